"""``python -m bench.profile_send``: where one embedded ``Agent.send``'s time goes.

A file store with one running space, a sender and one recipient (the bench's
caps lifted); ``--warm`` sends first, then ``--sends`` sends timed one by one
(p50 of the whole call) and, in a second loop of the same size, under cProfile.
The profile's functions are summed into phases by the module they live in
(own time, so nothing is counted twice), as microseconds per send.

python -m bench.profile_send --sends 5000            # the phase table
python -m bench.profile_send --sends 5000 --top 40   # and the top functions
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import tempfile
import time
from pathlib import Path

from bench.core import count, whole
from bench.peers.broker_queue import warmed_sender

# Own time summed by where the function lives, first match wins.
PHASES: list[tuple[str, tuple[str, ...]]] = [
    (
        "sqlite3 execute/fetch/commit (C)",
        (
            "sqlite3.Connection",
            "sqlite3.Cursor",
            "<method 'execute'",
            "<method 'fetchone'",
            "<method 'fetchall'",
            "<method 'commit'",
            "<method 'executemany'",
        ),
    ),
    ("input check (model/)", ("broker/model/",)),
    ("operation dispatch (api/)", ("broker/api/",)),
    ("grant gate + caller check (spaces/)", ("broker/spaces/",)),
    ("send transaction (mail/)", ("broker/mail/",)),
    ("deliveries + wake (delivery/)", ("broker/delivery/",)),
    ("store: tx, lock, statements (store/)", ("broker/store/",)),
    ("ids, clock, rest of broker", ("broker/",)),
    ("sqlalchemy", ("sqlalchemy/",)),
    ("stdlib / interpreter", ("",)),
]


def _phase(where: str) -> str:
    for name, marks in PHASES:
        if any(m in where for m in marks):
            return name
    return PHASES[-1][0]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.profile_send", description=__doc__)
    p.add_argument("--sends", type=count, default=5000)
    p.add_argument("--warm", type=whole, default=300)
    p.add_argument("--top", type=whole, default=0, help="also print the top N functions (own time)")
    p.add_argument("--dump", type=Path, default=None, help="write the raw profile here")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="profile-send-") as d:
        store, sender = warmed_sender(Path(d), a.warm)
        lat = []
        for i in range(a.sends):
            t0 = time.perf_counter_ns()
            sender.send("worker", f"timed {i:06d} " + "x" * 50)
            lat.append(time.perf_counter_ns() - t0)
        prof = cProfile.Profile()
        prof.enable()
        for i in range(a.sends):
            sender.send("worker", f"profiled {i:06d} " + "x" * 50)
        prof.disable()
        store.close()
    stats = pstats.Stats(prof)
    if a.dump:
        stats.dump_stats(str(a.dump))
    phases: dict[str, float] = {}
    rows = []
    total = 0.0
    for (file, line, fn), (_cc, _nc, tt, _ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        where = f"{file}:{line}({fn})"
        phases[_phase(where)] = phases.get(_phase(where), 0.0) + tt
        rows.append((tt, where))
        total += tt
    per = 1e6 / a.sends
    lat.sort()
    print(
        f"{a.sends} sends, p50 {statistics.median(lat) / 1000:.1f} µs, "
        f"p25 {lat[len(lat) // 4] / 1000:.1f} µs (unprofiled)"
    )
    print(f"profiled: {total * per:.1f} µs per send (cProfile inflates Python calls)")
    print("| phase | µs per send (profiled, own time) | share |")
    print("|---|---|---|")
    for name, _ in PHASES:
        if name in phases:
            print(f"| {name} | {phases[name] * per:.1f} | {phases[name] / total:.0%} |")
    if a.top:
        print()
        for tt, where in sorted(rows, reverse=True)[: a.top]:
            print(f"{tt * per:8.2f} µs  {where}")


if __name__ == "__main__":
    main()
