"""Served mode (spec §Targets): the store behind ``broker serve``.

- ``served_send``: 32 client processes sending over HTTP (keep-alive
  connections, loopback TCP) to a real server, against the same 32 processes
  sending embedded (each opening the file), in the same run: aggregate
  msg/s and per-send p99. Targets: HTTP p99 <= 50 ms; HTTP aggregate >= the
  embedded aggregate. The server's group-commit counters are reported. A
  quick run races 4 processes per side (its rows and targets say 4).
- client-mode ``broker msg send`` as a whole process (BROKER_URL on the Unix
  socket) beside the embedded one: target p50 <= 80 ms.
- SSE fan-out: 100 subscribers on one space's stream; the delivery latency
  (send start -> event read by a subscriber) p50/p99 over every pair.
- A stalled SSE subscriber (connected, reading nothing) beside one writer:
  the writer's rate with it against without it, in the same run.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.core import Ctx, Row, Scenario, body, latency_stats, pct, run_workers
from bench.peers.broker_queue import LIMITS

READY = re.compile(r"broker serve: unix://(\S+) http://(\S+)")


class _Served:
    """A ``broker serve`` process on a scratch store."""

    def __init__(self, folder: Path, args: list[str] | None = None) -> None:
        self.folder = folder
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("BROKER_") or k == "BROKER_SERVE_PROFILE"
        }
        env["BROKER_HOME"] = str(folder)
        self.env = env
        self.logfile = open(folder / "serve.log", "w+b")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "broker", "serve", "--port", "0", "--quiet", *(args or [])],
            stdout=self.logfile,
            stderr=self.logfile,
            env=env,
        )
        deadline = time.monotonic() + 60
        while True:
            found = READY.search((folder / "serve.log").read_text(errors="replace"))
            if found:
                self.socket, hostport = found.group(1), found.group(2)
                self.host, port = hostport.rsplit(":", 1)
                self.port = int(port)
                break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError((folder / "serve.log").read_text())
            time.sleep(0.05)
        self.key = (folder / "broker.db.operator-key").read_text().strip()
        self.url = f"sqlite:///{folder / 'broker.db'}"

    def request(self, method: str, path: str, secret: str, payload: Any = None) -> Any:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            data = None if payload is None else json.dumps(payload)
            conn.request(method, path, body=data, headers={"Authorization": f"Bearer {secret}"})
            return json.loads(conn.getresponse().read())
        finally:
            conn.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.logfile.close()


def _http_sender(
    barrier: Any, host: str, port: int, sid: str, token: str, n: int
) -> dict[str, Any]:
    conn = http.client.HTTPConnection(host, port, timeout=60)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    path = f"/api/spaces/{sid}/agent/send"
    payloads = [json.dumps({"to": ["sink"], "text": body(i)}) for i in range(n)]
    conn.request("GET", "/healthz")
    conn.getresponse().read()  # connected before the start
    lat: list[int] = []
    errors = 0
    barrier.wait()
    t0 = time.perf_counter()
    for p in payloads:
        s = time.perf_counter_ns()
        conn.request("POST", path, body=p, headers=headers)
        r = conn.getresponse()
        r.read()
        lat.append(time.perf_counter_ns() - s)
        errors += r.status != 200
    return {"seconds": time.perf_counter() - t0, "lat": lat, "errors": errors, "t0": t0}


def _embedded_sender(
    barrier: Any, url: str, sid: str, address: str, token: str, n: int
) -> dict[str, Any]:
    from broker import Agent, Store

    store = Store(url)
    me = Agent.connect(store, sid, address, token)
    lat: list[int] = []
    barrier.wait()
    t0 = time.perf_counter()
    for i in range(n):
        s = time.perf_counter_ns()
        me.send("sink", body(i))
        lat.append(time.perf_counter_ns() - s)
    return {"seconds": time.perf_counter() - t0, "lat": lat, "errors": 0, "t0": t0}


def _aggregate(results: list[dict[str, Any]], n: int) -> tuple[float, list[int], int]:
    bad = [r for r in results if "error" in r]
    if bad:
        raise RuntimeError(bad[0]["error"])
    start = min(r["t0"] for r in results)
    end = max(r["t0"] + r["seconds"] for r in results)
    lat = [x for r in results for x in r["lat"]]
    return len(results) * n / (end - start), lat, sum(r["errors"] for r in results)


def served(ctx: Ctx) -> Scenario:
    quick = ctx.quick
    # A quick run races 4 processes per side (forking and connecting 64 was
    # most of its time); the full run, which judges the targets, races 32.
    procs = 4 if quick else 32
    per = 30 if quick else 300
    http_label, embedded_label = (
        f"broker_http_{procs}_clients",
        f"broker_embedded_{procs}_processes",
    )
    sc = Scenario("served", f"served mode: {procs} clients over HTTP vs embedded", unit="msg/s")
    sc.params = {
        "processes": procs,
        "sends_per_process": per,
        "transport": "HTTP/1.1 keep-alive, loopback TCP",
    }
    from broker import Operator, Store

    srv = _Served(ctx.scratch("served"))
    try:
        store = Store(srv.url)
        sid = Operator(store).create_space("workflow", **LIMITS).id
        Operator(store).join(sid, "sink")
        http_tokens = [Operator(store).join(sid, f"h{i}")[1].token for i in range(procs)]
        emb = [(f"e{i}", Operator(store).join(sid, f"e{i}")[1].token) for i in range(procs)]
        before = srv.request("GET", "/healthz", "")
        # embedded first, then HTTP, then embedded again (the machine drifts): the best of
        # each; a quick run measures each once (its figures are indicative only).
        runs: dict[str, list[tuple[float, list[int], int]]] = {"embedded": [], "http": []}
        order = ("embedded", "http") if quick else ("embedded", "http", "embedded", "http")
        for system in order:
            if system == "http":
                args = [(srv.host, srv.port, sid, t, per) for t in http_tokens]
                res = run_workers(_http_sender, args)
            else:
                args = [(srv.url, sid, a, t, per) for a, t in emb]
                res = run_workers(_embedded_sender, args)
            runs[system].append(_aggregate(res, per))
        after = srv.request("GET", "/healthz", "")
        for system, label in (("http", http_label), ("embedded", embedded_label)):
            rate, lat, errors = max(runs[system], key=lambda r: r[0])
            stats = {
                **latency_stats(lat),
                "errors": errors,
                "rounds": [round(r[0]) for r in runs[system]],
            }
            sc.add(Row(label, round(rate, 1), "msg/s", how=system, stats=stats))
            ctx.log(
                f"  served {label}: {rate:.0f} msg/s, p99 {pct(lat, 99) / 1e6:.1f} ms, errors {errors}"
            )
        writes = after["writes"] - before["writes"]
        txs = after["transactions"] - before["transactions"]
        sc.counts = {"group_commit_writes": writes, "group_commit_transactions": txs,
                     "writes_per_transaction": round(writes / txs, 2) if txs else None}  # fmt: skip
        sc.ratio(http_label, embedded_label)
        http_row = sc.get(http_label)
        p99 = http_row.stats["p99_us"] / 1000 if http_row is not None else None
        sc.target(f"{procs} clients over HTTP: per-send p99 <= 50 ms", p99, "<=", 50.0)
        sc.target(
            f"{procs} clients over HTTP: aggregate >= the {procs} embedded processes",
            sc.ratio_value(http_label, embedded_label), ">=", 1.0,
        )  # fmt: skip
        _cli(ctx, sc, srv, store, sid)
        _fanout(ctx, sc, srv, store, sid, subscribers=100, messages=50 if quick else 300)
        _stalled(ctx, sc, srv, store, sid, messages=300 if quick else 3000)
        store.close()
    finally:
        srv.stop()
    return sc


def _cli(ctx: Ctx, sc: Scenario, srv: _Served, store: Any, sid: str) -> None:
    from broker import Operator

    runs = 3 if ctx.quick else 20
    joined = Operator(store).join(sid, "cli")[1]
    base = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
    script = Path(sys.executable).parent / "broker"
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "broker"]
    cmd += ["msg", "send", "--to", "sink", "hello from the cli"]
    envs = {
        "broker_cli_client_mode": {**base, "BROKER_URL": f"unix://{srv.socket}", "BROKER_TOKEN": joined.token},
        "broker_cli_embedded": {**base, "BROKER_URL": srv.url, "BROKER_SPACE": sid, "BROKER_AS": "cli",
                         "BROKER_TOKEN": joined.token},
    }  # fmt: skip
    walls: dict[str, list[float]] = {k: [] for k in envs}
    for _ in range(runs):
        for name, env in envs.items():
            t = time.perf_counter()
            code = subprocess.run(
                cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            ).returncode
            walls[name].append((time.perf_counter() - t) * 1000)
            if code != 0:
                raise RuntimeError(f"{name}: broker msg send exited {code}")
    for name, w in walls.items():
        sc.add(Row(name, round(pct(w, 50), 1), "wall p50 ms", how=" ".join(cmd[-5:]),
                   stats={"wall_p50_ms": round(pct(w, 50), 1), "wall_p99_ms": round(pct(w, 99), 1)}))  # fmt: skip
        ctx.log(f"  served {name}: p50 {pct(w, 50):.0f} ms")
    sc.target(
        "client-mode `broker msg send` process p50 <= 80 ms",
        round(pct(walls["broker_cli_client_mode"], 50), 1),
        "<=",
        80.0,
    )


def _fanout(
    ctx: Ctx, sc: Scenario, srv: _Served, store: Any, sid: str, *, subscribers: int, messages: int
) -> None:
    from broker import Operator

    sid = Operator(store).create_space("workflow", **LIMITS).id  # a fresh log: no backlog to stream
    Operator(store).join(sid, "sink")
    token = Operator(store).join(sid, "announcer")[1].token
    got: list[list[int]] = [[] for _ in range(subscribers)]
    ready = threading.Barrier(subscribers + 1)
    marker = re.compile(rb'"body":"fan (\d+) (\d+)"')
    socks: list[socket.socket] = []

    def subscribe(i: int) -> None:
        s = socket.create_connection((srv.host, srv.port))
        socks.append(s)
        after = 0
        s.sendall(f"GET /api/spaces/{sid}/messages/stream HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {srv.key}\r\n"
                  f"Last-Event-ID: {after}\r\n\r\n".encode())  # fmt: skip
        ready.wait()
        buf = b""
        while len(got[i]) < messages:
            chunk = s.recv(65536)
            if not chunk:
                return
            now = time.perf_counter_ns()
            buf += chunk
            for m in marker.finditer(buf):
                got[i].append(now - int(m.group(2)))
            buf = buf[buf.rfind(b"\n") + 1 :]

    threads = [
        threading.Thread(target=subscribe, args=(i,), daemon=True) for i in range(subscribers)
    ]
    for t in threads:
        t.start()
    ready.wait()
    time.sleep(0.5)  # every stream attached
    conn = http.client.HTTPConnection(srv.host, srv.port, timeout=60)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    for n in range(messages):
        payload = json.dumps({"to": ["sink"], "text": f"fan {n} {time.perf_counter_ns()}"})
        conn.request("POST", f"/api/spaces/{sid}/agent/send", body=payload, headers=headers)
        conn.getresponse().read()
        time.sleep(0.01)
    for t in threads:
        t.join(60)
    for s in socks:
        s.close()
    lat = [x for g in got for x in g]
    delivered = sum(len(g) for g in got)
    stats = {**latency_stats(lat), "subscribers": subscribers, "delivered": delivered,
             "expected": subscribers * messages}  # fmt: skip
    sc.add(Row("broker_sse_fanout_100", round(pct(lat, 99) / 1e6, 2), "delivery p99 ms",
               how="send start -> event read, every subscriber", stats=stats))  # fmt: skip
    ctx.log(
        f"  served sse fan-out: {delivered}/{subscribers * messages}, p99 {pct(lat, 99) / 1e6:.1f} ms"
    )


def _send_rate(srv: _Served, sid: str, token: str, n: int) -> float:
    conn = http.client.HTTPConnection(srv.host, srv.port, timeout=60)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    payload = json.dumps({"to": ["sink"], "text": "y" * 2000})
    t0 = time.perf_counter()
    for _ in range(n):
        conn.request("POST", f"/api/spaces/{sid}/agent/send", body=payload, headers=headers)
        r = conn.getresponse()
        r.read()
        if r.status != 200:
            raise RuntimeError(f"send failed: {r.status}")
    conn.close()
    return n / (time.perf_counter() - t0)


def _stalled(ctx: Ctx, sc: Scenario, srv: _Served, store: Any, sid: str, *, messages: int) -> None:
    from broker import Operator

    token = Operator(store).join(sid, "writer")[1].token
    free = _send_rate(srv, sid, token, messages)
    stalled = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.connect(srv.socket)
    stalled.sendall(f"GET /api/spaces/{sid}/messages/stream HTTP/1.1\r\nHost: x\r\n"
                    f"Authorization: Bearer {srv.key}\r\n\r\n".encode())  # fmt: skip
    try:
        held = _send_rate(srv, sid, token, messages)
    finally:
        stalled.close()
    sc.add(Row("broker_writer_alone", round(free, 1), "msg/s", how="one HTTP writer, 2 KB bodies"))
    sc.add(Row("broker_writer_beside_stalled_subscriber", round(held, 1), "msg/s",
               how="the same, with an SSE subscriber that reads nothing"))  # fmt: skip
    sc.ratio("broker_writer_beside_stalled_subscriber", "broker_writer_alone")
    ctx.log(f"  served stalled subscriber: {held:.0f} vs {free:.0f} msg/s alone")
