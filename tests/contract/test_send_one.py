"""The everyday send written without a ``Batch`` (``broker.mail.sending.send_one``)
writes what the ``Batch`` writes, and gives the same answer (S6-S12, S30,
S35, S38, S42).

``send_one`` takes an agent's plain direct message to one participant when no
rule can refuse or divert it, and hands every other send to the ``Batch``,
which judges each rule. Each script below is run twice, in two spaces made the
same way in one store: once as the library runs it, once with ``send_one``
turned off (every send through the ``Batch``). Each send's answer (its
result, or its refusal's kind and words) and, at the end, every log row and
delivery of the space must be the same. The scripts walk each rule up to the
send that it bites (an inbox cap, a sender's share, a share group's, the
log's cap, a contact policy, a recipient that left, the body cap, a reply, an
idempotency key), and each asserts which sends ``send_one`` took, so a guard
that let a refused send through, or one that never let anything through,
fails here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import trusted
from sqlrows import SPACE_NO, delivery_rows

from broker import Agent, Operator, errors
from broker.ids import seq_in_id
from broker.mail import sending
from broker.spaces import auth
from broker.store.sqlite import Store

Step = Callable[[dict[str, Agent], list[str]], Any]


@dataclass
class Script:
    """Agents to join, the space's settings, and the steps: each a send whose
    answer is compared, or (``setup``) a call that is not."""

    limits: dict[str, Any] = field(default_factory=dict)
    agents: tuple[str, ...] = ("lead", "alice", "bob", "carol")
    newcomers: tuple[str, ...] = ()  # joined with the space's join key (a share group, S42)
    steps: list[tuple[str, Step]] = field(default_factory=list)


def send(frm: str, to: str, text: str = "hello", **kw: Any) -> tuple[str, Step]:
    def step(a: dict[str, Agent], ids: list[str]) -> Any:
        args = {k: (ids[v] if k == "reply_to" else v) for k, v in kw.items()}
        return a[frm].send(to, text, **args)

    return "send", step


def setup(fn: Callable[[dict[str, Agent]], Any]) -> tuple[str, Step]:
    return "setup", lambda a, _ids: fn(a)


SCRIPTS: dict[str, Script] = {
    "plain sends, to others and to oneself, with a thread": Script(
        steps=[
            send("alice", "bob"),
            send("bob", "alice", "é" * 40),
            send("alice", "alice"),
            send("carol", "bob", thread="plan", importance="high"),
            send("lead", "carol", ack_required=True),
        ]
    ),
    "an inbox's cap and a sender's share of it": Script(
        limits={"inbox_cap": 4, "sender_share": 0.5},
        steps=[send("alice", "bob") for _ in range(3)]
        + [send("carol", "bob") for _ in range(3)]
        + [send("lead", "bob")],
    ),
    "the log's cap and a sender's share of it": Script(
        limits={"log_max_mb": 0.002, "sender_share": 0.5},
        steps=[send("alice", "bob", "x" * 200) for _ in range(6)]
        + [send("bob", "alice", "y" * 200) for _ in range(6)]
        + [send("carol", "bob", "z" * 200) for _ in range(3)],
    ),
    "a share group's hold on an inbox": Script(
        limits={"inbox_cap": 8, "join_key_share": 0.25},
        newcomers=("n1", "n2", "n3"),
        steps=[send(n, "bob") for n in ("n1", "n2", "n3", "n1", "n2")] + [send("alice", "bob")],
    ),
    "contact policies, and the lead who passes them": Script(
        steps=[
            setup(lambda a: a["bob"].set_contact_policy("closed")),
            send("alice", "bob"),
            send("lead", "bob"),
            setup(lambda a: a["bob"].set_contact_policy("listed", ["carol"])),
            send("carol", "bob"),
            send("alice", "bob"),
            setup(lambda a: a["bob"].set_contact_policy("open")),
            send("alice", "bob"),
        ]
    ),
    "a recipient that left, one never there": Script(
        steps=[
            send("alice", "bob"),
            setup(lambda a: a["bob"].leave()),
            send("alice", "bob"),
            send("alice", "nobody"),
            send("alice", "carol"),
        ]
    ),
    "the body's cap": Script(
        limits={"body_max_bytes": 10},
        steps=[
            send("alice", "bob", "x" * 10),
            send("alice", "bob", "x" * 11),
            send("alice", "bob", "é" * 5),
            send("alice", "bob", "é" * 6),
        ],
    ),
    "replies and idempotency keys": Script(
        steps=[
            send("alice", "bob"),
            send("bob", "alice", "re", reply_to=0),
            send("alice", "bob", "once", idempotency_key="k1"),
            send("alice", "bob", "once", idempotency_key="k1"),
            send("alice", "bob", "other", idempotency_key="k1"),
            send("alice", "bob", thread="t"),
        ]
    ),
}

# Which sends send_one takes, by script (True: taken; False: left to the Batch).
TAKEN: dict[str, list[bool]] = {
    "plain sends, to others and to oneself, with a thread": [True] * 5,
    # bob's inbox: quiet below min(inbox_cap 4, sender share 2) = 2 waiting.
    "an inbox's cap and a sender's share of it": [True, True] + [False] * 5,
    # the log: quiet below its smallest cap (a sender's share, 1,048 bytes; a
    # send here is 216 bytes).
    "the log's cap and a sender's share of it": [True] * 5 + [False] * 10,
    # the join key's share of bob's inbox: 2 deliveries.
    "a share group's hold on an inbox": [True, True] + [False] * 4,
    # alice and carol (not the lead) meet a policy; the lead passes it.
    "contact policies, and the lead who passes them": [False, True, False, False, True],
    # bob left: the Batch says so; "nobody" has no row, so no send_one either.
    "a recipient that left, one never there": [True, False, True],
    "the body's cap": [True, False, True, False],
    "replies and idempotency keys": [True, False, False, False, False, True],
}


def _answer(got: Any, space_id: str) -> Any:
    """A send's answer without what differs between twin spaces (ids, times)."""
    if isinstance(got, BaseException):
        return ("refused", type(got).__name__, str(got).replace(space_id, "<space>"))
    assert seq_in_id(got.id) == got.seq
    return ("sent", got.seq, got.kind, got.reached, got.not_reached, got.duplicate)


def _rows(store: Store, space_id: str) -> tuple[list[Any], list[Any]]:
    """The space's log rows (every column but its id, space and time) and its
    deliveries (message seq, recipient, state), in order."""
    skip = {"id", "space_no", "created_at_utc", "rowid"}
    with store.read() as t:
        rows = t.rows(
            f"SELECT * FROM messages WHERE space_no = {SPACE_NO} ORDER BY seq", (space_id,)
        )
        # A reply names its parent by id (and its thread after it): by seq here.
        seq_of = {r["id"]: f"<message {r['seq']}>" for r in rows}
        log = [{k: seq_of.get(v, v) for k, v in r.items() if k not in skip} for r in rows]
        deliveries = [
            tuple(r)
            for r in t.all(
                "SELECT m.seq, p.address, d.state, d.attempts "
                f"FROM {delivery_rows('d')} JOIN messages m ON m.id = d.message_id "
                "JOIN participants p ON p.id = d.recipient_id "
                "WHERE d.space_id = ? ORDER BY m.seq, p.address",
                (space_id,),
            )
        ]
    return log, deliveries


def _run(
    store: Store, script: Script, monkeypatch: pytest.MonkeyPatch, *, one: bool
) -> tuple[list[Any], tuple[list[Any], list[Any]], list[bool]]:
    op = Operator(store)
    created = op.create_space("workflow", **script.limits)
    sid = created.id
    agents = {"lead": trusted.join(store, sid, "lead", lead=True)[0]}
    agents.update({c: trusted.join(store, sid, c)[0] for c in script.agents if c != "lead"})
    for c in script.newcomers:
        agents[c] = Agent.join(store, sid, c, join_key=created.join_key)[0]
    taken: list[bool] = []
    real = sending.send_one

    def spy(*args: Any, **kw: Any) -> Any:
        got = real(*args, **kw) if one else None
        taken.append(got is not None)
        return got

    monkeypatch.setattr(sending, "send_one", spy)
    # A send whose caller's heartbeat is due (once a second) reads the caller
    # with the beat, not with its recipient, and goes to the Batch: no beat is
    # due here, so which sends send_one takes does not hang on the clock.
    monkeypatch.setattr(auth, "beat_due", lambda *_: False)
    answers: list[Any] = []
    ids: list[str] = []
    try:
        for what, step in script.steps:
            try:
                got = step(agents, ids)
            except errors.BrokerError as exc:
                got = exc
            if what == "send":
                answers.append(_answer(got, sid))
                ids.append("" if isinstance(got, BaseException) else got.id)
    finally:
        monkeypatch.undo()
    return answers, _rows(store, sid), taken


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_send_one_writes_and_answers_as_the_batch_does(
    store: Store, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = SCRIPTS[name]
    answers, rows, taken = _run(store, script, monkeypatch, one=True)
    batch_answers, batch_rows, _ = _run(store, script, monkeypatch, one=False)
    assert answers == batch_answers
    assert rows == batch_rows
    # send_one was asked about every send that reached a known participant, and
    # took exactly those no rule could refuse or divert.
    assert taken == TAKEN[name]
    # Each script ends with the rows it meant to make: some sent, and (but the
    # first) some refused or diverted by the rule it walks up to.
    sent = [a for a in answers if a[0] == "sent" and not a[4]]
    assert sent, answers
    if name != "plain sends, to others and to oneself, with a thread":
        assert len(sent) < len(answers), answers
