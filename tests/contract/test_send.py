"""S6-S10, S12: `to` forms, outcomes and caps, kinds, the sender, input checks,
idempotency. Every send writes exactly one log row; these tests count rows."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any

import pytest
import sqlrows
import trusted
from sqlrows import spaces_as_read, waiting_sql

from broker import Agent, Operator, Store, errors
from broker.api.handles import Agent as AgentClass
from broker.mail import messages
from broker.model.inputs import OperatorSendInput, PostInput, SendInput
from broker.model.records import NotReached, SendResult
from broker.store.settings import Limits


def count(store: Store, table: str, where: str = "1 = 1", params: tuple[Any, ...] = ()) -> int:
    with store.read() as t:
        return int(t.one(f"SELECT count(*) FROM {table} WHERE {where}", params)[0])


def all_rows(store: Store) -> dict[str, int]:
    return {
        table: count(store, table)
        for table in ("messages", "deliveries", "transcript", "participants", "participant_events")
    } | {
        "last_seq": _one(
            store, f"SELECT sum(last_seq) + sum(last_bcast) FROM {spaces_as_read(store)}"
        )
    }


def _one(store: Store, sql: str, params: tuple[Any, ...] = ()) -> Any:
    with store.read() as t:
        return t.one(sql, params)[0]


def row(store: Store, message_id: str) -> dict[str, Any]:
    with store.read() as t:
        r = t.row("SELECT * FROM messages WHERE id = ?", (message_id,))
    assert r is not None
    return r


def inbox(store: Store, agent: Agent) -> list[str]:
    """Bodies waiting in an agent's inbox, FIFO (read straight from the tables)."""
    with store.read() as t:
        return [
            r[0]
            for r in t.all(
                "SELECT m.body FROM deliveries d JOIN messages m ON m.rowid = d.rowid >> 20 "
                f"WHERE d.recipient_no = {sqlrows.RECIPIENT_NO} AND d.state = 'ready' ORDER BY d.rowid",
                (agent.identity.participant_id,),
            )
        ]


def not_reached(result: SendResult) -> list[tuple[str, str]]:
    return [(n.address, n.reason) for n in result.not_reached]


def undelivered(fn: Callable[[], object]) -> SendResult:
    """Run a send that must reach nobody; return the logged result (S8)."""
    with pytest.raises(errors.NotDelivered) as info:
        fn()
    data = info.value.fields["result"]
    return SendResult(**{**data, "not_reached": [NotReached(**n) for n in data["not_reached"]]})


@pytest.fixture
def crew(join: Callable[..., Agent]) -> dict[str, Agent]:
    """lynx, otter (agent scanner, step scan), heron (agent planner), wren (child of heron)."""
    return {
        "lynx": join("flow/lynx", agent="scanner", step="scan"),
        "otter": join("flow/otter", agent="scanner", step="scan"),
        "heron": join("flow/heron", agent="planner", step="plan"),
        "wren": join("flow/heron>wren#1", agent="writer", parent="heron"),
    }


# --- S6: to forms ----------------------------------------------------------------------------
def test_S6_to_an_address_lands_in_that_inbox(store: Store, crew: dict[str, Agent]) -> None:
    r = crew["heron"].send("lynx", "scan the repo")
    assert r.reached == ["lynx"] and r.not_reached == [] and r.kind == "direct"
    assert inbox(store, crew["lynx"]) == ["scan the repo"]
    assert inbox(store, crew["otter"]) == []
    r = crew["lynx"].send("heron>wren#1", "to a unit address")
    assert r.reached == ["heron>wren#1"]


def test_S6_to_a_full_codename_in_a_workflow(store: Store, crew: dict[str, Agent]) -> None:
    r = crew["heron"].send("flow/lynx", "by codename")
    assert r.reached == ["lynx"]
    assert crew["lynx"].send("flow/heron>wren#1@3", "codename with an attempt").reached == [
        "heron>wren#1"
    ]
    assert inbox(store, crew["wren"]) == ["codename with an attempt"]


def test_S6_to_a_full_codename_in_an_agentiflow(store: Store, operator: Operator) -> None:
    af = operator.create_space("agentiflow").id
    lead, _ = trusted.join(store, af, "cobalt-harbor/heron", lead=True)
    unit, _ = trusted.join(store, af, "cobalt-harbor/heron>lynx#1")
    assert lead.send("cobalt-harbor/heron>lynx#1", "to the unit by codename").reached == ["lynx#1"]
    assert unit.send("cobalt-harbor/heron", "to the lead by codename").reached == ["lead"]
    assert inbox(store, unit) == ["to the unit by codename"]
    assert inbox(store, lead) == ["to the lead by codename"]


def test_S6_unknown_address_is_unknown_participant(store: Store, crew: dict[str, Agent]) -> None:
    for to in ("lynx#9", "flow/ghost", "lynx>ghost"):
        r = undelivered(lambda to=to: crew["heron"].send(to, "anyone?"))
        assert not_reached(r) == [(to, "unknown_participant")]
        assert row(store, r.id)["not_reached"] == json.dumps(
            [{"address": to, "reason": "unknown_participant"}]
        )


def test_S6_role_reaches_every_live_participant_running_that_agent(
    store: Store, crew: dict[str, Agent], join: Callable[..., Agent]
) -> None:
    join("flow/finch", agent="scanner").leave()  # left: not live, not reached
    r = crew["heron"].send("role:scanner", "scanners, report")
    assert r.reached == ["lynx", "otter"]
    assert r.not_reached == []
    r = undelivered(lambda: crew["heron"].send("role:nobody", "x"))
    assert not_reached(r) == [("role:nobody", "no_live_participant")]


def test_S6_role_excludes_the_sender_itself(crew: dict[str, Agent]) -> None:
    assert crew["lynx"].send("role:scanner", "the other scanners").reached == ["otter"]


def test_S6_a_bare_name_that_is_not_an_address_is_a_role(
    crew: dict[str, Agent], store: Store
) -> None:
    assert crew["heron"].send("scanner", "bare role").reached == ["lynx", "otter"]
    # A bare name that is an address is that participant, whatever its agent.
    assert crew["lynx"].send("heron", "bare address").reached == ["heron"]
    r = undelivered(lambda: crew["heron"].send("auditor", "x"))
    assert not_reached(r) == [("auditor", "no_live_participant")]


def test_S6_step_reaches_every_live_participant_of_the_step(
    store: Store, crew: dict[str, Agent]
) -> None:
    assert crew["heron"].send("step:scan", "scan step").reached == ["lynx", "otter"]
    crew["otter"].leave()
    assert crew["heron"].send("step:scan", "again").reached == ["lynx"]
    r = undelivered(lambda: crew["heron"].send("step:review", "x"))
    assert not_reached(r) == [("step:review", "no_live_participant")]


def test_S6_roles_and_steps_are_resolved_at_send_time(
    store: Store, crew: dict[str, Agent], join: Callable[..., Agent]
) -> None:
    crew["heron"].send("role:scanner", "first")
    finch = join("flow/finch", agent="scanner")
    crew["heron"].send("role:scanner", "second")
    assert inbox(store, finch) == ["second"]


def test_S6_parent_reaches_the_run_that_launched_the_sender(
    store: Store, crew: dict[str, Agent], join: Callable[..., Agent]
) -> None:
    assert crew["wren"].send("parent", "done").reached == ["heron"]
    assert inbox(store, crew["heron"]) == ["done"]
    r = undelivered(lambda: crew["lynx"].send("parent", "I have none"))
    assert not_reached(r) == [("parent", "no_parent")]
    orphan = join("flow/ghost>kid", parent="ghost")  # its parent never joined
    r = undelivered(lambda: orphan.send("parent", "x"))
    assert not_reached(r) == [("parent", "no_parent")]


def test_S6_lead_reaches_the_lead_or_is_no_lead(store: Store, operator: Operator) -> None:
    af = operator.create_space("agentiflow").id
    unit, _ = trusted.join(store, af, "cobalt-harbor/heron>lynx#1")
    r = undelivered(lambda: unit.send("lead", "no lead yet"))
    assert not_reached(r) == [("lead", "no_lead")]
    lead, _ = trusted.join(store, af, "cobalt-harbor/heron", lead=True)
    assert unit.send("lead", "now there is").reached == ["lead"]
    assert inbox(store, lead) == ["now there is"]


def test_S6_operator_is_logged_and_reaches_operator_only(
    store: Store, space: str, crew: dict[str, Agent]
) -> None:
    before = count(store, "deliveries")
    r = crew["lynx"].send("operator", "a question for the human")
    assert r.reached == ["operator"] and r.not_reached == []
    assert count(store, "deliveries") == before  # nobody drains it
    entry = Operator(store).log(space)[-1]
    assert (entry.sender, entry.to, entry.reached, entry.body) == (
        "lynx",
        ["operator"],
        ["operator"],
        "a question for the human",
    )


def test_S6_broadcast_reaches_everyone_but_the_sender_once_via_the_broadcast_log(
    store: Store, space: str, crew: dict[str, Agent], join: Callable[..., Agent]
) -> None:
    deliveries = count(store, "deliveries")
    r = crew["lynx"].send("broadcast", "hello all")
    assert r.kind == "broadcast"
    assert sorted(r.reached) == ["heron", "heron>wren#1", "otter"]
    assert len(r.reached) == len(set(r.reached))
    assert count(store, "deliveries") == deliveries  # read by cursor, not copied per inbox
    assert row(store, r.id)["bcast_no"] == 1
    assert (
        _one(store, f"SELECT last_bcast FROM {spaces_as_read(store)} WHERE id = ?", (space,)) == 1
    )
    # Counted from when it joined: a newcomer's cursor starts after it.
    late = join("flow/finch")
    with store.read() as t:
        cursors = dict(
            t.all("SELECT address, bcast_seen FROM participants WHERE space_id = ?", (space,))
        )
    assert cursors["finch"] == 1 and cursors["otter"] == 0
    r2 = crew["otter"].send("broadcast", "second")
    assert sorted(r2.reached) == ["finch", "heron", "heron>wren#1", "lynx"]
    assert row(store, r2.id)["bcast_no"] == 2
    assert late.address == "finch"


def test_S6_broadcast_skips_participants_that_left(store: Store, crew: dict[str, Agent]) -> None:
    crew["otter"].leave()
    r = crew["lynx"].send("broadcast", "hello")
    assert sorted(r.reached) == ["heron", "heron>wren#1"]


def test_S6_broadcast_to_nobody_is_no_live_participant_and_not_in_the_broadcast_log(
    store: Store, space: str, join: Callable[..., Agent]
) -> None:
    alone = join("flow/lynx")
    join("flow/otter").leave()
    r = undelivered(lambda: alone.send("broadcast", "is anyone there?"))
    assert r.reached == []
    assert not_reached(r) == [("broadcast", "no_live_participant")]
    assert row(store, r.id)["bcast_no"] is None
    assert (
        _one(store, f"SELECT last_bcast FROM {spaces_as_read(store)} WHERE id = ?", (space,)) == 0
    )
    assert count(store, "messages", "bcast_no IS NOT NULL") == 0


def test_S6_broadcast_cannot_be_combined_with_other_addresses(
    store: Store, crew: dict[str, Agent]
) -> None:
    before = all_rows(store)
    with pytest.raises(errors.InvalidInput, match="broadcast"):
        crew["lynx"].send(["broadcast", "otter"], "x")
    assert all_rows(store) == before


def test_S6_several_to_forms_reach_each_recipient_once(
    store: Store, crew: dict[str, Agent]
) -> None:
    r = crew["heron"].send(["lynx", "role:scanner", "step:scan", "flow/lynx", "operator"], "x")
    assert sorted(r.reached) == ["lynx", "operator", "otter"]  # each once
    assert inbox(store, crew["lynx"]) == ["x"]
    assert inbox(store, crew["otter"]) == ["x"]
    assert json.loads(row(store, r.id)["recipients"]) == [
        "lynx",
        "role:scanner",
        "step:scan",
        "flow/lynx",
        "operator",
    ]


def test_S6_bad_to_forms_are_invalid_input_and_write_nothing(
    store: Store, crew: dict[str, Agent]
) -> None:
    before = all_rows(store)
    for to in ("", "role:", "step:bad name", "flow/operator", "a b", "lynx>"):
        with pytest.raises(errors.InvalidInput):
            crew["lynx"].send(to, "x")
    with pytest.raises(errors.InvalidInput):
        crew["lynx"].send([], "x")
    assert all_rows(store) == before


# --- S7 / S8: outcomes -------------------------------------------------------------------------
def test_S7_every_send_writes_exactly_one_log_row_with_its_outcome(
    store: Store, space: str, crew: dict[str, Agent]
) -> None:
    n = count(store, "messages")
    r = crew["heron"].send(["lynx", "ghost#1", "role:nobody"], "partly delivered")
    assert count(store, "messages") == n + 1
    assert r.reached == ["lynx"]
    assert not_reached(r) == [
        ("ghost#1", "unknown_participant"),
        ("role:nobody", "no_live_participant"),
    ]
    entry = Operator(store).log(space)[-1]
    assert entry.id == r.id and entry.seq == r.seq == n + 1
    assert entry.reached == r.reached and entry.not_reached == r.not_reached
    assert row(store, r.id)["reached_n"] == 1


def test_S7_message_to_a_participant_that_left_is_logged_participant_left(
    store: Store, crew: dict[str, Agent]
) -> None:
    crew["otter"].leave()
    n = count(store, "messages")
    r = undelivered(lambda: crew["lynx"].send("otter", "still there?"))
    assert not_reached(r) == [("otter", "participant_left")]
    assert count(store, "messages") == n + 1
    assert inbox(store, crew["otter"]) == []
    r = crew["lynx"].send(["otter", "heron"], "one left, one here")
    assert r.reached == ["heron"] and not_reached(r) == [("otter", "participant_left")]


def test_S7_inbox_full_at_256_waiting_deliveries(store: Store, crew: dict[str, Agent]) -> None:
    assert Limits().inbox_cap == 256
    sender, lynx = crew["heron"], crew["lynx"]
    # One sender fills the inbox alone here: its share is all of it (S30).
    Operator(store).set_space(lynx.space_id, sender_share=1)
    with store.write() as t:  # 256 sends in one transaction (fast); each still one row
        for i in range(256):
            assert sender.send("lynx", f"m{i}", tx=t).reached == ["lynx"]
    assert _one(store, f"{waiting_sql(store)} WHERE id = ?", (lynx.identity.participant_id,)) == 256
    n = count(store, "messages")
    r = undelivered(lambda: sender.send("lynx", "one too many"))
    assert not_reached(r) == [("lynx", "inbox_full")]
    assert count(store, "messages") == n + 1
    assert len(inbox(store, lynx)) == 256
    # Other recipients of the same send are still reached.
    r = sender.send(["lynx", "otter"], "to both")
    assert r.reached == ["otter"] and not_reached(r) == [("lynx", "inbox_full")]
    # Finished deliveries do not count: one done, one slot free.
    with store.write() as t:
        t.execute(
            "UPDATE deliveries SET state = 'done' WHERE rowid = (SELECT rowid FROM deliveries "
            f"WHERE recipient_no = {sqlrows.RECIPIENT_NO} ORDER BY rowid LIMIT 1)",
            (lynx.identity.participant_id,),
        )
    assert sender.send("lynx", "fits again").reached == ["lynx"]
    assert not_reached(undelivered(lambda: sender.send("lynx", "full again"))) == [
        ("lynx", "inbox_full")
    ]


def test_S7_inbox_cap_is_a_space_setting(store: Store, operator: Operator) -> None:
    sid = operator.create_space("workflow", inbox_cap=2, sender_share=1).id
    a, _ = trusted.join(store, sid, "flow/a")
    b, _ = trusted.join(store, sid, "flow/b")
    a.send("b", "1")
    a.send("b", "2")
    assert not_reached(undelivered(lambda: a.send("b", "3"))) == [("b", "inbox_full")]
    assert b.address == "b"


def test_S7_broadcast_full_when_a_live_participant_is_cap_behind(
    store: Store, operator: Operator
) -> None:
    sid = operator.create_space("workflow", broadcast_cap=3).id
    a, _ = trusted.join(store, sid, "flow/a")
    trusted.join(store, sid, "flow/b")
    for i in range(3):
        a.send("broadcast", f"b{i}")
    n = count(store, "messages")
    r = undelivered(lambda: a.send("broadcast", "one too many"))
    assert not_reached(r) == [("broadcast", "broadcast_full")]
    assert row(store, r.id)["bcast_no"] is None
    assert count(store, "messages") == n + 1
    assert _one(store, f"SELECT last_bcast FROM {spaces_as_read(store)} WHERE id = ?", (sid,)) == 3
    # Once b has read them (its cursor moves), broadcasts flow again.
    with store.write() as t:
        t.execute(
            "UPDATE participants SET bcast_seen = 3 WHERE space_id = ? AND address = 'b'", (sid,)
        )
    assert a.send("broadcast", "read up").reached == ["b"]


def test_S7_the_reader_furthest_behind_decides_whether_the_broadcast_log_is_full(
    store: Store, operator: Operator
) -> None:
    sid = operator.create_space("workflow", broadcast_cap=3).id
    a, _ = trusted.join(store, sid, "flow/a")
    for name in ("flow/b", "flow/c", "flow/d"):
        trusted.join(store, sid, name)
    for i in range(3):
        a.send("broadcast", f"b{i}")
    # c and d have read every broadcast; b has read one: it is two behind.
    with store.write() as t:
        t.execute(
            "UPDATE participants SET bcast_seen = CASE address WHEN 'b' THEN 1 ELSE 3 END "
            "WHERE space_id = ? AND address IN ('b', 'c', 'd')",
            (sid,),
        )
    assert a.send("broadcast", "b3").reached == ["b", "c", "d"]  # b is now 3 behind
    r = undelivered(lambda: a.send("broadcast", "one too many for b"))
    assert not_reached(r) == [("broadcast", "broadcast_full")]


def test_S7_broadcast_full_at_the_default_cap(
    store: Store, space: str, crew: dict[str, Agent]
) -> None:
    cap = Limits().broadcast_cap
    with store.write() as t:
        for i in range(cap):
            crew["lynx"].send("broadcast", f"b{i}", tx=t)
    r = undelivered(lambda: crew["lynx"].send("broadcast", "over the cap"))
    assert not_reached(r) == [("broadcast", "broadcast_full")]
    assert (
        _one(store, f"SELECT last_bcast FROM {spaces_as_read(store)} WHERE id = ?", (space,)) == cap
    )


def test_S8_reaching_nobody_raises_not_delivered_after_the_row_is_committed(
    store: Store, space: str, crew: dict[str, Agent]
) -> None:
    with pytest.raises(errors.NotDelivered) as info:
        crew["lynx"].send(["ghost#1", "role:nobody"], "into the void")
    err = info.value
    assert err.exit_code == 1
    assert "ghost#1: unknown_participant" in str(err)
    assert "role:nobody: no_live_participant" in str(err)
    assert "\n" not in str(err)
    result = err.fields["result"]
    # Committed: a fresh connection sees it.
    other = store.connect()
    try:
        got = other.execute(
            "SELECT body, reached, not_reached FROM messages WHERE id = ?", (result["id"],)
        ).fetchone()
    finally:
        other.close()
    assert got[0] == "into the void" and json.loads(got[1]) == []
    assert len(json.loads(got[2])) == 2


def test_S7_a_send_joins_the_callers_transaction(store: Store, crew: dict[str, Agent]) -> None:
    before = all_rows(store)
    with pytest.raises(RuntimeError), store.write() as t:
        crew["lynx"].send("otter", "my work and the message", tx=t)
        raise RuntimeError("the caller's work failed")
    assert all_rows(store) == before
    with store.write() as t:
        crew["lynx"].send("otter", "my work and the message", tx=t)
    assert inbox(store, crew["otter"]) == ["my work and the message"]


def test_S7_sequences_are_gap_free_per_space(store: Store, operator: Operator) -> None:
    one = operator.create_space("workflow").id
    two = operator.create_space("workflow").id
    a, _ = trusted.join(store, one, "flow/a")
    b, _ = trusted.join(store, two, "flow/b")
    for i in range(5):
        a.send("operator", f"a{i}")
        b.send("operator", f"b{i}")
        with pytest.raises(errors.NotDelivered):
            a.send("ghost#1", "x")  # failed sends take a seq too: they are logged
        with pytest.raises(errors.InvalidInput):
            a.send("", "x")  # invalid ones do not
    assert [e.seq for e in operator.log(one)] == list(range(1, 11))
    assert [e.seq for e in operator.log(two)] == list(range(1, 6))


# --- S9: kinds ---------------------------------------------------------------------------------
def test_S9_direct_lands_in_each_recipients_inbox(store: Store, crew: dict[str, Agent]) -> None:
    r = crew["heron"].send(["lynx", "otter"], "direct")
    assert r.kind == "direct" and row(store, r.id)["kind"] == "direct"
    assert count(store, sqlrows.delivery_rows(), "message_id = ?", (r.id,)) == 2


def test_S9_channel_post_is_on_the_board_and_in_no_inbox(
    store: Store, crew: dict[str, Agent]
) -> None:
    r = crew["lynx"].post("found the bug in parser.py")
    assert r.kind == "post" and r.reached == [] and r.not_reached == []
    assert count(store, sqlrows.delivery_rows(), "message_id = ?", (r.id,)) == 0
    assert row(store, r.id)["sender"] == "lynx"


def test_S9_addressed_post_lands_in_each_addressees_inbox_with_the_same_cap(
    store: Store, operator: Operator
) -> None:
    sid = operator.create_space("workflow", inbox_cap=1).id
    a, _ = trusted.join(store, sid, "flow/a")
    b, _ = trusted.join(store, sid, "flow/b")
    r = a.post("look at this", addressed_to=["b"])
    assert r.kind == "post" and r.reached == ["b"]
    assert inbox(store, b) == ["look at this"]
    r = undelivered(lambda: a.post("and this", addressed_to=["b"]))
    assert not_reached(r) == [("b", "inbox_full")]
    r = undelivered(lambda: a.post("ghost", addressed_to=["ghost#1"]))
    assert not_reached(r) == [("ghost#1", "unknown_participant")]
    with pytest.raises(errors.InvalidInput, match="broadcast"):
        a.post("everyone", addressed_to=["broadcast"])


def test_S9_operator_message_has_via_and_urgent(
    store: Store, space: str, crew: dict[str, Agent]
) -> None:
    r = Operator(store, via="cp").send(space, "stop and report", to=["lynx"], urgent=True)
    assert r.kind == "operator" and r.reached == ["lynx"]
    entry = Operator(store).log(space)[-1]
    assert (entry.kind, entry.sender, entry.via, entry.urgent) == (
        "operator",
        "operator",
        "cp",
        True,
    )
    r = Operator(store).send(space, "fyi", to=["otter"])
    assert (row(store, r.id)["via"], row(store, r.id)["urgent"]) == ("cli", 0)
    for via in ("mcp", "cli"):
        r = Operator(store, via=via).send(space, "x", to=["heron"])  # type: ignore[arg-type]
        assert r.reached == ["heron"] and row(store, r.id)["via"] == via
    with pytest.raises(errors.InvalidInput, match="via"):
        messages.operator_send(
            store, OperatorSendInput(space=space, text="x", to=["lynx"]), via="sms"
        )  # type: ignore[arg-type]


def test_S9_operator_default_target_is_the_lead_in_an_agentiflow(
    store: Store, operator: Operator
) -> None:
    af = operator.create_space("agentiflow").id
    lead, _ = trusted.join(store, af, "cobalt-harbor/heron", lead=True)
    unit, _ = trusted.join(store, af, "cobalt-harbor/heron>lynx#1")
    assert operator.send(af, "for the lead").reached == ["lead"]
    assert inbox(store, lead) == ["for the lead"] and inbox(store, unit) == []


def test_S9_operator_default_target_is_broadcast_elsewhere(
    store: Store, space: str, crew: dict[str, Agent]
) -> None:
    r = Operator(store).send(space, "everyone: wrap up")
    assert sorted(r.reached) == ["heron", "heron>wren#1", "lynx", "otter"]
    assert row(store, r.id)["kind"] == "operator"
    for agent in crew.values():
        assert inbox(store, agent) == ["everyone: wrap up"]


def test_S9_operator_broadcast_into_an_empty_space_is_not_delivered(
    store: Store, operator: Operator, space: str
) -> None:
    with pytest.raises(
        errors.NotDelivered, match="not delivered to broadcast: no_live_participant"
    ):
        operator.send(space, "hello?")
    assert count(store, "messages") == 1


def test_S9_operator_cannot_send_to_parent_or_operator(
    store: Store, space: str, crew: dict[str, Agent]
) -> None:
    before = all_rows(store)
    for to in ("parent", "operator"):
        with pytest.raises(errors.InvalidInput):
            Operator(store).send(space, "x", to=[to])
    assert all_rows(store) == before


def test_S9_an_agent_cannot_write_kind_operator_or_sender_operator(
    store: Store, space: str, crew: dict[str, Agent]
) -> None:
    # No agent-side API takes a sender or a kind ...
    for fn in (messages.send, messages.post, AgentClass.send, AgentClass.post):
        params = set(inspect.signature(fn).parameters)
        assert not params & {"sender", "from", "from_", "kind", "via", "urgent"}, fn
    # ... the tool inputs refuse them ...
    for field in ("from", "sender", "kind", "via", "urgent"):
        with pytest.raises(errors.InvalidInput, match="unknown field"):
            SendInput.parse({"to": ["lynx"], "text": "x", field: "operator"})
        with pytest.raises(errors.InvalidInput, match="unknown field"):
            PostInput.parse({"text": "x", field: "operator"})
    # ... and no participant can take the address `operator`.
    with pytest.raises(errors.InvalidInput, match="reserved"):
        trusted.join(store, space, "flow/operator")
    for agent in crew.values():
        agent.send("operator", "hi")
        agent.post("hi")
    log = Operator(store).log(space)
    assert {e.kind for e in log} == {"direct", "post"}
    assert "operator" not in {e.sender for e in log}


# --- S10: input ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("model", "data"),
    [
        (SendInput, {"to": ["lynx"], "text": "x", "priority": 1}),
        (SendInput, {"to": ["lynx"], "text": "x", "from": "operator"}),
        (SendInput, {"to": ["lynx"], "text": "x", "sender": "heron"}),
        (PostInput, {"text": "x", "to": ["lynx"]}),
        (PostInput, {"text": "x", "sender": "heron"}),
    ],
)
def test_S10_tool_inputs_refuse_unknown_fields(model: type[Any], data: dict[str, Any]) -> None:
    extra = (set(data) - set(model.NAMES)).pop()
    with pytest.raises(errors.InvalidInput, match=f"unknown field '{extra}'"):
        model.parse(data)


@pytest.mark.parametrize(
    "data",
    [
        {"text": "x"},  # no to
        {"to": [], "text": "x"},
        {"to": 5, "text": "x"},  # neither a name nor a list of them
        {"to": ["lynx"] * 65, "text": "x"},
        {"to": ["lynx"], "text": 5},
        {"to": ["lynx"], "text": "x", "idempotency_key": ""},
        {"to": ["x" * 401], "text": "x"},
    ],
)
def test_S10_bad_send_input_is_a_clear_error(data: dict[str, Any]) -> None:
    with pytest.raises(errors.InvalidInput) as info:
        SendInput.parse(data)
    assert "\n" not in str(info.value)


def test_S10_bad_input_writes_nothing(store: Store, crew: dict[str, Agent]) -> None:
    before = all_rows(store)
    lynx = crew["lynx"]
    for call in (
        lambda: lynx.send(["otter"] * 65, "x"),
        lambda: lynx.send("otter", "x", idempotency_key=""),
        lambda: lynx.send("otter", 5),  # type: ignore[arg-type]
        lambda: lynx.post("x", addressed_to=["otter"] * 65),
    ):
        with pytest.raises(errors.InvalidInput):
            call()
    assert all_rows(store) == before


def test_S10_body_cap_at_cap_minus_one_cap_and_cap_plus_one_bytes(
    store: Store, crew: dict[str, Agent]
) -> None:
    cap = Limits().body_max_bytes
    lynx = crew["lynx"]
    assert lynx.send("otter", "a" * (cap - 1)).reached == ["otter"]
    assert lynx.send("otter", "a" * cap).reached == ["otter"]
    before = all_rows(store)
    with pytest.raises(errors.BodyTooLarge) as info:
        lynx.send("otter", "a" * (cap + 1))
    assert info.value.fields == {"size": cap + 1, "cap": cap, "field": "text"}
    assert info.value.exit_code == 2
    # Bytes, not characters: 'é' is two bytes in UTF-8.
    with pytest.raises(errors.BodyTooLarge):
        lynx.send("otter", "é" * (cap // 2) + "a")
    with pytest.raises(errors.BodyTooLarge):
        lynx.post("a" * (cap + 1))
    with pytest.raises(errors.BodyTooLarge):
        Operator(store).send(lynx.space_id, "a" * (cap + 1), to=["otter"])
    assert all_rows(store) == before
    assert lynx.send("otter", "é" * (cap // 2)).reached == ["otter"]


def test_S10_body_cap_is_a_space_setting(store: Store, operator: Operator) -> None:
    sid = operator.create_space("workflow", body_max_bytes=10).id
    a, _ = trusted.join(store, sid, "flow/a")
    assert a.send("operator", "0123456789").reached == ["operator"]
    with pytest.raises(errors.BodyTooLarge):
        a.send("operator", "0123456789X")


def test_S10_at_the_largest_cap_one_byte_more_is_body_too_large_like_any_other_cap(
    store: Store, operator: Operator
) -> None:
    """At the largest cap a space can set, a body of exactly the cap goes and
    one byte more is ``body_too_large`` naming its size, as past any other
    cap, and as a body that is over in bytes but not in characters; never a
    plain character-count ``invalid_input``."""
    cap = 1024 * 1024
    sid = operator.create_space("workflow", body_max_bytes=cap).id
    a, _ = trusted.join(store, sid, "flow/a")
    trusted.join(store, sid, "flow/b")
    assert a.send("b", "a" * cap).reached == ["b"]
    before = all_rows(store)
    for text in ("a" * (cap + 1), "é" * (cap // 2) + "a", "a" * (4 * cap)):
        with pytest.raises(errors.BodyTooLarge) as info:
            a.send("b", text)
        size = len(text.encode())
        assert (info.value.fields["size"], info.value.fields["field"]) == (size, "text")
        assert str(info.value).startswith(f"message body is {size} bytes; ")
        with pytest.raises(errors.BodyTooLarge):
            operator.send(sid, text, to=["b"])
    assert all_rows(store) == before


# --- S12: idempotency ------------------------------------------------------------------------------
def test_S12_a_repeat_with_the_same_key_returns_the_first_result_and_writes_nothing(
    store: Store, crew: dict[str, Agent]
) -> None:
    first = crew["lynx"].send(["otter", "heron"], "once", idempotency_key="k-1")
    assert first.duplicate is False
    before = all_rows(store)
    again = crew["lynx"].send(["otter", "heron"], "once", idempotency_key="k-1")
    assert again.duplicate is True
    assert (again.id, again.seq, again.kind, again.reached, again.not_reached) == (
        first.id,
        first.seq,
        first.kind,
        first.reached,
        first.not_reached,
    )
    assert all_rows(store) == before
    assert inbox(store, crew["otter"]) == ["once"]


def test_S12_a_repeat_of_a_send_that_reached_nobody_is_still_not_delivered(
    store: Store, crew: dict[str, Agent]
) -> None:
    first = undelivered(lambda: crew["lynx"].send("ghost#1", "x", idempotency_key="k"))
    before = all_rows(store)
    again = undelivered(lambda: crew["lynx"].send("ghost#1", "x", idempotency_key="k"))
    assert again.id == first.id and again.duplicate
    assert all_rows(store) == before


def test_S12_S45_the_same_key_from_another_sender_is_another_key(
    store: Store, space: str, crew: dict[str, Agent]
) -> None:
    lynx = crew["lynx"].send("heron", "mine", idempotency_key="shared")
    otter = crew["otter"].send("heron", "also mine", idempotency_key="shared")
    op = Operator(store).send(space, "the operator's", to=["heron"], idempotency_key="shared")
    assert len({lynx.id, otter.id, op.id}) == 3
    assert not (lynx.duplicate or otter.duplicate or op.duplicate)
    # Each sender's repeat finds its own first send, and only that.
    assert crew["otter"].send("heron", "also mine", idempotency_key="shared").id == otter.id
    again = Operator(store).send(space, "the operator's", to=["heron"], idempotency_key="shared")
    assert again.id == op.id


K = "k-1"


@pytest.mark.parametrize(
    ("repeat", "differs"),
    [
        (lambda a: a.send(["otter", "heron"], "twice", idempotency_key=K), "text"),
        (lambda a: a.send(["otter"], "once", idempotency_key=K), "to"),
        (lambda a: a.send(["heron", "otter"], "once", idempotency_key=K), "to"),
        (lambda a: a.post("once", idempotency_key=K), "kind, to"),
        (
            lambda a: a.send(["otter", "heron"], "once", importance="high", idempotency_key=K),
            "importance",
        ),
        (lambda a: a.send(["otter", "heron"], "once", thread="other", idempotency_key=K), "thread"),
        (
            lambda a: a.send(["otter", "heron"], "once", ack_required=True, idempotency_key=K),
            "ack_required",
        ),
    ],
    ids=["text", "fewer-recipients", "recipient-order", "post", "importance", "thread", "ack"],
)
def test_S12_the_same_key_on_a_different_message_is_a_conflict_naming_what_differs(
    store: Store,
    crew: dict[str, Agent],
    repeat: Callable[[Agent], Any],
    differs: str,
) -> None:
    """A repeat is the same send: a key reused for another message would
    otherwise report the first message's result for a message never sent."""
    crew["lynx"].send(["otter", "heron"], "once", idempotency_key=K)
    before = all_rows(store)
    with pytest.raises(errors.Conflict) as caught:
        repeat(crew["lynx"])
    assert caught.value.fields.get("field") == "idempotency_key"
    assert str(caught.value) == conflict_line(K, differs)  # the whole line, not its middle
    assert all_rows(store) == before


def conflict_line(key: str, differs: str) -> str:
    """S12's refusal of a key reused for another message, one line: what
    differs, in the singular or the plural, and what to do instead."""
    verb = "differ" if ", " in differs else "differs"
    return (
        f"idempotency key {key!r} was first used for a different message (its {differs} "
        f"{verb}): a repeat must be the same send; use a new key for a new message"
    )


def test_S12_an_operators_repeat_that_differs_only_in_urgent_is_a_conflict_naming_urgent(
    store: Store, space: str, crew: dict[str, Agent]
) -> None:
    op = Operator(store)
    op.send(space, "once", to=["lynx"], idempotency_key="op-u")
    before = all_rows(store)
    with pytest.raises(errors.Conflict) as caught:
        op.send(space, "once", to=["lynx"], urgent=True, idempotency_key="op-u")
    assert str(caught.value) == conflict_line("op-u", "urgent")
    assert all_rows(store) == before


def test_S12_S35_a_replys_repeat_that_names_no_thread_is_the_same_send(
    store: Store, crew: dict[str, Agent]
) -> None:
    """A reply's row holds the thread it inherited; its repeat, which names no
    thread either, is the same send (a duplicate), not a conflict over the thread.
    Naming another thread is one."""
    asked = crew["lynx"].send("otter", "which files?", thread="scan-plan")
    first = crew["otter"].send("lynx", "these", reply_to=asked.id, idempotency_key="r-1")
    before = all_rows(store)
    again = crew["otter"].send("lynx", "these", reply_to=asked.id, idempotency_key="r-1")
    assert again.duplicate and again.id == first.id
    assert all_rows(store) == before
    with pytest.raises(errors.Conflict) as caught:
        crew["otter"].send(
            "lynx", "these", reply_to=asked.id, thread="other", idempotency_key="r-1"
        )
    assert str(caught.value) == conflict_line("r-1", "thread")


def test_S12_a_repeat_inside_one_batch_must_be_the_same_send_too(
    store: Store, crew: dict[str, Agent]
) -> None:
    before = all_rows(store)
    with pytest.raises(errors.Conflict, match="its text differs"):
        crew["lynx"].send_many(
            [
                {"to": "otter", "text": "one", "idempotency_key": "b-1"},
                {"to": "otter", "text": "two", "idempotency_key": "b-1"},
            ]
        )
    assert all_rows(store) == before
    same = crew["lynx"].send_many(
        [
            {"to": "otter", "text": "one", "idempotency_key": "b-1"},
            {"to": "otter", "text": "one", "idempotency_key": "b-1"},
        ]
    )
    assert same[1].duplicate and same[1].id == same[0].id


def test_S12_keys_are_per_space(store: Store, operator: Operator) -> None:
    one = operator.create_space("workflow").id
    two = operator.create_space("workflow").id
    a, _ = trusted.join(store, one, "flow/a")
    b, _ = trusted.join(store, two, "flow/a")
    r1 = a.send("operator", "x", idempotency_key="same")
    r2 = b.send("operator", "x", idempotency_key="same")
    assert r1.id != r2.id and not r2.duplicate


def test_S12_operator_sends_are_idempotent_too(
    store: Store, space: str, crew: dict[str, Agent]
) -> None:
    op = Operator(store)
    first = op.send(space, "once", to=["lynx"], idempotency_key="op-1")
    before = all_rows(store)
    again = op.send(space, "once", to=["lynx"], idempotency_key="op-1")
    assert again.id == first.id and again.duplicate
    assert all_rows(store) == before


def test_S7_each_address_is_reported_once_however_many_forms_named_it(
    store: Store, crew: dict[str, Agent]
) -> None:
    crew["otter"].leave()
    r = undelivered(lambda: crew["lynx"].send(["otter", "flow/otter", "ghost#1", "ghost#1"], "x"))
    assert not_reached(r) == [("otter", "participant_left"), ("ghost#1", "unknown_participant")]
