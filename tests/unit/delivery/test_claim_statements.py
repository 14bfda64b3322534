"""The caller checks of a claim and of a settle, as SQLite runs them (S4, S10).

A claim that follows one which did not fill its limit reads a snapshot first
(the caller and whether anything is claimable), so that an empty inbox takes
no write lock. The claim's write transaction that follows checks the caller
again: a participant that left, or whose token was replaced, between the
two claims nothing. ``ack_and_claim`` checks the caller once, with its ack,
and its claim takes the limits that check read. Counted with SQLite's trace
callback on the store's own connection (the texts of the catalogue's
statements as they are run: ``Stmt.numbered``).
"""

from __future__ import annotations

from conftest import Clock

from broker import Agent, Operator
from broker.store.sql import stmt
from broker.store.sqlite import Store


def _head(name: str) -> str:
    """A catalogue statement's text up to its first value: the trace gives
    the text with its values in."""
    return stmt(name).numbered[0].split("?", 1)[0]


CALLER = tuple(_head(n) for n in ("auth.caller", "auth.caller_heartbeat"))
CLAIM = _head("inbox.claim")
ACK = _head("inbox.ack")


def _at(write: list[str], head: str | tuple[str, ...]) -> list[int]:
    """Where statements beginning ``head`` ran in ``write``."""
    return [i for i, s in enumerate(write) if s.startswith(head)]


def _writes(seen: list[str]) -> list[list[str]]:
    """The statements of each write transaction (``BEGIN IMMEDIATE`` to
    ``COMMIT``), trigger bodies ('-- ' lines) left out. A statement that
    fires triggers is reported again after each: counted once."""
    out: list[list[str]] = []
    current: list[str] | None = None
    last = None
    for text in seen:
        if text.startswith("--") or text == last:
            continue
        last = text
        if text.startswith("BEGIN IMMEDIATE"):
            current = []
        elif text.startswith("COMMIT") and current is not None:
            out.append(current)
            current = None
        elif current is not None:
            current.append(text)
    return out


def _pair(store: Store) -> tuple[Agent, Agent]:
    """A sender "a" and a receiver "b" in a new space."""
    op = Operator(store)
    space = op.create_space("workflow").id
    return op.join(space, "a")[0], op.join(space, "b")[0]


def test_S10_a_claim_after_its_snapshot_checks_the_caller_again_in_its_write(
    traced: tuple[Store, list[str]], clock: Clock
) -> None:
    seen = traced[1]
    sender, receiver = _pair(traced[0])
    assert receiver.claim(limit=5).deliveries == []  # did not fill: a snapshot comes next
    sender.send("b", "hello")
    clock.advance(0.1)  # within the heartbeat's second: the plain caller check
    seen.clear()
    lease = receiver.claim(limit=5)
    assert [d.body for d in lease.deliveries] == ["hello"]
    assert any(s.startswith("BEGIN") and not s.startswith("BEGIN IMMEDIATE") for s in seen)
    (write,) = _writes(seen)  # the snapshot, then one write transaction
    (claimed,) = _at(write, CLAIM)
    assert [i for i in _at(write, CALLER) if i < claimed], write


def test_S10_ack_and_claim_checks_the_caller_once_with_its_ack(
    traced: tuple[Store, list[str]], clock: Clock
) -> None:
    seen = traced[1]
    sender, receiver = _pair(traced[0])
    sender.send("b", "one")
    sender.send("b", "two")
    lease = receiver.claim(limit=1)
    clock.advance(0.1)
    seen.clear()
    got = receiver.ack_and_claim(lease.lease_token)
    assert [d.body for d in got.deliveries] == ["two"]
    (write,) = _writes(seen)
    (checked,) = _at(write, CALLER)
    (acked,) = _at(write, ACK)
    (claimed,) = _at(write, CLAIM)
    assert checked < acked < claimed, write
