"""``python -m bench.served_step``: the server's CPU per request of a swarm step.

The served swarm (``bench.scenarios.swarm``, ``served_http``) shares two cores
between the agents' processes and the server, and its rate moves by 10–20 %
from run to run on a loaded machine. This holds the clients out of the way to
read the server alone: ``--clients`` processes, each a pair of agents on raw
sockets with their requests made once (a few µs of client CPU a request),
each looping the swarm's step (a send, the receiver's claim of it, its ack, a
claim of the now empty inbox: ``bench.swarm_step``'s) against one
``broker serve``. Every answer is checked (200, the claim found the message,
the empty claim nothing), or the run stops.

It reports the server's CPU (every thread, every worker) per request and per
step, the clients' per request (small, or the figure is not the server's),
the requests per second, how much the server's resident memory grew per
1,000 requests (a connection that kept what it had answered grew it by
~0.6 KiB a request), the share of requests the lean lane answered, the
group commit's writes per transaction and the share of its transactions the
event loop ran itself
(``/healthz``). Beside it, in the same run, the same step through the
library in one process (``bench.swarm_step``, the broker on one connection):
what the step costs without the server, so that the server's own share
reads as the difference.

With ``--unix`` the clients talk to the server's Unix socket instead of
loopback TCP: what the transport costs the server a request.

python -m bench.served_step --clients 16 --steps 400
python -m bench.served_step --clients 16 --steps 400 --unix
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import re
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.core import count, server_cpu_seconds, server_rss_kib, whole

REQUESTS = ("send", "claim", "ack", "empty claim")
_TOKEN = re.compile(rb'"lease_token":"([^"]+)"')


def _request(path: str, token: str, body: dict[str, Any]) -> bytes:
    data = json.dumps(body).encode()
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    ).encode() + data


class _Conn:
    """One keep-alive connection that reads each answer by its Content-Length."""

    def __init__(self, host: str, port: int, unix: str | None = None) -> None:
        if unix is None:
            self.sock = socket.create_connection((host, port))
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        else:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(unix)
        self.buf = b""

    def ask(self, request: bytes) -> bytes:
        self.sock.sendall(request)
        while (end := self.buf.find(b"\r\n\r\n")) < 0:
            self.buf += self._recv()
        head = self.buf[:end]
        if not head.startswith(b"HTTP/1.1 200 "):
            raise RuntimeError(f"the server answered {head[:60]!r}")
        length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
        while len(self.buf) < end + 4 + length:
            self.buf += self._recv()
        body, self.buf = self.buf[end + 4 : end + 4 + length], self.buf[end + 4 + length :]
        return body

    def _recv(self) -> bytes:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise RuntimeError("the server closed the connection")
        return chunk


def _client(out: Any, barrier: Any, *args: Any) -> None:
    """A sender and its receiver looping the step (``_loop(barrier, *args)``):
    (CPU seconds, steps) of the timed part into ``out``, or the error that
    stopped it."""
    try:
        out.put(_loop(barrier, *args))
    except Exception as exc:  # noqa: BLE001 - said by the parent
        barrier.abort()
        out.put(f"{type(exc).__name__}: {exc}")


def _loop(
    barrier: Any,
    go: Any,
    host: str,
    port: int,
    base: str,
    pair: tuple[Any, Any],
    steps: int,
    warm: int,
    unix: str | None,
) -> tuple[float, int]:
    sender, receiver = pair
    conn = _Conn(host, port, unix)
    send = _request(f"{base}/send", sender.token, {"to": receiver.address, "text": "x" * 64})
    claim = _request(f"{base}/inbox/claim", receiver.token, {"limit": 32})

    def step() -> None:
        conn.ask(send)
        found = _TOKEN.search(got := conn.ask(claim))
        if found is None or b'"deliveries":[]' in got:
            raise RuntimeError(f"the claim found no mail: {got[:120]!r}")
        conn.ask(_request(f"{base}/inbox/ack", receiver.token, {"lease_token": found[1].decode()}))
        if b'"deliveries":[]' not in conn.ask(claim):
            raise RuntimeError("the empty inbox had mail")

    for _ in range(warm):
        step()
    barrier.wait()  # warm: the parent reads the server's CPU, then says go
    if not go.wait(300):
        raise RuntimeError("the parent never said go")
    cpu = time.process_time()
    for _ in range(steps):
        step()
    return time.process_time() - cpu, steps


def measure(
    folder: Path,
    *,
    clients: int,
    steps: int,
    warm: int,
    workers: int | None,
    unix: bool = False,
) -> dict[str, Any]:
    """The server's CPU per request of ``clients`` thin clients looping the step."""
    from bench.peers.broker_queue import join_agent, open_space
    from bench.scenarios.served import _Served
    from broker.frontends.remote.wire import space_path

    store, space = open_space(folder)
    pairs = [
        (join_agent(store, space, f"s{i}"), join_agent(store, space, f"r{i}"))
        for i in range(clients)
    ]
    store.close()
    server = _Served(folder, [] if workers is None else ["--workers", str(workers)])
    try:
        base = f"{space_path(space)}/agent"
        ctx = mp.get_context("fork")
        # Two steps to the start: every client warm (the barrier), then the
        # parent's first CPU reading, then go. With one barrier, a parent
        # descheduled after it read the server's CPU after the clients had
        # run: a window of no requests (a rate in the millions, 0 µs a request).
        barrier, go, out = ctx.Barrier(clients + 1), ctx.Event(), ctx.Queue()
        path = server.socket if unix else None
        procs = [
            ctx.Process(
                target=_client,
                args=(out, barrier, go, server.host, server.port, base, pair, steps, warm, path),
            )
            for pair in pairs
        ]
        for proc in procs:
            proc.start()
        try:
            barrier.wait(timeout=300)
        except Exception:  # noqa: BLE001 - a client's error says why
            raise RuntimeError(str(out.get(timeout=10))) from None
        rss0 = server_rss_kib(server.proc.pid)
        cpu0, t0 = server_cpu_seconds(server.proc.pid), time.perf_counter()
        go.set()
        done = [out.get(timeout=600) for _ in procs]
        wall, cpu = time.perf_counter() - t0, server_cpu_seconds(server.proc.pid) - cpu0
        grown = server_rss_kib(server.proc.pid) - rss0
        for proc in procs:
            proc.join(10)
        failed = [d for d in done if isinstance(d, str)]
        if failed:
            raise RuntimeError(failed[0])
        counted = health(server.host, server.port, workers or 1)
    finally:
        server.stop()
    requests = sum(n for _, n in done) * len(REQUESTS)
    every = (clients * (steps + warm) + 1) * len(REQUESTS)  # the joins' first claims are the app's
    return {
        "clients": clients,
        "workers": workers or 1,
        "over": "unix" if unix else "tcp",
        "requests": requests,
        "requests_per_s": requests / wall,
        "server_us_per_request": 1e6 * cpu / requests,
        "client_us_per_request": 1e6 * sum(c for c, _ in done) / requests,
        "rss_kib_per_1000": 1000 * grown / requests,
        "lean_share": counted["lean"] / every,
        **group_commit(counted),  # over the whole run (warm-up included)
    }


COUNTED = ("lean", "transactions", "on_loop", "writes")


def health(host: str, port: int, workers: int) -> dict[str, int]:
    """``/healthz``'s counters summed over every worker (each ``/healthz`` is
    one worker's, named by ``X-Broker-Worker`` when there are several): the
    requests the lean lane answered, the group commit's transactions, those
    run on the event loop, and the writes in them."""
    import http.client

    seen: dict[str, dict[str, int]] = {}
    for _ in range(50 * workers):
        conn = http.client.HTTPConnection(host, port, timeout=10)
        try:
            conn.request("GET", "/healthz")
            response = conn.getresponse()
            answer = json.loads(response.read())
            seen[response.getheader("x-broker-worker") or ""] = {k: answer[k] for k in COUNTED}
        finally:
            conn.close()
        if len(seen) >= workers:
            break
    return {k: sum(one[k] for one in seen.values()) for k in COUNTED}


def group_commit(counted: dict[str, int]) -> dict[str, float]:
    """How the group commit ran, from ``health``'s counters: the writes a
    transaction, and the share of its transactions the event loop ran itself."""
    transactions = max(1, counted["transactions"])
    return {
        "writes_per_transaction": counted["writes"] / transactions,
        "on_loop_share": counted["on_loop"] / transactions,
    }


def embedded_step(folder: Path, steps: int, warm: int) -> float:
    """µs of the same step through the library in one process (one connection)."""
    from bench.swarm_step import measure as step

    return sum(step(folder, "broker", "one", steps=steps, warm=warm).values())


def report(got: dict[str, Any], embedded: float) -> str:
    per_step = got["server_us_per_request"] * len(REQUESTS)
    return "\n".join(
        [
            "| clients | workers | over | requests/s | server µs / request | server µs / step | "
            "client µs / request | server KiB / 1,000 requests | lean lane | "
            "writes / transaction | on the loop | embedded µs / step |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
            f"| {got['clients']} | {got['workers']} | {got['over']} | {got['requests_per_s']:,.0f} | "
            f"{got['server_us_per_request']:.0f} | {per_step:.0f} | "
            f"{got['client_us_per_request']:.0f} | {got['rss_kib_per_1000']:.0f} | "
            f"{got['lean_share']:.0%} | "
            f"{got['writes_per_transaction']:.1f} | {got['on_loop_share']:.0%} | {embedded:.0f} |",
            "",
            f"server ÷ embedded per step: {per_step / embedded:.2f} (the step: "
            + ", ".join(REQUESTS)
            + ")",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.served_step",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--clients", type=count, default=16)
    parser.add_argument("--steps", type=count, default=400, help="steps per client")
    parser.add_argument("--warm", type=whole, default=20)
    parser.add_argument("--workers", type=count, default=None, help="broker serve --workers")
    parser.add_argument(
        "--unix", action="store_true", help="the clients on the server's Unix socket, not TCP"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-served-step-") as tmp:
        got = measure(
            Path(tmp) / "served",
            clients=args.clients,
            steps=args.steps,
            warm=args.warm,
            workers=args.workers,
            unix=args.unix,
        )
        embedded = embedded_step(Path(tmp), steps=args.steps * 4, warm=args.warm)
    print(report(got, embedded))


if __name__ == "__main__":
    main()
