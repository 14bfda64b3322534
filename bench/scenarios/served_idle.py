"""Idle waiters in served mode (spec §Targets, issue 25): one ``broker serve``
holding N agents (1,000 in a full run), each parked in a long-poll
(``POST .../agent/inbox/claim`` with ``wait``) on its own keep-alive
connection, from one client process (asyncio: the clients' CPU is not the
server's).

Measured, in this order, while every wait stays parked:

- ``broker_served_idle_cpu``: the server's CPU (every thread; every worker with
  ``--workers``) over ``idle_seconds``, in % of one core. The waits are longer
  than the window, so nothing re-polls inside it: what a parked wait costs.
  Target <= 2 %.
- ``broker_served_idle_operator``: operator requests (``GET /api/spaces/{id}``, one
  keep-alive connection, one at a time) answered meanwhile: p99 <= 50 ms.
- ``broker_served_idle_wake``: a message to one parked agent at a time (an operator
  send over HTTP), from the send's start to the agent's long-poll answer read
  by its client: p99 <= 10 ms.
- ``broker_served_idle_repoll``: the server's CPU per long-poll cycle (a claim that
  finds nothing and parks, then times out and answers), with every agent
  re-polling at a short wait: what a client's wait length costs the server
  (an agent waiting ``W`` seconds costs ``1 / W`` cycles a second).
- ``broker_served_idle_churn_operator``: operator requests again, now with
  all N agents re-polling at ``CHURN_WAIT_S`` (a hundred waits ending and
  parking again every second at N = 1,000): p99, and the slowest in the
  stats. A full collection of Python's cyclic collector walks every parked
  wait's objects, and the requests in flight wait it out.

Needs a descriptor per connection on both sides: the client raises its soft
``RLIMIT_NOFILE`` to the hard limit (``broker serve`` does the same); with a
hard limit below N + 100 the scenario says so (``ulimit -n``, see
bench/results/served-swarm-2/README.md).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from typing import Any

from bench.core import Ctx, Row, Scenario, latency_stats, pct, run_workers, server_cpu_seconds
from bench.peers.broker_queue import LIMITS
from bench.scenarios.served import _Served

PARK_WAIT_S = 300.0  # the longest wait a call may ask for: nothing re-polls in the window
REPOLL_WAIT_S = 1.0  # the re-poll measurement's wait
CHURN_WAIT_S = 10.0  # every agent's wait while the operator is timed under churn


def _raise_nofile(needed: int) -> int:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed and soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    return soft


async def _clients(
    host: str, port: int, sid: str, tokens: list[str], wait: float, ctl: Any
) -> dict[str, Any]:
    """N connections, each re-polling ``/inbox/claim`` with ``wait`` until told to stop;
    every answer that brings a ``wake <ns>`` body records its latency."""
    path = f"/api/spaces/{sid}/agent/inbox/claim"
    woke: list[int] = []
    answers = 0
    errors: list[str] = []
    stop = asyncio.Event()

    async def one(token: str, first: float) -> None:
        nonlocal answers
        reader, writer = await asyncio.open_connection(host, port)
        w = first
        try:
            while not stop.is_set():
                body = json.dumps({"limit": 32, "wait": w}).encode()
                writer.write(
                    f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                head = await reader.readuntil(b"\r\n\r\n")
                now = time.monotonic_ns()
                status = int(head.split(b" ", 2)[1])
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                data = json.loads(await reader.readexactly(length))
                answers += 1
                if status != 200:
                    errors.append(f"{status} {data}")
                    await asyncio.sleep(0.5)
                    continue
                for d in data.get("deliveries", []):
                    text = str(d.get("body", ""))
                    if text.startswith("wake "):
                        woke.append(now - int(text.split()[1]))
                w = wait
        except (OSError, asyncio.IncompleteReadError) as exc:
            if not stop.is_set():
                errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            writer.close()

    loop = asyncio.get_running_loop()
    tasks = [asyncio.ensure_future(one(t, wait)) for t in tokens]
    while True:
        cmd = await loop.run_in_executor(None, ctl.recv)
        if cmd == "stop":
            break
        if cmd == "stats":
            ctl.send({"answers": answers, "woke": list(woke), "errors": errors[:5]})
    stop.set()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {"answers": answers, "woke": woke, "errors": errors[:5]}


def _client_proc(barrier: Any, host: str, port: int, sid: str, tokens: list[str],
                 wait: float, ctl: Any) -> dict[str, Any]:  # fmt: skip
    _raise_nofile(len(tokens) + 100)
    barrier.wait()
    return asyncio.run(_clients(host, port, sid, tokens, wait, ctl))


def _health(srv: _Served) -> dict[str, Any]:
    data: dict[str, Any] = srv.request("GET", "/healthz", "")
    return data


def _until_parked(srv: _Served, n: int, timeout: float) -> float:
    """Seconds until ``n`` long-polls are parked (the server's ``waiting``)."""
    t0 = time.monotonic()
    while _health(srv).get("waiting", 0) < n:
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"only {_health(srv).get('waiting')} of {n} waits parked")
        time.sleep(0.2)
    return time.monotonic() - t0


def served_idle(ctx: Ctx) -> Scenario:
    import http.client

    from broker import Operator, Store

    n = 50 if ctx.quick else int(os.environ.get("BENCH_SERVED_WAITERS", "1000"))
    secs = ctx.sizes.idle_seconds
    # A p99 of 100 wakes is their second slowest: one outlier moved it from
    # 5 to 10 ms between runs. 400 make it the fifth slowest (~20 s of sends).
    wakes = 10 if ctx.quick else 400
    asks = 20 if ctx.quick else 200
    workers = os.environ.get("BENCH_SERVED_WORKERS")
    sc = Scenario("served_idle", f"{n} agents parked in long-polls on one broker serve",
                  unit="% of one core")  # fmt: skip
    sc.params = {"waiters": n, "idle_seconds": secs, "wait_s": PARK_WAIT_S,
                 "workers": int(workers) if workers else 1,
                 "transport": "HTTP/1.1 keep-alive, loopback TCP, one connection per agent"}  # fmt: skip
    soft = _raise_nofile(n + 100)
    if soft < n + 100:
        sc.status = "skipped"
        sc.error = (f"RLIMIT_NOFILE {soft} < {n + 100}: raise it (ulimit -n {max(4096, 2 * n)})")  # fmt: skip
        return sc
    srv = _Served(ctx.scratch("served-idle"), ["--workers", workers] if workers else [])
    try:
        store = Store(srv.url)
        op = Operator(store)
        sid = op.create_space("workflow", **LIMITS).id
        tokens = [op.join(sid, f"w{i}")[1].token for i in range(n)]
        addresses = [f"w{i}" for i in range(n)]
        store.close()
        clients = _Clients(srv, sid, tokens, PARK_WAIT_S, timeout=3600)
        parked_s = _until_parked(srv, n, 120 + n * 0.2)
        time.sleep(1.0)  # the last parks settle
        before = _health(srv)
        c0, t0 = server_cpu_seconds(srv.proc.pid), time.monotonic()
        time.sleep(secs)
        c1, t1 = server_cpu_seconds(srv.proc.pid), time.monotonic()
        after = _health(srv)
        cpu_pct = (c1 - c0) / (t1 - t0) * 100
        sc.add(Row("broker_served_idle_cpu", round(cpu_pct, 2), "% of one core",
                   how=f"server CPU (all threads) over {secs:g} s, {n} long-polls parked",
                   stats={"waiting": after.get("waiting"), "parked_in_s": round(parked_s, 1),
                          "transactions_in_window": after["transactions"] - before["transactions"]}))  # fmt: skip
        ctx.log(f"  served_idle cpu: {cpu_pct:.2f}% of one core with {after.get('waiting')} parked")
        # operator requests, one at a time, while they wait
        lat = _operator_gets(srv, sid, asks)
        conn = http.client.HTTPConnection(srv.host, srv.port, timeout=60)
        auth = {"Authorization": f"Bearer {srv.key}"}
        sc.add(Row("broker_served_idle_operator", round(pct(lat, 99) / 1e6, 2), "p99 ms",
                   how="GET /api/spaces/{id} with the operator key, one at a time",
                   stats=latency_stats(lat)))  # fmt: skip
        ctx.log(f"  served_idle operator: p99 {pct(lat, 99) / 1e6:.1f} ms")
        # wakes: one message to one parked agent at a time
        rng = random.Random(7)
        for _ in range(wakes):
            to = rng.choice(addresses)
            payload = json.dumps({"to": [to], "text": f"wake {time.monotonic_ns()}"})
            conn.request("POST", f"/api/spaces/{sid}/messages", body=payload,
                         headers={**auth, "Content-Type": "application/json"})  # fmt: skip
            r = conn.getresponse()
            r.read()
            if r.status != 200:
                raise RuntimeError(f"operator send: {r.status}")
            time.sleep(0.05)
        time.sleep(0.5)
        got = clients.ask("stats")
        woke = got["woke"]
        sc.add(Row("broker_served_idle_wake", round(pct(woke, 99) / 1e6, 2) if woke else None,
                   "p99 ms", how="operator send over HTTP (start) -> the agent's long-poll answer read",
                   stats={**latency_stats(woke), "sent": wakes, "woken": len(woke),
                          "errors": got["errors"]}))  # fmt: skip
        ctx.log(f"  served_idle wake: {len(woke)}/{wakes}, p99 {pct(woke, 99) / 1e6:.1f} ms")
        clients.stop()
        conn.close()
        if clients.results and "error" in clients.results[0]:
            raise RuntimeError(clients.results[0]["error"])
        _repoll(ctx, sc, srv, sid, tokens[: min(n, 200)])
        _churn(ctx, sc, srv, sid, tokens)
    finally:
        srv.stop()
    sc.target(f"{n} parked long-polls: server CPU <= 2% of one core",
              sc.value("broker_served_idle_cpu"), "<=", 2.0)  # fmt: skip
    sc.target(
        "operator request meanwhile: p99 <= 50 ms",
        sc.value("broker_served_idle_operator"),
        "<=",
        50.0,
    )
    sc.target(
        "message to a parked agent: wake p99 <= 10 ms",
        sc.value("broker_served_idle_wake"),
        "<=",
        10.0,
    )
    return sc


class _Clients:
    """The agents' client process (``_client_proc``), run from a thread and asked
    over a pipe: ``ask("stats")``, then ``stop()``; ``results`` once it ended."""

    def __init__(
        self, srv: _Served, sid: str, tokens: list[str], wait_s: float, *, timeout: float
    ) -> None:
        import multiprocessing as mp
        import threading

        self.pipe, child = mp.get_context("fork").Pipe()
        self.results: list[dict[str, Any]] = []

        def run() -> None:
            job = (srv.host, srv.port, sid, tokens, wait_s, child)
            self.results.extend(run_workers(_client_proc, [job], timeout=timeout))

        self.runner = threading.Thread(target=run, daemon=True)
        self.runner.start()

    def ask(self, what: str) -> Any:
        self.pipe.send(what)
        return self.pipe.recv()

    def stop(self) -> None:
        self.pipe.send("stop")
        self.runner.join(120)


def _operator_gets(srv: _Served, sid: str, asks: int) -> list[int]:
    """ns of ``asks`` requests ``GET /api/spaces/{id}`` with the operator key,
    one at a time, 10 ms apart."""
    import http.client

    conn = http.client.HTTPConnection(srv.host, srv.port, timeout=60)
    auth = {"Authorization": f"Bearer {srv.key}"}
    lat: list[int] = []
    try:
        for _ in range(asks):
            s = time.perf_counter_ns()
            conn.request("GET", f"/api/spaces/{sid}", headers=auth)
            r = conn.getresponse()
            r.read()
            lat.append(time.perf_counter_ns() - s)
            if r.status != 200:
                raise RuntimeError(f"operator request: {r.status}")
            time.sleep(0.01)
    finally:
        conn.close()
    return lat


def _churn(ctx: Ctx, sc: Scenario, srv: _Served, sid: str, tokens: list[str]) -> None:
    """Operator requests while every agent re-polls (``CHURN_WAIT_S``)."""
    wait = 1.0 if ctx.quick else CHURN_WAIT_S
    clients = _Clients(srv, sid, tokens, wait, timeout=900)
    try:
        _until_parked(srv, len(tokens) * 9 // 10, 120 + len(tokens) * 0.2)
        time.sleep(wait)  # the first waits end: every client in its cycle
        a0 = clients.ask("stats")["answers"]
        lat = _operator_gets(srv, sid, 20 if ctx.quick else 1500)  # ~20 s in a full run
        got = clients.ask("stats")
    finally:
        clients.stop()
    sc.add(Row("broker_served_idle_churn_operator", round(pct(lat, 99) / 1e6, 2), "p99 ms",
               how=f"GET /api/spaces/{{id}} every 10 ms, {len(tokens)} agents re-polling "
                   f"with wait={wait:g} s",
               stats={**latency_stats(lat), "cycles": got["answers"] - a0,
                      "errors": got["errors"]}))  # fmt: skip
    ctx.log(f"  served_idle operator under churn: p99 {pct(lat, 99) / 1e6:.1f} ms, "
            f"slowest {max(lat) / 1e6:.1f} ms")  # fmt: skip


def _repoll(ctx: Ctx, sc: Scenario, srv: _Served, sid: str, tokens: list[str]) -> None:
    """Server CPU per long-poll cycle: the agents re-poll at ``REPOLL_WAIT_S``."""
    clients = _Clients(srv, sid, tokens, REPOLL_WAIT_S, timeout=600)
    time.sleep(REPOLL_WAIT_S * 3)  # every client in its cycle
    a0 = clients.ask("stats")["answers"]
    c0, t0 = server_cpu_seconds(srv.proc.pid), time.monotonic()
    time.sleep(max(2.0, ctx.sizes.idle_seconds / 2))
    c1, t1 = server_cpu_seconds(srv.proc.pid), time.monotonic()
    a1 = clients.ask("stats")["answers"]
    clients.stop()
    cycles = max(1, a1 - a0)
    per_ms = (c1 - c0) / cycles * 1000
    sc.add(Row("broker_served_idle_repoll", round(per_ms, 3), "server CPU ms per long-poll cycle",
               how=f"{len(tokens)} agents re-polling with wait={REPOLL_WAIT_S:g} s",
               stats={"cycles": cycles, "cycles_per_s": round(cycles / (t1 - t0), 1),
                      "cpu_pct": round((c1 - c0) / (t1 - t0) * 100, 2)}))  # fmt: skip
    ctx.log(f"  served_idle repoll: {per_ms:.2f} ms of server CPU per long-poll cycle")
