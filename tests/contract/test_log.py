"""S11: the log is append-only (in the database, not only in code) and never
trimmed; past log_max_mb sends fail with messaging_full, receipts still land.
Plus reading the log: order, filters, cursors."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from typing import Any

import pytest
import sqlrows
import trusted
from sqlrows import spaces_as_read

from broker import Agent, Operator, Store, errors
from broker.ids import new_id, parse_ts, seq_in_id
from broker.mail import messages
from broker.model.records import to_dict
from broker.store.settings import Limits
from broker.vocab import APPEND_ONLY


def count(store: Store, table: str, where: str = "1 = 1", params: tuple[Any, ...] = ()) -> int:
    with store.read() as t:
        return int(t.one(f"SELECT count(*) FROM {table} WHERE {where}", params)[0])


@pytest.fixture
def filled(store: Store, space: str, join: Callable[..., Agent]) -> dict[str, Agent]:
    """A space with a row in every append-only table."""
    lynx = join("flow/lynx")
    otter = join("flow/otter", tools=["board.read"])
    lynx.send("otter", "hello")
    with pytest.raises(errors.ToolUnavailable):
        otter.send("lynx", "I may not")  # leaves a transcript notice
    with store.write() as t:
        t.execute(
            "INSERT INTO claim_journal (id, space_id, key, event, owner, token, at_utc) "
            "VALUES (?, ?, 'k', 'claimed', 'lynx', 1, ?)",
            (new_id(), space, store.now_ts()),
        )
    for table in APPEND_ONLY:
        assert count(store, table) > 0, table
    return {"lynx": lynx, "otter": otter}


def snapshot(store: Store, table: str) -> list[Any]:
    with store.read() as t:
        return t.all(f"SELECT * FROM {table} ORDER BY id")


@pytest.mark.parametrize("table", APPEND_ONLY)
def test_S11_update_and_delete_are_refused_through_the_store(
    store: Store, filled: dict[str, Agent], table: str
) -> None:
    before = snapshot(store, table)
    with (
        pytest.raises(errors.AppendOnly, match=f"append-only: {table} refuses UPDATE"),
        store.write() as t,
    ):
        t.execute(f"UPDATE {table} SET id = id")
    with (
        pytest.raises(errors.AppendOnly, match=f"append-only: {table} refuses DELETE"),
        store.write() as t,
    ):
        t.execute(f"DELETE FROM {table}")
    assert snapshot(store, table) == before


@pytest.mark.sqlite_only  # the SQLite file itself (tests/unit/store/test_pg.py: the same on PostgreSQL)
@pytest.mark.parametrize("table", APPEND_ONLY)
def test_S11_update_and_delete_are_refused_through_a_plain_sqlite3_connection(
    store: Store, filled: dict[str, Agent], table: str
) -> None:
    before = snapshot(store, table)
    conn = sqlite3.connect(store.path)  # no broker code at all
    try:
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            conn.execute(f"UPDATE {table} SET id = id")
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            conn.execute(f"DELETE FROM {table} WHERE rowid = (SELECT min(rowid) FROM {table})")
        conn.rollback()
    finally:
        conn.close()
    assert snapshot(store, table) == before


@pytest.mark.sqlite_only  # the SQLite file itself (tests/unit/store/test_pg.py: the same on PostgreSQL)
def test_S11_append_only_also_guards_columns_one_by_one(
    store: Store, filled: dict[str, Agent]
) -> None:
    conn = sqlite3.connect(store.path)
    try:
        for column in ("body", "reached", "not_reached", "sender", "kind", "seq", "bcast_no"):
            with pytest.raises(sqlite3.DatabaseError, match="append-only"):
                conn.execute(f"UPDATE messages SET {column} = NULL")
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            conn.execute("UPDATE participant_events SET event = 'left'")
    finally:
        conn.close()


def test_S11_inserts_are_still_allowed_and_other_tables_stay_writable(
    store: Store, filled: dict[str, Agent]
) -> None:
    with store.write() as t:
        t.execute("UPDATE deliveries SET state = 'done'")  # the queue is not the log
        t.execute("UPDATE participants SET status = 'idle'")
    assert count(store, "deliveries", "state = 'done'") == 1


# --- log_max_mb ------------------------------------------------------------------------------
def test_S11_log_max_mb_defaults_to_64() -> None:
    assert Limits().log_max_mb == 64


def test_S11_past_log_max_mb_sends_fail_with_messaging_full_and_a_notice(
    store: Store, operator: Operator
) -> None:
    # ~2 KB, all of it for one sender (S30's share is tested in test_limits.py)
    sid = operator.create_space("workflow", log_max_mb=0.002, sender_share=1).id
    lynx, _ = trusted.join(store, sid, "flow/lynx")
    otter, _ = trusted.join(store, sid, "flow/otter")
    sent = 0
    with pytest.raises(errors.MessagingFull) as info:
        for _ in range(100):
            lynx.send("otter", "x" * 300)
            sent += 1
    assert 4 <= sent <= 8
    err = info.value
    assert err.exit_code == 6 and err.code == "messaging_full"
    assert "log_max_mb" in str(err)
    pid = lynx.identity.participant_id
    assert (
        count(store, "messages", f"space_no = {sqlrows.SPACE_NO}", (sid,)) == sent
    )  # the refused send: no row
    assert (
        count(
            store,
            "transcript",
            "participant_id = ? AND kind = 'messaging_full' AND direction = 'notice'",
            (pid,),
        )
        == 1
    )

    # Every further send fails the same way, each leaving a notice; nothing is trimmed.
    for call in (
        lambda: lynx.send("otter", "tiny"),
        lambda: lynx.send("broadcast", "tiny"),
        lambda: lynx.post("tiny"),
        lambda: otter.send("lynx", "tiny"),
    ):
        with pytest.raises(errors.MessagingFull):
            call()
    assert count(store, "transcript", "participant_id = ? AND kind = 'messaging_full'", (pid,)) == 4
    assert (
        count(
            store,
            "transcript",
            "participant_id = ? AND kind = 'messaging_full'",
            (otter.identity.participant_id,),
        )
        == 1
    )
    # ... but the operator is always heard (S30): logged and counted past the cap.
    assert operator.send(sid, "from the operator", to=["lynx"]).reached == ["lynx"]
    assert count(store, "messages", f"space_no = {sqlrows.SPACE_NO}", (sid,)) == sent + 1

    # Receipts are still written.
    first = operator.log(sid)[0]
    with store.write() as t:
        receipt = messages.append_receipt(store, t, sid, "otter", new_id(), [first.id])
    entry = operator.log(sid)[-1]
    assert (entry.id, entry.kind, entry.sender, entry.seq) == (receipt, "seen", "otter", sent + 2)
    assert json.loads(entry.body) == [first.id]


def test_S11_messaging_full_is_per_space(store: Store, operator: Operator) -> None:
    full = operator.create_space("workflow", log_max_mb=0.0001).id
    fine = operator.create_space("workflow").id
    a, _ = trusted.join(store, full, "flow/a")
    b, _ = trusted.join(store, fine, "flow/a")
    a.send("operator", "x" * 200)
    with pytest.raises(errors.MessagingFull):
        a.send("operator", "x")
    assert b.send("operator", "x").reached == ["operator"]


def test_S11_log_max_mb_is_counted_in_mebibytes_to_the_byte(
    store: Store, operator: Operator
) -> None:
    # 2**-9 MB is 2048 bytes exactly: a log of 2047 bytes takes one more send, 2048 none.
    def log_bytes(sid: str) -> int:
        with store.read() as t:
            return int(
                t.one(f"SELECT log_bytes FROM {spaces_as_read(store)} WHERE id = ?", (sid,))[0]
            )

    for size, full in ((2047, False), (2048, True)):
        sid = operator.create_space("workflow", log_max_mb=2**-9, sender_share=1).id
        a, _ = trusted.join(store, sid, "flow/a")
        trusted.join(store, sid, "flow/b")
        row = len('["b"]') * 2 + len("[]")  # recipients, reached, not_reached
        a.send("b", "x" * (size - log_bytes(sid) - row))
        assert log_bytes(sid) == size
        if not full:
            assert a.send("b", "x").reached == ["b"]
            continue
        with pytest.raises(errors.MessagingFull) as info:
            a.send("b", "x")
        assert str(info.value) == (
            f"the log of space {sid} passed log_max_mb (0.00195312 MB): sends are refused"
        )
        assert log_bytes(sid) == size


# --- reading the log ----------------------------------------------------------------------------
def test_S7_log_entries_carry_the_whole_row(
    store: Store, space: str, join: Callable[..., Agent]
) -> None:
    lynx = join("flow/lynx")
    join("flow/otter")
    before = store.now_ts()
    r = lynx.send(["otter", "ghost#1"], "body text", idempotency_key="k1")
    after = store.now_ts()
    with store.read() as t:
        stored_at = t.one("SELECT created_at_utc FROM messages WHERE id = ?", (r.id,))[0]
    assert before <= stored_at <= after  # stamped by the send, not by the read
    (entry,) = Operator(store).log(space)
    assert to_dict(entry) == {
        "id": r.id,
        "space_id": space,
        "seq": 1,
        "kind": "direct",
        "sender": "lynx",
        "to": ["otter", "ghost#1"],
        "body": "body text",
        "urgent": False,
        "via": None,
        "ref": None,
        "reached": ["otter"],
        "not_reached": [{"address": "ghost#1", "reason": "unknown_participant"}],
        "idempotency_key": "k1",
        "created_at_utc": stored_at,
        "thread": None,
        "reply_to": None,
        "importance": "normal",
        "ack_required": False,
    }
    parse_ts(entry.created_at_utc)
    assert len(entry.created_at_utc) == 27


def test_S7_log_reads_after_an_id_or_a_seq_filtered_by_kind(
    store: Store, space: str, join: Callable[..., Agent]
) -> None:
    lynx = join("flow/lynx")
    join("flow/otter")
    op = Operator(store)
    ids = [lynx.send("otter", "d1").id, lynx.post("p1").id, op.send(space, "o1", to=["otter"]).id]
    ids.append(lynx.send("otter", "d2").id)
    assert [e.id for e in op.log(space)] == ids
    assert [e.body for e in op.log(space, after=ids[1])] == ["o1", "d2"]
    assert [e.body for e in op.log(space, after=3)] == ["d2"]  # a seq
    assert [e.body for e in op.log(space, kinds=["direct", "operator"])] == ["d1", "o1", "d2"]
    assert [e.body for e in op.log(space, after=ids[0], kinds=["direct"])] == ["d2"]
    assert [e.body for e in op.log(space, limit=2)] == ["d1", "p1"]
    assert op.log(space, after=ids[-1]) == []
    with pytest.raises(errors.MessageNotFound):
        op.log(space, after="01NOSUCHMESSAGE0000000000")
    compact = space.split("_", 1)[1]
    assert [e.id for e in op.log(compact)] == ids  # the log takes any run id form


def test_S7_message_ids_are_time_ordered_like_seq(
    store: Store, space: str, join: Callable[..., Agent]
) -> None:
    lynx = join("flow/lynx")
    for i in range(20):
        lynx.send("operator", str(i))
    log = Operator(store).log(space)
    assert [e.id for e in log] == sorted(e.id for e in log)
    assert [e.created_at_utc for e in log] == sorted(e.created_at_utc for e in log)


def test_S7_a_message_id_names_its_seq_and_a_look_alike_at_that_seq_is_no_message(
    store: Store, operator: Operator, space: str, join: Callable[..., Agent]
) -> None:
    """Revision 0018: the log keeps no index of ids. An id the broker makes
    names its seq (``broker.ids.message_id``); a lookup reads the row at that
    seq and checks the id, so another id that names the same seq is no message."""
    lynx = join("flow/lynx")
    sent = [lynx.send("operator", str(i)) for i in range(3)]
    assert [seq_in_id(r.id) for r in sent] == [r.seq for r in sent]
    first = sent[0].id
    look_alike = first[:18] + ("00000000" if first[18:] != "00000000" else "11111111")
    assert seq_in_id(look_alike) == sent[0].seq
    with pytest.raises(errors.MessageNotFound):
        operator.log(space, after=look_alike)
    assert [e.seq for e in operator.log(space, after=first)] == [r.seq for r in sent[1:]]
    for bad in ("not an id", first.lower(), first + "0"):
        with pytest.raises((errors.MessageNotFound, errors.InvalidInput)):  # no message
            operator.log(space, after=bad)
    with store.read() as t:
        assert t.one("SELECT count(*) FROM message_aliases")[0] == 0  # none made by the broker


def test_S7_a_log_cursor_from_another_space_is_message_not_found_in_one_exact_line(
    store: Store, operator: Operator, space: str, join: Callable[..., Agent]
) -> None:
    join("flow/lynx").send("operator", "here")
    other = operator.create_space("workflow").id
    elsewhere = trusted.join(store, other, "flow/otter")[0].send("operator", "there").id
    with pytest.raises(errors.MessageNotFound) as info:
        operator.log(space, after=elsewhere)
    assert str(info.value) == f"no message {elsewhere!r} in space {space}"
    assert (info.value.code, info.value.exit_code) == ("message_not_found", 3)


def test_S7_messages_log_reads_at_most_limit_rows_after_the_cursor(
    store: Store, space: str, join: Callable[..., Agent]
) -> None:
    # The batched readers (follow, the thread cursor) page the log with ``limit``.
    lynx = join("flow/lynx")
    for i in range(5):
        lynx.send("operator", f"m{i}")
    assert [e.seq for e in messages.log(store, space, after_seq=1, limit=2)] == [2, 3]
    assert [e.seq for e in messages.log(store, space, after_seq=3, limit=9)] == [4, 5]
    assert [e.seq for e in messages.log(store, space, after_seq=1)] == [2, 3, 4, 5]


def test_S11_a_broadcast_row_appended_outside_a_send_moves_the_broadcast_counter_by_one(
    store: Store, space: str
) -> None:
    # The log's other writer (receipts; the rows the export and view tests lay
    # down, tests/sqlrows.py) keeps the space's counters those of its log.
    import sqlrows

    counters = f"SELECT last_seq, last_bcast, log_bytes FROM {spaces_as_read(store)} WHERE id = ?"
    for n in (1, 2):
        mid = sqlrows.message(store, space, "lynx", f"all hands {n}", to=["broadcast"], bcast=True)
        with store.read() as t:
            seq, bcast_no, size = t.one(
                "SELECT seq, bcast_no, size_bytes FROM messages WHERE id = ?", (mid,)
            )
            last_seq, last_bcast, log_bytes = t.one(counters, (space,))
            total = t.one(
                f"SELECT sum(size_bytes) FROM messages WHERE space_no = {sqlrows.SPACE_NO}",
                (space,),
            )[0]
        assert (seq, bcast_no) == (last_seq, last_bcast) == (n, n)
        assert log_bytes == total and size > 0


def test_S18_a_seen_receipt_is_one_log_row_to_nobody_never_urgent(
    store: Store, space: str, join: Callable[..., Agent]
) -> None:
    lynx, otter = join("flow/lynx"), join("flow/otter")
    sent = lynx.send("otter", "hello").id
    turn = otter.next_turn()
    assert turn.id is not None
    counters = f"SELECT last_seq, last_bcast, log_bytes FROM {spaces_as_read(store)} WHERE id = ?"
    with store.read() as t:
        before = tuple(t.one(counters, (space,)))
    seen = otter.seen(turn.id)
    with store.read() as t:
        after = tuple(t.one(counters, (space,)))
        size = t.one("SELECT size_bytes FROM messages WHERE id = ?", (seen.receipt_id,))[0]
    body = json.dumps([sent])
    assert size == len(body) + len("[]") * 3  # the body, no to, reached or not_reached
    # One more row and its bytes; no broadcast number (a receipt is no broadcast).
    assert after == (before[0] + 1, before[1], before[2] + size)
    receipt = to_dict(Operator(store).log(space)[-1])
    assert receipt.pop("created_at_utc") and receipt.pop("space_id") == space
    assert receipt == {
        "id": seen.receipt_id,
        "seq": 2,
        "kind": "seen",
        "sender": "otter",
        "to": [],
        "body": body,
        "urgent": False,
        "via": None,
        "ref": turn.id,
        "reached": [],
        "not_reached": [],
        "idempotency_key": None,
        "thread": None,
        "reply_to": None,
        "importance": "normal",
        "ack_required": False,
    }
