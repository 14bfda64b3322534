"""A lean row (revision 0015): every index earns its pages, and the change of
schema changes no export.

- Every index of a migrated store is read by the plan (``EXPLAIN QUERY PLAN``)
  of at least one statement of the catalogue, or enforces a uniqueness a rule
  needs; a send writes no index nobody reads.
- The claim finds its rows through the ready index and the rowid it holds:
  ``deliveries`` has no index on its ULID.
- An old store (revision 0014) upgraded to 0015 exports byte for byte what it
  exported before the upgrade, on SQLite and on PostgreSQL, and its inboxes
  still claim in FIFO order.
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pgtest
import pytest
import spacegen
import sqlrows
import trusted
from alembic import command

from broker import Operator, Store, errors
from broker.ids import new_id, seq_in_id
from broker.interchange.export import export_space
from broker.mail.search import integrity_check
from broker.store import sql
from broker.store.migrate import HEAD, config

# Indexes that enforce a uniqueness a rule needs, whether or not a plan reads them.
UNIQUE_FOR_A_RULE = {
    "sqlite_autoindex_alembic_version_1": "alembic's own version row",
    "sqlite_autoindex_claim_journal_1": "journal line ids are unique (exported, S23)",
    "sqlite_autoindex_history_1": "history ids are unique (exported, S26)",
    "sqlite_autoindex_participant_events_1": "event ids are unique (exported, S4)",
    "sqlite_autoindex_purges_1": "purge ids are unique",
    "sqlite_autoindex_transcript_1": "transcript ids are unique (exported, S19)",
}


def _plans(store: Store) -> dict[str, set[str]]:
    """Index name -> the catalogue statements whose plan reads it."""
    raw = store.connect()
    try:
        raw.execute(sql.all_statements()["search.tail_index"])
        indexes = [r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='index'")]
        used: dict[str, set[str]] = {name: set() for name in indexes}
        for name, stmt in sql.all_statements().items():
            if not re.match(r"\s*(SELECT|INSERT|UPDATE|DELETE|WITH)\s", stmt):
                continue
            plan = raw.execute(f"EXPLAIN QUERY PLAN {stmt}", dict.fromkeys(stmt.params))
            text = " ".join(str(r[3]) for r in plan)
            for index in indexes:
                if re.search(rf"\b{re.escape(index)}\b", text):
                    used[index].add(name)
        return used
    finally:
        raw.close()


def test_every_index_is_read_by_a_catalogue_statement_or_enforces_a_rule(
    tmp_path: Path,
) -> None:
    store = spacegen.fresh_store(tmp_path)
    try:
        used = _plans(store)
    finally:
        store.close()
    unread = {name for name, users in used.items() if not users}
    assert unread == set(UNIQUE_FOR_A_RULE), (
        f"indexes no statement reads: {sorted(unread - set(UNIQUE_FOR_A_RULE))}; "
        f"listed but read or gone: {sorted(set(UNIQUE_FOR_A_RULE) - unread)}"
    )


def test_no_catalogue_statement_scans_the_deliveries_table(tmp_path: Path) -> None:
    """A statement that scans ``deliveries`` costs more the larger the store, on
    whatever call runs it (``usage.sender_waiting``, a send's share check, did:
    ``state IN ('ready', 'processing')`` matches no partial index). A reader of an
    inbox reads its partial indexes, a state at a time; a reader of a space the
    rowid ranges of the space's log (revision 0021)."""
    store = spacegen.fresh_store(tmp_path)
    raw = store.connect()
    scans: dict[str, list[str]] = {}
    try:
        aliases = re.compile(r"\bdeliveries\s+(?:AS\s+)?([a-z]\w*)", re.I)
        for name, stmt in sql.all_statements().items():
            if name == "ops.orphans":
                continue  # doctor reads every row, as its quick_check does
            if "deliveries" not in stmt or not re.match(
                r"\s*(SELECT|INSERT|UPDATE|DELETE|WITH)\s", stmt
            ):
                continue
            names = {"deliveries"} | {
                a for a in aliases.findall(stmt) if a.upper() not in {"WHERE", "SET", "JOIN", "ON"}
            }
            plan = raw.execute(f"EXPLAIN QUERY PLAN {stmt}", dict.fromkeys(stmt.params))
            bad = [
                str(r[3])
                for r in plan
                if (m := re.match(r"SCAN (\w+)( USING (COVERING )?INDEX)?", str(r[3])))
                and m.group(1) in names
                and not m.group(2)
            ]
            if bad:
                scans[name] = bad
    finally:
        raw.close()
        store.close()
    assert scans == {}


def test_the_claim_finds_its_rows_by_rowid_and_deliveries_has_no_ulid_index(
    tmp_path: Path,
) -> None:
    store = spacegen.fresh_store(tmp_path)
    try:
        used = _plans(store)
        with store.read() as t:
            indexed = {
                tuple(c[2] for c in t.all(f"PRAGMA index_info('{name}')"))
                for (name,) in t.all("SELECT name FROM pragma_index_list('deliveries')")
            }
    finally:
        store.close()
    assert ("id",) not in indexed  # the ULID is kept once, in the row
    assert "inbox.claim" in used["ix_deliveries_ready"]
    assert "inbox.claim" in used["ix_deliveries_leased"]
    assert not any(name.startswith("sqlite_autoindex_deliveries") for name in used)


def _plan(store: Store, name: str) -> list[str]:
    raw = store.connect()
    try:
        stmt = sql.all_statements()[name]
        return [
            str(r[3]) for r in raw.execute(f"EXPLAIN QUERY PLAN {stmt}", dict.fromkeys(stmt.params))
        ]
    finally:
        raw.close()


def test_a_messages_deliveries_are_its_rowid_range_and_the_ready_index_is_in_log_order(
    tmp_path: Path,
) -> None:
    """Revision 0017: no index on deliveries.message_id (a message's deliveries
    are the rowids from its rowid times 2^20 on), and the ready index holds
    the recipient's number (revision 0022) and the rowid only: the claim reads
    it in rowid order, the log's order within an inbox (S13), with no sort."""
    store = spacegen.fresh_store(tmp_path)
    try:
        with store.read() as t:
            indexed = {
                name: tuple(c[2] for c in t.all(f"PRAGMA index_info('{name}')"))
                for (name,) in t.all("SELECT name FROM pragma_index_list('deliveries')")
            }
            fks = {r[3] for r in t.all("PRAGMA foreign_key_list('deliveries')")}
        claim = _plan(store, "inbox.claim")
        missed = _plan(store, "inbox.by_message_ids")
        insert = _plan(store, "inbox.insert")
    finally:
        store.close()
    assert not any("message_id" in cols for cols in indexed.values()), indexed
    # Revision 0021: no column names the message or its space, the rowid does;
    # revision 0022: the recipient is its participants row's number (no declared key).
    assert fks == set()
    assert indexed["ix_deliveries_ready"] == ("recipient_no",)
    ready = [p for p in claim if "ix_deliveries_ready" in p]
    assert ready == ["SEARCH deliveries USING INDEX ix_deliveries_ready (recipient_no=?)"]
    # The ready branch is cut to :n in index order, no sort (the merge sorts its <= 2 x :n).
    assert "TEMP B-TREE" not in claim[claim.index(ready[0]) + 1], claim
    assert any("INTEGER PRIMARY KEY (rowid>? AND rowid<?)" in p for p in missed), missed
    assert any("INTEGER PRIMARY KEY (rowid>? AND rowid<?)" in p for p in insert), insert
    assert not any(re.match(r"SCAN (deliveries|d|k)\b", p) for p in missed + insert), (
        missed,
        insert,
    )


# --- an old store upgraded --------------------------------------------------------------
def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def _export(store: Store, space: str, root: Path) -> dict[str, bytes]:
    export_space(store, space, root, now=spacegen.EXPORT_NOW)
    return _tree(root)


def _export_old(store: Store, space: str, root: Path) -> dict[str, bytes]:
    """The export of a store of an older revision by this exporter, which reads
    a space's log size from ``space_usage`` (revision 0020), a delivery's
    recipient by its number (revision 0022) and a log row's space by its
    number (revision 0023). While it runs, what the store lacks stands in: a
    view of that name, the sum of the space's ``sender_usage`` rows, which is
    what the exporter read before it; a column ``recipient_no`` holding each
    row's recipient's number (on PostgreSQL the participants' ``rowid`` with
    it), the participant its id names; a view ``messages`` over the log with
    its space's number (on PostgreSQL the spaces' ``rowid`` with it)."""
    shims: list[str] = []
    undo: list[str] = []
    with store.read() as t:
        tables = {
            r[0]
            for r in t.all(
                "SELECT name FROM sqlite_master WHERE type = 'table'"
                if store.dialect == "sqlite"
                else "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
            )
        }
        columns = {c[0] for c in t.execute("SELECT * FROM deliveries WHERE 1 = 0").description}
    with store.read() as t:
        logged = {c[0] for c in t.execute("SELECT * FROM messages WHERE 1 = 0").description}
    if "space_no" not in logged:
        # The log names its space by number (revision 0023): a view of that name
        # stands in for it while the table is set aside under another.
        if store.dialect == "sqlite":
            shims.append("PRAGMA legacy_alter_table = ON")
            undo.append("PRAGMA legacy_alter_table = OFF")
            row = "m.rowid AS rowid, "
        else:
            shims.append(
                "ALTER TABLE spaces ADD COLUMN rowid BIGINT GENERATED BY DEFAULT AS IDENTITY"
            )
            undo.append("ALTER TABLE spaces DROP COLUMN rowid")
            row = ""
        shims += [
            "ALTER TABLE messages RENAME TO messages_old",
            f"CREATE VIEW messages AS SELECT {row}m.*, s.rowid AS space_no "
            "FROM messages_old m JOIN spaces s ON s.id = m.space_id",
        ]
        undo[:0] = ["DROP VIEW messages", "ALTER TABLE messages_old RENAME TO messages"]
        if store.dialect == "sqlite":  # (a new connection: the pool was closed)
            undo.insert(0, "PRAGMA legacy_alter_table = ON")
    if "space_usage" not in tables:
        shims.append(
            "CREATE VIEW space_usage AS SELECT space_id, sum(log_bytes) AS log_bytes "
            "FROM sender_usage GROUP BY space_id"
        )
        undo.append("DROP VIEW space_usage")
    if "recipient_no" not in columns:
        if store.dialect != "sqlite":
            shims.append(
                "ALTER TABLE participants ADD COLUMN rowid BIGINT GENERATED BY DEFAULT AS IDENTITY"
            )
            undo.append("ALTER TABLE participants DROP COLUMN rowid")
        shims += [
            "ALTER TABLE deliveries ADD COLUMN recipient_no INTEGER",
            "UPDATE deliveries SET recipient_no = "
            "(SELECT p.rowid FROM participants p WHERE p.id = deliveries.recipient_id)",
        ]
        undo.insert(0, "ALTER TABLE deliveries DROP COLUMN recipient_no")
    with store.write() as t:
        for ddl in shims:
            t.execute(ddl)
    store.close()  # pooled connections saw the old schema
    try:
        return _export(store, space, root)
    finally:
        with store.write() as t:
            for ddl in undo:
                t.execute(ddl)
        store.close()


def _by_delivery(t: Any, column: str, now: str, joins: str = "") -> list[tuple[str, str]]:
    """(delivery id, a value) of every delivery, in ``t``: the row's ``column``
    in a store from before the revision that dropped it, else ``now``, read
    from the row ``d``, its message ``m`` and ``joins``."""
    columns = {c[0] for c in t.execute("SELECT * FROM deliveries WHERE 1 = 0").description}
    return [
        (str(d), str(v))
        for d, v in t.all(
            f"SELECT id, {column} FROM deliveries ORDER BY id"
            if column in columns
            else f"SELECT {sql.fragment('delivery_id')} AS i, {now} FROM deliveries d "
            f"JOIN messages m ON m.rowid = d.rowid >> 20 {joins}ORDER BY i"
        )
    ]


def _links(t: Any) -> list[tuple[str, str]]:
    """(delivery id, message id) of every delivery: by the message_id column
    before revision 0021, by the message the rowid names from it on."""
    return _by_delivery(t, "message_id", "m.id")


def _to(store: Store, revision: str) -> None:
    cfg = config()
    with store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        if revision == HEAD:
            command.upgrade(cfg, revision)
        else:
            command.downgrade(cfg, revision)
    store.close()  # pooled connections saw the old schema


@pytest.fixture(params=["sqlite", "postgresql"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        store = spacegen.fresh_store(tmp_path / "a")
        yield store
        store.close()
        return
    with pgtest.database() as url:
        store = Store(url, clock=spacegen.StepClock())
        yield store
        store.close()


def test_an_old_store_upgraded_exports_what_it_exported_before(
    any_store: Store, tmp_path: Path
) -> None:
    store = any_store
    built = spacegen.rich_space(store)
    head_export = _export(store, built.space, tmp_path / "head")
    _to(store, "0014")  # the store as revision 0014 left it: primary key, per-row counters
    assert store.schema_version() == "0014"
    # What it exports at 0014 is what it exported before the downgrade: the
    # layout is the same (this exporter reads the new schema's folds, so the
    # export made before the downgrade stands for it).
    before = head_export
    assert any(n.endswith("inbox.jsonl") for n in before)
    with store.read() as t:
        # Revision 0017 renumbers the rows (a message's rowid times 2^20 on), in their order.
        rows_before = t.all("SELECT id, state FROM deliveries ORDER BY rowid")
        # Each row's message, by the column revision 0021 drops: its rowid must name it.
        links_before = _links(t)
        usage_before = t.all("SELECT * FROM sender_usage ORDER BY space_id, sender")
        waiting_before = t.all("SELECT id, waiting FROM participants ORDER BY id")
        assert (
            sum(w for _, w in waiting_before)
            == t.one("SELECT count(*) FROM deliveries WHERE state IN ('ready', 'processing')")[0]
        )
    _to(store, HEAD)
    assert store.schema_version() == HEAD
    after = _export(store, built.space, tmp_path / "after")
    assert after == before
    with store.read() as t:
        assert t.all("SELECT id, state FROM deliveries ORDER BY rowid") == rows_before
        places: dict[str, list[int]] = {}
        assert _links(t) == links_before
        for mid, place in t.all(
            "SELECT m.id, d.rowid - m.rowid * 1048576 FROM deliveries d "
            "JOIN messages m ON m.rowid = d.rowid >> 20 ORDER BY d.rowid"
        ):
            places.setdefault(mid, []).append(place)
        assert sum(map(len, places.values())) == len(rows_before)
        assert all(p == list(range(len(p))) for p in places.values()), places
        assert t.all("SELECT * FROM sender_usage ORDER BY space_id, sender") == usage_before
        assert t.all("SELECT id, waiting FROM participants ORDER BY id") == waiting_before
        if store.dialect == "sqlite":
            upto = t.one("SELECT upto FROM folds WHERE name = 'sender_usage'")[0]
            assert upto == t.one("SELECT max(rowid) FROM messages")[0]
            upto = t.one("SELECT upto FROM folds WHERE name = 'waiting'")[0]
            assert upto == t.one("SELECT max(rowid) FROM deliveries")[0]


def test_a_store_of_revision_0016_upgraded_exports_what_it_exported_before(
    any_store: Store, tmp_path: Path
) -> None:
    """Revision 0017: the counters derived, deliveries renumbered by message;
    the export of the store as 0016 left it is the export after the upgrade,
    and its sends go on where the log left off."""
    store = any_store
    built = spacegen.rich_space(store)
    head_export = _export(store, built.space, tmp_path / "head")
    _to(store, "0016")  # the counters written back into the space row, rowids dense
    assert store.schema_version() == "0016"
    with store.read() as t:
        (last_seq,) = t.one("SELECT last_seq FROM spaces WHERE id = ?", (built.space,))
        (top,) = t.one("SELECT max(seq) FROM messages WHERE space_id = ?", (built.space,))
        assert last_seq == top > 0  # as every send of revision 0016 kept it
        rows = t.all("SELECT id, state FROM deliveries ORDER BY rowid")
        links = _links(t)
    _to(store, HEAD)  # (the code of revision 0018 reads no store of 0016: no export there)
    assert _export(store, built.space, tmp_path / "after") == head_export
    with store.read() as t:
        assert t.all("SELECT id, state FROM deliveries ORDER BY rowid") == rows
        # Each row in its message's rowid range: the rowid names the message it held.
        assert _links(t) == links
    late, _ = trusted.join(store, built.space, "flow/late")
    reader, _ = trusted.join(store, built.space, "flow/reader")
    assert late.send("reader", "after the upgrade").seq == top + 1
    assert [d.body for d in reader.claim(limit=5).deliveries] == ["after the upgrade"]


def test_a_store_of_revision_0017_upgraded_exports_what_it_exported_before_and_finds_old_ids(
    any_store: Store, tmp_path: Path
) -> None:
    """Revision 0018: no index of message ids. A message logged before it has
    an id that names no seq (80 random bits): the upgrade gives it an alias, so
    the store exports what it exported before, and every lookup by that id (a
    cursor, a reply, a status, its delivery's claim) finds it; ids made after
    spell their seq and need none."""
    store = any_store
    built = spacegen.rich_space(store)
    lynx, otter = built.agents["lynx"], built.agents["otter"]
    _to(store, "0017")
    old = new_id()  # as every id was made before revision 0018
    with store.write() as t:
        (top,) = t.one("SELECT max(seq) FROM messages WHERE space_id = ?", (built.space,))
        (last_at,) = t.one(
            "SELECT max(created_at_utc) FROM messages WHERE space_id = ?", (built.space,)
        )
        t.execute(
            "INSERT INTO messages (id, space_id, seq, kind, sender, recipients, body, reached, "
            "not_reached, reached_n, size_bytes, created_at_utc) "
            "VALUES (?, ?, ?, 'direct', ?, '[\"otter\"]', 'from before', '[\"otter\"]', '[]', "
            "1, 30, ?)",
            (old, built.space, top + 1, lynx.identity.address, last_at),
        )
        (mrow,) = t.one("SELECT rowid FROM messages WHERE id = ?", (old,))
        t.execute(
            "INSERT INTO deliveries (rowid, id, space_id, message_id, recipient_id, state, "
            "created_at_utc) VALUES (?, ?, ?, ?, ?, 'ready', ?)",
            (mrow * 1048576, new_id(), built.space, old, otter.identity.participant_id, last_at),
        )
    assert seq_in_id(old) != top + 1
    before = _export_old(store, built.space, tmp_path / "old")
    _to(store, HEAD)
    assert _export(store, built.space, tmp_path / "after") == before
    with store.read() as t:
        aliased = t.all("SELECT id, seq FROM message_aliases WHERE space_id = ?", (built.space,))
    assert [tuple(a) for a in aliased] == [(old, top + 1)]  # rich_space's ids spell their seq
    op = Operator(store)
    assert op.log(built.space, after=old) == []
    assert op.status(built.space, old).reached == ["otter"]
    reply = otter.send("lynx", "about that", reply_to=old)
    assert seq_in_id(reply.id) == reply.seq == top + 2
    assert [e.reply_to for e in op.log(built.space, after=top + 1)] == [old]
    claimed = [(d.id, d.body) for d in otter.claim(limit=10).deliveries]
    assert (old, "from before") in claimed
    with store.read() as t:  # the reply needed no alias
        assert t.one("SELECT count(*) FROM message_aliases")[0] == 1


def test_an_upgraded_store_claims_in_fifo_order(tmp_path: Path) -> None:
    store = spacegen.fresh_store(tmp_path / "a")
    op = Operator(store)
    sid = op.create_space("workflow").id
    sender, _ = op.join(sid, "s")
    worker, _ = op.join(sid, "w")
    for i in range(5):
        sender.send("w", f"m{i}")
    _to(store, "0014")
    _to(store, HEAD)
    for i in range(5, 8):
        sender.send("w", f"m{i}")
    got = []
    while True:
        lease = worker.claim(limit=3)
        if not lease.deliveries:
            break
        got += [d.body for d in lease.deliveries]
        worker.ack(lease.lease_token)
    assert got == [f"m{i}" for i in range(8)]
    store.close()


# --- the inbox counter in batches (SQLite) -----------------------------------------------
def _exact(store: Store, pid: str) -> int:
    with store.read() as t:
        return int(
            t.one(
                f"SELECT count(*) FROM deliveries WHERE recipient_no = {sqlrows.RECIPIENT_NO} "
                "AND state IN ('ready', 'processing')",
                (pid,),
            )[0]
        )


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"], indirect=False)
def test_S7_the_inbox_cap_holds_across_the_counter_s_batches_claims_acks_and_a_purge(
    backend: str, tmp_path: Path
) -> None:
    """The inbox counter is taken in batches of 32 on SQLite (revision 0015):
    whatever the batch's state (rows counted, rows waiting for it, rows claimed
    and acked before it came), every reader sees the inbox's exact depth and
    the cap refuses the send past it; a purge of another space that frees the
    top rowids does not make the next deliveries count wrong."""
    with contextlib.ExitStack() as stack:
        if backend == "sqlite":
            store = spacegen.fresh_store(tmp_path / "a")
        else:
            store = Store(stack.enter_context(pgtest.database()))
        stack.callback(store.close)
        op = Operator(store)
        sid = op.create_space("workflow", inbox_cap=45, sender_share=1).id
        other = op.create_space("workflow").id
        a, _ = op.join(sid, "a")
        b, bj = op.join(sid, "b")
        z, _ = op.join(other, "z")
        _y, _ = op.join(other, "y")

        def seen() -> int:
            return next(p.waiting for p in op.participants(sid) if p.address == "b")

        for i in range(30):
            a.send("b", f"m{i}")
        lease = b.claim(limit=20)  # claimed before the batch counts them
        b.ack(lease.lease_token)
        assert seen() == _exact(store, bj.participant_id) == 10
        for i in range(35):  # one batch counted on the way
            a.send("b", f"n{i}")
            assert seen() == _exact(store, bj.participant_id)
        with pytest.raises(errors.NotDelivered, match="inbox_full"):
            a.send("b", "one too many")
        lease = b.claim(limit=5)
        b.ack(lease.lease_token)
        assert seen() == _exact(store, bj.participant_id) == 40
        for i in range(20):
            z.send("y", f"z{i}")  # the top rowids: the other space's
        op.archive_space(other)
        op.purge_space(other, tmp_path / "export")
        for i in range(5):
            a.send("b", f"after{i}")
        assert seen() == _exact(store, bj.participant_id) == 45
        with pytest.raises(errors.NotDelivered, match="inbox_full"):
            a.send("b", "full again")
        while (lease := b.claim(limit=7)).deliveries:
            b.ack(lease.lease_token)
            assert seen() == _exact(store, bj.participant_id)
        assert seen() == 0


_COUNTER_SEEK = re.compile(
    r"USING COVERING INDEX (sqlite_autoindex_messages_1 \(space_no=\?\)"
    r"|ix_messages_space_no_bcast_no \(space_no=\? AND bcast_no>\?\))$"
)


# The send's caller read also takes the space's last log time (S44): the log's
# (space_no, seq) index read backwards, LIMIT 1, one row: a probe, not a tail.
_LAST_AT = "SEARCH messages USING INDEX sqlite_autoindex_messages_1 (space_no=?)"
_READS_LAST_AT = {"auth.caller_send"}


def test_every_reader_of_a_batched_counter_reads_the_tail_by_rowid(tmp_path: Path) -> None:
    """The rows past ``folds.upto`` are a short rowid range (fewer than 32):
    a reader that added them by another index would read a whole inbox or log."""
    store = spacegen.fresh_store(tmp_path)
    raw = store.connect()
    try:
        # (search.pending reads no tail: the log's last rowid against the search
        # index's mark, revision 0025, one probe of the log's end.)
        readers = {
            n: s
            for n, s in sql.all_statements().items()
            if "FROM folds" in s and n != "search.pending"
        }
        assert len(readers) >= 14
        for name, stmt in readers.items():
            plan = [
                str(r[3])
                for r in raw.execute(f"EXPLAIN QUERY PLAN {stmt}", dict.fromkeys(stmt.params))
            ]
            # The derived counters' seeks (revision 0017): the last seq and
            # broadcast number, one probe each of the log's own indexes.
            tails = [
                p
                for p in plan
                if re.match(r"SEARCH (w|messages) ", p)
                and not _COUNTER_SEEK.search(p)
                and not (name in _READS_LAST_AT and p == _LAST_AT)
            ]
            assert tails and all("INTEGER PRIMARY KEY (rowid>?)" in p for p in tails), (
                name,
                plan,
            )
    finally:
        raw.close()
        store.close()


def test_a_space_s_log_size_is_one_row_read_whatever_its_senders(tmp_path: Path) -> None:
    """Revision 0020: every statement that reads a space's log bytes (the send's
    caller check among them) reads its ``space_usage`` row by key and no
    ``sender_usage`` row; summing the senders' rows made a send cost more the
    more agents had sent in the space."""
    store = spacegen.fresh_store(tmp_path)
    try:
        readers = {n: s for n, s in sql.all_statements().items() if "space_usage" in s}
        assert "auth.caller_send" in readers and "usage.space_totals" in readers
        for name in readers:
            plan = _plan(store, name)
            assert any(
                p.startswith("SEARCH space_usage USING INDEX sqlite_autoindex_space_usage_1")
                for p in plan
            ), (name, plan)
            assert not any("sender_usage" in p for p in plan), (name, plan)
    finally:
        store.close()


def test_a_store_of_revision_0019_upgraded_keeps_its_log_size_with_a_batch_unfolded(
    any_store: Store, tmp_path: Path
) -> None:
    """Revision 0020 starts each space's ``space_usage`` row at the sum of its
    folded ``sender_usage`` rows; the rows past ``folds.upto`` stay the readers'
    tail. So a store upgraded with a batch half folded exports what it exported
    before, reads its log size as the log's own sum, and keeps it across the
    next folds."""
    store = any_store
    built = spacegen.rich_space(store)
    lynx = built.agents["lynx"]
    for i in range(45):  # a fold, and rows past it
        lynx.send("otter", f"before the upgrade {i}")
    _to(store, "0019")
    with store.read() as t:
        assert "space_usage" not in {
            r[0]
            for r in t.all(
                "SELECT name FROM sqlite_master WHERE type = 'table'"
                if store.dialect == "sqlite"
                else "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
            )
        }
    before = _export_old(store, built.space, tmp_path / "old")
    _to(store, HEAD)
    assert _export(store, built.space, tmp_path / "after") == before

    def agrees() -> int:
        with store.read() as t:
            (logged,) = t.one(
                f"SELECT sum(size_bytes) FROM messages WHERE space_no = {sqlrows.SPACE_NO}",
                (built.space,),
            )
            got = t.one(sql.stmt("usage.space_totals"), {"space_id": built.space})["log_bytes"]
        assert got == logged
        return int(logged)

    first = agrees()
    for i in range(40):
        lynx.send("otter", f"after the upgrade {i}")
    assert agrees() > first


def test_a_store_of_revision_0020_upgraded_keeps_every_delivery_and_an_imported_time(
    any_store: Store, tmp_path: Path
) -> None:
    """Revision 0021 drops the delivery's message id and space and keeps its time
    only where it is not its message's. A store of 0020 with one delivery whose
    time is its own (as an imported line may carry) upgrades to one that
    exports byte-identically, keeps that time and no other, and whose rows'
    messages are the ones they named."""
    store = any_store
    built = spacegen.rich_space(store)
    _to(store, "0020")
    own = "2026-01-02T03:04:05.000006Z"
    with store.write() as t:
        (odd,) = t.one("SELECT id FROM deliveries ORDER BY rowid LIMIT 1")
        t.execute("UPDATE deliveries SET created_at_utc = ? WHERE id = ?", (own, odd))
        links = _links(t)
    before = _export_old(store, built.space, tmp_path / "old")
    assert own.encode() in b"".join(before.values())
    _to(store, HEAD)
    assert _export(store, built.space, tmp_path / "after") == before
    with store.read() as t:
        kept = [
            tuple(r)
            for r in t.all(
                "SELECT id, created_at_utc FROM deliveries WHERE created_at_utc IS NOT NULL"
            )
        ]
        assert kept == [(odd, own)]
        assert _links(t) == links
    # And back: revision 0020's columns, filled from the messages again.
    _to(store, "0020")
    with store.read() as t:
        assert _links(t) == links
        assert t.one("SELECT created_at_utc FROM deliveries WHERE id = ?", (odd,))[0] == own
        assert t.one("SELECT count(*) FROM deliveries WHERE created_at_utc IS NULL")[0] == 0
    _to(store, HEAD)


def test_revision_0021_refuses_a_delivery_that_does_not_match_its_rowid_s_message(
    tmp_path: Path,
) -> None:
    """A row whose message id disagrees with the message its rowid names (none is
    written since revision 0017) would lose its link: the upgrade refuses, the
    store stays at 0020, every row as it was."""
    store = spacegen.fresh_store(tmp_path)
    try:
        spacegen.rich_space(store)
        _to(store, "0020")
        with store.write() as t:
            (other,) = t.one("SELECT id FROM messages ORDER BY rowid DESC LIMIT 1")
            (first,) = t.one("SELECT id FROM deliveries ORDER BY rowid LIMIT 1")
            t.execute("UPDATE deliveries SET message_id = ? WHERE id = ?", (other, first))
        with pytest.raises(Exception, match="do not match the message their rowid names"):
            _to(store, HEAD)
        assert store.schema_version() == "0020"
        with store.read() as t:
            assert t.one("SELECT message_id FROM deliveries WHERE id = ?", (first,))[0] == other
    finally:
        store.close()


def _recipients(t: Any) -> list[tuple[str, str]]:
    """(delivery id, recipient's participant id) of every delivery: by the
    recipient_id column before revision 0022, by the participant its number
    names from it on."""
    return _by_delivery(
        t, "recipient_id", "p.id", "JOIN participants p ON p.rowid = d.recipient_no "
    )


def test_a_store_of_revision_0021_upgraded_names_each_recipient_by_its_number(
    any_store: Store, tmp_path: Path
) -> None:
    """Revision 0022 replaces a delivery's recipient id by its participant's
    number. A store of 0021 upgrades to one that exports byte-identically, whose
    every row names the participant it named, whose inboxes claim in order, and
    that goes back to 0021 with the ids filled in again."""
    store = any_store
    built = spacegen.rich_space(store)
    lynx, otter = built.agents["lynx"], built.agents["otter"]
    _to(store, "0021")
    with store.read() as t:
        recipients = _recipients(t)
        rows = t.all("SELECT id, state FROM deliveries ORDER BY rowid")
        waiting = t.all("SELECT id, waiting FROM participants ORDER BY id")
    assert len(recipients) > 5
    before = _export_old(store, built.space, tmp_path / "old")
    _to(store, HEAD)
    assert _export(store, built.space, tmp_path / "after") == before
    with store.read() as t:
        assert _recipients(t) == recipients
        assert t.all("SELECT id, state FROM deliveries ORDER BY rowid") == rows
        assert t.all("SELECT id, waiting FROM participants ORDER BY id") == waiting
    otter.claim(limit=100)  # what was ready before the upgrade, under a lease
    for i in range(3):
        lynx.send("otter", f"after the upgrade {i}")
    got = [d.body for d in otter.claim(limit=100).deliveries]
    assert got == [f"after the upgrade {i}" for i in range(3)]
    with store.read() as t:
        recipients = _recipients(t)
    _to(store, "0021")
    with store.read() as t:
        assert _recipients(t) == recipients
    _to(store, HEAD)


def test_revision_0022_refuses_a_delivery_whose_recipient_is_no_participant(
    tmp_path: Path,
) -> None:
    """A row whose recipient is no participant (the foreign key of revision 0021
    refuses one; a file written with the keys off could hold it) has no number
    to take: the upgrade refuses, the store stays at 0021, the row as it was."""
    store = spacegen.fresh_store(tmp_path)
    try:
        spacegen.rich_space(store)
        _to(store, "0021")
        raw = sqlite3.connect(store.path)
        try:
            (first,) = raw.execute("SELECT id FROM deliveries ORDER BY rowid LIMIT 1").fetchone()
            with raw:
                raw.execute("UPDATE deliveries SET recipient_id = 'nobody' WHERE id = ?", (first,))
        finally:
            raw.close()
        with pytest.raises(Exception, match="name a recipient that is no participant"):
            _to(store, HEAD)
        assert store.schema_version() == "0021"
        with store.read() as t:
            assert (
                t.one("SELECT recipient_id FROM deliveries WHERE id = ?", (first,))[0] == "nobody"
            )
    finally:
        store.close()


# --- a delivery's id, derived from its message's (revision 0024) -------------------------
def test_a_send_writes_no_delivery_id_and_every_surface_shows_the_one_its_message_gives(
    any_store: Store, tmp_path: Path
) -> None:
    """A send's rows hold no id (NULL): each shows its message id's first 22
    characters and its place among the message's deliveries in four Crockford
    base32 characters, the same in the claim, the views, the export and a
    requeue by it; two recipients of one message get two ids."""
    store = any_store
    op = Operator(store)
    sid = op.create_space("workflow", max_deliveries=1).id
    sender, _ = op.join(sid, "s")
    a, _ = op.join(sid, "a")
    b, _ = op.join(sid, "b")
    sent = sender.send(["a", "b"], "to both")
    with store.read() as t:
        assert t.one("SELECT count(*) FROM deliveries WHERE id IS NOT NULL")[0] == 0
        shown = {
            r["recipient"]: r["delivery_id"]
            for r in t.all("SELECT recipient, delivery_id FROM v_inbox WHERE space_id = ?", (sid,))
        }
    assert shown == {"a": sent.id[:22] + "0000", "b": sent.id[:22] + "0001"}
    claimed = a.claim(limit=5)
    assert [(d.id, d.delivery_id) for d in claimed.deliveries] == [(sent.id, shown["a"])]
    a.release(claimed.lease_token)
    assert a.claim(limit=5).deliveries == []  # max_deliveries 1: the next claim quarantines
    assert [q.delivery_id for q in op.quarantined(sid)] == [shown["a"]]
    with store.read() as t:
        assert (
            t.one("SELECT delivery_id FROM v_quarantine WHERE space_id = ?", (sid,))[0]
            == (shown["a"])
        )
    _export(store, sid, tmp_path / "x")
    (inbox,) = (tmp_path / "x").rglob("mailboxes/a/inbox.jsonl")
    lines = inbox.read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == [shown["a"]]
    assert op.requeue(sid, [shown["a"]]) == 1
    assert [d.delivery_id for d in a.claim(limit=5).deliveries] == [shown["a"]]


def test_a_store_of_revision_0023_upgraded_keeps_every_delivery_id(
    any_store: Store, tmp_path: Path
) -> None:
    """Going back to revision 0023 writes each derived id into its row; the
    upgrade keeps every id a row holds, so the store exports what it exported
    at 0023 and every row shows the id it showed."""
    store = any_store
    built = spacegen.rich_space(store)
    with store.read() as t:
        derived = t.one("SELECT count(*) FROM deliveries WHERE id IS NULL")[0]
        ids = _links(t)
    assert derived > 0
    head = _export(store, built.space, tmp_path / "head")
    _to(store, "0023")
    with store.read() as t:
        assert t.one("SELECT count(*) FROM deliveries WHERE id IS NULL")[0] == 0
        assert _links(t) == ids
    assert _export(store, built.space, tmp_path / "old") == head
    _to(store, HEAD)
    with store.read() as t:
        assert _links(t) == ids
    assert _export(store, built.space, tmp_path / "after") == head


# --- the search index without column sizes (revision 0025) ------------------------------
def test_a_store_of_revision_0024_upgraded_finds_what_it_found_and_keeps_no_sizes(
    tmp_path: Path,
) -> None:
    """Revision 0025 makes the search index again without its table of column
    sizes (12 bytes a message) and keeps its mark in a fold. A store taken back
    to 0024 holds the sizes of every row again; upgraded, it finds the same
    messages with the same ranks as before, passes FTS5's integrity check, its
    mark is the log's last row, and a new send is found."""
    store = spacegen.fresh_store(tmp_path)

    def sized() -> int:
        with store.read() as t:
            if not t.one("SELECT count(*) FROM sqlite_master WHERE name = 'messages_fts_docsize'")[
                0
            ]:
                return -1
            return int(t.one("SELECT count(*) FROM messages_fts_docsize")[0])

    try:
        op = Operator(store)
        sid = op.create_space("workflow").id
        a, _ = op.join(sid, "a")
        op.join(sid, "b")
        for i in range(40):  # a batch indexed, a tail waiting
            a.send("b", f"parser word{i % 7} {'bug' if i % 3 else 'fix'} {i}")
        before = [(h.id, h.rank) for h in op.search(sid, "parser word3", limit=50)]
        assert len(before) > 3 and sized() == -1
        _to(store, "0024")
        assert sized() == 40  # (the code of 0024 reads its index: no search here)
        _to(store, HEAD)
        assert sized() == -1
        with store.read() as t:
            assert (
                t.one("SELECT upto FROM folds WHERE name = 'search'")[0]
                == t.one("SELECT max(rowid) FROM messages")[0]
            )
        assert [(h.id, h.rank) for h in op.search(sid, "parser word3", limit=50)] == before
        integrity_check(store)
        a.send("b", "parser word3 after")
        assert len(op.search(sid, "parser word3", limit=50)) == len(before) + 1
        _to(store, "0024")
        assert sized() == 41
        _to(store, HEAD)
        integrity_check(store)
    finally:
        store.close()


# --- a log row's reached list, written only where it is not its recipients (0026) -------
def test_a_send_to_addresses_that_all_take_it_writes_no_reached_list_and_shows_one(
    any_store: Store, tmp_path: Path
) -> None:
    """Revision 0026: where every form given is an address and each took the
    message, ``reached`` is NULL (its recipients are the list); a role form or
    a partial reach writes its list. The log, the views, the export and the
    idempotent repeat show the same list either way."""
    store = any_store
    op = Operator(store)
    sid = op.create_space("workflow").id
    sender, _ = op.join(sid, "s")
    op.join(sid, "a")
    op.join(sid, "b", role="reviewer")
    plain = sender.send(["a", "b"], "to both", idempotency_key="k")
    role = sender.send("role:b", "by role")
    partial = sender.send(["a", "nobody"], "half")
    with store.read() as t:
        stored = {
            r[0]: r[1]
            for r in t.all(
                f"SELECT id, reached FROM messages WHERE space_no = {sqlrows.SPACE_NO}",
                (sid,),
            )
        }
        viewed = {
            r[0]: json.loads(r[1])
            for r in t.all("SELECT id, reached FROM v_log WHERE space_id = ?", (sid,))
        }
    assert stored[plain.id] is None
    assert json.loads(stored[role.id]) == ["b"] and json.loads(stored[partial.id]) == ["a"]
    assert viewed == {plain.id: ["a", "b"], role.id: ["b"], partial.id: ["a"]}
    assert [e.reached for e in op.log(sid)] == [["a", "b"], ["b"], ["a"]]
    assert sender.send(["a", "b"], "to both", idempotency_key="k").reached == ["a", "b"]
    _export(store, sid, tmp_path / "x")
    (log,) = (tmp_path / "x").rglob("messages/log.jsonl")
    assert [json.loads(line)["reached"] for line in log.read_text().splitlines()] == [
        ["a", "b"],
        ["b"],
        ["a"],
    ]


def test_a_store_of_revision_0025_upgraded_keeps_every_reached_list(
    any_store: Store, tmp_path: Path
) -> None:
    """The upgrade clears the copies (a list equal to its recipients), the
    store exports what it exported at 0025, and going back writes them again."""
    store = any_store
    built = spacegen.rich_space(store)
    head = _export(store, built.space, tmp_path / "head")
    _to(store, "0025")
    with store.read() as t:
        assert t.one("SELECT count(*) FROM messages WHERE reached IS NULL")[0] == 0
        copies = t.one("SELECT count(*) FROM messages WHERE reached = recipients")[0]
    assert copies > 0
    assert _export(store, built.space, tmp_path / "old") == head
    _to(store, HEAD)
    with store.read() as t:
        assert t.one("SELECT count(*) FROM messages WHERE reached IS NULL")[0] == copies
        assert t.one("SELECT count(*) FROM messages WHERE reached = recipients")[0] == 0
    assert _export(store, built.space, tmp_path / "after") == head


def test_the_caller_check_of_an_operation_that_sends_nothing_reads_two_rows_by_key(
    tmp_path: Path,
) -> None:
    """``auth.caller`` (a claim's, an ack's, a board call's check, S10) reads the
    caller's participant row and its space's row, each by its key, and nothing
    of the log: the space's counters (last seq, log bytes, last broadcast) are
    read only by a send's check (``auth.caller_counted``, ``auth.caller_send``),
    each three more seeks of the log, every page read again after another
    process's commit."""
    store = spacegen.fresh_store(tmp_path)
    try:
        lean = _plan(store, "auth.caller")
        assert len(lean) == 2, lean
        assert all(re.match(r"SEARCH (p|spaces) USING INDEX ", p) for p in lean), lean
        counted = _plan(store, "auth.caller_counted")
        assert any(p.startswith("SEARCH messages ") for p in counted), counted
    finally:
        store.close()


def test_a_check_reads_the_space_s_counters_only_when_asked_and_then_as_a_send_does(
    tmp_path: Path,
) -> None:
    """``caller(..., counted=True)`` (a send to several targets) reads the
    counters ``auth.caller_send`` reads; a plain check leaves them unread
    (None), and the heartbeat's check (it reads them, once a second) too."""
    from broker.spaces import auth

    store = spacegen.fresh_store(tmp_path)
    try:
        op = Operator(store)
        space = op.create_space("workflow").id
        agent, _ = op.join(space, "a")
        b = op.join(space, "b")[1]
        agent.send(b.address, "one")
        agent.send("broadcast", "two")
        ident = agent.identity
        with store.read() as t:
            assert auth.caller(t, ident).counters is None
            counted = auth.caller(t, ident, counted=True).counters
            # (a time before the send's beat falls due: the send's own check)
            sending = auth.caller(t, ident, "1999-01-01T00:00:00.000000Z", b.address).counters
        assert counted == sending
        assert counted is not None and counted[0] == 2 and counted[2] == 1 and counted[1] > 0
        auth._beats.clear()  # the next write's check is the heartbeat's
        with store.write() as t:
            beat = auth.caller(t, ident, store.now_ts())
        assert auth._beats and beat.counters is None
    finally:
        store.close()
