"""S42: shares hold against many identities. Newcomers the join key admitted
hold their share of the log and of an inbox together; a parent answers for
the children it admitted with its token; the lead and the operator keep room.
Real SQLite files and PostgreSQL databases, and the real CLI."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import trusted
from conftest import open_store
from sqlrows import spaces_as_read

from broker import Agent, Operator, Store, errors
from broker.spaces import participants
from broker.vocab import human_size

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
    held = re.escape(human_size(log_bytes(store, sid)))  # a's rows: the group's bytes
    assert re.fullmatch(
        f"the participants the join key admitted hold {held} of the log of space {sid} "
        r"together: their join_key_share \(0\.25 of log_max_mb 0\.01 MB\) is used up; "
        "sends from b are refused",
        exc.value.message,
    ), exc.value.message  # the whole line, not parts of it
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


def inbox_of_eight(store: Store, operator: Operator) -> tuple[str, Agent, Agent, list[Agent]]:
    """A space whose inboxes hold 8 (join_key_share 0.5: the join key's newcomers
    4 together): the victim and a friend joined by the operator, and a crowd of
    two by the join key."""
    created = operator.create_space("workflow", inbox_cap=8)
    victim, _ = trusted.join(store, created.id, "victim")
    friend, _ = trusted.join(store, created.id, "friend")
    crowd = [Agent.join(store, created.id, f"s{i}", join_key=created.join_key)[0] for i in range(2)]
    return created.id, victim, friend, crowd


def test_S42_a_batch_counts_each_of_its_deliveries_toward_its_groups_share_of_an_inbox(
    store: Store, operator: Operator
) -> None:
    sid, victim, friend, crowd = inbox_of_eight(store, operator)
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


# A log of 8192 bytes whose sender_share and join_key_share are 2048 each; a
# row to c is its body and 12 bytes (recipients, reached, not_reached).
SMALL_LOG = {"log_max_mb": 2**-7, "sender_share": 0.25, "join_key_share": 0.25}
ROW = len('["c"]') * 2 + len("[]")


def rows_of(n: int, size: int = 512) -> list[dict[str, Any]]:
    return [{"to": "c", "text": "x" * (size - ROW)}] * n


def small_log_group(store: Store, operator: Operator) -> tuple[str, Agent, Agent, Agent]:
    """A space of ``SMALL_LOG``: c joined by the operator, a and b by its join
    key (one share group)."""
    created = operator.create_space("workflow", **SMALL_LOG)
    c, _ = trusted.join(store, created.id, "c")
    a, _ = Agent.join(store, created.id, "a", join_key=created.join_key)
    b, _ = Agent.join(store, created.id, "b", join_key=created.join_key)
    return created.id, c, a, b


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_S42_a_group_holding_exactly_its_share_of_the_log_is_refused_even_when_it_is_all_the_log(
    store: Store, operator: Operator
) -> None:
    sid, c, a, b = small_log_group(store, operator)
    a.send_many(rows_of(2))
    b.send_many(rows_of(2))
    assert log_bytes(store, sid) == 2048  # the log is the group's 2048 bytes, its share
    with pytest.raises(errors.MessagingFull) as exc:
        b.send("c", "one more")  # b holds 1024 alone, under its own share
    assert exc.value.fields["reason"] == "join_key_share"
    assert c.send("a", "heard").seq > 0  # the log itself is a quarter full


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_S42_a_batch_counts_each_of_its_rows_toward_its_groups_share_of_the_log(
    store: Store, operator: Operator
) -> None:
    sid, c, a, b = small_log_group(store, operator)
    c.send_many([{"to": "a", "text": "y" * (512 - ROW)}] * 2)
    a.send_many(rows_of(1))
    assert log_bytes(store, sid) == 1536
    # b's first row takes the log to 2048, the group's share: the group's bytes
    # are read at the second (a's 512 and the batch's own 512, not yet written)
    # and kept row by row; the fourth finds the group at 2048 and is refused.
    with pytest.raises(errors.MessagingFull) as exc:
        b.send_many(rows_of(4))
    assert (exc.value.fields["item"], exc.value.fields["reason"]) == (3, "join_key_share")
    assert log_bytes(store, sid) == 1536  # the whole batch is refused
    assert [r.reached for r in b.send_many(rows_of(3))] == [["c"]] * 3
    with pytest.raises(errors.MessagingFull):
        b.send("c", "and now the group holds its share")


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_S42_a_parents_family_is_held_to_sender_share_of_an_inbox_not_to_join_key_share(
    store: Store, operator: Operator
) -> None:
    # inbox_cap 8: one sender, or a parent's family, holds 4; the join key's newcomers 2.
    sid = operator.create_space("workflow", inbox_cap=8, sender_share=0.5, join_key_share=0.25).id
    victim, _ = trusted.join(store, sid, "victim")
    friend, _ = trusted.join(store, sid, "friend")
    boss, boss_j = trusted.join(store, sid, "boss")
    kid, _ = Agent.join(store, sid, "boss>k", parent_token=boss_j.token)
    for _ in range(3):
        friend.send("victim", "hi")
    # The inbox holds 3, past the newcomers' 2 but not the family's 4.
    assert kid.send("victim", "from the family").reached == ["victim"]
    assert boss.send("victim", "and its parent").reached == ["victim"]


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_S42_a_batch_counts_its_deliveries_made_before_its_group_was_first_counted(
    store: Store, operator: Operator
) -> None:
    sid, victim, friend, crowd = inbox_of_eight(store, operator)
    for sender in (friend, friend, crowd[0]):
        assert sender.send("victim", "hi").reached == ["victim"]
    # The batch's first delivery takes the inbox to 4; the group is counted at
    # the second: s0's one and the batch's own one, then two more, not three.
    results = crowd[1].send_many([{"to": ["victim"], "text": f"m{i}"} for i in range(5)])
    assert [[n.reason for n in r.not_reached] for r in results] == [
        [],
        [],
        [],
        ["sender_share"],
        ["sender_share"],
    ]
