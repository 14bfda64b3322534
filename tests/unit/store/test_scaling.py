"""A hot call does the same work whatever the size of its space (SQLite).

An agent's everyday calls (a send, a claim, an ack, both at once, a turn, a
board post and read, its own row) are counted in SQLite virtual-machine steps (a
progress handler called at every step of every statement the call runs), not
timed: the count is exact, the same on every machine. Each is counted in a
small space and in a large one (many senders who have sent, many
participants, a long log, a deep inbox), as the least over a run of calls.
Both spaces hold a whole number of batches of 32 messages when the run
starts, so the folds every 32nd message runs, and the tail past them that
readers add (0 to 31 rows), stand at the same place in both. A statement that
read a row per sender (the space's log size as a sum over ``sender_usage``,
before revision 0020), per participant, per message of the log or per
delivery of an inbox would make the large space's count grow with it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

import spacegen
import trusted

from broker import Agent, Operator, Store

RUN = 40  # calls counted in a row; the least of them is compared


def _steps(store: Store, call: Callable[[], object]) -> int:
    """VM steps of every statement ``call`` runs on this thread's connection."""
    with store.read() as t:
        conn = t.raw  # the thread's own: the call runs its statements on it
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    conn.set_progress_handler(count, 1)
    try:
        call()
    finally:
        conn.set_progress_handler(None, 1)
    return steps


def _space(store: Store, senders: int, backlog: int) -> tuple[Agent, Agent]:
    """A space where ``senders`` agents have each sent to ``b``, and ``b``'s
    inbox holds ``backlog`` more messages from ``a``."""
    sid = Operator(store).create_space("workflow", inbox_cap=100_000, log_max_mb=1024).id
    a, _ = trusted.join(store, sid, "a")
    b, _ = trusted.join(store, sid, "b")
    for i in range(senders):
        trusted.join(store, sid, f"s{i}")[0].send("b", f"hello from s{i}")
    for i in range(backlog):
        a.send("b", f"backlog {i}")
    return a, b


def _counts(store: Store, senders: int, backlog: int) -> dict[str, int]:
    a, b = _space(store, senders, backlog)
    sends = min(_steps(store, lambda: a.send("b", "counted")) for _ in range(RUN))
    leases: list[str] = []

    def claim() -> None:
        got = b.claim(limit=1)  # the oldest: folded rows, in both spaces
        assert got.lease_token is not None
        leases.append(got.lease_token)

    claims = min(_steps(store, claim) for _ in range(RUN))
    acks = min(_steps(store, partial(b.ack, token)) for token in leases)
    held = [b.claim(limit=1).lease_token]

    def ack_and_claim() -> None:
        assert held[-1] is not None
        held.append(b.ack_and_claim(held[-1]).lease_token)

    def turn() -> None:
        got = b.next_turn(limit=1)
        if got.id is not None:
            b.seen(got.id)

    return {
        "send": sends,
        "claim": claims,
        "ack": acks,
        "ack_and_claim": min(_steps(store, ack_and_claim) for _ in range(RUN)),
        "next_turn + seen": min(_steps(store, turn) for _ in range(RUN)),
        "post": min(_steps(store, lambda: a.post("on the board")) for _ in range(RUN)),
        "board_read": min(_steps(store, lambda: b.board_read(limit=5)) for _ in range(RUN)),
        "me": min(_steps(store, b.me) for _ in range(RUN)),
    }


def test_an_agent_s_everyday_calls_do_the_same_work_in_a_large_space(tmp_path: Path) -> None:
    small = spacegen.fresh_store(tmp_path / "small")
    large = spacegen.fresh_store(tmp_path / "large")
    try:
        few = _counts(small, senders=2, backlog=126)  # 128 messages: 4 batches
        many = _counts(large, senders=120, backlog=1928)  # 2,048: 64 batches
    finally:
        small.close()
        large.close()
    assert all(n > 50 for n in few.values()), few  # the handler saw the statements
    # The same steps (a seek is one step however deep its b-tree); a store of
    # revision 0019 took ~600 more for a send, a claim and an ack here, five per sender.
    for call, n in few.items():
        assert many[call] <= n + 10, (call, few, many)
