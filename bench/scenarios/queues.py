"""Send and claim + ack, one at a time and in batches, against every baseline.

Every system gets its own store in its own folder (same filesystem), is set up
and preloaded first, and then all systems run *interleaved*: round after round,
each does its share of the operations in turn. A burst of load from elsewhere
on the machine then hits every system alike instead of whichever ran at that
moment, so the ratios stay comparable even when the absolute numbers move.
Claims are checked message by message: the bodies must come back in FIFO
order, each exactly once.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.core import (
    BROKER,
    BROKER_PG,
    FILE_MAILBOX,
    LITEQUEUE,
    PERSIST_QUEUE,
    PGQUEUER,
    RAW_FLOOR,
    RAW_PG,
    RAW_SAME,
    REDIS,
    Ctx,
    Row,
    Scenario,
    accounting,
    body,
    latency_stats,
    now_ns,
)
from bench.peers import Unavailable, factories

# The broker on PostgreSQL joins when a server is named (BENCH_PG_URL): it is
# the same API over the network and fsync, far slower than every local lane.
ALL = [BROKER, RAW_SAME, RAW_FLOOR, FILE_MAILBOX, PERSIST_QUEUE, LITEQUEUE, REDIS] + (
    [BROKER_PG, RAW_PG, PGQUEUER] if os.environ.get("BENCH_PG_URL") else []
)
BASELINES = ALL[1:]
ROUNDS = 10


def _pg_target(sc: Scenario, what: str) -> None:
    """spec §Targets, PostgreSQL: ``what`` on PostgreSQL >= 0.9x raw psycopg running
    the same statements in the same round trips (when a server is named)."""
    if BROKER_PG in ALL:
        sc.target(
            f"on PostgreSQL: {what} >= 0.9x raw psycopg (same statements)",
            sc.ratio_value(BROKER_PG, RAW_PG),
            ">=",
            0.9,
        )


# One operation of a lane: returns the bodies it claimed ([] = the queue is
# empty), or None for a send.
Op = Callable[["Lane"], list[str] | None]


@dataclass
class Lane:
    """One system doing one kind of operation in a scenario."""

    name: str  # the row's system name
    system: str  # which queue to build
    op: Op
    per: int = 1  # messages per operation (batch size)
    limit: int = 0  # operations to run (0: the scenario's count)
    how: str | None = None
    q: Any = None
    texts: list[str] = field(default_factory=list)
    i: int = 0  # next text to send
    state: Any = None  # a lease carried from one operation to the next
    got: list[str] = field(default_factory=list)
    lat: list[int] = field(default_factory=list)
    elapsed: int = 0
    ops: int = 0
    done: bool = False
    error: str | None = None


# --- operations ---------------------------------------------------------------------------
def op_put(lane: Lane) -> None:
    lane.q.put(lane.texts[lane.i])
    lane.i += 1


def op_put_many(lane: Lane) -> None:
    lane.q.put_many(lane.texts[lane.i : lane.i + lane.per])
    lane.i += lane.per


def op_claim(lane: Lane) -> list[str]:
    return lane.q.claim_ack()  # type: ignore[no-any-return]


def op_claim_many(lane: Lane) -> list[str]:
    return lane.q.claim_ack_many(lane.per)  # type: ignore[no-any-return]


def op_ack_and_claim(lane: Lane) -> list[str]:
    """Ack the lease held since the last operation and claim the next, in one call."""
    q = lane.q
    if lane.system == BROKER:
        lease = q.claim(limit=1) if lane.state is None else q.ack_and_claim(lane.state, limit=1)
        lane.state = lease.lease_token if lease.deliveries else None
        return [d.body for d in lease.deliveries]
    if lane.system == RAW_SAME:
        token, bodies = q.claim(1) if lane.state is None else q.ack_and_claim(lane.state, 1)
        lane.state = token if bodies else None
        return bodies  # type: ignore[no-any-return]
    entries = q.ack_and_claim(lane.state or [], 1)  # redis: XACK + XREADGROUP pipelined
    lane.state = [e[0] for e in entries]
    return [e[1] for e in entries]


def _finish_ack_and_claim(lane: Lane) -> None:
    """Ack the lease still held after the last operation."""
    if not lane.state:
        return
    if lane.system in (BROKER, RAW_SAME):
        lane.q.ack(lane.state)
    else:
        lane.q.r.xack(lane.q.key, "g", *lane.state)


# --- the interleaved runner ------------------------------------------------------------------
def run_lanes(
    ctx: Ctx,
    sc: Scenario,
    lanes: list[Lane],
    *,
    ops: int,
    texts: int,
    preload: int = 0,
    unit: str = "msg/s",
) -> list[Lane]:
    """Set every lane up, run ``ops`` operations per lane interleaved in ROUNDS
    rounds, add one row per lane; returns the lanes that ran."""
    ready: list[Lane] = []
    for lane in lanes:
        lane.limit = lane.limit or ops
        try:
            lane.q = factories([lane.system])[lane.system](ctx.scratch(f"{sc.name}-{lane.name}"))
            lane.texts = [body(i) for i in range(max(texts, preload))]
            if preload:
                lane.q.preload(lane.texts[:preload])
            elif lane.op in (op_put, op_put_many):
                warm = max(1, min(20, lane.limit // 10))
                for j in range(warm):  # first-use costs (statement cache, files) untimed
                    lane.q.put(body(-j - 1))
            lane.how = lane.how or (lane.q.batch_how if lane.per > 1 else lane.q.how)
            ready.append(lane)
        except Unavailable as exc:
            sc.add(Row(lane.name, status="skipped", reason=str(exc)))
            ctx.log(f"  {sc.name} {lane.name}: skipped ({exc})")
        except Exception as exc:  # noqa: BLE001 - reported in the row
            _fail(ctx, sc, lane, exc)
    for _ in range(ROUNDS):
        for lane in ready:
            if lane.done or lane.error:
                continue
            per_round = math.ceil(lane.limit / ROUNDS)
            start = now_ns()
            try:
                for _ in range(min(per_round, lane.limit - lane.ops)):
                    t0 = now_ns()
                    got = lane.op(lane)
                    t1 = now_ns()
                    if got is not None:
                        if not got:
                            lane.done = True
                            break
                        lane.got += got
                    lane.lat.append(t1 - t0)
                    lane.ops += 1
            except Exception as exc:  # noqa: BLE001
                _fail(ctx, sc, lane, exc)
            lane.elapsed += now_ns() - start
            lane.done = lane.done or lane.ops >= lane.limit
    for lane in ready:
        with contextlib.suppress(Exception):  # closing is best effort
            if lane.op is op_ack_and_claim:
                _finish_ack_and_claim(lane)
            lane.q.close()
        if lane.error:
            continue
        claims = lane.op not in (op_put, op_put_many)
        moved = len(lane.got) if claims else lane.ops * lane.per
        stats: dict[str, Any] = latency_stats(lane.lat, "batch_" if lane.per > 1 else "")
        if claims:
            counts = accounting(lane.texts[: len(lane.got)], lane.got)
            counts["fifo"] = lane.got == lane.texts[: len(lane.got)]
            stats.update(counts)
            _merge_counts(sc, lane.name, counts)
        rate = moved / (lane.elapsed / 1e9) if lane.elapsed else float("nan")
        sc.add(Row(lane.name, rate, unit, how=lane.how, stats=stats))
        ctx.log(f"  {sc.name} {lane.name}: {rate:,.0f} {unit}")
    return ready


def _fail(ctx: Ctx, sc: Scenario, lane: Lane, exc: Exception) -> None:
    import traceback

    lane.error = f"{type(exc).__name__}: {exc}"
    sc.add(Row(lane.name, status="error", reason=lane.error))
    ctx.log(f"  {sc.name} {lane.name}: ERROR {lane.error}")
    ctx.log(traceback.format_exc())
    if lane.system == BROKER:
        sc.status, sc.error = "error", f"{lane.name}: {lane.error}"


def _ratios(sc: Scenario, num: str = BROKER, dens: list[str] = BASELINES) -> None:
    for den in dens:
        sc.ratio(num, den)


def _p50_ratio(sc: Scenario, num: str, den: str) -> None:
    """Rate ratio from median latencies: insensitive to the few multi-ms stalls
    (checkpoints, other processes' I/O) that dominate a mean on a busy machine."""
    a, b = sc.get(num), sc.get(den)
    value = None
    if a is not None and b is not None and a.stats.get("p50_us") and b.stats.get("p50_us"):
        value = b.stats["p50_us"] / a.stats["p50_us"]
    sc.ratios.append(
        {
            "label": f"{num} / {den} by p50 latency",
            "num": num,
            "den": den,
            "num_point": None,
            "den_point": None,
            "value": value,
        }
    )


def _merge_counts(sc: Scenario, system: str, counts: dict[str, Any]) -> None:
    sc.counts[system] = counts
    tot = sc.counts.setdefault(
        "total", {"expected": 0, "acked": 0, "lost": 0, "duplicates": 0, "unexpected": 0}
    )
    for k in tot:
        tot[k] += counts.get(k, 0)


# --- the scenarios ---------------------------------------------------------------------------
def send(ctx: Ctx) -> Scenario:
    n = ctx.sizes.messages
    sc = Scenario("send", "single send (one message per transaction)", unit="msg/s")
    sc.params = {"messages": n, "body_bytes": 64, "rounds": ROUNDS}
    run_lanes(ctx, sc, [Lane(s, s, op_put) for s in ALL], ops=n, texts=n)
    _ratios(sc)
    _p50_ratio(sc, BROKER, RAW_SAME)
    # Issue 25's targets: the broker's statements near the minimal queue, and
    # the library near its own statements.
    sc.target(
        "raw sqlite3 (same statements) >= 0.5x one statement per tx",
        sc.ratio_value(RAW_SAME, RAW_FLOOR),
        ">=",
        0.5,
    )
    sc.target(
        "single send >= 0.8x raw sqlite3 (same statements)",
        sc.ratio_value(BROKER, RAW_SAME),
        ">=",
        0.8,
    )
    sc.target(
        "single send >= 0.3x raw sqlite3 (one statement per tx)",
        sc.ratio_value(BROKER, RAW_FLOOR),
        ">=",
        0.3,
        statements=sc.ratio_value(RAW_SAME, RAW_FLOOR),
    )
    _pg_target(sc, "single send")
    _statement_check(ctx, sc, "send")
    return sc


def send_batch(ctx: Ctx) -> Scenario:
    k, nb = ctx.sizes.batch, ctx.sizes.batches
    sc = Scenario("send_batch", f"batched send ({k} messages per transaction)", unit="msg/s")
    sc.params = {"batch": k, "batches": nb, "messages": k * nb, "rounds": ROUNDS}
    lanes = [Lane(s, s, op_put_many, per=k) for s in ALL]
    # The single-send rate, side by side, over the same number of messages.
    lanes.insert(1, Lane("broker_single", BROKER, op_put, limit=k * nb))
    run_lanes(ctx, sc, lanes, ops=nb, texts=k * nb)
    sc.ratio(BROKER, "broker_single", label="broker batch / broker single")
    _ratios(sc)
    sc.target(
        f"batches of {k}: >= 10x the single-send rate",
        sc.ratio_value(BROKER, "broker_single"),
        ">=",
        10.0,
    )
    sc.notes.append(
        "The broker batch is Agent.send_many: one transaction, the space read once, each "
        "distinct address resolved once, one executemany per table."
    )
    return sc


def claim_ack(ctx: Ctx) -> Scenario:
    backlog = ctx.sizes.backlog
    k = min(ctx.sizes.messages, backlog)
    sc = Scenario("claim_ack", f"single claim + ack at a {backlog:,} backlog", unit="msg/s")
    sc.params = {"backlog": backlog, "claims": k, "rounds": ROUNDS}
    run_lanes(ctx, sc, [Lane(s, s, op_claim) for s in ALL], ops=k, texts=backlog, preload=backlog)
    _ratios(sc)
    _p50_ratio(sc, BROKER, RAW_SAME)
    sc.target(
        "single claim+ack >= 0.85x raw sqlite3 (same statements)",
        sc.ratio_value(BROKER, RAW_SAME),
        ">=",
        0.85,
    )
    for peer, text, times in (
        (PERSIST_QUEUE, "persist-queue", 8.0),
        (LITEQUEUE, "litequeue", 8.0),
        (FILE_MAILBOX, f"the file mailbox (backlog {backlog:,}; spec: at 5k)", 20.0),
    ):
        sc.target(
            f"claim+ack >= {times:g}x {text}",
            sc.ratio_value(BROKER, peer),
            ">=",
            times,
            statements=sc.ratio_value(RAW_SAME, peer),
        )
    _pg_target(sc, "single claim+ack")
    _statement_check(ctx, sc, "claim_ack")
    return sc


def claim_ack_batch(ctx: Ctx) -> Scenario:
    k, nb = ctx.sizes.batch, ctx.sizes.batches
    total = k * nb
    backlog = max(ctx.sizes.backlog, total)
    sc = Scenario("claim_ack_batch", f"batched claim + ack ({k} per lease)", unit="msg/s")
    sc.params = {"batch": k, "batches": nb, "messages": total, "backlog": backlog, "rounds": ROUNDS}
    lanes = [Lane(s, s, op_claim_many, per=k) for s in ALL]
    lanes.insert(1, Lane("broker_single", BROKER, op_claim, limit=total))
    run_lanes(ctx, sc, lanes, ops=nb, texts=backlog, preload=backlog)
    sc.ratio(BROKER, "broker_single", label="broker batch / broker single")
    _ratios(sc)
    sc.target(
        f"batches of {k}: >= 10x the single claim+ack rate",
        sc.ratio_value(BROKER, "broker_single"),
        ">=",
        10.0,
    )
    return sc


def ack_and_claim(ctx: Ctx) -> Scenario:
    backlog = ctx.sizes.backlog
    k = min(ctx.sizes.messages, backlog)
    sc = Scenario("ack_and_claim", "ack-and-claim-next (one call per message)", unit="msg/s")
    sc.params = {"backlog": backlog, "claims": k, "rounds": ROUNDS}
    lanes = [
        Lane(
            BROKER,
            BROKER,
            op_ack_and_claim,
            how="lease = claim(limit=1), then lease = ack_and_claim(lease.lease_token, limit=1) per message",
        ),
        Lane("broker_single", BROKER, op_claim, how="claim(limit=1) then ack(token): two calls"),
        Lane(
            RAW_SAME,
            RAW_SAME,
            op_ack_and_claim,
            how="the broker's ack UPDATE and claim statements in one transaction",
        ),
        Lane(
            "raw_same_single",
            RAW_SAME,
            op_claim,
            how="the broker's statements, claim then ack in two transactions",
        ),
        Lane(
            REDIS,
            REDIS,
            op_ack_and_claim,
            how="XACK of the previous id and XREADGROUP COUNT 1 in one pipelined round trip",
        ),
    ]
    run_lanes(ctx, sc, lanes, ops=k, texts=backlog, preload=backlog)
    sc.ratio(BROKER, "broker_single", label="broker ack_and_claim / broker claim+ack")
    sc.ratio(BROKER, RAW_SAME)
    sc.ratio(BROKER, REDIS)
    return sc


# --- are the raw statements the broker's? -------------------------------------------------
def _statement_check(ctx: Ctx, sc: Scenario, what: str) -> None:
    """Trace one operation of the broker and of raw_same; record both sequences."""
    from bench.peers.broker_queue import BrokerQueue
    from bench.peers.raw_sqlite import RawSame, broker_connection, trace

    try:
        bq = BrokerQueue(ctx.scratch(f"{sc.name}-trace-broker"))
        rq = RawSame(ctx.scratch(f"{sc.name}-trace-raw"))
        try:
            if what == "send":
                # The first send of a process is the heartbeat's call (once a second);
                # the one after it is what every other send runs.
                bq.put("warm")
                rq.put("warm")
                b = trace(broker_connection(bq.store), lambda: bq.put("trace"))
                r = trace(rq.conn, lambda: rq.put("trace"))
            else:
                bq.preload(["a", "b"])
                rq.preload(["a", "b"])
                b = trace(broker_connection(bq.store), bq.claim_ack)
                r = trace(rq.conn, rq.claim_ack)
        finally:
            bq.close()
            rq.close()
    except Exception as exc:  # noqa: BLE001 - the check is informative
        sc.params["statements"] = {"error": f"{type(exc).__name__}: {exc}"}
        return
    sc.params["statements"] = {"broker": b, "raw_same": r, "match": b == r}
    if b != r:
        sc.notes.append(
            "raw_same does not run exactly the broker's statements (see params.statements): "
            "update bench/peers/raw_sqlite.py to follow the broker."
        )
