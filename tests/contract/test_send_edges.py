"""Edges of sending (S6, S8, S9, S33) that mutation testing found unpinned:
the exact one-line refusal each bad send gets and that it wrote nothing, the
kinds a batch logs, the defaults of ``messages.send``, and the operator's send
to participants that all left (S8's one exception). test_send.py holds the
rules themselves; this module holds their exact edges."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import sqlrows
import trusted
from sqlrows import spaces_as_read

from broker import Agent, Operator, Store, errors
from broker.mail import messages
from broker.model.inputs import OperatorSendInput, SendInput


def all_rows(store: Store) -> tuple[Any, ...]:
    """Every row a send could write, and the space counters it could move."""
    with store.read() as t:
        counts = tuple(
            t.one(f"SELECT count(*) FROM {table}")[0]
            for table in ("messages", "deliveries", "transcript", "participant_events")
        )
        counters = t.one(
            f"SELECT sum(last_seq), sum(last_bcast), sum(log_bytes) FROM {spaces_as_read(store)}"
        )
    return counts + tuple(counters)


def assert_refused(
    store: Store, call: Callable[[], object], message: str, fields: dict[str, Any] | None = None
) -> None:
    """S33: ``call`` is invalid input with exactly ``message`` (and ``fields``,
    when given), and wrote nothing."""
    before = all_rows(store)
    with pytest.raises(errors.InvalidInput) as info:
        call()
    assert str(info.value) == message
    assert info.value.to_dict()["error"] == "invalid_input"
    if fields is not None:
        assert info.value.fields == fields
    assert all_rows(store) == before


@pytest.fixture
def pair(join: Callable[..., Agent]) -> tuple[Agent, Agent]:
    return join("flow/lynx", agent="scanner"), join("flow/otter", agent="scanner")


# --- S6: broadcast is an address of its own ---------------------------------------------------
def test_S6_broadcast_with_other_addresses_is_refused_in_one_exact_line(
    store: Store, pair: tuple[Agent, Agent]
) -> None:
    lynx, _ = pair
    # A form that does not parse names the field too, on every path.
    for call in (
        lambda: lynx.send(["otter", "bad address!"], "x"),
        lambda: lynx.directive(["bad address!"], "x"),
        lambda: Operator(store).send(lynx.identity.space_id, "x", to=["bad address!"]),
    ):
        assert_refused(store, call, "bad address 'bad address!'", {"field": "to"})
    for to in (["broadcast", "otter"], ["otter", "broadcast"]):
        for call in (
            lambda to=to: lynx.send(to, "x"),
            lambda to=to: lynx.directive(to, "x"),
            lambda to=to: Operator(store).send(lynx.identity.space_id, "x", to=to),
        ):
            assert_refused(
                store, call, "'broadcast' cannot be combined with other addresses", {"field": "to"}
            )


def test_S6_a_batch_item_with_broadcast_and_another_address_is_refused_naming_the_item(
    store: Store, pair: tuple[Agent, Agent]
) -> None:
    lynx, _ = pair
    # Two addresses are enough: the rule is "broadcast and anything else".
    assert_refused(
        store,
        lambda: lynx.send_many(
            [{"to": "otter", "text": "fine"}, {"to": ["otter", "broadcast"], "text": "x"}]
        ),
        "items[1].to: 'broadcast' cannot be combined with other addresses",
    )


def test_S9_a_batch_logs_each_item_with_its_own_kind(
    store: Store, space: str, pair: tuple[Agent, Agent]
) -> None:
    lynx, _ = pair
    results = lynx.send_many(
        [
            {"to": "otter", "text": "direct"},
            {"to": "broadcast", "text": "to all"},
            {"to": ["role:scanner"], "text": "by role"},
        ]
    )
    assert [r.kind for r in results] == ["direct", "broadcast", "direct"]
    assert [r.reached for r in results] == [["otter"]] * 3
    log = Operator(store).log(space)
    assert [(e.kind, e.body, e.urgent) for e in log] == [
        ("direct", "direct", False),  # urgent is the operator's (S17), never an agent's
        ("broadcast", "to all", False),
        ("direct", "by role", False),
    ]


def test_S9_a_post_addressed_to_broadcast_is_refused_in_one_exact_line(
    store: Store, pair: tuple[Agent, Agent]
) -> None:
    lynx, _ = pair
    for to in (["broadcast"], ["otter", "broadcast"]):
        assert_refused(
            store,
            lambda to=to: lynx.post("everyone", addressed_to=to),
            "a post cannot be addressed to 'broadcast': an unaddressed post is the channel",
        )


# --- S33: a bad batch item is named by its position ------------------------------------------
def test_S33_a_bad_batch_item_is_refused_in_one_line_naming_its_position(
    store: Store, pair: tuple[Agent, Agent]
) -> None:
    lynx, _ = pair
    ok = {"to": "otter", "text": "fine"}
    assert_refused(
        store,
        lambda: lynx.send_many([ok, {"to": "otter", "text": "x", "from": "lead"}]),
        "unknown field 'items[1].from': this tool does not take it",
    )
    assert_refused(
        store,
        lambda: lynx.send_many([{"to": "otter", "text": "  "}, ok]),
        "bad items[0].text: message text is empty",
    )


# --- S9: the operator's refusals ---------------------------------------------------------------
def test_S9_the_operators_bad_via_urgent_and_targets_are_refused_in_one_exact_line(
    store: Store, space: str, pair: tuple[Agent, Agent]
) -> None:
    # A handle made with a bad via is refused at its first send.
    assert_refused(
        store,
        lambda: Operator(store, via="sms").send(space, "x", to=["lynx"]),  # type: ignore[arg-type]
        "bad via 'sms': cli, cp or mcp",
        {"field": "via"},
    )
    # The handle checks urgent's type at the API's edge (broker.model.typecheck) ...
    assert_refused(
        store,
        lambda: Operator(store).send(space, "x", to=["lynx"], urgent="yes"),  # type: ignore[arg-type]
        "bad urgent 'yes': true or false",
    )
    # ... and its input record is the one check, whoever builds it.
    assert_refused(
        store,
        lambda: messages.operator_send(
            store, OperatorSendInput(space=space, text="x", urgent="yes"), via="cli"
        ),
        "bad urgent 'yes': true or false",
    )
    for to in ("parent", "operator"):
        assert_refused(
            store,
            lambda to=to: Operator(store).send(space, "x", to=["lynx", to]),
            f"the operator cannot send to {to!r}",
            {"field": "to"},
        )


# --- S8: the operator's one exception ----------------------------------------------------------
def test_S8_an_operator_send_whose_only_misses_left_succeeds_and_is_logged(
    store: Store, space: str, pair: tuple[Agent, Agent]
) -> None:
    lynx, otter = pair
    lynx.leave()
    otter.leave()
    op = Operator(store)
    r = op.send(space, "are you there?", to=["lynx", "otter"])
    assert r.reached == []
    assert [(n.address, n.reason) for n in r.not_reached] == [
        ("lynx", "participant_left"),
        ("otter", "participant_left"),
    ]
    entry = op.log(space)[-1]
    assert (entry.id, entry.sender, entry.not_reached) == (r.id, "operator", r.not_reached)
    # A miss of another kind beside them is an error, as for any sender.
    before = all_rows(store)
    with pytest.raises(errors.NotDelivered) as info:
        op.send(space, "anyone?", to=["lynx", "nobody#9"])
    assert str(info.value) == (
        "not delivered to lynx: participant_left, nobody#9: unknown_participant"
    )
    assert all_rows(store)[0] == before[0] + 1  # logged all the same


# --- the library call's defaults ------------------------------------------------------------------
def test_S9_messages_send_defaults_to_a_plain_message_that_asks_for_no_ack(
    store: Store, space: str, pair: tuple[Agent, Agent]
) -> None:
    lynx, _ = pair
    r = messages.send(store, lynx.identity, SendInput(to="otter", text="plain"))
    entry = Operator(store).log(space)[-1]
    assert entry.id == r.id and r.kind == "direct"
    assert (entry.thread, entry.reply_to, entry.importance, entry.ack_required) == (
        None,
        None,
        "normal",
        False,
    )
    assert (entry.urgent, entry.via) == (False, None)


# --- S9, S35: the operator's send has an agent's mail fields ----------------------------------------
def test_S35_the_operator_sends_in_threads_with_importance_and_acks_like_an_agent(
    store: Store, space: str, pair: tuple[Agent, Agent]
) -> None:
    lynx, _ = pair
    op = Operator(store)
    first = op.send(space, "plan", to=["lynx"], thread="plan", importance="high",
                    ack_required=True)  # fmt: skip
    reply = op.send(space, "more", to=["lynx"], reply_to=first.id)
    by_id = {e.id: e for e in op.log(space)}
    a, b = by_id[first.id], by_id[reply.id]
    assert (a.kind, a.sender, a.thread, a.importance, a.ack_required, a.via) == (
        "operator", "operator", "plan", "high", True, "cli",
    )  # fmt: skip
    assert (b.thread, b.reply_to, b.importance, b.ack_required) == (
        "plan", first.id, "normal", False,
    )  # fmt: skip
    status = op.status(space, first.id)
    assert (status.ack_required, status.seen, status.not_seen) == (True, [], ["lynx"])
    # Checked as an agent's, before anything is written (S33).
    assert_refused(
        store,
        lambda: op.send(space, "x", to=["lynx"], reply_to="abc"),
        "bad reply_to: a message id (26 letters and digits)",
        {"field": "reply_to"},
    )
    assert_refused(
        store,
        lambda: op.send(space, "x", to=["lynx"], thread="a b"),
        "bad thread: a thread name: 1 to 64 letters, digits or _ . : # @ / + - (no spaces)",
        {"field": "thread"},
    )
    assert_refused(
        store,
        lambda: op.send(space, "x", to=["lynx"], importance="urgent"),
        "bad importance: one of 'low', 'normal' or 'high'",
        {"field": "importance"},
    )
    with pytest.raises(errors.MessageNotFound):
        op.send(space, "x", to=["lynx"], reply_to="0" * 26)


# --- S30: a sender's share of the log, to the byte ---------------------------------------------
# 2**-9 MB is 2048 bytes exactly, so a sender_share of 0.5 is 1024 of them.
TINY_LOG = {"log_max_mb": 2**-9, "sender_share": 0.5}
ROW = len('["c"]') * 2 + len("[]")  # a row to c, beside its body: recipients, reached, not_reached


def held(store: Store, sid: str, sender: str) -> int:
    with store.read() as t:
        return int(
            t.one(
                f"SELECT coalesce(sum(size_bytes), 0) FROM messages WHERE space_no = {sqlrows.SPACE_NO} AND sender = ?",
                (sid, sender),
            )[0]
        )


def share_refusal(sid: str, held: str = "1.0 KB") -> str:
    # A human size that is never "0.0 MB" for a sender that holds something.
    return (
        f"a holds {held} of the log of space {sid}: its sender_share (0.5 of log_max_mb "
        "0.00195312 MB) is used up; sends from it are refused"
    )


def test_S30_a_sender_holding_exactly_its_share_of_the_log_is_refused_in_one_exact_line(
    store: Store, operator: Operator
) -> None:
    # (a's bytes, c's bytes): a at 1023 passes; a at 1024 is refused, whether the
    # log holds more than the share or exactly it.
    for mine, other, refused_now in ((1023, 200, False), (1024, 200, True), (1024, 0, True)):
        sid = operator.create_space("workflow", **TINY_LOG).id
        a, _ = trusted.join(store, sid, "flow/a")
        c, _ = trusted.join(store, sid, "flow/c")
        if other:
            c.send("a", "y" * (other - ROW))
        a.send("c", "x" * (mine - ROW))
        assert (held(store, sid, "a"), held(store, sid, "c")) == (mine, other)
        if not refused_now:
            assert a.send("c", "x").reached == ["c"]
            continue
        before = all_rows(store)
        with pytest.raises(errors.MessagingFull) as info:
            a.send("c", "x")
        assert str(info.value) == share_refusal(sid)
        assert info.value.fields == {"space_id": sid, "sender": "a", "reason": "sender_share"}
        assert all_rows(store)[:2] == before[:2]  # no message, no delivery (a notice is kept)
        assert c.send("a", "another sender is still heard").reached == ["a"]


def test_S30_a_sender_new_to_the_log_fills_its_share_to_the_last_byte_in_one_batch(
    store: Store, operator: Operator
) -> None:
    # 4096 bytes of log, a share of 2048: c holds exactly 2048, so the log is at
    # the share and a's bytes are read (a has sent nothing: no usage row, 0).
    sid = operator.create_space("workflow", log_max_mb=2**-8, sender_share=0.5).id
    a, _ = trusted.join(store, sid, "flow/a")
    c, _ = trusted.join(store, sid, "flow/c")
    c.send_many([{"to": "a", "text": "y" * (256 - ROW)}] * 8)
    assert held(store, sid, "c") == 2048
    # a's first row takes it to 2047 bytes, one under the share: its second row
    # is still taken (the log is then at 4095 of 4096).
    results = a.send_many([{"to": "c", "text": "x" * (2047 - ROW)}, {"to": "c", "text": "z"}])
    assert [r.reached for r in results] == [["c"], ["c"]]
    assert held(store, sid, "a") == 2047 + ROW + 1
    with pytest.raises(errors.MessagingFull):  # and now it holds its share
        a.send("c", "more")


def test_S7_a_broadcast_with_no_other_live_reader_is_logged_and_never_counted_as_full(
    store: Store, operator: Operator
) -> None:
    # No other live reader: no cursor is behind, so broadcast_cap cannot refuse.
    sid = operator.create_space("workflow", broadcast_cap=1).id
    a, _ = trusted.join(store, sid, "flow/a")
    for n in (1, 2):
        with pytest.raises(errors.NotDelivered) as info:
            a.send("broadcast", f"anyone? {n}")
        assert info.value.fields["result"]["not_reached"] == [
            {"address": "broadcast", "reason": "no_live_participant"}
        ]
        assert info.value.fields["result"]["seq"] == n


def test_S30_a_batch_counts_its_own_rows_toward_the_senders_share_of_the_log(
    store: Store, operator: Operator
) -> None:
    sid = operator.create_space("workflow", **TINY_LOG).id
    a, _ = trusted.join(store, sid, "flow/a")
    c, _ = trusted.join(store, sid, "flow/c")
    item = {"to": "c", "text": "x" * (200 - ROW)}  # 200 bytes a row
    # Ten rows would be 2000 bytes of a 2048-byte log: past a's share at the sixth.
    with pytest.raises(errors.MessagingFull) as info:
        a.send_many([item] * 10)
    # the seventh, counted from 0; the six before hold 1200 bytes
    assert str(info.value) == "items[6]: " + share_refusal(sid, "1.2 KB")
    assert held(store, sid, "a") == 0  # the whole batch is refused
    # With another sender's 300 bytes in, the log passes the share at a's fifth
    # row: a's bytes are read then (800, this batch's) and kept up to date row by row.
    c.send("a", "y" * (300 - ROW))
    with pytest.raises(errors.MessagingFull) as info:
        a.send_many([item] * 7)  # the seventh finds a at 1200 bytes, the log at 1500
    assert info.value.fields["reason"] == "sender_share"
    assert info.value.fields["item"] == 6
    assert a.send_many([item] * 6)[-1].reached == ["c"]  # the sixth finds a at 1000
    assert held(store, sid, "a") == 1200


def test_S30_a_batch_keeps_counting_its_deliveries_toward_the_share_of_an_inbox(
    store: Store, operator: Operator
) -> None:
    # inbox_cap 8 at 0.25: one sender holds at most 2 of b's waiting deliveries.
    sid = operator.create_space("workflow", inbox_cap=8, sender_share=0.25).id
    a, _ = trusted.join(store, sid, "flow/a")
    b, _ = trusted.join(store, sid, "flow/b")
    c, _ = trusted.join(store, sid, "flow/c")
    c.send_many([{"to": "b", "text": "c"}] * 2)  # b's inbox now holds a share: a's is read
    results = a.send_many([{"to": "b", "text": str(i)} for i in range(4)])
    assert [r.reached for r in results] == [["b"], ["b"], [], []]
    assert [[(n.address, n.reason) for n in r.not_reached] for r in results[2:]] == [
        [("b", "sender_share")]
    ] * 2
    assert [d.body for d in b.claim(limit=8).deliveries] == ["c", "c", "0", "1"]


def test_S30_a_batch_reading_the_share_of_an_inbox_counts_its_own_deliveries_there_only(
    store: Store, operator: Operator
) -> None:
    sid = operator.create_space("workflow", inbox_cap=8, sender_share=0.25).id
    a, _ = trusted.join(store, sid, "flow/a")
    for name in ("b", "d"):
        trusted.join(store, sid, f"flow/{name}")
    trusted.join(store, sid, "flow/e")[0].send("b", "from e")
    # b holds 2 (a share) at a's fourth item: a's one delivery to b in this batch
    # counts, its two to d do not.
    items = [{"to": to, "text": to} for to in ("b", "d", "d", "b", "b")]
    results = a.send_many(items)
    assert [r.reached for r in results] == [["b"], ["d"], ["d"], ["b"], []]
    assert [(n.address, n.reason) for n in results[4].not_reached] == [("b", "sender_share")]


# --- S10, S7: refusals inside the send transaction ------------------------------------------------
def test_S10_a_body_over_the_cap_is_refused_in_one_exact_line_on_every_path(
    store: Store, operator: Operator
) -> None:
    sid = operator.create_space("workflow", body_max_bytes=10).id
    a, _ = trusted.join(store, sid, "flow/a")
    trusted.join(store, sid, "flow/b")
    big = "0123456789é"  # 12 bytes: the cap counts UTF-8 bytes, not characters
    for call, item in (
        (lambda: a.send("b", big), {}),
        (lambda: a.post(big), {}),
        # A batch is refused as a whole, naming the item (counted from 0).
        (lambda: a.send_many([{"to": "b", "text": "fits"}, {"to": "b", "text": big}]), {"item": 1}),
        (lambda: operator.send(sid, big, to=["b"]), {}),
    ):
        before = all_rows(store)
        with pytest.raises(errors.BodyTooLarge) as info:
            call()
        field = "items[1].text" if item else "text"  # the item and its field
        prefix = f"{field}: " if item else ""
        assert str(info.value) == prefix + "message body is 12 bytes; the cap is 10"
        assert info.value.fields == {"field": field, "size": 12, "cap": 10, **item}
        assert all_rows(store) == before


def test_S7_a_send_into_a_stopped_space_is_refused_in_one_exact_line_on_every_path(
    store: Store, operator: Operator
) -> None:
    sid = operator.create_space("workflow").id
    a, _ = trusted.join(store, sid, "flow/a")
    trusted.join(store, sid, "flow/b")
    operator.stop_space(sid)
    for call in (
        lambda: a.send("b", "x"),
        lambda: a.post("x"),
        lambda: a.send_many([{"to": "b", "text": "x"}]),
        lambda: operator.send(sid, "x", to=["b"]),
    ):
        before = all_rows(store)
        with pytest.raises(errors.SpaceNotRunning) as info:
            call()
        assert str(info.value) == f"space {sid} is stopped: it takes no message"
        assert info.value.fields == {"space_id": sid}
        assert all_rows(store)[:2] == before[:2]  # no message, no delivery


# --- S9: a directive to broadcast is no broadcast ----------------------------------------------
def test_S9_a_directive_to_broadcast_reaches_everyone_without_the_broadcast_log(
    store: Store, operator: Operator
) -> None:
    sid = operator.create_space("workflow", broadcast_cap=1).id
    a, _ = trusted.join(store, sid, "flow/a", tools=["msg.send", "board.directive"])
    trusted.join(store, sid, "flow/b")
    trusted.join(store, sid, "flow/c")
    a.send("broadcast", "fills the broadcast log's cap of 1 for b and c")
    r = a.directive("broadcast", "everyone: tests first")
    assert sorted(r.reached) == ["b", "c"]  # past the broadcast cap: it is no broadcast
    with store.read() as t:
        assert t.one("SELECT bcast_no FROM messages WHERE id = ?", (r.id,))[0] is None
        assert t.one(f"SELECT last_bcast FROM {spaces_as_read(store)} WHERE id = ?", (sid,))[0] == 1
        assert (
            t.one(f"SELECT count(*) FROM {sqlrows.delivery_rows()} WHERE message_id = ?", (r.id,))[
                0
            ]
            == 0
        )


def test_S12_S45_a_key_another_sender_used_is_the_callers_own_key(
    store: Store, pair: tuple[Agent, Agent]
) -> None:
    lynx, otter = pair
    first = lynx.send("otter", "first", idempotency_key="k1")
    mine = otter.send("lynx", "mine?", idempotency_key="k1")
    assert mine.id != first.id and not mine.duplicate
    # In a batch too: otter's k1 is otter's; a repeat of it is a duplicate.
    got = otter.send_many(
        [{"to": "lynx", "text": "a"}, {"to": "lynx", "text": "mine?", "idempotency_key": "k1"}]
    )
    assert got[1].id == mine.id and got[1].duplicate
    with store.read() as t:
        keyed = t.all("SELECT sender FROM messages WHERE idempotency_key = 'k1' ORDER BY seq")
    assert [r[0] for r in keyed] == ["lynx", "otter"]


def test_S33_a_batch_item_with_a_bad_address_is_refused_naming_the_item(
    store: Store, pair: tuple[Agent, Agent]
) -> None:
    lynx, _ = pair
    with pytest.raises(errors.InvalidInput) as info:
        lynx.send_many([{"to": "otter", "text": "a"}, {"to": "bad address!", "text": "b"}])
    assert str(info.value) == "items[1].to: bad address 'bad address!'"
    assert info.value.fields == {"field": "items[1].to", "item": 1}
    # A refusal's own fields are kept beside the item's position.
    with pytest.raises(errors.InvalidInput) as info:
        lynx.send_many([{"to": "otter", "text": "a", "importance": "loud"}])
    assert str(info.value).startswith("bad items[0].importance: ")
    assert info.value.fields == {"field": "items[0].importance", "item": 0}
