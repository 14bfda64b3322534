"""What the trust guards cost a send and a claim+ack: paired runs on one tree.

python -m bench.guards                       # 5 rounds x 2000 sends + 2000 claim+acks
python -m bench.guards --rounds 7 --messages 4000 --json /tmp/guards.json

Each configuration runs in a fresh process with a fresh store (the bench's
broker lane: ``bench.peers.broker_queue.BrokerQueue``, caps lifted as in
``python -m bench send claim_ack``), and the configurations take turns round
after round (rotated), so a burst of load elsewhere hits them alike. A
configuration turns guards off in its own process only, never in the tree:

- ``s43``: drops the REPLACE guards (``*_no_replace`` triggers, S43) from its
  store;
- ``s44``: the store's clock is the process's as is (no ``SteadyClock``), and
  a log row is stamped without reading the space's last time (S44);
- ``s42``: the log checks of a send (``Batch._check_log``: S11 cap, S30/S42
  shares) and the per-inbox share (``Batch._over_share``) are skipped.

The figure per configuration is the median over rounds of the mean time of
one operation; the report gives each against ``guarded`` (everything on).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CONFIGS: dict[str, tuple[str, ...]] = {
    "guarded": (),
    "no_s43": ("s43",),
    "no_s44": ("s44",),
    "no_s42": ("s42",),
    "none": ("s43", "s44", "s42"),
}


def _unguard(off: tuple[str, ...], db: Path) -> None:
    if "s43" in off:
        conn = sqlite3.connect(str(db))
        try:
            names = [
                r[0]
                for r in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'trigger' "
                    "AND name LIKE '%_no_replace'"
                )
            ]
            for name in names:
                conn.execute(f"DROP TRIGGER {name}")
            conn.commit()
        finally:
            conn.close()
    if "s44" in off:
        from broker import ids
        from broker.mail import sending

        ids.SteadyClock.__call__ = lambda self: self.wall() + self.offset  # type: ignore[method-assign]
        sending.stamp = lambda store, t, space_id: store.now_ts()
    if "s42" in off:
        from broker.mail.sending import Batch

        Batch._check_log = lambda self, limits: None  # type: ignore[method-assign]
        Batch._over_share = lambda self, pid, now_waiting, limits: False  # type: ignore[method-assign]


def child(config: str, n: int, work: str | None) -> dict[str, float]:
    """One run: ``n`` sends, then ``n`` claim+acks of them, timed per phase:
    wall time, and this process's CPU time (what a guard adds, without the
    fsync waits and the other processes of a shared machine)."""
    from bench.peers.broker_queue import BrokerQueue

    with tempfile.TemporaryDirectory(prefix="guards-", dir=work) as tmp:
        q = BrokerQueue(Path(tmp))
        _unguard(CONFIGS[config], Path(tmp) / "broker.db")
        for i in range(50):  # warm the statement caches
            q.put(f"warm {i}")
        assert len(q.claim_ack_many(50)) == 50
        texts = [f"message {i:06d} " + "x" * 48 for i in range(n)]
        t0, c0 = time.perf_counter(), time.process_time()
        for text in texts:
            q.put(text)
        t1, c1 = time.perf_counter(), time.process_time()
        got: list[str] = []
        for _ in range(n):
            got += q.claim_ack()
        t2, c2 = time.perf_counter(), time.process_time()
        assert got == texts, "FIFO, each once"
        q.close()
    return {
        "send_us": (t1 - t0) / n * 1e6,
        "claim_ack_us": (t2 - t1) / n * 1e6,
        "send_cpu_us": (c1 - c0) / n * 1e6,
        "claim_ack_cpu_us": (c2 - c1) / n * 1e6,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.guards", description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--messages", type=int, default=2000)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--work", help="folder for the scratch stores (default: the temp folder)")
    ap.add_argument("--child", choices=sorted(CONFIGS), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.messages, args.work)))
        return 0
    names = list(CONFIGS)
    runs: dict[str, list[dict[str, float]]] = {c: [] for c in names}
    for r in range(args.rounds):
        for c in names[r % len(names) :] + names[: r % len(names)]:
            out = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "bench.guards",
                    "--child",
                    c,
                    "--messages",
                    str(args.messages),
                    *(["--work", args.work] if args.work else []),
                ],
                check=True,
                capture_output=True,
                text=True,
            )
            runs[c].append(json.loads(out.stdout))
    result: dict[str, Any] = {"rounds": args.rounds, "messages": args.messages, "configs": {}}
    keys = ("send_us", "send_cpu_us", "claim_ack_us", "claim_ack_cpu_us")
    base = {k: statistics.median(x[k] for x in runs["guarded"]) for k in keys}
    print("µs per operation, median over rounds (× = against guarded)")
    print(f"{'config':10}" + "".join(f" {k:>22}" for k in keys))
    for c in names:
        med = {k: statistics.median(x[k] for x in runs[c]) for k in keys}
        result["configs"][c] = {"median": med, "runs": runs[c]}
        cells = "".join(f" {med[k]:12.1f} ({med[k] / base[k]:5.3f}×)" for k in keys)
        print(f"{c:10}{cells}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
