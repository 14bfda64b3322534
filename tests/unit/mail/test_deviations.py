"""The smaller deviations of issue 10, each checked against its rule: a
directive that reaches nobody is an error (S8); a broadcast is shown in at
most one open turn (S18); an operator send to participants that left succeeds
with `participant_left` logged (S8); poison far past 16x the claim
limit at the head of an inbox never hides a good message (S15); an empty
operator message is refused and writes nothing (S10, S33)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trusted
from conftest import Clock

from broker import Agent, Operator, Store, errors


def rows(store: Store, sql: str = "SELECT count(*) FROM messages", *params: Any) -> int:
    with store.read() as t:
        return int(t.one(sql, params)[0])


@pytest.mark.parametrize("to", ["role:ghost", "step:nowhere", "ghost", "broadcast"])
def test_S8_a_directive_that_reaches_nobody_is_an_error_through_the_cli(
    store: Store, cli: Callable[..., Any], to: str
) -> None:
    sid = Operator(store).create_space("workflow").id
    _, joined = trusted.join(store, sid, "flow/heron", pid=None, tools=["board.directive"])
    env = {"BROKER_SPACE": sid, "BROKER_AS": joined.address, "BROKER_TOKEN": joined.token}
    r = cli("board", "directive", "--to", to, "hold all merges", env=env)
    assert r.code == 1, (r.out, r.err)
    assert f"{to}: no_live_participant" in r.out + r.err
    with store.read() as t:
        kind, not_reached = t.one("SELECT kind, not_reached FROM messages")
    assert kind == "directive"  # logged all the same, and stays in force
    assert json.loads(not_reached) == [{"address": to, "reason": "no_live_participant"}]


def test_S18_a_second_turn_while_the_first_is_open_does_not_repeat_a_broadcast(
    store: Store, space: str, join: Callable[..., Agent]
) -> None:
    a, b = join("a"), join("b")
    a.send("broadcast", "hello all")
    first = b.next_turn()
    assert [i.body for i in first.items if i.group == "broadcast"] == ["hello all"]
    second = b.next_turn()  # the first is not confirmed yet
    assert [i for i in second.items if i.group == "broadcast"] == []
    assert first.id is not None
    b.seen(first.id)
    assert [i for i in b.next_turn().items if i.group == "broadcast"] == []


def test_S8_an_operator_send_to_a_participant_that_left_succeeds_and_logs_participant_left(
    store: Store, cli: Callable[..., Any]
) -> None:
    sid = Operator(store).create_space("workflow").id
    lynx, _ = trusted.join(store, sid, "flow/lynx")
    lynx.leave()
    r = cli("message", "send", sid, "--to", "lynx", "are you there?", "--json")
    assert r.code == 0, r.err
    assert r.json()["reached"] == [] and r.json()["not_reached"] == [
        {"address": "lynx", "reason": "participant_left"}
    ]
    with store.read() as t:
        logged = t.one("SELECT sender, not_reached FROM messages")
    assert logged[0] == "operator"
    assert json.loads(logged[1]) == [{"address": "lynx", "reason": "participant_left"}]
    # an agent's send to the same participant is still an error (S8)
    otter, _ = trusted.join(store, sid, "flow/otter")
    with pytest.raises(errors.NotDelivered, match="lynx: participant_left"):
        otter.send("lynx", "are you there?")
    # a miss of another kind is an error to the operator too
    r = cli("message", "send", sid, "--to", "nobody#9", "hello")
    assert r.code == 1 and "unknown_participant" in r.out + r.err


@pytest.fixture
def cstore(tmp_path: Path, clock: Clock) -> Iterator[Store]:
    s = Store(f"sqlite:///{tmp_path / 'clocked.db'}", clock=clock)
    yield s
    s.close()


def test_S15_far_more_than_16_times_the_limit_of_poison_at_the_head_never_hides_a_good_message(
    cstore: Store, clock: Clock
) -> None:
    sid = Operator(cstore).create_space("workflow", max_deliveries=1).id
    a, _ = trusted.join(cstore, sid, "a")
    b, _ = trusted.join(cstore, sid, "b")
    limit = 2
    poison = 100  # > 16 x limit
    a.send_many([{"to": "b", "text": f"poison {i}"} for i in range(poison)])
    assert len(b.claim(limit=poison, lease=1).deliveries) == poison  # handed out once: the max
    clock.advance(2)  # never acked
    good = a.send("b", "good").id
    got = b.claim(limit=limit, lease=60).deliveries
    assert [d.id for d in got] == [good]
    quarantined = "SELECT count(*) FROM deliveries WHERE state = 'quarantine'"
    assert rows(cstore, quarantined) == poison


@pytest.mark.parametrize("text", ["", "   ", "\n\t"])
def test_S33_an_empty_operator_message_is_refused_and_writes_nothing(
    store: Store, space: str, join: Callable[..., Agent], text: str
) -> None:
    join("lynx")
    before = rows(store)
    with pytest.raises(errors.InvalidInput, match="message text is empty"):
        Operator(store).send(space, text)
    assert rows(store) == before
    assert rows(store, "SELECT count(*) FROM deliveries") == 0


def test_S33_operator_send_checks_its_other_inputs_too(store: Store, space: str) -> None:
    op = Operator(store)
    before = rows(store)
    for call in (
        lambda: op.send(space, "x", urgent="yes"),  # type: ignore[arg-type]
        lambda: op.send(space, "x", to=[5]),  # type: ignore[list-item]
        lambda: op.send(space, "x", idempotency_key=""),
        lambda: op.send(space, "\ud800"),
    ):
        with pytest.raises(errors.InvalidInput):
            call()
    assert rows(store) == before


def test_S33_a_body_with_a_lone_surrogate_is_invalid_input_from_an_agent_too(
    store: Store, space: str, join: Callable[..., Agent]
) -> None:
    a, _ = join("a"), join("b")
    before = rows(store)
    for call in (lambda: a.send("b", "bad \udc80 text"), lambda: a.post("\ud800")):
        with pytest.raises(errors.InvalidInput, match="lone surrogate"):
            call()
    assert rows(store) == before
