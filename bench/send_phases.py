"""``python -m bench.send_phases``: one embedded ``Agent.send``'s wall time by
phase, without a profiler's overhead on every call.

A few wrappers (~0.2 µs each) time the layers of the path — the handle (input
record and dispatch), the library's own work, the grant gate's transaction
(lock + BEGIN, the caller check, COMMIT + unlock + wake), the send
transaction — and every statement the connection runs (SQLite's C time).
Each phase is its own time (its inner phases subtracted), as the median
over ``--sends`` sends to a one-recipient space on a file store.

``--layers`` times the send instead with its layers taken off one at a time,
each the same message to the same inbox, without a wrapper anywhere: the
library method, the operation's call with its input record made, the
library function, the grant gate, the caller check and send transaction in
the store's own transaction, the broker's statements raw in that
transaction, and the same with no store around them (``raw_same``). The
variants run in turns of ``--per`` sends, alternated ``--rounds`` times, each
the median of its turns' medians; the difference between two rows is the
layer's cost, as much of it as the machine's caches make it in a real send.
One more variant sits beside them: the caller check and the same send
through the ``Batch`` (every send's path before ``send_one``, stop 52), so
the row says what the Batch's objects cost over ``send_one``.

``--hold`` times what a send does with the writer lock held, which is what
a swarm of processes queues behind: from the lock's acquire to its release,
and the statements run in between (their C time; the rest is Python). Turns
of ``--per`` sends through ``send_one`` alternate with turns of the same
send through the ``Batch`` (``send_one`` declining), ``--rounds`` times.

python -m bench.send_phases --sends 5000
python -m bench.send_phases --layers --rounds 12 --per 400
python -m bench.send_phases --hold --rounds 12 --per 400
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.core import count, whole
from bench.peers.broker_queue import warmed_sender
from broker.store import sqlite as store_sqlite

_clock = time.perf_counter_ns
_acc: dict[str, int] = {}
_stack: list[int] = []  # inner time to subtract from the enclosing phase


def _timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def run(*a: Any, **kw: Any) -> Any:
        _stack.append(0)
        t0 = _clock()
        try:
            return fn(*a, **kw)
        finally:
            spent = _clock() - t0
            inner = _stack.pop()
            _acc[name] = _acc.get(name, 0) + spent - inner
            if _stack:
                _stack[-1] += spent

    return run


def _patch(owner: Any, attr: str, name: str) -> None:
    setattr(owner, attr, _timed(name, getattr(owner, attr)))


CHECKED = "the caller check and the send in store.write"
BATCH = "(the same through the Batch, not send_one)"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.send_phases", description=__doc__)
    p.add_argument("--sends", type=count, default=5000)
    p.add_argument("--warm", type=whole, default=300)
    p.add_argument("--layers", action="store_true", help="the layers taken off one at a time")
    p.add_argument("--hold", action="store_true", help="the writer lock's hold, send_one or not")
    p.add_argument("--rounds", type=count, default=12, help="--layers, --hold: turns of each")
    p.add_argument("--per", type=count, default=400, help="--layers, --hold: sends a turn")
    a = p.parse_args(argv)
    if a.hold:
        with tempfile.TemporaryDirectory(prefix="send-hold-") as d:
            store, sender = warmed_sender(Path(d), a.warm)
            held = hold(sender, a.rounds, a.per)
            store.close()
        print(f"{a.rounds} turns of {a.per} sends each way, the median of the turns' medians")
        print("| the send | p50 µs | writer lock held µs | statements in it µs | Python in it µs |")
        print("|---|---|---|---|---|")
        for k, (wall, lock, sql) in held.items():
            print(f"| {k} | {wall:.1f} | {lock:.1f} | {sql:.1f} | {lock - sql:.1f} |")
        return
    if a.layers:
        with tempfile.TemporaryDirectory(prefix="send-layers-") as d:
            store, sender = warmed_sender(Path(d), a.warm)
            got = layers(store, sender, a.rounds, a.per)
            store.close()
        print(f"{a.rounds} turns of {a.per} sends a variant, the median of the turns' medians")
        print("| what runs | p50 µs | the layer above it |")
        print("|---|---|---|")
        above: float | None = None
        for k, v in got.items():
            if k == BATCH:  # beside the layers: what the Batch costs over send_one
                checked = got[CHECKED]
                print(f"| {k} | {v:.1f} | {v - checked:+.1f} over the row above it |")
                continue
            layer = "" if above is None else f"{above - v:.1f}"
            print(f"| {k} | {v:.1f} | {layer} |")
            above = v
        return
    import broker.mail.messages as messages
    import broker.mail.sending as sending
    import broker.spaces.auth as auth
    import broker.spaces.gate as gate

    with tempfile.TemporaryDirectory(prefix="send-phases-") as d:
        store, sender = warmed_sender(Path(d), a.warm)
        # Every statement (BEGIN, the caller's read, the inserts, COMMIT).
        # (the module's, which Connection.execute calls after numbering a catalogue statement's values)
        store_sqlite._execute = _timed("SQLite statements (C)", store_sqlite._execute)
        _patch(messages, "_send_as", "library: targets, mail fields")
        _patch(gate, "call", "grant gate: tx, lock, wake, checkpoint")
        _patch(auth, "caller", "caller check (Python)")
        _patch(sending, "send_in_tx", "send transaction (Python)")
        # gate.call's own names: re-bind the ones it imported
        gate.caller = auth.caller
        messages._send_as.__globals__["gate"] = gate
        messages.send.__globals__["send_in_tx"] = sending.send_in_tx
        per: dict[str, list[int]] = {}
        totals = []
        for i in range(a.sends):
            _acc.clear()
            _stack.append(0)
            t0 = _clock()
            sender.send("worker", f"timed {i:06d} " + "x" * 50)
            spent = _clock() - t0
            inner = _stack.pop()
            _acc["handle: input record, dispatch"] = spent - inner
            totals.append(spent)
            for k, v in _acc.items():
                per.setdefault(k, []).append(v)
        store.close()
    print(f"{a.sends} sends, p50 {statistics.median(totals) / 1000:.1f} µs a send")
    print("| phase | p50 µs | mean µs |")
    print("|---|---|---|")
    for k, v in sorted(per.items(), key=lambda kv: -statistics.median(kv[1])):
        print(f"| {k} | {statistics.median(v) / 1000:.1f} | {sum(v) / len(v) / 1000:.1f} |")


def layers(store: Any, sender: Any, rounds: int, per: int) -> dict[str, float]:
    """The send with its layers taken off one at a time (``--layers``): the
    median µs of each variant, every one a real send of one message to
    "worker" (the outermost first)."""
    from bench.peers import raw_sqlite
    from broker.api.operations import SEND
    from broker.mail import messages, sending
    from broker.mail.recipients import Sender
    from broker.mail.threads import PLAIN
    from broker.spaces import auth, gate
    from broker.spaces.addressing import parse_targets

    ident = sender.identity
    text = "x" * 60
    inp = SEND.take({"to": "worker", "text": text})
    targets, _ = parse_targets(inp.to)

    def run(t: Any, row: Any) -> Any:
        who = Sender(ident.address, ident.participant_id, row.parent, row.is_lead)
        return sending.send_in_tx(
            store, t, ident.space_id, who, "direct", targets, text, key=None, mail=PLAIN,
            space=row.space, known=row.recipient, last_at=row.last_at, now=row.now,
        )  # fmt: skip

    def checked_send() -> None:
        with store.write() as t:
            run(t, auth.caller(t, ident, store.now_ts(), "worker", counted=True))

    def batch_send() -> None:
        # The same send through the Batch, as every send went before stop 52
        # (send_one takes it now): the rules' objects are the difference.
        with store.write() as t:
            row = auth.caller(t, ident, store.now_ts(), "worker", counted=True)
            who = Sender(ident.address, ident.participant_id, row.parent, row.is_lead)
            batch = sending.Batch(
                store, t, ident.space_id, who, space=row.space, last_at=row.last_at, now=row.now
            )
            if row.recipient is not None:  # None once a second: the heartbeat's read
                batch.known[row.recipient[1]] = row.recipient
            batch.add("direct", targets, text, mail=PLAIN)
            batch.flush()

    caller = raw_sqlite._Caller(store, ident.space_id, ident)
    caller.due = "9999"  # the heartbeat is the library's, once a second: not timed here

    def statements(c: Any) -> None:
        raw_sqlite.send_statements(c, store, ident.space_id, caller, ident.address, "worker", text)

    def in_store_tx() -> None:
        with store.write() as t:
            statements(t.raw)

    conn = store.connect()
    variants: dict[str, Callable[[], object]] = {
        "Agent.send (the library method)": lambda: sender.send("worker", text),
        "Agent.call with the input record made": lambda: sender.call(SEND, inp),
        "messages.send (the library function)": lambda: messages.send(store, ident, inp),
        "gate.call (grant gate, caller check, send)": lambda: gate.call(
            store, ident, "msg.send", run, send="worker", counted=True
        ),
        CHECKED: checked_send,
        BATCH: batch_send,
        "the broker's statements raw in store.write": in_store_tx,
        "raw_same: the statements, no store": lambda: raw_sqlite.in_write_tx(conn, statements),
    }
    turns: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            times = []
            for _ in range(per):
                t0 = _clock()
                fn()
                times.append(_clock() - t0)
            turns[name].append(statistics.median(times) / 1000)
    conn.close()
    return {k: statistics.median(v) for k, v in turns.items()}


def hold(sender: Any, rounds: int, per: int) -> dict[str, tuple[float, float, float]]:
    """``--hold``: (send p50, lock held, statements inside) in µs, medians of
    the turns' medians, through ``send_one`` and through the ``Batch``."""
    from broker.mail import sending
    from broker.store.writelock import WriterLock

    at = {"t0": 0, "sql": 0}
    holds: list[tuple[int, int]] = []
    acquire, release, execute = WriterLock.acquire, WriterLock.release, store_sqlite._execute

    def timed_acquire(self: WriterLock, timeout: float | None) -> bool:
        got = acquire(self, timeout)
        at["t0"], at["sql"] = _clock(), 0
        return got

    def timed_release(self: WriterLock) -> None:
        holds.append((_clock() - at["t0"], at["sql"]))
        release(self)

    def timed_execute(conn: Any, sql: Any, params: Any = ()) -> Any:
        t0 = _clock()
        try:
            return execute(conn, sql, params)
        finally:
            at["sql"] += _clock() - t0

    one = sending.send_one
    ways: dict[str, Callable[..., Any]] = {
        "send_one": one,
        "the Batch (send_one declining)": lambda *_a, **_k: None,
    }
    turns: dict[str, list[tuple[float, float, float]]] = {k: [] for k in ways}
    WriterLock.acquire, WriterLock.release = timed_acquire, timed_release  # type: ignore[method-assign]
    store_sqlite._execute = timed_execute
    try:
        for _ in range(rounds):
            for name, way in ways.items():
                sending.send_one = way
                holds.clear()
                walls = []
                for _ in range(per):
                    t0 = _clock()
                    sender.send("worker", "x" * 60)
                    walls.append(_clock() - t0)
                turns[name].append(
                    (
                        statistics.median(walls),
                        statistics.median(h for h, _ in holds),
                        statistics.median(q for _, q in holds),
                    )
                )
    finally:
        sending.send_one = one
        WriterLock.acquire, WriterLock.release = acquire, release  # type: ignore[method-assign]
        store_sqlite._execute = execute
    return {
        k: tuple(statistics.median(c) / 1000 for c in zip(*v, strict=True))
        for k, v in turns.items()
    }


if __name__ == "__main__":
    main()
