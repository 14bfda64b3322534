"""Claim latency as the backlog grows: 1k / 100k / 1M ready messages in one inbox.

Each backlog is written in bulk (the rows direct sends write, FIFO order) into
a fresh broker database; then the broker (``claim(limit=1)`` + ``ack``) and
raw sqlite3 running the broker's statements take turns on that same database,
in chunks of 50, so both see the same backlog, cache and file. The value is
the median latency of the claim call; its ack is reported apart.
"""

from __future__ import annotations

from typing import Any

from bench.core import BROKER, RAW_SAME, Ctx, Row, Scenario, body, latency_stats, now_ns
from bench.peers.broker_queue import BrokerQueue
from bench.peers.raw_sqlite import RawSame

CHUNK = 50


def backlog(ctx: Ctx) -> Scenario:
    sizes, claims = ctx.sizes.backlogs, ctx.sizes.backlog_claims
    sc = Scenario(
        "backlog",
        "claim latency (p50) as the backlog grows",
        unit="claim p50 µs",
        higher_is_better=False,
        x_label="backlog",
    )
    sc.params = {"backlogs": list(sizes), "claims_per_system": claims}
    for n in sizes:
        q = BrokerQueue(ctx.scratch(f"backlog-{n}"))
        raw = RawSame(None, attach=q)
        try:
            t0 = now_ns()
            q.preload([body(i) for i in range(n)])
            load_s = (now_ns() - t0) / 1e9
            got: dict[str, list[str]] = {BROKER: [], RAW_SAME: []}
            lat: dict[str, list[int]] = {BROKER: [], RAW_SAME: []}
            ack: dict[str, list[int]] = {BROKER: [], RAW_SAME: []}
            # Both systems take from the head of one FIFO: never more than the backlog holds.
            want = min(claims, n // 2)
            while len(got[BROKER]) < want:
                for _ in range(CHUNK):
                    s = now_ns()
                    lease = q.claim(limit=1)
                    m = now_ns()
                    q.ack(lease.lease_token)
                    e = now_ns()
                    lat[BROKER].append(m - s)
                    ack[BROKER].append(e - m)
                    got[BROKER] += [d.body for d in lease.deliveries]
                for _ in range(CHUNK):
                    s = now_ns()
                    token, bodies = raw.claim(1)
                    m = now_ns()
                    raw.ack(token)
                    e = now_ns()
                    lat[RAW_SAME].append(m - s)
                    ack[RAW_SAME].append(e - m)
                    got[RAW_SAME] += bodies
            for system, how in ((BROKER, q.how), (RAW_SAME, raw.how)):
                stats: dict[str, Any] = {
                    **latency_stats(lat[system]),
                    **latency_stats(ack[system], "ack_"),
                    "claimed": len(got[system]),
                    "load_s": round(load_s, 2),
                }
                sc.add(Row(system, stats["p50_us"], "claim p50 µs", point=n, how=how, stats=stats))
            # Both took from the head of one FIFO: together, the first messages, once each.
            taken = got[BROKER] + got[RAW_SAME]
            sc.counts[str(n)] = {
                "claimed": len(taken),
                "unique": len(set(taken)),
                "duplicates": len(taken) - len(set(taken)),
                "lost": len({body(i) for i in range(len(taken))} - set(taken)),
            }
            ctx.log(
                f"  backlog {n:,}: loaded in {load_s:.1f} s; claim p50 broker "
                f"{sc.value(BROKER, n):,.0f} us, raw {sc.value(RAW_SAME, n):,.0f} us"
            )
        finally:
            raw.close()
            q.close()
    lo, hi = min(sizes), max(sizes)
    for n in sizes:
        sc.ratio(BROKER, RAW_SAME, point=n)
    r = sc.ratio(BROKER, BROKER, num_point=hi, den_point=lo, label=f"broker {hi:,} / {lo:,}")
    sc.ratio(RAW_SAME, RAW_SAME, num_point=hi, den_point=lo, label=f"raw {hi:,} / {lo:,}")
    sc.target(f"claim latency at {hi:,} <= 1.5x that at {lo:,}", r, "<=", 1.5)
    return sc
