"""Waiting for mail across processes: wake latency, and the CPU of idle waiters (S20).

Wake latency: a waiter process blocks for its next message; the parent sends
one message at a time (after a random 1-3 ms pause) and stamps the commit with
the wall clock (``time.time_ns``, comparable across processes); the waiter
stamps its return. Latency = return - commit, p50 / p99 / p99.9.

- broker: the waiter blocks in ``claim(limit=1, wait=...)`` (the doorbell); the
  sender stamps from an ``after_commit`` hook registered before the send, so
  the stamp is taken right after COMMIT and before the doorbell rings.
- sqlite data_version polling: the waiter polls ``PRAGMA data_version`` every
  1 ms and claims with UPDATE ... RETURNING when it changes (spec §Targets'
  measured alternative); the sender stamps after its autocommit INSERT.
- file mailbox polling: the waiter lists its inbox every 1 ms (the mailbox
  protocol's "check between work units"); the sender stamps after the rename.
- Redis Streams: the waiter blocks in ``XREADGROUP ... BLOCK``; the sender
  stamps just before XADD (the commit happens inside the server, before the
  reply: this is conservative against Redis by at most one round trip).

Idle CPU: W waiters (threads, spread over 4 processes) wait with no traffic;
their processes' utime + stime over the window (from /proc) is reported as a
percentage of one core.
"""

from __future__ import annotations

import os
import random
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from bench.core import (
    BROKER,
    BROKER_PG,
    FILE_MAILBOX,
    REDIS,
    Ctx,
    Row,
    Scenario,
    latency_stats,
    proc_cpu_seconds,
    run_workers,
)
from bench.peers import Unavailable

POLL = "sqlite_poll"
POLL_S = 0.001
WAIT_S = 5.0
IDLE_PROCS = 4


# --- the systems: a sender side and a waiter side each --------------------------------
class _BrokerPair:
    how = (
        "waiter: claim(limit=1, wait=5) (doorbell socket); sender: Agent.send, stamped after COMMIT"
    )

    def __init__(self, folder: Path, waiters: int = 1) -> None:
        from bench.peers.broker_queue import api, open_space
        from broker import Operator

        self.store, self.space = open_space(folder)
        self.sender, _ = Operator(self.store).join(self.space, "sender")
        self.waiters = [Operator(self.store).join(self.space, f"w{i}")[0] for i in range(waiters)]
        self._api = api

    def send(self, text: str, to: int = 0) -> int:
        stamp: list[int] = []
        with self.store.transaction() as tx:
            tx.after_commit(lambda: stamp.append(time.time_ns()))  # runs before the doorbell
            self.sender.send(f"w{to}", text, tx=tx)
        return stamp[0]

    def wait_one(self, i: int, timeout: float) -> tuple[str, int] | None:
        agent = self.waiters[i]
        lease = self._api(agent, "claim")(limit=1, wait=timeout)
        t = time.time_ns()
        if not lease.deliveries:
            return None
        self._api(agent, "ack")(lease.lease_token)
        return str(lease.deliveries[0].body), t

    def close(self) -> None:
        import shutil

        from broker.delivery import wake

        # Killed idle waiters leave their doorbell sockets behind: remove this
        # store's doorbell folder (the next ring would clean them up anyway).
        shutil.rmtree(wake.root_path(self.store), ignore_errors=True)
        self.store.close()


class _BrokerPgPair(_BrokerPair):
    how = (
        "broker on PostgreSQL: waiter claim(limit=1, wait=5) (LISTEN/NOTIFY, one listening "
        "connection per process); sender: Agent.send, its NOTIFY queued in the transaction "
        "and delivered by the COMMIT, stamped right after the COMMIT"
    )

    def __init__(self, folder: Path, waiters: int = 1) -> None:
        from bench.peers.broker_pg import BrokerPgQueue
        from bench.peers.broker_queue import api
        from broker import Operator

        self.owner = BrokerPgQueue(folder)  # a fresh database on the server, dropped at close
        self.store, self.space = self.owner.store, self.owner.space
        self.sender = self.owner.sender
        self.waiters = [Operator(self.store).join(self.space, f"w{i}")[0] for i in range(waiters)]
        self._api = api

    def close(self) -> None:
        self.owner.close()


class _PollPair:
    how = "waiter: PRAGMA data_version every 1 ms, then UPDATE ... RETURNING; sender: INSERT (autocommit)"

    def __init__(self, folder: Path, waiters: int = 1) -> None:
        from broker import Store

        self.db = Store(f"sqlite:///{folder / 'poll.db'}", migrate=False)
        c = self.db.connect()
        c.execute("CREATE TABLE q (id INTEGER PRIMARY KEY, w INTEGER, body TEXT, state INTEGER)")
        c.execute("CREATE INDEX q_ready ON q (w, id) WHERE state = 0")
        self.conn = c
        self.local = threading.local()

    def _c(self) -> sqlite3.Connection:
        c: sqlite3.Connection | None = getattr(self.local, "c", None)
        if c is None or getattr(self.local, "pid", None) != os.getpid():
            c = self.local.c = self.db.connect()
            self.local.pid = os.getpid()
        return c

    def send(self, text: str, to: int = 0) -> int:
        self._c().execute("INSERT INTO q (w, body, state) VALUES (?, ?, 0)", (to, text))
        return time.time_ns()

    def wait_one(self, i: int, timeout: float) -> tuple[str, int] | None:
        c = self._c()
        deadline = time.monotonic() + timeout
        version = None
        while True:
            v = c.execute("PRAGMA data_version").fetchone()[0]
            if v != version:
                version = v
                row = c.execute(
                    "UPDATE q SET state = 2 WHERE id = (SELECT id FROM q WHERE w = ? AND state = 0 "
                    "ORDER BY id LIMIT 1) RETURNING body",
                    (i,),
                ).fetchone()
                if row is not None:
                    return str(row[0]), time.time_ns()
                version = c.execute("PRAGMA data_version").fetchone()[0]
            if time.monotonic() >= deadline:
                return None
            time.sleep(POLL_S)

    def close(self) -> None:
        self.conn.close()


class _FilePair:
    how = "waiter: list inbox/ every 1 ms, rename the first into processing/; sender: write + fsync + rename"

    def __init__(self, folder: Path, waiters: int = 1) -> None:
        from bench.peers.file_mailbox import FileMailbox

        self.boxes = [FileMailbox(folder, who=f"w{i}") for i in range(waiters)]

    def send(self, text: str, to: int = 0) -> int:
        self.boxes[to].put(text)
        return time.time_ns()

    def wait_one(self, i: int, timeout: float) -> tuple[str, int] | None:
        box = self.boxes[i]
        deadline = time.monotonic() + timeout
        while True:
            paths = box.claim(1)
            if paths:
                t = time.time_ns()
                return box.read_ack(paths[0]), t
            if time.monotonic() >= deadline:
                return None
            time.sleep(POLL_S)

    def close(self) -> None:
        pass


class _RedisPair:
    how = "waiter: XREADGROUP ... COUNT 1 BLOCK 5000 then XACK; sender: XADD, stamped before it"

    def __init__(self, folder: Path, waiters: int = 1) -> None:
        import uuid

        from bench.peers.redis_streams import connect, redis_url

        self.url = redis_url()
        r = connect()
        self.keys = [f"bench:wake:{uuid.uuid4().hex}:{i}" for i in range(waiters)]
        for k in self.keys:
            r.xgroup_create(k, "g", id="0", mkstream=True)
        self.r = r
        self.local = threading.local()

    def _client(self) -> Any:
        c = getattr(self.local, "c", None)
        if c is None or getattr(self.local, "pid", None) != os.getpid():
            from bench.peers.redis_streams import connect

            c = self.local.c = connect(self.url)
            self.local.pid = os.getpid()
        return c

    def send(self, text: str, to: int = 0) -> int:
        c = self._client()
        t = time.time_ns()
        c.xadd(self.keys[to], {"b": text})
        return t

    def wait_one(self, i: int, timeout: float) -> tuple[str, int] | None:
        c = self._client()
        got = c.xreadgroup("g", "c", {self.keys[i]: ">"}, count=1, block=int(timeout * 1000))
        t = time.time_ns()
        if not got or not got[0][1]:
            return None
        mid, fields = got[0][1][0]
        c.xack(self.keys[i], "g", mid)
        return str(fields[b"b"].decode()), t

    def close(self) -> None:
        try:
            self.r.delete(*self.keys)
        finally:
            self.r.close()


PAIRS: dict[str, Any] = {
    BROKER: _BrokerPair,
    POLL: _PollPair,
    FILE_MAILBOX: _FilePair,
    REDIS: _RedisPair,
}
if os.environ.get("BENCH_PG_URL"):  # as in the queue scenarios: a server is named
    PAIRS[BROKER_PG] = _BrokerPgPair


# --- wake latency ---------------------------------------------------------------------------
def _waiter(barrier: Any, pair: Any, n: int, conn: Any) -> dict[str, Any]:
    barrier.wait()
    missed = 0
    for _ in range(n):
        got = pair.wait_one(0, WAIT_S)
        if got is None:
            missed += 1
            conn.send(("miss", -1, time.time_ns()))
            continue
        text, t = got  # t: stamped as the claim returned (before the ack)
        conn.send(("got", int(text.split()[1]), t))
    return {"missed": missed}


def _run_waiter(result: list[dict[str, Any]], pair: Any, n: int, conn: Any) -> None:
    result.extend(run_workers(_waiter, [(pair, n, conn)]))


def wake(ctx: Ctx) -> Scenario:
    import multiprocessing as mp

    n = ctx.sizes.wake_messages
    sc = Scenario(
        "wake",
        "wake latency across processes: commit -> waiter returns (p99)",
        unit="p99 ms",
        higher_is_better=False,
    )
    sc.params = {"messages": n, "pause_ms": "1-3 random", "poll_interval_ms": POLL_S * 1000}
    for system, make in PAIRS.items():
        try:
            pair = make(ctx.scratch(f"wake-{system}"))
        except Unavailable as exc:
            sc.add(Row(system, status="skipped", reason=str(exc)))
            continue
        try:
            parent_end, child_end = mp.get_context("fork").Pipe()
            result: list[dict[str, Any]] = []
            t = threading.Thread(target=_run_waiter, args=(result, pair, n, child_end), daemon=True)
            t.start()
            time.sleep(0.3)  # the waiter process starts and blocks
            lat: list[int] = []
            errors = 0
            rng = random.Random(7)
            for i in range(n):
                time.sleep(rng.uniform(0.001, 0.003))
                sent = pair.send(f"msg {i} wake")
                if not parent_end.poll(WAIT_S + 2):
                    errors += 1
                    break
                kind, idx, woke = parent_end.recv()
                if kind != "got" or idx != i:
                    errors += 1
                    continue
                lat.append(woke - sent)
            t.join(timeout=30)
            if result and "error" in result[0]:
                raise RuntimeError(result[0]["error"])
            stats = {**latency_stats(lat), "errors": errors}
            p99_ms = stats["p99_us"] / 1000
            sc.add(Row(system, p99_ms, "p99 ms", how=pair.how, stats=stats))
            ctx.log(
                f"  wake {system}: p50 {stats['p50_us']:,.0f} us, p99 {stats['p99_us']:,.0f} us, "
                f"p99.9 {stats['p999_us']:,.0f} us, errors {errors}"
            )
            if errors and system == BROKER:
                sc.status, sc.error = "error", f"broker waiter missed {errors} messages"
        except Exception as exc:  # noqa: BLE001 - reported in the row
            sc.add(Row(system, status="error", reason=f"{type(exc).__name__}: {exc}"))
            if system == BROKER:
                sc.status, sc.error = "error", f"{type(exc).__name__}: {exc}"
        finally:
            pair.close()
    for system in PAIRS:
        if system != BROKER:
            sc.ratio(BROKER, system)
    sc.target("wake latency p99 <= 10 ms", sc.value(BROKER), "<=", 10.0)
    if BROKER_PG in PAIRS:  # LISTEN/NOTIFY, idle (spec §Targets, PostgreSQL)
        sc.target("on PostgreSQL: wake latency p99 <= 5 ms idle", sc.value(BROKER_PG), "<=", 5.0)
    return sc


# --- idle CPU ------------------------------------------------------------------------------
def _idle(barrier: Any, pair: Any, ids: list[int], seconds: float) -> dict[str, Any]:
    got = [0]

    def one(i: int) -> None:
        if pair.wait_one(i, seconds) is not None:
            got[0] += 1

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in ids]
    for th in threads:
        th.start()
    barrier.wait()
    for th in threads:
        th.join(seconds + 10)
    return {"woken": got[0]}


def idle_cpu(ctx: Ctx) -> Scenario:
    w, secs = ctx.sizes.idle_waiters, ctx.sizes.idle_seconds
    sc = Scenario(
        "idle_cpu",
        f"CPU of {w} idle waiters over {secs:g} s (% of one core)",
        unit="% of one core",
        higher_is_better=False,
    )
    sc.params = {"waiters": w, "seconds": secs, "processes": IDLE_PROCS}
    for system, make in PAIRS.items():
        try:
            pair = make(ctx.scratch(f"idle-{system}"), waiters=w)
        except Unavailable as exc:
            sc.add(Row(system, status="skipped", reason=str(exc)))
            continue
        try:
            cpu, woken = _measure_idle(pair, w, secs, system)
            pct_core = 100.0 * cpu / secs
            stats = {"cpu_pct_one_core": round(pct_core, 3), "cpu_s": round(cpu, 4)}
            if woken:
                stats["errors"] = woken
            sc.add(Row(system, pct_core, "% of one core", how=pair.how, stats=stats))
            ctx.log(f"  idle_cpu {system}: {pct_core:.2f}% of one core")
        except Exception as exc:  # noqa: BLE001
            sc.add(Row(system, status="error", reason=f"{type(exc).__name__}: {exc}"))
            if system == BROKER:
                sc.status, sc.error = "error", f"{type(exc).__name__}: {exc}"
        finally:
            pair.close()
    for system in PAIRS:
        if system != BROKER:
            sc.ratio(BROKER, system)
    sc.target(f"{w} idle waiters <= 2% of one core", sc.value(BROKER), "<=", 2.0)
    sc.notes.append(
        "Redis: the CPU of the redis-server process over the window is included in its figure."
    )
    return sc


def _measure_idle(pair: Any, w: int, secs: float, system: str) -> tuple[float, int]:
    """CPU seconds the waiter processes use in a window of ``secs`` with no traffic."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(IDLE_PROCS + 1)
    out = ctx.Queue()
    wait_for = secs + 60  # the waiters outlive the window; killed after it

    def proc(ids: list[int]) -> None:
        res = _idle(barrier, pair, ids, wait_for)
        out.put(res["woken"])

    chunks = [list(range(i, w, IDLE_PROCS)) for i in range(IDLE_PROCS)]
    procs = [ctx.Process(target=proc, args=(c,), daemon=True) for c in chunks]
    for p in procs:
        p.start()
    barrier.wait(60)
    time.sleep(0.5)  # every waiter is blocked (or polling) by now
    server = _redis_server_pid(pair) if system == REDIS else None
    pids = [p.pid for p in procs if p.pid is not None] + ([server] if server else [])
    before = sum(proc_cpu_seconds(pid) for pid in pids)
    time.sleep(secs)
    after = sum(proc_cpu_seconds(pid) for pid in pids)
    woken = 0
    while not out.empty():
        woken += out.get()  # a waiter that returned in the window was woken for nothing
    for p in procs:
        p.kill()
        p.join(5)
    return after - before, woken


def _redis_server_pid(pair: Any) -> int | None:
    try:
        pid = int(pair.r.info("server")["process_id"])
        proc_cpu_seconds(pid)  # is it on this host, readable?
        return pid
    except Exception:  # noqa: BLE001
        return None
