"""First opens of one new database file by two processes at once: one migrates,
the other waits for it on the migration lock and finds the schema at head.

The race is made real, not left to luck: the process that migrates holds its
migration open (inside the migration step, write lock taken, first table being
created) until the other process is provably queued behind it, i.e. blocked on
the writer lock (``lockview``: read from the kernel), or has failed. Without the lock the
second process runs into SQLite's write lock instead and gives up after its
busy timeout (100 ms here, as a slow disk or a long migration would make it),
so this test fails; with it, both succeed and the migration runs once.
"""

from __future__ import annotations

import multiprocessing as mp
import sys
import time
from pathlib import Path
from typing import Any

import lockview
import pytest

from broker import Store
from broker.store.migrate import HEAD
from broker.store.settings import StoreSettings

FORK = mp.get_context("fork")
BUSY_TIMEOUT_MS = 100

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads /proc to see who waits on the lock"
)


def blocked_on_lock(path: str) -> set[int]:
    """Pids waiting for the writer lock at ``path`` (``lockview``: read from the kernel)."""
    return {pid for pid, waiting in lockview.holders(path) if waiting}


def _first_open(url: str, lock_path: str, failed: Any, out: Any) -> None:
    try:
        import sqlalchemy as sa

        created: list[str] = []

        @sa.event.listens_for(sa.engine.Engine, "before_cursor_execute")
        def _hold(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            if not statement.lstrip().upper().startswith("CREATE TABLE SPACES"):
                return
            created.append(statement)
            deadline = time.monotonic() + 60
            while not (blocked_on_lock(lock_path) or failed.is_set()):
                if time.monotonic() > deadline:
                    raise RuntimeError("the other process never queued up behind the migration")
                time.sleep(0.001)

        s = Store(url, settings=StoreSettings(url=url, busy_timeout_ms=BUSY_TIMEOUT_MS))
        out.put(("ok", s.schema_version(), len(created)))
        s.close()
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        failed.set()
        out.put(("error", repr(exc)[:500], 0))


def test_store_first_open_by_two_processes_migrates_once_while_the_other_waits_on_the_lock(
    tmp_path: Path,
) -> None:
    db = tmp_path / "new" / "broker.db"  # the folder does not exist yet either
    url = f"sqlite:///{db}"
    failed = FORK.Event()
    out = FORK.Queue()
    procs = [
        FORK.Process(target=_first_open, args=(url, f"{db}.lock", failed, out)) for _ in range(2)
    ]
    try:
        for p in procs:
            p.start()
        results = sorted(out.get(timeout=120) for _ in procs)
        for p in procs:
            p.join(60)
            assert p.exitcode == 0
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join(30)
    assert [r[:2] for r in results] == [("ok", HEAD), ("ok", HEAD)], results
    assert sorted(r[2] for r in results) == [0, 1]  # one migrated, the other found it done
    s = Store(url, migrate=False)
    try:
        with s.read() as t:
            assert [r[0] for r in t.all("SELECT version_num FROM alembic_version")] == [HEAD]
            assert t.one("PRAGMA integrity_check")[0] == "ok"
    finally:
        s.close()
