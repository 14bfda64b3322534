"""The store's settings and life cycle (spec §Storage): pragmas, file modes,
where the file lives, the SQLite version check, migrating on open, concurrent
first opens and fork safety. Real files, real processes."""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
import sqlite3
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trusted

import broker.store.sqlite
from broker import Agent, Operator, Store, errors
from broker.spaces import spaces
from broker.store.migrate import HEAD

FORK = mp.get_context("fork")


def pragma(store: Store, name: str) -> Any:
    with store.read() as t:
        return t.one(f"PRAGMA {name}")[0]


def test_store_uses_wal_foreign_keys_and_a_busy_timeout(store: Store) -> None:
    assert pragma(store, "journal_mode") == "wal"
    assert pragma(store, "foreign_keys") == 1
    assert pragma(store, "busy_timeout") == 10_000
    # Every connection gets them, not only the first one.
    conn = store.connect()
    try:
        assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 10_000
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()


def test_store_synchronous_is_normal_by_default(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BROKER_SYNCHRONOUS", raising=False)
    s = Store(db_url)
    try:
        assert s.settings.synchronous == "NORMAL"
        assert pragma(s, "synchronous") == 1  # NORMAL
    finally:
        s.close()


def test_store_synchronous_full_with_broker_synchronous_env(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BROKER_SYNCHRONOUS", "FULL")
    s = Store(db_url)
    try:
        assert pragma(s, "synchronous") == 2  # FULL
    finally:
        s.close()


def test_store_refuses_a_bad_synchronous_setting(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BROKER_SYNCHRONOUS", "OFF")
    with pytest.raises(errors.InvalidInput, match="BROKER_SYNCHRONOUS"):
        Store(db_url)


def test_store_busy_timeout_follows_the_environment(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BROKER_BUSY_TIMEOUT_MS", "2500")
    s = Store(db_url)
    try:
        assert pragma(s, "busy_timeout") == 2500
    finally:
        s.close()


def test_store_db_file_is_0600_and_its_new_folder_0700(tmp_path: Path) -> None:
    old = os.umask(0o022)  # a permissive umask must not leak into the modes
    try:
        folder = tmp_path / "deep" / "home"
        s = Store(f"sqlite:///{folder / 'broker.db'}")
    finally:
        os.umask(old)
    try:
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(folder / "broker.db").st_mode) == 0o600
    finally:
        s.close()


def test_store_refuses_memory_and_non_sqlite_urls(tmp_path: Path) -> None:
    with pytest.raises(errors.InvalidInput):
        Store("sqlite:///:memory:")
    with pytest.raises(errors.InvalidInput):
        Store("mysql://nowhere/db")
    # A PostgreSQL URL opens the PostgreSQL store (tests/unit/store/test_pg.py); a server
    # that is not there is one StoreError line, never a traceback.
    with pytest.raises(errors.StoreError, match="cannot reach the PostgreSQL store"):
        Store("postgresql+psycopg://nobody@127.0.0.1:1/broker")


def test_store_refuses_sqlite_older_than_3_35(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(broker.store.sqlite.sqlite3, "sqlite_version_info", (3, 34, 1))
    with pytest.raises(errors.UnsupportedSQLite, match="3.35") as info:
        Store(db_url)
    assert info.value.exit_code == errors.UnsupportedSQLite.exit_code


def test_store_opening_an_empty_file_migrates_it(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    path.touch()
    s = Store(f"sqlite:///{path}")
    try:
        assert s.schema_version() == HEAD
        with s.read() as t:
            names = {r[0] for r in t.all("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert {"spaces", "participants", "messages", "deliveries", "alembic_version"} <= names
    finally:
        s.close()


def test_store_without_migrate_leaves_an_empty_file_empty(tmp_path: Path) -> None:
    s = Store(f"sqlite:///{tmp_path / 'x.db'}", migrate=False)
    try:
        assert s.schema_version() is None
        s.ensure_schema()
        assert s.schema_version() == HEAD
    finally:
        s.close()


def test_store_broker_url_wins_over_broker_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BROKER_HOME", str(tmp_path / "home"))
    s = Store()
    try:
        assert s.path == tmp_path / "home" / "broker.db"
    finally:
        s.close()
    monkeypatch.setenv("BROKER_URL", f"sqlite:///{tmp_path / 'elsewhere' / 'b.db'}")
    s = Store()
    try:
        assert s.path == tmp_path / "elsewhere" / "b.db"
    finally:
        s.close()


def test_store_default_home_is_the_xdg_data_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BROKER_HOME", raising=False)
    monkeypatch.delenv("BROKER_URL", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    s = Store()
    try:
        assert s.path == tmp_path / "xdg" / "broker" / "broker.db"
    finally:
        s.close()


def test_store_write_takes_the_lock_up_front(store: Store) -> None:
    """BEGIN IMMEDIATE: a second writer waits for the first instead of failing mid-way."""
    other = store.connect()
    try:
        with store.write():
            other.execute("PRAGMA busy_timeout = 0")
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                other.execute("BEGIN IMMEDIATE")
    finally:
        other.close()


def test_store_locked_database_is_a_store_busy_error(db_url: str) -> None:
    s = Store(db_url)
    blocker = s.connect()
    blocker.execute("BEGIN IMMEDIATE")
    try:
        s2 = Store(db_url, settings=dataclasses.replace(s.settings, busy_timeout_ms=50))
        with pytest.raises(errors.StoreBusy), s2.write():
            pass
        s2.close()
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
        s.close()


def test_store_write_joins_an_outer_transaction(store: Store, operator: Operator) -> None:
    operator.create_space("session")
    with pytest.raises(RuntimeError), store.write() as t:
        spaces.create(store, "run", tx=t)  # joins ours: rolls back with it
        t.connection.exec_driver_sql("CREATE TABLE callers_work (x INTEGER)")
        raise RuntimeError("caller's work failed")
    assert [s.kind for s in spaces.list_spaces(store)] == ["session"]
    with store.read() as t:
        assert t.one("SELECT count(*) FROM sqlite_master WHERE name = 'callers_work'")[0] == 0
    with store.write() as t:
        spaces.create(store, "run", tx=t)
        t.connection.exec_driver_sql("CREATE TABLE callers_work (x INTEGER)")
    assert sorted(s.kind for s in spaces.list_spaces(store)) == ["run", "session"]
    with store.read() as t:
        assert t.one("SELECT count(*) FROM sqlite_master WHERE name = 'callers_work'")[0] == 1


@pytest.mark.parametrize("keep", [False, True], ids=["rolled back", "released"])
def test_store_a_transaction_goes_on_past_an_error_that_held_a_writes_unread_rows(
    store: Store, keep: bool
) -> None:
    """An error caught inside a transaction that goes on (a savepoint rolled
    back or released with it as its ``cause``) no longer holds the statements
    its frames ran: a write's RETURNING rows left unread kept SQLite from
    releasing the savepoint and from committing ("SQL statements in
    progress") for as long as the error lived, and the caller keeps it."""

    def half_read(t: Any) -> None:
        rows = t.execute("UPDATE scratch_rows SET n = n + 10 RETURNING n")
        assert rows.fetchone() is not None  # one of two: still running
        raise errors.InvalidInput("refused", field="x")

    with store.write() as t:
        t.execute("CREATE TABLE scratch_rows (n INTEGER)")
        t.execute("INSERT INTO scratch_rows (n) VALUES (1), (2)")
    kept: list[BaseException] = []
    with store.write() as t:
        t.savepoint()
        try:
            half_read(t)
        except errors.InvalidInput as exc:
            kept.append(exc)  # the error outlives the savepoint, as a job's answer does
            if keep:
                t.release_savepoint(exc)
            else:
                t.rollback_to_savepoint(exc)
        t.execute("INSERT INTO scratch_rows (n) VALUES (3)")
    assert [str(e) for e in kept] == ["refused"]
    with store.read() as t:
        got = sorted(r[0] for r in t.all("SELECT n FROM scratch_rows"))
    assert got == ([3, 11, 12] if keep else [1, 2, 3])


# --- concurrent first opens ---------------------------------------------------------------
def _open_and_report(url: str, barrier: Any, out: Any) -> None:
    try:
        import sqlalchemy as sa

        created: list[str] = []  # DDL this process ran: the migration happens once overall

        @sa.event.listens_for(sa.engine.Engine, "before_cursor_execute")
        def _ddl(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            if statement.lstrip().upper().startswith("CREATE TABLE SPACES"):
                created.append(statement)

        barrier.wait(30)
        s = Store(url)
        out.put(("ok", s.schema_version(), len(created)))
        s.close()
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        out.put(("error", repr(exc), 0))


def test_store_two_processes_opening_one_empty_file_both_succeed(tmp_path: Path) -> None:
    for attempt in range(3):
        url = f"sqlite:///{tmp_path / f'new{attempt}' / 'broker.db'}"  # folder does not exist yet
        barrier = FORK.Barrier(2)
        out = FORK.Queue()
        procs = [FORK.Process(target=_open_and_report, args=(url, barrier, out)) for _ in range(2)]
        for p in procs:
            p.start()
        results = [out.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(60)
            assert p.exitcode == 0
        assert [r[:2] for r in results] == [("ok", HEAD), ("ok", HEAD)], results
        assert sum(r[2] for r in results) == 1  # one migration
        s = Store(url, migrate=False)
        with s.read() as t:
            assert [tuple(r) for r in t.all("SELECT version_num FROM alembic_version")] == [(HEAD,)]
            assert t.one("PRAGMA integrity_check")[0] == "ok"
        s.close()


# --- fork ---------------------------------------------------------------------------------
def _in_child(fn: Callable[[], None]) -> int:
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 1
        try:
            fn()
            code = 0
        except BaseException:  # noqa: BLE001
            import traceback

            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_store_connection_is_safe_after_fork(store: Store, space: str) -> None:
    lynx, joined = trusted.join(store, space, "flow/lynx")
    otter, _ = trusted.join(store, space, "flow/otter")
    otter.send("lynx", "from the parent, before fork")
    held = store._local.conn  # the parent's connection, in use

    def child() -> None:
        assert store._local.__dict__.get("conn") is None  # nothing inherited is reused
        me = Agent.connect(store, space, "lynx", joined.token)
        me.send("otter", "from the child")
        with store.read() as t:
            assert t.one("SELECT count(*) FROM messages")[0] == 2

    assert _in_child(child) == 0
    assert store._local.conn is held
    otter.send("lynx", "from the parent, after the child exited")
    with store.read() as t:
        bodies = [r[0] for r in t.all("SELECT body FROM messages ORDER BY seq")]
        assert t.one("PRAGMA integrity_check")[0] == "ok"
    assert bodies == [
        "from the parent, before fork",
        "from the child",
        "from the parent, after the child exited",
    ]


def test_store_fork_inside_a_transaction_leaves_the_parent_transaction_intact(
    store: Store, space: str
) -> None:
    otter, _ = trusted.join(store, space, "flow/otter")
    with store.write() as t:
        otter.send("operator", "parent, in a transaction", tx=t)

        def child() -> None:
            # The parent holds the write lock: the child's own connection sees
            # only committed rows and does not touch the parent's transaction.
            with store.read() as rt:
                assert rt.one("SELECT count(*) FROM messages")[0] == 0

        assert _in_child(child) == 0
    with store.read() as rt:
        assert rt.one("SELECT count(*) FROM messages")[0] == 1


def test_store_in_a_place_that_cannot_hold_a_file_is_a_store_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(errors.StoreError, match="cannot create the database file"):
        Store(f"sqlite:///{blocker / 'home' / 'broker.db'}")
    with pytest.raises(errors.StoreError, match="cannot create the database file"):
        Store(f"sqlite:///{blocker / 'broker.db'}")


def test_store_on_a_file_that_is_not_a_database_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not an SQLite database, not even close" * 100)
    with pytest.raises(errors.StoreError, match="not a database"):
        Store(f"sqlite:///{path}")
