"""Turns (S17-S18) and broadcast fan-out.

turn: before each timed turn the worker gets one urgent operator message, one
direct message and one broadcast (untimed), and two standing directives apply
throughout; the timed part is ``next_turn()`` (all four groups, in order) plus
``seen(turn_id)``. Baseline: the file mailbox doing the same turn by hand
(list + read the inbox in name order, urgent first; read the directives folder;
read the broadcast folder past a cursor file; then move the inbox files to
done/ and rewrite the cursor with write + fsync + rename).

broadcast: one sender, N receivers. Timed: one broadcast send, then every
receiver reading it (broker: ``next_turn`` + ``seen``, one receiver after the
other). Value: receivers served per second, (send + all reads) / N. Baselines:
the file mailbox (a broadcast is one delivery per inbox: write + fsync +
rename each, then each receiver claims + acks its copy) and Redis Streams (one
XADD; each receiver is its own consumer group: XREADGROUP + XACK).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from bench.core import (
    BROKER,
    FILE_MAILBOX,
    REDIS,
    Ctx,
    Row,
    Scenario,
    latency_stats,
    now_ns,
)
from bench.peers import Unavailable
from bench.peers.broker_queue import api, open_space

GROUPS = ["urgent", "directive", "message", "broadcast"]


# --- turn ------------------------------------------------------------------------------
def turn(ctx: Ctx) -> Scenario:
    n = ctx.sizes.turns
    sc = Scenario("turn", "turn with all four groups, then seen", unit="turns/s")
    sc.params = {"turns": n, "per_turn": "1 urgent + 2 directives + 1 direct + 1 broadcast"}
    try:
        sc.add(_broker_turns(ctx, n))
    except Exception as exc:  # noqa: BLE001
        sc.add(Row(BROKER, status="error", reason=f"{type(exc).__name__}: {exc}"))
        sc.status, sc.error = "error", f"broker: {type(exc).__name__}: {exc}"
    try:
        sc.add(_file_turns(ctx, n))
    except Exception as exc:  # noqa: BLE001
        sc.add(Row(FILE_MAILBOX, status="error", reason=f"{type(exc).__name__}: {exc}"))
    sc.ratio(BROKER, FILE_MAILBOX)
    b = sc.get(BROKER)
    if b is not None:
        sc.counts = {k: b.stats[k] for k in ("turns", "items", "complete_turns", "group_order_ok")}
    return sc


def _broker_turns(ctx: Ctx, n: int) -> Row:
    from broker import Operator

    store, space = open_space(ctx.scratch("turn-broker"))
    try:
        op = Operator(store)
        lead, _ = Operator(store).join(space, "boss", lead=True)
        peer, _ = Operator(store).join(space, "peer")
        worker, _ = Operator(store).join(space, "worker")
        directive = api(lead, "directive")
        directive("worker", "standing rule one: keep answers short")
        directive("worker", "standing rule two: cite the message id")
        next_turn, seen = api(worker, "next_turn"), api(worker, "seen")
        seen(next_turn().id)  # records the directives once
        lat_turn: list[int] = []
        lat_seen: list[int] = []
        items = complete = 0
        order_ok = True
        total = 0
        for i in range(n):
            op.send(space, f"urgent {i}", to=["worker"], urgent=True)
            peer.send("worker", f"direct {i}")
            peer.send("broadcast", f"broadcast {i}")
            t0 = now_ns()
            t = next_turn()
            t1 = now_ns()
            seen(t.id)
            t2 = now_ns()
            total += t2 - t0
            lat_turn.append(t1 - t0)
            lat_seen.append(t2 - t1)
            groups = [it.group for it in t.items]
            items += len(groups)
            if groups == sorted(groups, key=GROUPS.index):
                complete += set(groups) == set(GROUPS)
            else:
                order_ok = False
        stats: dict[str, Any] = {
            **latency_stats([a + b for a, b in zip(lat_turn, lat_seen, strict=True)]),
            **latency_stats(lat_turn, "next_turn_"),
            **latency_stats(lat_seen, "seen_"),
            "turns": n,
            "items": items,
            "complete_turns": complete,
            "group_order_ok": order_ok,
        }
        how = (
            "next_turn() then seen(turn.id); setup per turn (untimed): Operator.send(urgent=True), "
            "Agent.send(direct), Agent.send('broadcast'); 2 standing directives"
        )
        return Row(BROKER, n / (total / 1e9), "turns/s", how=how, stats=stats)
    finally:
        store.close()


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, path)


def _file_turns(ctx: Ctx, n: int) -> Row:
    from bench.peers.file_mailbox import FileMailbox

    root = ctx.scratch("turn-file")
    box = FileMailbox(root)
    directives = root / "board" / "directives"
    bcast = root / "broadcasts"
    directives.mkdir(parents=True)
    bcast.mkdir()
    for j in range(2):
        _write(directives / f"{j:04d}.txt", f"standing rule {j}")
    cursor = root / "worker.cursor"
    _write(cursor, "0")
    lat: list[int] = []
    total = 0
    for i in range(n):
        box.put(f"0 urgent {i}")  # the name sorts urgent first: 0 < 1
        box.put(f"1 direct {i}")
        _write(bcast / f"{i + 1:08d}.txt", f"broadcast {i}")
        t0 = now_ns()
        shown: list[str] = []
        claimed = box.claim(10_000)
        texts = [box.read_ack(p) for p in claimed]
        urgent = [t for t in texts if t.startswith("0 ")]
        shown += urgent
        for name in sorted(os.listdir(directives)):
            shown.append((directives / name).read_text())
        shown += [t for t in texts if not t.startswith("0 ")]
        seen_no = int(cursor.read_text())
        last = seen_no
        for name in sorted(os.listdir(bcast)):
            no = int(name.split(".")[0])
            if no > seen_no:
                shown.append((bcast / name).read_text())
                last = max(last, no)
        _write(cursor, str(last))  # seen: the cursor moves (the inbox was acked above)
        dt = now_ns() - t0
        total += dt
        lat.append(dt)
    how = (
        "list + read + rename the inbox (urgent first by name), read board/directives/, read "
        "broadcasts/ past a cursor file, rewrite the cursor (write + fsync + rename)"
    )
    return Row(FILE_MAILBOX, n / (total / 1e9), "turns/s", how=how, stats=latency_stats(lat))


# --- broadcast fan-out ---------------------------------------------------------------------
def broadcast(ctx: Ctx) -> Scenario:
    rounds = 1 if ctx.quick else 3
    sc = Scenario(
        "broadcast",
        "broadcast fan-out: one send, every receiver reads it",
        unit="receivers/s",
        x_label="participants",
    )
    sc.params = {"participants": list(ctx.sizes.fanout), "broadcasts_per_point": rounds}
    for n in ctx.sizes.fanout:
        for system, fn in (
            (BROKER, _bcast_broker),
            (FILE_MAILBOX, _bcast_file),
            (REDIS, _bcast_redis),
        ):
            try:
                row = fn(ctx, n, rounds)
                row.point = n
                sc.add(row)
                ctx.log(
                    f"  broadcast {system} x{n}: {row.value:,.0f} receivers/s, "
                    f"send {row.stats.get('send_ms', 0):.2f} ms"
                )
            except Unavailable as exc:
                sc.add(Row(system, status="skipped", reason=str(exc), point=n))
            except Exception as exc:  # noqa: BLE001
                sc.add(Row(system, status="error", reason=f"{type(exc).__name__}: {exc}", point=n))
                if system == BROKER:
                    sc.status, sc.error = "error", f"broker: {type(exc).__name__}: {exc}"
        sc.ratio(BROKER, FILE_MAILBOX, point=n)
        sc.ratio(BROKER, REDIS, point=n)
    return sc


def _row(
    system: str, n: int, rounds: int, send: list[int], reads: list[int], how: str, lost: int
) -> Row:
    total = sum(send) + sum(reads)
    stats = {
        "send_ms": round(sum(send) / len(send) / 1e6, 3),
        "read_us_per_participant": round(sum(reads) / (n * rounds) / 1e3, 1),
        "lost": lost,
    }
    return Row(system, n * rounds / (total / 1e9), "receivers/s", how=how, stats=stats)


def _bcast_broker(ctx: Ctx, n: int, rounds: int) -> Row:
    from broker import Operator

    store, space = open_space(ctx.scratch(f"bcast-broker-{n}"))
    try:
        sender, _ = Operator(store).join(space, "sender")
        receivers = [Operator(store).join(space, f"r{i}")[0] for i in range(n)]
        calls = [(api(r, "next_turn"), api(r, "seen")) for r in receivers]
        send: list[int] = []
        reads: list[int] = []
        lost = 0
        for k in range(rounds):
            t0 = now_ns()
            sender.send("broadcast", f"broadcast {k}")
            send.append(now_ns() - t0)
            t0 = now_ns()
            for next_turn, seen in calls:
                t = next_turn()
                if t.id is None or not any(it.group == "broadcast" for it in t.items):
                    lost += 1
                    continue
                seen(t.id)
            reads.append(now_ns() - t0)
        how = "Agent.send('broadcast', body) (one log row, no inbox rows); each receiver next_turn() + seen()"
        return _row(BROKER, n, rounds, send, reads, how, lost)
    finally:
        store.close()


def _bcast_file(ctx: Ctx, n: int, rounds: int) -> Row:
    from bench.peers.file_mailbox import FileMailbox

    root = ctx.scratch(f"bcast-file-{n}")
    boxes = [FileMailbox(root, who=f"r{i}") for i in range(n)]
    send: list[int] = []
    reads: list[int] = []
    lost = 0
    for k in range(rounds):
        t0 = now_ns()
        for box in boxes:
            box.put(f"broadcast {k}")
        send.append(now_ns() - t0)
        t0 = now_ns()
        for box in boxes:
            if not box.claim_ack():
                lost += 1
        reads.append(now_ns() - t0)
    how = "one delivery per inbox (write + fsync + rename each); each receiver lists, claims, acks"
    return _row(FILE_MAILBOX, n, rounds, send, reads, how, lost)


def _bcast_redis(ctx: Ctx, n: int, rounds: int) -> Row:
    import uuid

    from bench.peers.redis_streams import connect

    r = connect()
    key = f"bench:bcast:{uuid.uuid4().hex}"
    try:
        r.xadd(key, {"b": "init"})
        pipe = r.pipeline(transaction=False)
        for i in range(n):
            pipe.xgroup_create(key, f"r{i}", id="$")
        pipe.execute()
        send: list[int] = []
        reads: list[int] = []
        lost = 0
        for k in range(rounds):
            t0 = now_ns()
            r.xadd(key, {"b": f"broadcast {k}"})
            send.append(now_ns() - t0)
            t0 = now_ns()
            for i in range(n):
                got = r.xreadgroup(f"r{i}", "c", {key: ">"}, count=10)
                if not got or not got[0][1]:
                    lost += 1
                    continue
                r.xack(key, f"r{i}", *[e[0] for e in got[0][1]])
            reads.append(now_ns() - t0)
        how = "one XADD; each receiver is a consumer group: XREADGROUP + XACK"
        return _row(REDIS, n, rounds, send, reads, how, lost)
    finally:
        r.delete(key)
        r.close()
