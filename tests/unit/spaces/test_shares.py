"""S42: shares hold against many identities. Newcomers the join key admitted
hold their share of the log and of an inbox together; a parent answers for
the children it admitted with its token; the lead and the operator keep room.
Real SQLite files and PostgreSQL databases, and the real CLI."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import trusted
from conftest import open_store
from sqlrows import spaces_as_read

from broker import Agent, Operator, Store, errors
from broker.spaces import participants

BACKENDS = ["sqlite", "postgresql"]
KB = 1024


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    s = open_store(db_url)
    yield s
    s.close()


def fill(agent: Agent, text: str, to: str = "operator", most: int = 1000) -> int:
    """Send until refused for space; how many went through."""
    for n in range(most):
        try:
            agent.send(to, text)
        except errors.MessagingFull:
            return n
    raise AssertionError(f"{agent.address} was never refused")


def log_bytes(store: Store, sid: str) -> int:
    with store.read() as t:
        return int(t.one(f"SELECT log_bytes FROM {spaces_as_read(store)} WHERE id = ?", (sid,))[0])


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("sybils", [2, 5])
def test_S42_join_key_sybils_together_cannot_stop_the_leads_send(
    store: Store, operator: Operator, sybils: int
) -> None:
    """The attack: newcomers made with the join key, each at its own
    sender_share (0.5), filled log_max_mb between two of them, and the lead's
    send was refused messaging_full. Now they hold join_key_share together."""
    created = operator.create_space("agentiflow", log_max_mb=0.02)  # about 20 KB
    sid, key = created.id, created.join_key
    lead, _ = Agent.join(store, sid, "flow/heron", lead=True, join_key=key)
    crowd = [Agent.join(store, sid, f"flow/heron>s{i}", join_key=key)[0] for i in range(sybils)]
    refusals = []
    for s in crowd:
        fill(s, "x" * 400)
        with pytest.raises(errors.MessagingFull) as exc:
            s.send("operator", "one more")
        refusals.append(exc.value.fields.get("reason"))
    assert "join_key_share" in refusals
    cap = 0.02 * 1024 * KB
    assert log_bytes(store, sid) < cap * 0.5 + 1 * KB  # the group's share and one crossing row
    # The lead is still heard, and so is the operator.
    assert lead.send("operator", "the lead still talks").reached == ["operator"]
    assert fill(lead, "y" * 400) > 10
    operator.send(sid, "the operator always does", to=["lead"])


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_S42_the_refusal_names_the_group_and_its_share(store: Store, operator: Operator) -> None:
    created = operator.create_space("workflow", log_max_mb=0.01, join_key_share=0.25)
    sid, key = created.id, created.join_key
    a, _ = Agent.join(store, sid, "a", join_key=key)
    b, _ = Agent.join(store, sid, "b", join_key=key)
    fill(a, "x" * 300)
    with pytest.raises(errors.MessagingFull) as exc:
        b.send("operator", "x")
    assert exc.value.fields == {
        "space_id": sid,
        "sender": "b",
        "reason": "join_key_share",
        "group": "join key",
    }
    assert "the participants the join key admitted hold" in exc.value.message
    assert "join_key_share (0.25 of log_max_mb 0.01 MB)" in exc.value.message
    # Someone the operator admitted is no newcomer of the join key: it still sends.
    c, _ = trusted.join(store, sid, "c")
    assert c.send("operator", "heard").seq > 0


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_S42_children_admitted_with_a_parents_token_count_against_their_parent(
    store: Store, operator: Operator
) -> None:
    sid = operator.create_space("workflow", log_max_mb=0.01).id
    boss, boss_j = trusted.join(store, sid, "boss")
    kids = [Agent.join(store, sid, f"boss>k{i}", parent_token=boss_j.token)[0] for i in range(3)]
    for k in kids:
        fill(k, "x" * 300)
    with pytest.raises(errors.MessagingFull) as exc:
        boss.send("operator", "x")
    assert exc.value.fields["reason"] == "sender_share" and exc.value.fields["group"] == "boss"
    assert "boss and the participants it admitted hold" in exc.value.message
    other, _ = trusted.join(store, sid, "other")  # another family is not held by this one
    assert other.send("operator", "heard").seq > 0


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_S42_join_key_newcomers_hold_their_share_of_an_inbox_together(
    store: Store, operator: Operator
) -> None:
    created = operator.create_space("workflow", inbox_cap=8)  # join_key_share 0.5: 4 together
    sid, key = created.id, created.join_key
    victim, _ = trusted.join(store, sid, "victim")
    crowd = [Agent.join(store, sid, f"s{i}", join_key=key)[0] for i in range(6)]
    for s in crowd[:4]:
        assert s.send("victim", "hi").reached == ["victim"]
    with pytest.raises(errors.NotDelivered) as exc:
        crowd[4].send("victim", "hi")
    assert exc.value.fields["result"]["not_reached"] == [
        {"address": "victim", "reason": "sender_share"}
    ]
    friend, _ = trusted.join(store, sid, "friend")
    assert friend.send("victim", "still reached").reached == ["victim"]


def test_S42_a_batch_counts_each_of_its_deliveries_toward_its_groups_share_of_an_inbox(
    store: Store, operator: Operator
) -> None:
    created = operator.create_space("workflow", inbox_cap=8)  # join_key_share 0.5: 4 together
    sid, key = created.id, created.join_key
    victim, _ = trusted.join(store, sid, "victim")
    friend, _ = trusted.join(store, sid, "friend")
    crowd = [Agent.join(store, sid, f"s{i}", join_key=key)[0] for i in range(2)]
    for sender in (friend, friend, crowd[0], crowd[0]):
        assert sender.send("victim", "hi").reached == ["victim"]
    # The inbox holds 4, the group 2 of them: two more from the group, not three.
    results = crowd[1].send_many([{"to": ["victim"], "text": f"m{i}"} for i in range(3)])
    assert [(r.reached, [n.reason for n in r.not_reached]) for r in results] == [
        (["victim"], []),
        (["victim"], []),
        ([], ["sender_share"]),
    ]


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_S42_a_join_records_how_it_was_admitted(store: Store, operator: Operator) -> None:
    created = operator.create_space("workflow")
    sid = created.id
    _, p = Agent.join(store, sid, "p", join_key=created.join_key)
    Agent.join(store, sid, "p>c", parent_token=p.token)
    trusted.join(store, sid, "o")
    got = [(e.address, e.reason) for e in participants.journal(store, sid)]
    assert got == [("p", "join key"), ("p>c", "parent token"), ("o", "operator key")]


def test_S42_cli_newcomers_refused_for_their_group_exit_6(cli: Callable[..., Any]) -> None:
    sid = cli(
        "space", "create", "--kind", "workflow", "--setting", "log_max_mb=0.005", "--json"
    ).json()["id"]
    tokens = {n: cli("join", sid, n, "--json").json()["token"] for n in ("a", "b")}

    def send(who: str) -> Any:
        env = {"BROKER_SPACE": sid, "BROKER_AS": who, "BROKER_TOKEN": tokens[who]}
        return cli("msg", "send", "--to", "operator", "x" * 1500, env=env)

    sent = 0
    while (r := send("a")).code == 0 and sent < 20:
        sent += 1
    assert r.code == 6 and 0 < sent < 20, r
    r = send("b")
    assert r.code == 6 and r.err.count("\n") == 1, r
    assert "join_key_share" in r.err and "Traceback" not in r.err


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_S42_S30_space_show_says_what_the_join_keys_newcomers_hold_together(
    store: Store, operator: Operator
) -> None:
    created = operator.create_space("workflow", join_key_share=0.25)
    sid = created.id
    a, ja = Agent.join(store, sid, "a", join_key=created.join_key)
    kid, _ = Agent.join(store, sid, "a>k", parent_token=ja.token)
    own, _ = trusted.join(store, sid, "own")
    for who in (a, kid, own):
        who.send("operator", "x" * 100)
    usage = operator.space_usage(sid)
    by_sender = {u.sender: u.log_bytes for u in usage.top_senders}
    assert usage.join_key_members == 2  # a, and the child it admitted
    assert usage.join_key_log_bytes == by_sender["a"] + by_sender["a>k"]
    assert usage.join_key_log_cap_bytes == 16 * 1024 * 1024
