"""``python -m bench.send_phases``: one embedded ``Agent.send``'s wall time by
phase, without a profiler's overhead on every call.

A few wrappers (~0.2 µs each) time the layers of the path — the handle (input
record and dispatch), the library's own work, the grant gate's transaction
(lock + BEGIN, the caller check, COMMIT + unlock + wake), the send
transaction — and every statement the connection runs (SQLite's C time).
Each phase is its own time (its inner phases subtracted), as the median
over ``--sends`` sends to a one-recipient space on a file store.

python -m bench.send_phases --sends 5000
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


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.send_phases", description=__doc__)
    p.add_argument("--sends", type=count, default=5000)
    p.add_argument("--warm", type=whole, default=300)
    a = p.parse_args(argv)
    import broker.mail.messages as messages
    import broker.mail.sending as sending
    import broker.spaces.auth as auth
    import broker.spaces.gate as gate

    with tempfile.TemporaryDirectory(prefix="send-phases-") as d:
        store, sender = warmed_sender(Path(d), a.warm)
        # Every statement (BEGIN, the caller's read, the inserts, COMMIT).
        store_sqlite.Connection.execute = _timed(  # type: ignore[method-assign]
            "SQLite statements (C)", store_sqlite.sqlite3.Connection.execute
        )
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


if __name__ == "__main__":
    main()
