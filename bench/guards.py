"""What the trust guards cost a send and a claim+ack: paired runs on one tree.

python -m bench.guards                          # 3000 sends + 3000 claim+acks per configuration
python -m bench.guards --messages 6000 --batch 50 --work /dev/shm --json /tmp/guards.json

One process, one store per configuration (the bench's broker lane,
``bench.peers.broker_queue.BrokerQueue``, caps lifted as in ``python -m bench
send claim_ack``), and the configurations take turns batch after batch
(``--batch`` operations each, in a rotated order): a burst of load elsewhere
on a shared machine hits them all alike, so the difference between them is
the guards', not the machine's. A configuration turns guards off only while
its own batch runs, never in the tree:

- ``s43``: its store has no REPLACE guards (``*_no_replace`` triggers dropped);
- ``s44``: the store's clock is the process's as is (no ``SteadyClock``), and
  a log row is stamped without reading the space's last time;
- ``s42``: the log checks of a send (``Batch._check_log``: the S11 cap, the
  S30/S42 shares) and the per-inbox share (``Batch._over_share``) are skipped.

Reported per configuration: wall and CPU microseconds per operation (the CPU
time of this process leaves out fsync waits), and each against ``guarded``.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.core import count

CONFIGS: dict[str, tuple[str, ...]] = {
    "guarded": (),
    "no_s43": ("s43",),
    "no_s44": ("s44",),
    "no_s42": ("s42",),
    "none": ("s43", "s44", "s42"),
}


def _drop_replace_guards(db: Path) -> None:
    conn = sqlite3.connect(str(db))
    try:
        names = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE '%_no_replace'"
            )
        ]
        for name in names:
            conn.execute(f"DROP TRIGGER {name}")
        conn.commit()
    finally:
        conn.close()


class Switches:
    """The S44 and S42 guards, on or off for the batch that runs next."""

    def __init__(self) -> None:
        from broker import ids
        from broker.mail import sending

        self.ids, self.sending = ids, sending
        self.on = {
            "clock": ids.SteadyClock.__call__,
            "stamp": sending.stamp,
            "check_log": sending.Batch._check_log,
            "over_share": sending.Batch._over_share,
        }

    def set(self, off: tuple[str, ...]) -> None:
        steady, batch = self.ids.SteadyClock, self.sending.Batch
        if "s44" in off:
            steady.__call__ = lambda self: self.wall() + self.offset  # type: ignore[method-assign]
            self.sending.stamp = lambda store, t, space_id: store.now_ts()
        else:
            steady.__call__ = self.on["clock"]  # type: ignore[method-assign]
            self.sending.stamp = self.on["stamp"]
        if "s42" in off:
            batch._check_log = lambda self, limits: None  # type: ignore[method-assign]
            batch._over_share = lambda self, pid, waiting, limits: False  # type: ignore[method-assign]
        else:
            batch._check_log = self.on["check_log"]  # type: ignore[method-assign]
            batch._over_share = self.on["over_share"]  # type: ignore[method-assign]


def run(n: int, batch: int, work: str | None) -> dict[str, dict[str, float]]:
    from bench.peers.broker_queue import BrokerQueue

    names = list(CONFIGS)
    switches = Switches()
    totals = {
        c: {"send_wall": 0.0, "send_cpu": 0.0, "ack_wall": 0.0, "ack_cpu": 0.0} for c in names
    }
    with tempfile.TemporaryDirectory(prefix="guards-", dir=work) as tmp:
        lanes = {}
        for c in names:
            folder = Path(tmp) / c
            folder.mkdir()
            lanes[c] = BrokerQueue(folder)
            if "s43" in CONFIGS[c]:
                _drop_replace_guards(folder / "broker.db")
        texts = [f"message {i:06d} " + "x" * 48 for i in range(n)]
        for c in names:  # warm every lane's statement caches
            switches.set(CONFIGS[c])
            for i in range(50):
                lanes[c].put(f"warm {i}")
            assert len(lanes[c].claim_ack_many(50)) == 50

        def phase(kind: str, op: Callable[[str, Any, int], None]) -> None:
            for r, start in enumerate(range(0, n, batch)):
                stop = min(n, start + batch)
                for c in names[r % len(names) :] + names[: r % len(names)]:
                    switches.set(CONFIGS[c])
                    q = lanes[c]
                    t0, c0 = time.perf_counter(), time.process_time()
                    for i in range(start, stop):
                        op(c, q, i)
                    totals[c][f"{kind}_wall"] += time.perf_counter() - t0
                    totals[c][f"{kind}_cpu"] += time.process_time() - c0

        got: dict[str, list[str]] = {c: [] for c in names}
        phase("send", lambda c, q, i: q.put(texts[i]))
        phase("ack", lambda c, q, i: got[c].extend(q.claim_ack()))
        switches.set(())
        for c in names:
            assert got[c] == texts, f"{c}: FIFO, each once"
            lanes[c].close()
    return {
        c: {
            "send_us": t["send_wall"] / n * 1e6,
            "send_cpu_us": t["send_cpu"] / n * 1e6,
            "claim_ack_us": t["ack_wall"] / n * 1e6,
            "claim_ack_cpu_us": t["ack_cpu"] / n * 1e6,
        }
        for c, t in totals.items()
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.guards", description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=count, default=3000)
    ap.add_argument("--batch", type=count, default=50)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--work", help="folder for the scratch stores (default: the temp folder)")
    args = ap.parse_args(argv)
    result = run(args.messages, args.batch, args.work)
    keys = ("send_us", "send_cpu_us", "claim_ack_us", "claim_ack_cpu_us")
    base = result["guarded"]
    print(f"µs per operation, {args.messages} each, batches of {args.batch} (× against guarded)")
    print(f"{'config':10}" + "".join(f" {k:>22}" for k in keys))
    for c, med in result.items():
        cells = "".join(f" {med[k]:12.1f} ({med[k] / base[k]:5.3f}×)" for k in keys)
        print(f"{c:10}{cells}")
    if args.json:
        args.json.write_text(
            json.dumps({"args": vars(args) | {"json": str(args.json)}, "result": result}, indent=2)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
