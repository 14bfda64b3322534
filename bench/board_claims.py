"""Board key claims under contention: claim + release throughput (S22).

    python bench/board_claims.py --seconds 2 --out board_claims.json

For 1 and 8 processes (``--procs``), each joined as its own participant, every
process loops ``claim(key) -> release(key, token)`` for ``--seconds`` after a
common barrier, on the same key (``same``: all contend for one key, most
claims are refused with ``ClaimHeld``) and on distinct keys (``distinct``:
contention only for the write lock). Reported per point:

- ``pairs_per_s``: successful claim + release pairs per second, all processes;
- ``refused_per_s``: claims refused because another process held the key;
- ``write_tx_per_s``: write transactions per second (2 per pair, 1 per refusal);
- ``errors``: anything other than ``ClaimHeld`` (must be 0: no ``database is
  locked`` reaches a caller).

Every operation is one write transaction (BEGIN IMMEDIATE) with the store's
default durability (WAL, synchronous=NORMAL). Prints a table, writes JSON.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# A standalone script (``python bench/NAME.py``): the project's root on the path
# for the bench's own helpers.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.core import counts, seconds
from broker import Agent, Operator, Store, errors

FORK = mp.get_context("fork")


def _worker(
    url: str,
    space: str,
    address: str,
    token: str,
    key: str,
    seconds: float,
    barrier: Any,
    out: Any,
) -> None:
    store = Store(url)
    me = Agent.connect(store, space, address, token)
    pairs = refused = 0
    bad: list[str] = []
    barrier.wait()
    start = time.perf_counter()
    end = start + seconds
    while time.perf_counter() < end:
        try:
            grant = me.claim_key(key, 30.0)
        except errors.ClaimHeld:
            refused += 1
            continue
        except errors.BrokerError as exc:
            bad.append(repr(exc))
            continue
        try:
            me.release_key(key, grant.fence)
            pairs += 1
        except errors.BrokerError as exc:
            bad.append(repr(exc))
    elapsed = time.perf_counter() - start
    out.put(
        {"pairs": pairs, "refused": refused, "errors": bad[:5], "n_errors": len(bad), "s": elapsed}
    )
    store.close()


def measure(workdir: Path, procs: int, keys: str, seconds: float) -> dict[str, Any]:
    """One point: ``procs`` processes on the ``same`` key or ``distinct`` keys."""
    url = f"sqlite:///{workdir / f'board-{procs}-{keys}.db'}"
    store = Store(url)
    try:
        space = Operator(store).create_space("workflow").id
        joined = [Operator(store).join(space, f"p{i}")[1] for i in range(procs)]
    finally:
        store.close()
    barrier, out = FORK.Barrier(procs), FORK.Queue()
    workers = [
        FORK.Process(
            target=_worker,
            args=(
                url,
                space,
                j.address,
                j.token,
                "hot" if keys == "same" else f"key-{i}",
                seconds,
                barrier,
                out,
            ),
        )
        for i, j in enumerate(joined)
    ]
    for w in workers:
        w.start()
    reports = [out.get(timeout=seconds + 120) for _ in workers]
    for w in workers:
        w.join(timeout=30)
    wall = max(r["s"] for r in reports)
    pairs = sum(r["pairs"] for r in reports)
    refused = sum(r["refused"] for r in reports)
    return {
        "procs": procs,
        "keys": keys,
        "seconds": round(wall, 3),
        "pairs": pairs,
        "refused": refused,
        "pairs_per_s": round(pairs / wall, 1),
        "refused_per_s": round(refused / wall, 1),
        "write_tx_per_s": round((2 * pairs + refused) / wall, 1),
        "errors": sum(r["n_errors"] for r in reports),
        "error_samples": [e for r in reports for e in r["errors"]][:5],
        "per_process_pairs": [r["pairs"] for r in reports],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--seconds", type=seconds, default=2.0, help="measured seconds per point")
    p.add_argument("--procs", type=counts, default=(1, 8), help="process counts, e.g. 1,8")
    p.add_argument("--out", type=Path, help="write the results here as JSON")
    args = p.parse_args(argv)
    procs = list(args.procs)
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-board-") as tmp:
        for n in procs:
            for keys in ("same", "distinct"):
                if n == 1 and keys == "distinct":
                    continue  # one process: same and distinct are the same thing
                results.append(measure(Path(tmp), n, keys, args.seconds))
    header = f"{'procs':>5}  {'keys':<8}  {'pairs/s':>9}  {'refused/s':>9}  {'write tx/s':>10}  {'errors':>6}"
    print(header)
    for r in results:
        print(
            f"{r['procs']:>5}  {r['keys']:<8}  {r['pairs_per_s']:>9,.0f}  {r['refused_per_s']:>9,.0f}  "
            f"{r['write_tx_per_s']:>10,.0f}  {r['errors']:>6}"
        )
    one = next((r for r in results if r["procs"] == 1), None)
    if one:
        for r in results:
            if r is not one:
                print(
                    f"{r['procs']} procs {r['keys']} keys: {r['pairs_per_s'] / one['pairs_per_s']:.2f}x "
                    "the 1-process pair rate"
                )
    doc = {
        "benchmark": "board_claims",
        "what": "claim + release of a board key, one write transaction each",
        "seconds": args.seconds,
        "machine": {
            "python": sys.version.split()[0],
            "sqlite": sqlite3.sqlite_version,
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
        },
        "results": results,
    }
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"wrote {args.out}")
    return 1 if any(r["errors"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
