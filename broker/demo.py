"""The demo swarm: a lead and worker processes exchanging messages in one space.

Real OS processes (multiprocessing, fork) on the embedded SQLite store. Each
worker joins, reports to the lead, greets the others by broadcast and says
goodbye; the lead sends a directive-style instruction to the workers' role.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from broker.client import Agent, Operator
from broker.db import Store


class DemoSummary(BaseModel):
    space: str
    db: str
    participants: int
    messages: int
    reached_nobody: int
    wall_seconds: float
    inspect: list[str]


def _worker(url: str, space: str, n: int, messages: int) -> None:
    store = Store(url)
    me, _ = Agent.join(
        store,
        space,
        f"demo/lead>worker#{n}",
        agent="worker",
        parent="lead",
        role="demo worker",
        archetype="specialist",
        task=f"report {messages} results",
    )
    for i in range(messages):
        me.send("parent", f"result {i + 1}/{messages} from {me.address}")
    me.send("broadcast", f"{me.address} is done")
    me.leave()


def run_demo(
    store: Store,
    workers: int = 4,
    messages: int = 5,
    progress: Callable[[int, int], Any] | None = None,
) -> DemoSummary:
    started = time.perf_counter()
    op = Operator(store)
    space = op.create_space("agentiflow")
    lead, _ = Agent.join(
        store,
        space.id,
        "demo/lead",
        lead=True,
        agent="lead",
        role="coordinator",
        archetype="planner",
        task="collect results",
    )
    op.send(space.id, "Collect one result per worker message, then stop.")
    ctx = mp.get_context("fork")
    procs = [
        ctx.Process(target=_worker, args=(str(store.url), space.id, n, messages))
        for n in range(1, workers + 1)
    ]
    for p in procs:
        p.start()
    expected = workers * (messages + 1)
    while any(p.is_alive() for p in procs):
        got = sum(1 for e in op.log(space.id) if e.sender != "operator" and e.sender != "lead")
        if progress:
            progress(got, expected)
        time.sleep(0.05)
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise RuntimeError(f"demo worker exited with {p.exitcode}")
    entries = op.log(space.id)
    if progress:
        progress(expected, expected)
    lead.leave()
    return DemoSummary(
        space=space.id,
        db=str(store.path),
        participants=workers + 1,
        messages=len(entries),
        reached_nobody=sum(1 for e in entries if e.not_reached and not e.reached),
        wall_seconds=round(time.perf_counter() - started, 3),
        inspect=[
            f"broker message list {space.id}",
            f"broker message participants {space.id}",
            f"sqlite3 {store.path} \"SELECT seq, kind, sender, reached FROM messages WHERE space_id = '{space.id}' ORDER BY seq\"",
        ],
    )
