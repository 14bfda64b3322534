"""``broker serve --workers N`` (docs/served.md, Workers): a pre-fork master,
N real worker processes accepting on the same listeners.

Real processes throughout: the server is ``python -m broker serve``, agents
are HTTP clients on their own connections, a worker is killed with SIGKILL,
and the log is read from the database file itself."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trusted

from broker import Operator, Store
from tests.frontends.http.test_served_limits import http
from tests.served import Server

pytestmark = pytest.mark.timeout(300)


def _workers(server: Server) -> set[int]:
    """The master's live children: its workers."""
    pid = server.proc.pid
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return {int(p) for p in f.read().split()}


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture
def two(tmp_path: Path) -> Iterator[tuple[Server, Store, str]]:
    server = Server(tmp_path / "home", "--quiet", "--workers", "2")
    store = Store(server.url)
    try:
        with server.client(server.key, timeout=60) as op:
            r = op.post("/api/spaces", json={"kind": "workflow"})
            assert r.status_code == 201, r.text
        yield server, store, r.json()["id"]
    finally:
        store.close()
        server.stop()


def test_two_workers_answer_agents_and_every_write_is_in_the_log_once(
    two: tuple[Server, Store, str],
) -> None:
    server, store, space = two
    assert len(_workers(server)) == 2
    trusted.join(store, space, "sink")
    agents = [trusted.join(store, space, f"a{i}")[1].token for i in range(8)]
    pids: Counter[int] = Counter()
    sent: list[str] = []
    lock = threading.Lock()
    failures: list[str] = []

    def agent(i: int, token: str) -> None:
        # Each round on a new connection, so the kernel hands them to both workers.
        for round_ in range(6):
            unix = (i + round_) % 2 == 0
            with server.client(token, unix=unix, timeout=60) as c:
                for k in range(4):
                    text = f"a{i}-{round_}-{k}"
                    r = c.post(f"/api/spaces/{space}/agent/send", json={"to": "sink", "text": text})
                    if r.status_code != 200:
                        failures.append(r.text)
                        return
                    with lock:
                        pids[int(r.headers["x-broker-worker"])] += 1
                        sent.append(text)

    threads = [threading.Thread(target=agent, args=(i, t)) for i, t in enumerate(agents)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(240)
    assert not failures, failures[0]
    assert len(sent) == 8 * 6 * 4
    # both workers answered agents, and each pid is one of the master's workers
    assert set(pids) == _workers(server), pids
    # every write is in the log exactly once, whichever worker committed it
    logged = [m.body for m in Operator(store).log(space, limit=10_000) if m.sender.startswith("a")]
    assert sorted(logged) == sorted(sent)
    assert len(set(logged)) == len(logged)


def test_a_killed_worker_is_restarted_and_sigterm_stops_every_worker(
    two: tuple[Server, Store, str],
) -> None:
    server, store, space = two
    first = _workers(server)
    assert len(first) == 2
    victim = min(first)
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        now = _workers(server)
        if victim not in now and len(now) == 2:
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"no worker replaced {victim}: {_workers(server)}")
    assert f"worker {victim} ended (signal SIGKILL); starting another" in server.output()
    # the server keeps answering, on both listeners, from live workers
    token = trusted.join(store, space, "after")[1].token
    for unix in (False, True):
        with server.client(token, unix=unix, timeout=60) as c:
            r = c.post(f"/api/spaces/{space}/agent/send", json={"to": "after", "text": "hi"})
            assert r.status_code == 200, r.text
            assert int(r.headers["x-broker-worker"]) in now
    # SIGTERM to the master: every worker stops, the master exits 0, the socket goes
    workers = _workers(server)
    assert server.terminate(60) == 0
    assert not [pid for pid in workers if _alive(pid)]
    assert not Path(server.socket).exists()
    with pytest.raises(httpx.TransportError):
        httpx.get(server.base + "/healthz", timeout=5)


def test_S41_wait_caps_are_split_between_workers_each_holds_its_share(tmp_path: Path) -> None:
    """--max-waits-per-agent 2 over 2 workers: each worker parks at most 1 wait
    of a participant (2 / 2, rounded up); the rest are 429 at once.

    The parked claims end with a message each as soon as every request is
    known to be answered or parked, else with their 6 s wait: 7 refusals
    (one worker took them all: its 1 parked is the 8th), or 6 refusals from
    both workers (each refused: each holds its 1). Six from one worker alone
    leave the 8th undecided (parked on the other worker, or not yet refused)."""
    server = Server(tmp_path / "home", "--quiet", "--workers", "2", "--max-waits-per-agent", "2")
    store = Store(server.url)
    try:
        with server.client(server.key, timeout=60) as op:
            space = op.post("/api/spaces", json={"kind": "workflow"}).json()["id"]
        token = trusted.join(store, space, "a")[1].token
        sender, _ = trusted.join(store, space, "sender")
        claim = f"/api/spaces/{space}/agent/inbox/claim"

        async def main() -> tuple[list[tuple[int, dict[str, str], Any]], int]:
            asks = [
                asyncio.create_task(http(server, "POST", claim, token, {"wait": 6}))
                for _ in range(8)
            ]
            while not all(t.done() for t in asks):
                refusals = [t.result()[1] for t in asks if t.done() and t.result()[0] == 429]
                by = {h["x-broker-worker"] for h in refusals}
                if len(refusals) == 7 or (len(refusals) == 6 and len(by) == 2):
                    for i in range(8 - len(refusals)):  # one message per parked wait
                        await asyncio.to_thread(sender.send, "a", f"wake {i}")
                    return list(await asyncio.gather(*asks)), 8 - len(refusals)
                await asyncio.sleep(0.02)
            return [t.result() for t in asks], 0

        answers, woke = asyncio.run(main())
        parked = Counter(int(h["x-broker-worker"]) for s, h, _ in answers if s == 200)
        refused = [b for s, _, b in answers if s == 429]
        assert all(n == 1 for n in parked.values()), parked  # each worker: its share, 1
        assert sum(parked.values()) + len(refused) == 8
        assert 1 <= sum(parked.values()) <= 2
        assert all(b["error"] == "too_many_waits" for b in refused)
        assert all("a already has 1 waits parked" in b["message"] for b in refused)
        got = sorted(d["body"] for s, _, b in answers if s == 200 for d in b["deliveries"])
        assert got == [f"wake {i}" for i in range(woke)]  # woken by their message, or none came
    finally:
        store.close()
        server.stop()


def test_routes_put_the_operations_first_without_changing_which_route_a_url_meets() -> None:
    from broker.frontends.http import operations, routes_agent, routes_operator
    from broker.frontends.http.app import route_order

    declared = routes_operator.endpoints() + routes_agent.endpoints() + operations.endpoints()
    routed = route_order(declared)
    assert routed[0].op is not None and routed[0].op.caller == "agent"  # a send meets it first

    def paths(eps: list[Any]) -> list[str]:
        return list(dict.fromkeys(ep.path for ep in eps))

    def overlap(a: str, b: str) -> bool:
        x, y = a.split("/"), b.split("/")
        return len(x) == len(y) and all(
            p == q or p.startswith("{") or q.startswith("{") for p, q in zip(x, y, strict=True)
        )

    before, after = paths(declared), paths(routed)
    assert sorted(before) == sorted(after)
    flipped = [
        (a, b)
        for i, a in enumerate(before)
        for b in before[i + 1 :]
        if overlap(a, b) and after.index(a) > after.index(b)
    ]
    assert flipped == []
    # a declared route a hand-written one before it could shadow keeps its place
    assert after.index("/api/spaces/stream") < after.index("/api/{kind}/{id}")
    # the check sees an overlap where there is one
    assert overlap("/api/{kind}/{id}/agent/send", "/api/{kind}/{id}/{x}/send")


def test_sigint_to_the_master_stops_every_worker_too(tmp_path: Path) -> None:
    server = Server(tmp_path / "home", "--quiet", "--workers", "2")
    try:
        workers = _workers(server)
        assert len(workers) == 2
        server.proc.send_signal(signal.SIGINT)
        assert server.proc.wait(60) == 0
        assert not [pid for pid in workers if _alive(pid)]
        assert not Path(server.socket).exists()
    finally:
        server.stop()
