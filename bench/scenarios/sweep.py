"""1 / 2 / 4 / 8 / 16 processes claiming + acking one shared inbox.

All processes act as the same participant (one inbox, the hardest case: every
claim competes for the same index range), start together after a barrier and
claim + ack one message at a time until the inbox is empty. Every message must
be acked exactly once: lost, duplicated and errors (any exception reaching the
caller, ``database is locked`` counted apart) are reported per point.
"""

from __future__ import annotations

import os
import time
from typing import Any

from bench.core import (
    BROKER,
    BROKER_NOLOCK,
    BROKER_PG,
    RAW_PG,
    RAW_SAME,
    Ctx,
    Row,
    Scenario,
    accounting,
    body,
    pct,
    run_workers,
)
from bench.peers import factories

# The broker on PostgreSQL and raw psycopg with its statements join the sweep
# when a server is named (BENCH_PG_URL), as in the queue scenarios.
SYSTEMS = (BROKER, RAW_SAME) + ((BROKER_PG, RAW_PG) if os.environ.get("BENCH_PG_URL") else ())

MAX_CONSECUTIVE_ERRORS = 200


def _worker(barrier: Any, q: Any, system: str) -> dict[str, Any]:
    if system in (RAW_SAME, RAW_PG):
        q.after_fork()
    got: list[str] = []
    lat: list[int] = []
    errors = locked = streak = 0
    first_error = None
    barrier.wait()
    t0 = time.monotonic_ns()
    while True:
        s = time.perf_counter_ns()
        try:
            bodies = q.claim_ack()
        except Exception as exc:  # noqa: BLE001 - every error reaching a caller is counted
            errors += 1
            streak += 1
            text = str(exc).lower()
            if "locked" in text or "busy" in text:
                locked += 1
            first_error = first_error or f"{type(exc).__name__}: {exc}"
            if streak >= MAX_CONSECUTIVE_ERRORS:
                break
            continue
        streak = 0
        if not bodies:
            break
        lat.append(time.perf_counter_ns() - s)
        got += bodies
    t1 = time.monotonic_ns()
    return {
        "got": got,
        "lat": lat,
        "errors": errors,
        "locked": locked,
        "first_error": first_error,
        "t0": t0,
        "t1": t1,
    }


def sweep(ctx: Ctx) -> Scenario:
    n = ctx.sizes.sweep_messages
    sc = Scenario(
        "sweep",
        "P processes claim + ack one shared inbox (aggregate)",
        unit="msg/s",
        x_label="processes",
    )
    sc.params = {"messages_per_point": n, "processes": list(ctx.sizes.procs), "inboxes": 1}
    texts = [body(i) for i in range(n)]
    # Full runs add the broker with its writer lock off: what the lock costs
    # in rate here, where every process writes all the time.
    systems = SYSTEMS + (() if ctx.quick else (BROKER_NOLOCK,))
    for procs in ctx.sizes.procs:
        for system in systems:
            folder = ctx.scratch(f"sweep-{system}-{procs}")
            q: Any = factories([system])[system](folder)
            try:
                q.preload(texts)
                res = run_workers(_worker, [(q, system)] * procs, timeout=300)
            finally:
                q.close()
            failed = [r["error"] for r in res if "error" in r]
            if failed:
                sc.add(Row(system, status="error", reason=failed[0], point=procs))
                if system == BROKER:
                    sc.status, sc.error = "error", failed[0]
                continue
            got = [b for r in res for b in r["got"]]
            lat = [v for r in res for v in r["lat"]]
            span = (max(r["t1"] for r in res) - min(r["t0"] for r in res)) / 1e9
            counts = accounting(texts, got)
            errors = sum(r["errors"] for r in res)
            locked = sum(r["locked"] for r in res)
            stats: dict[str, Any] = {
                "p50_us": round(pct([v / 1000 for v in lat], 50), 1),
                "p99_us": round(pct([v / 1000 for v in lat], 99), 1),
                "errors": errors,
                "locked_errors": locked,
                **counts,
                "first_error": next((r["first_error"] for r in res if r["first_error"]), None),
                "per_process": [len(r["got"]) for r in res],
            }
            sc.add(Row(system, len(got) / span, "msg/s", point=procs, how=q.how, stats=stats))
            sc.counts[f"{system}@{procs}"] = counts
            ctx.log(
                f"  sweep {system} x{procs}: {len(got) / span:,.0f} msg/s, "
                f"p99 {stats['p99_us']:,.0f} us, errors {errors}, lost {counts['lost']}, "
                f"dup {counts['duplicates']}"
            )
    ps = ctx.sizes.procs
    lo, hi = min(ps), max(ps)
    for p in ps:
        sc.ratio(BROKER, RAW_SAME, point=p)
        if BROKER_NOLOCK in systems:
            sc.ratio(BROKER, BROKER_NOLOCK, point=p)
        if RAW_PG in SYSTEMS:
            sc.ratio(BROKER_PG, RAW_PG, point=p)
    r = sc.ratio(BROKER, BROKER, num_point=hi, den_point=lo, label=f"broker x{hi} / broker x{lo}")
    raw = sc.ratio(RAW_SAME, RAW_SAME, num_point=hi, den_point=lo, label=f"raw x{hi} / raw x{lo}")
    sc.target(f"{hi} processes: aggregate >= 0.9x one process", r, ">=", 0.9, statements=raw)
    b = [row for row in sc.rows if row.system == BROKER and row.status == "ok"]
    if b:
        sc.target("sweep: 0 lost", float(sum(row.stats["lost"] for row in b)), "==", 0.0)
        sc.target(
            "sweep: 0 duplicated (no lease expires in this run)",
            float(sum(row.stats["duplicates"] for row in b)),
            "==",
            0.0,
        )
        sc.target(
            "sweep: 0 'database is locked' errors reaching a caller",
            float(sum(row.stats["locked_errors"] for row in b)),
            "==",
            0.0,
        )
    return sc
