"""Shared pieces of the harness: sizes, timing, statistics, result records.

A scenario returns a ``Scenario``: one row per (system, point) with its value,
the ratios of the broker to each baseline, and the spec §Targets targets it
checks. Rows of a system that cannot run here (Redis not reachable, a package
missing) are kept with ``status = "skipped"`` and the reason, never dropped.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import math
import os
import platform
import socket
import sqlite3
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# Systems, in the order the report lists them.
BROKER = "broker"
BROKER_NOLOCK = "broker_nolock"
RAW_SAME = "raw_same"
RAW_FLOOR = "raw_floor"
FILE_MAILBOX = "file_mailbox"
PERSIST_QUEUE = "persist_queue"
LITEQUEUE = "litequeue"
REDIS = "redis"
BROKER_PG = "broker_pg"
RAW_PG = "raw_pg"
PGQUEUER = "pgqueuer"
SYSTEM_TITLES = {
    BROKER: "broker",
    BROKER_NOLOCK: "broker, writer lock off (BROKER_WRITER_LOCK=off)",
    RAW_SAME: "raw sqlite3, same statements",
    RAW_FLOOR: "raw sqlite3, one statement per tx",
    FILE_MAILBOX: "file mailbox (mailbox protocol)",
    PERSIST_QUEUE: "persist-queue SQLiteAckQueue",
    LITEQUEUE: "litequeue",
    REDIS: "Redis Streams",
    BROKER_PG: "broker on PostgreSQL",
    RAW_PG: "raw psycopg, same statements (PostgreSQL)",
    PGQUEUER: "pgqueuer (PostgreSQL)",
}


@dataclass
class Sizes:
    """How much work each scenario does. ``--quick`` shrinks every one."""

    messages: int = 5000  # single send / claim+ack: operations per system
    backlog: int = 5000  # ready messages before claim+ack starts
    batch: int = 100  # messages per batch
    batches: int = 50  # batches per system
    turns: int = 1000
    fanout: tuple[int, ...] = (10, 100, 1000)
    board_procs: int = 4
    board_keys: int = 4
    board_seconds: float = 3.0
    procs: tuple[int, ...] = (1, 2, 4, 8, 16)
    sweep_messages: int = 10000
    wake_messages: int = 1000
    idle_waiters: int = 100
    idle_seconds: float = 10.0
    backlogs: tuple[int, ...] = (1000, 100_000, 1_000_000)
    backlog_claims: int = 1000
    cli_runs: int = 20
    swarm_procs: tuple[int, ...] = (8, 32, 64)
    swarm_messages: int = 12000  # per point, shared by the P agents
    # Runs of each swarm point, the systems' order reversed every other round: a
    # run on a noisy machine moves 10-20 %, a paired ratio's median far less.
    swarm_rounds: int = 1
    search_messages: int = 100_000  # messages in the searched space
    search_rounds: int = 25  # times the query mix is run per system

    @classmethod
    def quick(cls) -> Sizes:
        # The CI run (tests/project/test_bench_quick.py): every scenario, every system and
        # every accounting check, at the smallest sizes that still mean something
        # (a FIFO deeper than the claims, two points per curve, processes racing).
        # The swarm runs one point, two agents racing: each point starts every
        # system's agents and server afresh, and P=4 was two thirds of the
        # scenario's time (and the swarm a third of the run's).
        return cls(
            messages=150,
            backlog=500,
            batch=50,
            batches=3,
            turns=50,
            fanout=(10, 50, 100),
            board_procs=4,
            board_keys=4,
            board_seconds=0.3,
            procs=(1, 4),
            sweep_messages=400,
            wake_messages=50,
            idle_waiters=50,
            idle_seconds=0.5,
            backlogs=(500, 2000, 5000),
            backlog_claims=100,
            cli_runs=3,
            swarm_procs=(2,),
            swarm_messages=200,
            search_messages=1000,
            search_rounds=2,
        )


@dataclass
class Ctx:
    """What every scenario gets: sizes, a scratch folder, and run options."""

    sizes: Sizes
    work: Path
    quick: bool
    redis_url: str
    log: Callable[[str], None]

    def scratch(self, name: str) -> Path:
        """A fresh folder for one system of one scenario (same filesystem for all)."""
        path = self.work / name
        n = 1
        while path.exists():
            n += 1
            path = self.work / f"{name}.{n}"
        path.mkdir(parents=True, mode=0o700)
        return path


@dataclass
class Row:
    """One measured value: a system at a point (e.g. 16 processes)."""

    system: str
    value: float | None = None
    unit: str = "ops/s"
    point: float | None = None  # x of a sweep (participants, processes, backlog)
    status: str = "ok"  # ok | skipped | error
    reason: str | None = None
    how: str | None = None
    stats: dict[str, Any] = field(default_factory=dict)


def holds(value: float | None, op: str, threshold: float) -> bool | None:
    """``value op threshold``; None when the value could not be measured here."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if op == ">=":
        return value >= threshold
    if op == "<=":
        return value <= threshold
    return value == threshold


@dataclass
class Target:
    """A spec §Targets target checked by a ratio or a bound in this run.

    ``statements`` is the same measure taken of the broker's own statements run
    raw, with no library (``raw_same``; ``raw_same_flock`` in the swarm, under
    the same writer lock as the minimal queue), in the same run, where the target has
    one: what the library could reach at best. A target the statements miss too
    is out of reach of the library; its distance is the statements' (bench
    README, "Where the broker stands")."""

    text: str
    value: float | None
    op: str  # ">=" or "<=" or "=="
    threshold: float
    statements: float | None = None
    met: bool | None = None  # None: could not be measured here
    statements_met: bool | None = None

    def __post_init__(self) -> None:
        self.met = holds(self.value, self.op, self.threshold)
        self.statements_met = holds(self.statements, self.op, self.threshold)


@dataclass
class Scenario:
    name: str
    title: str
    unit: str
    higher_is_better: bool = True
    x_label: str | None = None  # set for sweeps
    params: dict[str, Any] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)
    ratios: list[dict[str, Any]] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    counts: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    status: str = "ok"
    error: str | None = None
    seconds: float = 0.0

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        return row

    def get(self, system: str, point: float | None = None) -> Row | None:
        for r in self.rows:
            if r.system == system and r.point == point and r.status == "ok":
                return r
        return None

    def value(self, system: str, point: float | None = None) -> float | None:
        row = self.get(system, point)
        return row.value if row is not None else None

    def ratio_value(
        self, num: str, den: str, num_point: float | None = None, den_point: float | None = None
    ) -> float | None:
        a, b = self.value(num, num_point), self.value(den, den_point)
        return a / b if a is not None and b else None

    def ratio(
        self,
        num: str,
        den: str,
        *,
        point: float | None = None,
        num_point: float | None = None,
        den_point: float | None = None,
        label: str | None = None,
    ) -> float | None:
        """Record and return value(num) / value(den), both from this run."""
        np_ = num_point if num_point is not None else point
        dp = den_point if den_point is not None else point
        value = self.ratio_value(num, den, np_, dp)
        self.ratios.append(
            {
                "label": label or f"{num} / {den}",
                "num": num,
                "den": den,
                "num_point": np_,
                "den_point": dp,
                "value": value,
            }
        )
        return value

    def target(
        self,
        text: str,
        value: float | None,
        op: str,
        threshold: float,
        *,
        statements: float | None = None,
    ) -> Target:
        t = Target(text, value, op, threshold, statements)
        self.targets.append(t)
        return t

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["rows"] = [asdict(r) for r in self.rows]
        out["targets"] = [asdict(t) for t in self.targets]
        return out


# --- timing and statistics ---------------------------------------------------------
now_ns = time.perf_counter_ns


# --- command-line numbers (every bench command's sizes) ---------------------------------
def _whole(text: str, least: int) -> int:
    try:
        value = int(text.strip().replace("_", ""))
    except ValueError:
        value = least - 1
    if value < least:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from {least} up")
    return value


def count(text: str) -> int:
    """An argparse type: a whole number from 1 up (messages, sends, steps, processes)."""
    return _whole(text, 1)


def whole(text: str) -> int:
    """An argparse type: a whole number from 0 up (a warm-up, which may be none)."""
    return _whole(text, 0)


def counts(text: str) -> tuple[int, ...]:
    """An argparse type: counts separated by commas (``8,32,64``)."""
    got = tuple(count(x) for x in text.split(",") if x.strip())
    if not got:
        raise argparse.ArgumentTypeError(f"{text!r} names no count (e.g. 8,32,64)")
    return got


def seconds(text: str) -> float:
    """An argparse type: a number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0")
    return value


def pct(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100), linear between the closest ranks."""
    if not values:
        return float("nan")
    s = sorted(values)
    if len(s) == 1:
        return float(s[0])
    k = (len(s) - 1) * q / 100.0
    lo = math.floor(k)
    hi = min(lo + 1, len(s) - 1)
    return float(s[lo] + (s[hi] - s[lo]) * (k - lo))


def latency_stats(ns: Sequence[int | float], prefix: str = "") -> dict[str, float]:
    """p50/p99/p999/max in microseconds of per-operation latencies in ns."""
    us = [v / 1000.0 for v in ns]
    return {
        f"{prefix}p50_us": round(pct(us, 50), 2),
        f"{prefix}p99_us": round(pct(us, 99), 2),
        f"{prefix}p999_us": round(pct(us, 99.9), 2),
        f"{prefix}max_us": round(max(us), 2) if us else float("nan"),
        f"{prefix}n": len(us),
    }


def timed_loop(op: Callable[[], object], n: int) -> tuple[float, list[int]]:
    """Run ``op`` n times; (ops per second, per-op latencies in ns)."""
    lat: list[int] = []
    start = now_ns()
    for _ in range(n):
        t0 = now_ns()
        op()
        lat.append(now_ns() - t0)
    total = now_ns() - start
    return n / (total / 1e9), lat


def proc_cpu_seconds(pid: int) -> float:
    """CPU time of a process, all its threads, from /proc (psutil-free).

    ``/proc/PID/stat`` utime + stime (clock ticks, 10 ms) counts every thread
    the process ever ran, exited ones included; summing the live threads'
    ``schedstat`` instead went negative when a thread (Redis' background ones)
    exited inside the window."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()  # the name may hold spaces
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def server_cpu_seconds(pid: int) -> float:
    """User + system CPU of ``pid`` and its live children (the workers), in seconds."""
    return _summed(pid, proc_cpu_seconds)


def server_rss_kib(pid: int) -> int:
    """Resident memory of ``pid`` and its live children (the workers), in KiB."""
    return int(_summed(pid, _rss_kib))


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next((int(line.split()[1]) for line in f if line.startswith("VmRSS:")), 0)


def _summed(pid: int, read: Callable[[int], float]) -> float:
    """``read(p)`` summed over ``pid`` and its live descendants (one gone counts 0)."""
    total = 0.0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            total += read(p)
        except OSError:
            continue  # gone
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                kids = Path(f"/proc/{p}/task/{task}/children").read_text().split()
                todo += [int(k) for k in kids]
        except OSError:
            pass
    return total


def accounting(expected: Iterable[str], acked: Sequence[str]) -> dict[str, int]:
    """lost / duplicates of a run that should ack every expected id exactly once."""
    exp = set(expected)
    seen = set(acked)
    return {
        "expected": len(exp),
        "acked": len(acked),
        "unique": len(seen),
        "lost": len(exp - seen),
        "duplicates": len(acked) - len(seen),
        "unexpected": len(seen - exp),
    }


# --- machine --------------------------------------------------------------------------
def machine_info() -> dict[str, Any]:
    cpu_model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_kb = 0
    try:
        with open("/proc/meminfo") as f:
            mem_kb = int(f.readline().split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return {
        "host": socket.gethostname(),
        "cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "cpu_model": cpu_model,
        "mem_gb": round(mem_kb / 1024 / 1024, 1),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "sqlite": sqlite3.sqlite_version,
        "load_avg": list(os.getloadavg()),
    }


def versions() -> dict[str, str | None]:
    from importlib import metadata

    import broker

    # The broker that ran is the imported package (a checkout need not be installed;
    # its distribution is "swarm-broker").
    out: dict[str, str | None] = {"broker": broker.__version__}
    for dist in ("persist-queue", "litequeue", "redis", "matplotlib", "sqlalchemy"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def body(i: int, size: int = 64) -> str:
    """A message body of about ``size`` bytes, the same for every system."""
    head = f"msg {i:08d} "
    return head + "x" * max(0, size - len(head))


# --- processes ------------------------------------------------------------------------
def run_workers(
    target: Callable[..., dict[str, Any]],
    args: list[tuple[Any, ...]],
    *,
    timeout: float = 600.0,
) -> list[dict[str, Any]]:
    """Fork one process per args tuple; each runs ``target(barrier, *args)``.

    The target does its setup (open its own store: no connection crosses a fork),
    waits on ``barrier`` (every worker and the parent), works, and returns a dict
    (an exception is returned as ``{"error": ...}``). Results are in args order."""
    import multiprocessing as mp
    import traceback

    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(len(args) + 1)
    queue = ctx.Queue()

    def wrap(i: int, a: tuple[Any, ...]) -> None:
        try:
            res = target(barrier, *a)
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            res = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
            with contextlib.suppress(Exception):
                barrier.abort()
        queue.put((i, res))

    procs = [ctx.Process(target=wrap, args=(i, a), daemon=True) for i, a in enumerate(args)]
    # The parent's objects frozen while it forks (Python's own advice for a
    # forking parent): a child's collections pass them over, where they would
    # walk them all and so copy every page of the parent's heap into each of P
    # processes. After a served run the parent held enough for that to halve
    # the next embedded swarm at P = 64 (3 of 3 such rounds at 1,000-1,050
    # msg/s and ~1.5 ms of CPU a message, against 1,600-1,700 and ~0.8).
    gc.collect()
    gc.freeze()
    try:
        for p in procs:
            p.start()
    finally:
        gc.unfreeze()
    results: dict[int, dict[str, Any]] = {}
    with contextlib.suppress(Exception):  # a worker failed in setup: collect what came back
        barrier.wait(timeout)
    deadline = time.monotonic() + timeout
    while len(results) < len(procs):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            i, res = queue.get(timeout=min(left, 1.0))
        except Exception:  # noqa: BLE001 - queue.Empty: check for dead workers
            if not any(p.is_alive() for p in procs) and queue.empty():
                break
            continue
        results[i] = res
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
            p.join()
    return [results.get(i, {"error": "worker did not report"}) for i in range(len(args))]
