"""Retention (spec §Retention): ``broker space purge`` exports an archived space,
verifies the export against the database, deletes exactly that space's rows in
one transaction and journals it; the append-only triggers let exactly that
through and nothing else (S34), and the export imports back byte for byte."""

from __future__ import annotations

import json
import os
import pty
import select
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pgtest
import pytest
import spacegen
import sqlrows
import terminal

from broker import Operator, Store, errors
from broker.ids import new_id
from broker.interchange.export import export_space, space_parts
from broker.interchange.importer import import_dir
from broker.interchange.purge import TABLES, purge_space, purges
from broker.spaces import spaces
from broker.store.tables import metadata
from broker.vocab import APPEND_ONLY

SPACE_TABLES = ("spaces", *TABLES)


def counts(store: Store, space: str) -> dict[str, int]:
    with store.read() as t:
        out = {}
        for table in SPACE_TABLES:
            key = "id" if table == "spaces" else "space_id"
            # A delivery's space is its message's (revision 0021), the log's a number (0023).
            source = {"deliveries": sqlrows.delivery_rows(), "messages": sqlrows.log_rows()}.get(
                table, table
            )
            out[table] = t.one(f"SELECT COUNT(*) FROM {source} WHERE {key} = ?", (space,))[0]
    return out


def tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


@pytest.fixture
def two(tmp_path: Path) -> tuple[Store, str, str]:
    """A store with two rich spaces; the first archived."""
    store = spacegen.fresh_store(tmp_path / "db")
    a = spacegen.rich_space(store).space
    b = spacegen.rich_space(store).space
    spaces.archive(store, a)
    return store, a, b


def test_purge_of_an_archived_space_removes_exactly_its_rows_and_journals_it(
    two: tuple[Store, str, str], tmp_path: Path
) -> None:
    store, a, b = two
    before_a, before_b = counts(store, a), counts(store, b)
    assert all(before_a[t] > 0 for t in SPACE_TABLES), before_a
    done = Operator(store).purge_space(a, tmp_path / "archive")
    assert counts(store, a) == dict.fromkeys(SPACE_TABLES, 0)
    assert counts(store, b) == before_b, "the other space is untouched"
    assert done.counts == {t: before_a[t] for t in TABLES}
    (entry,) = purges(store)
    assert entry["space_id"] == a and entry["counts"] == done.counts
    assert entry["digest"] == done.digest and entry["via"] == "cli"
    assert entry["export_dir"] == str(tmp_path / "archive" / Path(*space_parts("workflow", a)))
    assert entry["pid"] == os.getpid() and entry["os_user"]
    with store.read() as t:
        assert t.all("SELECT * FROM purging") == [], "the marker lives only inside the purge"


def test_purge_export_verifies_and_reimports_byte_identically(
    two: tuple[Store, str, str], tmp_path: Path
) -> None:
    store, a, _ = two
    rows_before = spacegen_rows(store, a)
    done = purge_space(store, a, tmp_path / "archive")
    folder = Path(done.export_dir)
    assert (folder / "log.jsonl").is_file() and done.files == len(
        [p for p in folder.rglob("*") if p.is_file()]
    )
    # into another store, and back into this one (the id is free again)
    for target in (spacegen.fresh_store(tmp_path / "other"), store):
        summary = import_dir(target, tmp_path / "archive")
        assert summary.spaces == [a]
        export_space(target, a, tmp_path / "again")
        again = tmp_path / "again" / Path(*space_parts("workflow", a))
        # live claim files depend on when the export runs: compare the rest
        assert {k: v for k, v in tree(again).items() if not k.startswith("board/claims/")} == {
            k: v for k, v in tree(folder).items() if not k.startswith("board/claims/")
        }
        assert spacegen_rows(target, a) == rows_before
        import shutil

        shutil.rmtree(tmp_path / "again")


def spacegen_rows(store: Store, space: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the space, secrets' hashes aside (tokens, the join key: S27)."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    with store.read() as t:
        for table in SPACE_TABLES:
            cols = [
                # A delivery's recipient, the log's space: the store's numbers of them
                # (revisions 0022, 0023): by id.
                {"recipient_no": "recipient_id", "space_no": "space_id"}.get(c.name, c.name)
                for c in metadata.tables[table].columns
                if c.name not in ("token_hash", "join_key_hash")
            ]
            key = "id" if table == "spaces" else "space_id"
            # The space's counters are derived from the log (revision 0017), a delivery's
            # space is its message's (revision 0021): as read.
            source = {
                "spaces": sqlrows.spaces_as_read(store),
                "deliveries": sqlrows.delivery_rows(),
                "messages": sqlrows.log_rows(),
            }.get(table, table)
            out[table] = sorted(
                (
                    tuple(r)
                    for r in t.all(
                        f"SELECT {', '.join(cols)} FROM {source} WHERE {key} = ?", (space,)
                    )
                ),
                key=repr,
            )
    return out


@pytest.mark.parametrize("state", ["running", "stopped"])
def test_purge_refuses_a_running_or_stopped_space_and_writes_nothing(
    tmp_path: Path, state: str
) -> None:
    store = spacegen.fresh_store(tmp_path / "db")
    space = spacegen.rich_space(store).space
    if state == "stopped":
        spaces.stop(store, space)
    before = counts(store, space)
    with pytest.raises(errors.Conflict, match=f"is {state}: only an archived space"):
        purge_space(store, space, tmp_path / "archive")
    assert counts(store, space) == before
    assert purges(store) == []
    assert not (tmp_path / "archive").exists(), "refused before anything is written"


def test_purge_refuses_an_export_folder_holding_other_files(
    two: tuple[Store, str, str], tmp_path: Path
) -> None:
    store, a, _ = two
    folder = tmp_path / "archive" / Path(*space_parts("workflow", a))
    (folder / "mailboxes" / "stranger").mkdir(parents=True)
    (folder / "mailboxes" / "stranger" / "inbox.jsonl").write_text("{}\n")
    before = counts(store, a)
    with pytest.raises(errors.Conflict, match="holds files the export did not write"):
        purge_space(store, a, tmp_path / "archive")
    assert counts(store, a) == before and purges(store) == []


class _WriteDuringExport:
    """A progress hook that changes the space from another connection once the
    export has been read: the purge must notice and delete nothing."""

    def __init__(self, path: Path, delivery: str) -> None:
        self.path, self.delivery = path, delivery

    def start(self, total: int, label: str) -> None:
        pass

    def advance(self, n: int) -> None:
        pass

    def finish(self) -> None:
        conn = sqlite3.connect(self.path)
        conn.execute(
            f"UPDATE deliveries SET last_error = 'late' WHERE {sqlrows.by_delivery_id()}",
            (self.delivery,),
        )
        conn.commit()
        conn.close()


def test_purge_deletes_nothing_when_the_space_changed_after_its_export(
    two: tuple[Store, str, str], tmp_path: Path
) -> None:
    store, a, _ = two
    with store.read() as t:
        delivery = t.one(
            f"SELECT id FROM {sqlrows.delivery_rows()} WHERE space_id = ? LIMIT 1", (a,)
        )[0]
    before = counts(store, a)
    with pytest.raises(errors.Conflict, match="changed while it was being exported"):
        purge_space(
            store, a, tmp_path / "archive", progress=_WriteDuringExport(store.path, delivery)
        )
    assert counts(store, a) == before and purges(store) == []


def test_purge_covers_every_table_of_a_space() -> None:
    """A table added with a space_id must be purged too (or the space's delete fails).
    ``sender_usage`` and ``space_usage`` are derived from the log and go with their
    space by a trigger (tests/contract/test_limits.py checks a purge leaves none of them);
    ``message_aliases``, an index of the log's ids, by a statement of its own
    (not counted in the journal; tests/contract/test_import.py checks it). A delivery's
    space is its message's (revision 0021): its rows are purged by the log's; the
    log names its space by number (revision 0023)."""
    scoped = {t.name for t in metadata.tables.values() if "space_id" in t.columns}
    scoped |= {"deliveries", "messages"}
    derived = {"sender_usage", "space_usage"}
    assert scoped - {"purges", "purging", "message_aliases"} - derived == set(TABLES)


# --- the triggers (S34) ----------------------------------------------------------------
def test_S34_append_only_tables_refuse_update_and_delete_even_during_a_purge_of_another_space(
    two: tuple[Store, str, str],
) -> None:
    """Through a plain sqlite3 connection: the purge marker of space A lets A's
    log rows be deleted, and nothing else: not B's, not an UPDATE of A's."""
    store, a, b = two
    before_b = counts(store, b)
    conn = sqlite3.connect(store.path, isolation_level=None)
    try:
        conn.execute("PRAGMA foreign_keys = ON")
        for table in APPEND_ONLY:
            with pytest.raises(sqlite3.DatabaseError, match=f"append-only: {table} refuses DELETE"):
                conn.execute(f"DELETE FROM {table} WHERE {sqlrows.of_space(table)}", (a,))
        conn.execute("BEGIN IMMEDIATE")
        purge = new_id()
        conn.execute(
            "INSERT INTO purges (id, space_id, space_kind, via, os_user, pid, export_dir, digest, "
            "files, counts, at_utc) VALUES (?, ?, 'workflow', 'cli', 'me', 1, '/x', 'd', 0, '{}', 'now')",
            (purge, a),
        )
        with pytest.raises(sqlite3.DatabaseError, match="only an archived space can be purged"):
            conn.execute("INSERT INTO purging (space_id, purge_id) VALUES (?, ?)", (b, purge))
        conn.execute("INSERT INTO purging (space_id, purge_id) VALUES (?, ?)", (a, purge))
        for table in APPEND_ONLY:
            with pytest.raises(sqlite3.DatabaseError, match=f"append-only: {table} refuses DELETE"):
                conn.execute(f"DELETE FROM {table} WHERE {sqlrows.of_space(table)}", (b,))
            with pytest.raises(sqlite3.DatabaseError, match=f"append-only: {table} refuses UPDATE"):
                conn.execute(f"UPDATE {table} SET id = id WHERE {sqlrows.of_space(table)}", (a,))
        with pytest.raises(sqlite3.DatabaseError, match="a purge marker cannot change"):
            conn.execute("UPDATE purging SET space_id = ?", (b,))
        deleted = conn.execute("DELETE FROM transcript WHERE space_id = ?", (a,)).rowcount
        assert deleted > 0, "the marked space's rows may go"
        # The log's too, by its space's number (revision 0023).
        logged = conn.execute(f"DELETE FROM messages WHERE {sqlrows.of_space('messages')}", (a,))
        assert logged.rowcount > 0
        conn.execute("ROLLBACK")
        for op in ("UPDATE purges SET digest = 'x'", "DELETE FROM purges"):
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "INSERT INTO purges (id, space_id, space_kind, via, os_user, pid, export_dir, "
                "digest, files, counts, at_utc) VALUES (?, 'x', 'run', 'cli', 'me', 1, '/x', 'd', "
                "0, '{}', 'now')",
                (new_id(),),
            )
            with pytest.raises(sqlite3.DatabaseError, match="append-only: purges refuses"):
                conn.execute(op)
            conn.execute("ROLLBACK")
    finally:
        conn.close()
    assert counts(store, b) == before_b
    assert counts(store, a)["transcript"] > 0


def test_S34_purge_journal_survives_a_purge_and_refuses_rewrites(
    two: tuple[Store, str, str], tmp_path: Path
) -> None:
    store, a, _ = two
    purge_space(store, a, tmp_path / "archive")
    conn = sqlite3.connect(store.path)
    try:
        for sql in ("UPDATE purges SET digest = 'forged'", "DELETE FROM purges"):
            with pytest.raises(sqlite3.DatabaseError, match="append-only: purges refuses"):
                conn.execute(sql)
    finally:
        conn.close()
    assert len(purges(store)) == 1


# --- the CLI ---------------------------------------------------------------------------
def test_cli_space_purge_needs_yes_without_a_terminal_and_prints_json(
    cli: Callable[..., Any], tmp_path: Path
) -> None:
    space = cli("space", "create", "--kind", "run", "--json").json()["id"]
    r = cli("space", "purge", space, "--export", str(tmp_path / "x"), "--yes")
    assert r.code == 5 and "only an archived space" in r.err and "Traceback" not in r.err
    assert cli("space", "archive", space, "--yes").code == 0
    r = cli("space", "purge", space, "--export", str(tmp_path / "x"))
    assert r.code == 2 and "pass --yes" in r.err
    assert space in cli("space", "list").out
    r = cli("space", "purge", space, "--export", str(tmp_path / "x"), "--yes", "--json")
    assert r.code == 0, r.err
    assert r.json()["space_id"] == space and r.json()["counts"]["messages"] == 0
    assert space not in cli("space", "list").out


def _purge_at_a_terminal(
    home: Path, space: str, export: Path, answer: bytes, url: str
) -> tuple[int, str]:
    env = pgtest.process_env(home, url)
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "broker", "space", "purge", space, "--export", str(export)],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env=env,
    )
    os.close(follower)
    out = b""
    try:
        deadline = time.monotonic() + 60
        while b"[y/N]" not in out:
            assert time.monotonic() < deadline, out
            ready, _, _ = select.select([leader], [], [], 1.0)
            if ready:
                out += os.read(leader, 4096)
        os.write(leader, answer + b"\n")
        out += terminal.read_to_end(leader, proc)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(leader)
    return code, out.decode(errors="replace")


def test_cli_space_purge_asks_at_a_terminal(
    cli: Callable[..., Any], tmp_path: Path, db_url: str
) -> None:
    space = cli("space", "create", "--kind", "run", "--json").json()["id"]
    assert cli("space", "archive", space, "--yes").code == 0
    code, out = _purge_at_a_terminal(tmp_path / "home", space, tmp_path / "x", b"n", db_url)
    assert code == 2 and "not confirmed" in out
    assert space in cli("space", "list").out
    code, out = _purge_at_a_terminal(tmp_path / "home", space, tmp_path / "x", b"y", db_url)
    assert code == 0, out
    assert space not in cli("space", "list").out
    assert (
        json.loads((tmp_path / "x" / "runs" / space / "messages" / "space.json").read_text())["id"]
        == space
    )
