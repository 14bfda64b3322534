"""``python -m bench.swarm_step``: one swarm step, call by call, on three systems.

The swarm (``bench.scenarios.swarm``) compares P processes; its ratio is set
by what one step of an agent's loop costs, and by what sharing the file with
other processes adds. This times that step in one process, with no lock
contention, as the median over ``--steps`` steps after ``--warm``:

- a send (a0 to a1), the receiver's claim of it (up to 32), its ack, and a
  claim of the now empty inbox;
- on the broker (the public ``Agent`` API), on ``raw_same`` (the broker's own
  statements with no library, ``bench.peers.raw_same_swarm.SameAgent``) and on
  the minimal queue (``bench.peers.mini_queue``: one INSERT, one
  ``UPDATE ... RETURNING``, one UPDATE);
- with both agents on one connection (``one``: every page a transaction
  reads is still in the connection's cache) and on a connection each
  (``two``: each call follows the other connection's commit, so SQLite has
  dropped its page cache and reads every page again: what every transaction
  of a swarm of processes pays).

The per-message sum of ``two`` is the swarm's floor per system on one core;
the ratios of those sums are the swarm's ratios before contention.

python -m bench.swarm_step --steps 3000
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

CALLS = ("send", "claim", "ack", "empty claim")
SYSTEMS = ("broker", "raw_same", "minimal queue")
LAYOUTS = ("one", "two")
DRAIN = 32
TEXT = "x" * 64

Step = dict[str, Callable[[], Any]]


def _step(send: Callable[[], Any], claim: Callable[[], Any], ack: Callable[[Any], Any]) -> Step:
    """The four calls from a system's send, claim (its lease, falsy when it
    found nothing) and ack (of that lease): a claim must find the mail, the
    empty claim nothing, or the run stops instead of timing the wrong work."""
    held: list[Any] = []

    def claimed() -> None:
        lease = claim()
        assert lease, "the claim found no mail"
        held.append(lease)

    def empty() -> None:
        assert not claim(), "the empty inbox had mail"

    return {"send": send, "claim": claimed, "ack": lambda: ack(held.pop()), "empty claim": empty}


def _broker(folder: Path, layout: str) -> tuple[Step, Callable[[], None]]:
    from bench.peers.broker_queue import join_agent, open_space, store_settings
    from broker import Agent, Store

    store, space = open_space(folder)
    joined = [join_agent(store, space, f"a{i}") for i in range(2)]
    other = store if layout == "one" else Store(settings=store_settings(folder))
    a0 = Agent.connect(store, space, joined[0].address, joined[0].token)
    a1 = Agent.connect(other, space, joined[1].address, joined[1].token)
    to = joined[1].address

    def close() -> None:
        store.close()
        other.close()

    def claim() -> str | None:
        lease = a1.claim(limit=DRAIN)
        return lease.lease_token if lease.deliveries else None

    return _step(lambda: a0.send(to, TEXT), claim, a1.ack), close


def _raw_same(folder: Path, layout: str) -> tuple[Step, Callable[[], None]]:
    from bench.peers.broker_queue import join_agent, open_space
    from bench.peers.raw_same_swarm import SameAgent

    store, space = open_space(folder)
    joined = [join_agent(store, space, f"a{i}") for i in range(2)]
    addresses = [j.address for j in joined]
    s0, s1 = (SameAgent(store, space, j, addresses) for j in joined)
    if layout == "one":
        s1.conn.close()
        s1.conn = s0.conn

    def close() -> None:
        s0.close()
        if layout == "two":
            s1.close()
        store.close()

    def claim() -> str | None:
        token, bodies = s1.claim(DRAIN, 0.0)
        return token if bodies else None

    return _step(lambda: s0.send(1, TEXT), claim, s1.ack), close


def _minimal(folder: Path, layout: str) -> tuple[Step, Callable[[], None]]:
    from bench.peers import mini_queue

    path = folder / "mini.db"
    mini_queue.create(path)
    q0 = mini_queue.MiniQueue(path, lock=True)
    q1 = q0 if layout == "one" else mini_queue.MiniQueue(path, lock=True)

    def close() -> None:
        q0.close()
        if q1 is not q0:
            q1.close()

    return _step(
        lambda: q0.send(1, TEXT), lambda: [r[0] for r in q1.claim(1, DRAIN)], q1.ack
    ), close


_MAKERS = {"broker": _broker, "raw_same": _raw_same, "minimal queue": _minimal}


def measure(folder: Path, system: str, layout: str, *, steps: int, warm: int) -> dict[str, float]:
    """Median µs of each call of the step (``CALLS``) on ``system`` laid out as
    ``layout``, in a fresh store under ``folder``."""
    where = folder / f"{system.replace(' ', '_')}-{layout}"
    where.mkdir(parents=True)
    step, close = _MAKERS[system](where, layout)
    times: dict[str, list[int]] = {name: [] for name in CALLS}
    clock = time.perf_counter_ns
    try:
        for n in range(warm + steps):
            for name in CALLS:
                t0 = clock()
                step[name]()
                if n >= warm:
                    times[name].append(clock() - t0)
    finally:
        close()
    return {name: statistics.median(ns) / 1000 for name, ns in times.items()}


def run(steps: int, warm: int) -> dict[tuple[str, str], dict[str, float]]:
    with tempfile.TemporaryDirectory(prefix="bench-step-") as tmp:
        return {
            (system, layout): measure(Path(tmp), system, layout, steps=steps, warm=warm)
            for system in SYSTEMS
            for layout in LAYOUTS
        }


def report(got: dict[tuple[str, str], dict[str, float]]) -> str:
    lines = [
        "| system | connections | " + " | ".join(CALLS) + " | a message (sum) |",
        "|---|---|" + "---|" * (len(CALLS) + 1),
    ]
    for (system, layout), calls in got.items():
        cells = " | ".join(f"{calls[c]:.1f}" for c in CALLS)
        lines.append(f"| {system} | {layout} | {cells} | {sum(calls.values()):.1f} |")
    two = {system: sum(got[(system, "two")].values()) for system in SYSTEMS}
    lines += [
        "",
        "µs, median of each call; `two`: each call after the other connection's commit.",
        f"a message on a connection each: raw_same ÷ minimal queue "
        f"{two['minimal queue'] / two['raw_same']:.2f} (as a rate), broker ÷ raw_same "
        f"{two['raw_same'] / two['broker']:.2f}, broker ÷ minimal queue "
        f"{two['minimal queue'] / two['broker']:.2f}",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.swarm_step",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--steps", type=count, default=3000)
    parser.add_argument("--warm", type=whole, default=200)
    args = parser.parse_args()
    print(report(run(args.steps, args.warm)))


if __name__ == "__main__":
    main()
