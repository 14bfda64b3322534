"""``python -m bench``: run scenarios side by side, write JSON + markdown + PNG.

python -m bench --quick --out /tmp/bench          # CI: every scenario, small sizes
python -m bench                                   # the full run, into bench/out/ (~5-15 min)
python -m bench send claim_ack --messages 20000   # some scenarios, other sizes
python -m bench --list
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import report
from bench.core import Ctx, Sizes, count, counts, machine_info, seconds, versions
from bench.peers.redis_streams import DEFAULT_URL, server_info
from bench.scenarios import SCENARIOS, run


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmark the broker against raw sqlite3 and its peers, side by side.",
    )
    p.add_argument("scenarios", nargs="*", metavar="SCENARIO", help="names to run (default: all)")
    p.add_argument("--list", action="store_true", help="list scenario names and exit")
    p.add_argument("--quick", action="store_true", help="small sizes: the CI run (seconds)")
    p.add_argument(
        "--out",
        type=Path,
        default=Path("bench/out"),
        help="folder for the results (default bench/out)",
    )
    p.add_argument("--work", type=Path, help="scratch folder (default: a temp folder, removed)")
    p.add_argument("--keep-work", action="store_true", help="keep the scratch databases")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--redis-url", default=os.environ.get("BENCH_REDIS_URL", DEFAULT_URL))
    g = p.add_argument_group("sizes (defaults: the full run; --quick shrinks them)")
    g.add_argument("--messages", type=count, help="operations per system (send, claim+ack)")
    g.add_argument("--backlog", type=count, help="ready messages before claim+ack starts")
    g.add_argument("--batch", type=count, help="messages per batch")
    g.add_argument("--batches", type=count, help="batches per system")
    g.add_argument("--turns", type=count, help="turns in the turn scenario")
    g.add_argument("--fanout", type=counts, help="participants per broadcast, e.g. 10,100,1000")
    g.add_argument("--procs", type=counts, help="process counts of the sweep, e.g. 1,2,4,8,16")
    g.add_argument("--sweep-messages", type=count, help="messages per sweep point")
    g.add_argument("--board-seconds", type=seconds, help="seconds of board contention")
    g.add_argument("--wake-messages", type=count, help="messages timed for wake latency")
    g.add_argument("--idle-waiters", type=count, help="idle waiters for the CPU measurement")
    g.add_argument("--idle-seconds", type=seconds, help="seconds the idle waiters are measured")
    g.add_argument("--backlogs", type=counts, help="claim latency backlogs, e.g. 1000,100000")
    g.add_argument("--backlog-claims", type=count, help="claims timed at each backlog")
    g.add_argument("--cli-runs", type=count, help="process runs per CLI command")
    g.add_argument("--swarm-procs", type=counts, help="agent processes of the swarm, e.g. 8,32,64")
    g.add_argument("--swarm-messages", type=count, help="messages per swarm point (all agents)")
    g.add_argument(
        "--swarm-rounds",
        type=count,
        help="runs of each swarm point, systems alternated (ratios: the median of the rounds')",
    )
    g.add_argument("--search-messages", type=count, help="messages in the searched space")
    g.add_argument("--search-rounds", type=count, help="rounds of the search query mix")
    return p.parse_args(argv)


def sizes_of(args: argparse.Namespace) -> Sizes:
    sizes = Sizes.quick() if args.quick else Sizes()
    for name in asdict(sizes):
        value = getattr(args, name, None)
        if value is not None:
            setattr(sizes, name, value)
    return sizes


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.list:
        for name, (_, _, title) in SCENARIOS.items():
            print(f"{name:16} {title}")
        return 0
    unknown = [s for s in args.scenarios if s not in SCENARIOS]
    if unknown:
        print(f"unknown scenario(s): {', '.join(unknown)}; see --list", file=sys.stderr)
        return 2
    names = args.scenarios or list(SCENARIOS)
    os.environ["BENCH_REDIS_URL"] = args.redis_url
    sizes = sizes_of(args)

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    work = args.work or Path(tempfile.mkdtemp(prefix="broker-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    # A store with no file of its own (PostgreSQL) keeps its operator key in
    # BROKER_HOME: the bench's go to its scratch folder, never to the user's.
    os.environ["BROKER_HOME"] = str(work / "home")

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    ctx = Ctx(sizes=sizes, work=work, quick=args.quick, redis_url=args.redis_url, log=log)
    argv_used = sys.argv[1:] if argv is None else argv
    results: dict[str, Any] = {
        "schema": 1,
        "command": "python -m bench " + shlex.join(argv_used),
        "quick": args.quick,
        "started_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {**machine_info(), "work_fs": _fs_type(work)},
        "versions": versions(),
        "redis": server_info(args.redis_url),
        "settings": {
            "synchronous": os.environ.get("BROKER_SYNCHRONOUS", "NORMAL").upper(),
            "journal_mode": "WAL",
        },
        "sizes": asdict(sizes),
        "scenarios": {},
    }
    start = time.perf_counter()
    try:
        for name in names:
            log(f"[{time.perf_counter() - start:6.1f}s] {name}")
            sc = run(name, ctx)
            results["scenarios"][name] = sc.to_json()
            if sc.status != "ok":
                log(f"  {name}: {sc.status}: {sc.error}")
    finally:
        if not args.keep_work and args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    results["duration_s"] = round(time.perf_counter() - start, 1)
    results["machine"]["load_avg_end"] = list(os.getloadavg())

    (out / "results.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    md = report.markdown(results)
    (out / "report.md").write_text(md)
    if not args.no_plots:
        try:
            report.plots(results, out)
        except ImportError as exc:
            log(f"no plots: {exc}")
    print(md)
    log(f"wrote {out / 'results.json'}, {out / 'report.md'} in {results['duration_s']} s")
    failed = [n for n, s in results["scenarios"].items() if s["status"] == "error"]
    return 1 if failed else 0


def _fs_type(path: Path) -> str:
    best, fs = "", "?"
    try:
        real = str(path.resolve())
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                mnt = parts[1]
                if real.startswith(mnt) and len(mnt) > len(best):
                    best, fs = mnt, parts[2]
    except OSError:
        pass
    return fs


if __name__ == "__main__":
    sys.exit(main())
