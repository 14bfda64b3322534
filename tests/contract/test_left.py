"""S4: a participant that left cannot act, on any call of ``Agent``.

Every public method of ``Agent`` (its mixins included) is in the table below or
named as exempt with the reason, so a new method cannot skip the check: the
table is compared with the class. Each call of a left participant is refused
with ``ParticipantLeft`` and writes nothing, also inside a caller's
transaction that catches the error and commits (the heartbeat a call refreshes
is not written for it either). Runs on SQLite and PostgreSQL (PG_CONTRACT).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlrows
import trusted
from conftest import Clock, open_store

from broker import Agent, Operator, Store, errors
from broker.api.operations import SEND
from broker.model.records import Turn
from broker.store.sqlite import Tx
from broker.store.tables import metadata

# Not calls a participant makes with its identity: properties, the ways to
# become one, and ``me`` (its own row, which S4's ``left`` status is read from).
EXEMPT = {"address", "space_id", "connect", "join", "from_token", "me", "process"}


class Left:
    """``b`` held a turn, a lease on three messages, a board key, a path
    reservation, a directive and a sent message when it left."""

    def __init__(self, store: Store) -> None:
        sid = Operator(store).create_space("workflow").id
        self.a, _ = trusted.join(store, sid, "a")
        self.b, _ = trusted.join(store, sid, "b", tools=["board.*", "msg.*"])
        ids = [self.a.send("b", f"m{i}").id for i in range(5)]
        self.turn: Turn = self.b.next_turn(limit=1)
        assert [i.id for i in self.turn.items] == ids[:1]
        self.lease = self.b.claim(limit=3, lease=60)
        self.ids = [d.id for d in self.lease.deliveries]
        assert self.ids == ids[1:4]
        self.fence = self.b.claim_key("build/lock").fence
        self.reservation = self.b.reserve("src/**")[0].fence
        self.directive = self.b.directive("a", "stop the build").id
        self.sent = self.b.send("a", "did you see this?", ack_required=True).id
        self.b.leave()


def acting(left: Left) -> dict[str, Callable[[Tx | None], Any]]:
    """Every acting method of ``Agent``, called as the left participant ``b``
    would call it had it not left (``tx``: a caller's transaction, where the
    method takes one)."""
    b, token, ids, turn = left.b, left.lease.lease_token, left.ids, left.turn
    return {
        "send": lambda tx: b.send("a", "after leaving", tx=tx),
        "send_many": lambda tx: b.send_many([{"to": "a", "text": "x"}], tx=tx),
        "post": lambda tx: b.post("after leaving", tx=tx),
        "leave": lambda tx: b.leave(tx=tx),
        "granted": lambda tx: b.granted(tx=tx),
        "board_read": lambda tx: b.board_read(tx=tx),
        "directive": lambda tx: b.directive("a", "again", tx=tx),
        "retract": lambda tx: b.retract(left.directive, tx=tx),
        "claim_key": lambda tx: b.claim_key("build/other", tx=tx),
        "release_key": lambda tx: b.release_key("build/lock", left.fence, tx=tx),
        "renew_key": lambda tx: b.renew_key("build/lock", left.fence, tx=tx),
        "claim": lambda tx: b.claim(tx=tx),
        "ack": lambda tx: b.ack(token, ids[:1], tx=tx),
        "ack_whole_lease": lambda tx: b.ack(token, tx=tx),
        "release": lambda tx: b.release(token, ids[1:2], error="gave up", tx=tx),
        "extend": lambda tx: b.extend(token, 604800, tx=tx),
        "extend_default": lambda tx: b.extend(token, tx=tx),
        "quarantine": lambda tx: b.quarantine(token, ids[2], "bad input", tx=tx),
        "ack_and_claim": lambda tx: b.ack_and_claim(token, ids[:1], tx=tx),
        "next_turn": lambda tx: b.next_turn(tx=tx),
        "seen": lambda tx: b.seen(turn.id or "", tx=tx),
        "set_status": lambda tx: b.set_status("idle", tx=tx),
        "quarantine_turn": lambda _tx: b.quarantine_turn(turn, "bad turn"),
        "append_history": lambda tx: b.append_history(turn, tx=tx),
        "undo_history": lambda tx: b.undo_history([i.id for i in turn.items], tx=tx),
        "history": lambda _tx: b.history(),
        "append_turn_history": lambda tx: b.append_turn_history(turn.id or "", tx=tx),
        "undo_turn_history": lambda tx: b.undo_turn_history(turn.id or "", tx=tx),
        "quarantine_turn_input": lambda tx: b.quarantine_turn_input(turn.id or "", "bad", tx=tx),
        "reserve": lambda tx: b.reserve("docs/**", tx=tx),
        "release_reservation": lambda tx: b.release_reservation(left.reservation, tx=tx),
        "renew_reservation": lambda tx: b.renew_reservation(left.reservation, tx=tx),
        "check_paths": lambda tx: b.check_paths("src/a.py", tx=tx),
        "status": lambda tx: b.status(left.sent, tx=tx),
        "search": lambda tx: b.search("build", tx=tx),
        "contact_policy": lambda tx: b.contact_policy(tx=tx),
        "set_contact_policy": lambda tx: b.set_contact_policy("closed", tx=tx),
        "call": lambda tx: b.call(SEND, {"to": "a", "text": "declared"}, tx),
    }


def every_row(store: Store) -> dict[str, list[tuple[str, ...]]]:
    """The whole content of every table, in a comparable form."""
    out = {}
    with store.read() as t:
        for table in metadata.sorted_tables:
            rows = t.all(f"SELECT * FROM {table.name}")
            out[table.name] = sorted(tuple(str(v) for v in r) for r in rows)
    return out


# The table's rows by name (parametrised below, checked against ``acting``).
METHODS = [
    "send", "send_many", "post", "leave", "granted", "board_read", "directive", "retract",
    "claim_key", "release_key", "renew_key", "claim", "ack", "ack_whole_lease", "release",
    "extend", "extend_default", "quarantine", "ack_and_claim", "next_turn", "seen",
    "set_status", "quarantine_turn", "append_history", "undo_history", "history",
    "append_turn_history", "undo_turn_history", "quarantine_turn_input", "reserve",
    "release_reservation", "renew_reservation", "check_paths", "status", "search",
    "contact_policy", "set_contact_policy", "call",
]  # fmt: skip
NO_TX = {"quarantine_turn", "history"}  # they take no caller's transaction


@pytest.fixture
def cstore(clocked_url: str, clock: Clock) -> Iterator[Store]:
    s = open_store(clocked_url, clock=clock)
    yield s
    s.close()


@pytest.fixture
def left(cstore: Store) -> Left:
    return Left(cstore)


def test_S4_the_table_covers_every_public_method_of_agent(left: Left) -> None:
    assert list(acting(left)) == METHODS
    public = {n for n in dir(Agent) if not n.startswith("_")} - EXEMPT
    assert {n.removesuffix("_whole_lease").removesuffix("_default") for n in METHODS} == public


@pytest.mark.parametrize("method", METHODS)
def test_S4_a_participant_that_left_cannot_act_and_its_refusal_writes_nothing(
    cstore: Store, clock: Clock, left: Left, method: str
) -> None:
    store = cstore
    call = acting(left)[method]
    clock.advance(2)  # every call's heartbeat is due: a refusal must not write it
    before = every_row(store)
    with pytest.raises(errors.ParticipantLeft) as info:
        call(None)
    assert info.value.code == "participant_left"
    assert every_row(store) == before
    if method in NO_TX:
        return
    # Inside a caller's transaction that catches the refusal and commits.
    clock.advance(2)
    with store.transaction() as t, pytest.raises(errors.ParticipantLeft):
        call(t)
    assert every_row(store) == before


def test_S4_the_deliveries_a_participant_held_when_it_left_stay_under_its_lease(
    cstore: Store, left: Left
) -> None:
    """Leaving returns nothing: the lease runs out (S15), and after re-joining
    the participant settles or claims them like any of its own (S3: it keeps
    its inbox)."""
    with cstore.read() as t:
        rows = t.all(
            f"SELECT message_id, state, lease_token FROM {sqlrows.delivery_rows('d')} "
            "JOIN participants p ON p.id = d.recipient_id WHERE p.address = 'b' "
            "ORDER BY d.rowid"
        )
    token = left.lease.lease_token
    assert [tuple(r) for r in rows][1:] == [(i, "processing", token) for i in left.ids] + [
        (rows[4][0], "ready", None)
    ]
    again, _ = trusted.join(cstore, left.b.space_id, "b", tools=["board.*", "msg.*"])
    assert again.ack(token, left.ids[:1]) == 1
