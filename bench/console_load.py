"""``python -m bench.console_load``: what an open console costs a busy server.

One ``broker serve`` on a scratch store, a space of ``--participants``
agents, and an agent sending a message every ``--every`` seconds for
``--seconds`` (each send a commit that rings the space's live view), with the
space's state stream open (``GET .../state/stream``, the console's view) or,
with ``--no-console``, without it. It reports the readings the stream brought
a second, the server's CPU (every thread) as a share of one core, and the
sends' p50 and p99 round trip. Every send is checked (200), and the stream's
first reading must name every participant, or the run stops.

A reading carries the whole space: with a thousand participants it takes
~25 ms of the interpreter the server's event loop shares, so how often the
watcher reads, and how long another thread may hold the interpreter, show in
the sends' tail (bench/results/2026-12-05-stop47-keeper).

python -m bench.console_load --participants 1000 --seconds 20
python -m bench.console_load --participants 1000 --seconds 20 --no-console
"""

from __future__ import annotations

import argparse
import http.client
import json
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.core import count, pct, seconds, server_cpu_seconds
from bench.peers.broker_queue import LIMITS
from bench.scenarios.served import _Served


def run(
    folder: Path, participants: int, seconds: float, every: float, console: bool
) -> dict[str, Any]:
    """The measurement (``main``'s), on a server in ``folder``."""
    from broker import Operator, Store

    srv = _Served(folder)
    try:
        store = Store(srv.url)
        op = Operator(store)
        sid = op.create_space("workflow", **LIMITS).id
        for i in range(participants):
            op.join(sid, f"w{i}")
        talker = op.join(sid, "talker")[1]
        store.close()
        readings: list[float] = []
        first: list[Any] = []
        opened = threading.Event()

        def follow() -> None:
            conn = http.client.HTTPConnection(srv.host, srv.port, timeout=60)
            conn.request("GET", f"/api/spaces/{sid}/state/stream",
                         headers={"Authorization": f"Bearer {srv.key}"})  # fmt: skip
            response = conn.getresponse()
            opened.set()
            event = ""
            while line := response.fp.readline():
                if line.startswith(b"event:"):
                    event = line[6:].strip().decode()
                elif line.startswith(b"data:") and event == "state":
                    readings.append(time.monotonic())
                    if not first:
                        first.append(json.loads(line[5:]))

        if console:
            threading.Thread(target=follow, daemon=True).start()
            opened.wait(30)
            deadline = time.monotonic() + 30
            while not first and time.monotonic() < deadline:
                time.sleep(0.05)
            names = {p["address"] for p in first[0]["participants"]} if first else set()
            if len(names) != participants + 1:
                raise RuntimeError(f"the first reading named {len(names)} participants")
        conn = http.client.HTTPConnection(srv.host, srv.port, timeout=60)
        head = {"Authorization": f"Bearer {talker.token}", "Content-Type": "application/json"}
        body = json.dumps({"to": "w0", "text": "x"})
        took: list[float] = []
        c0, t0, r0 = server_cpu_seconds(srv.proc.pid), time.monotonic(), len(readings)
        while time.monotonic() - t0 < seconds:
            began = time.perf_counter()
            conn.request("POST", f"/api/spaces/{sid}/agent/send", body=body, headers=head)
            response = conn.getresponse()
            response.read()
            if response.status != 200:
                raise RuntimeError(f"send: {response.status}")
            took.append(time.perf_counter() - began)
            time.sleep(every)
        c1, t1 = server_cpu_seconds(srv.proc.pid), time.monotonic()
        return {
            "participants": participants,
            "console": console,
            "readings_per_s": round((len(readings) - r0) / (t1 - t0), 2),
            "server_cpu_pct": round(100 * (c1 - c0) / (t1 - t0), 1),
            "sends": len(took),
            "send_p50_ms": round(pct(took, 50) * 1000, 2),
            "send_p99_ms": round(pct(took, 99) * 1000, 2),
        }
    finally:
        srv.stop()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.console_load", description=__doc__)
    p.add_argument("--participants", type=count, default=1000)
    p.add_argument("--seconds", type=seconds, default=20.0)
    p.add_argument("--every", type=seconds, default=0.02, help="seconds between sends")
    p.add_argument("--no-console", dest="console", action="store_false")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="console-load-") as d:
        got = run(Path(d), a.participants, a.seconds, a.every, a.console)
    print(json.dumps(got))


if __name__ == "__main__":
    main()
