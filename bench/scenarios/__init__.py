"""The scenarios, by name, in report order. Each is ``fn(ctx) -> Scenario``."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from importlib import import_module

from bench.core import Ctx, Scenario

# name -> (module, function, one-line description)
SCENARIOS: dict[str, tuple[str, str, str]] = {
    "send": ("queues", "send", "single send: one message per transaction"),
    "send_batch": ("queues", "send_batch", "batched send: 100 messages per transaction"),
    "claim_ack": ("queues", "claim_ack", "single claim + ack at a backlog"),
    "claim_ack_batch": ("queues", "claim_ack_batch", "batched claim + ack (100 per lease)"),
    "ack_and_claim": ("queues", "ack_and_claim", "ack the lease and claim the next in one call"),
    "turn": ("turns", "turn", "turn delivery with all four groups, then seen"),
    "broadcast": ("turns", "broadcast", "broadcast fan-out to 10 / 100 / 1,000 participants"),
    "board": ("board", "board", "board key claim / release under contention"),
    "sweep": ("sweep", "sweep", "1..16 processes claiming + acking one shared inbox"),
    "swarm": ("swarm", "swarm", "P agent processes send to neighbours and drain (end-to-end)"),
    "wake": ("wake", "wake", "wake latency across processes (commit -> waiter returns)"),
    "idle_cpu": ("wake", "idle_cpu", "CPU of 100 idle waiters"),
    "backlog": ("backlog", "backlog", "claim latency at 1k / 100k / 1M backlog"),
    "search": ("search", "search", "full-text search p95 over a 100,000-message space (S36)"),
    "cli": ("cli", "cli", "whole-process cost of `broker msg send` and `broker inbox claim`"),
    "mcp": ("mcp", "mcp", "MCP tool-call round trip (stdio) beside the CLI process cost"),
    "pages": (
        "pages",
        "pages",
        "WAL frames per send and bytes on disk per message, per table and index",
    ),
    "served": (
        "served",
        "served",
        "broker serve: 32 HTTP clients vs embedded, client-mode CLI, SSE fan-out",
    ),
    "served_idle": (
        "served_idle",
        "served_idle",
        "broker serve holding 1,000 parked long-polls: CPU, operator p99, wake p99",
    ),
}


def run(name: str, ctx: Ctx) -> Scenario:
    module, fn_name, title = SCENARIOS[name]
    fn: Callable[[Ctx], Scenario] = getattr(import_module(f"bench.scenarios.{module}"), fn_name)
    start = time.perf_counter()
    try:
        sc = fn(ctx)
    except Exception as exc:  # noqa: BLE001 - one broken scenario must not sink the run
        sc = Scenario(name, title, unit="")
        sc.status = "error"
        sc.error = f"{type(exc).__name__}: {exc}"
        ctx.log(traceback.format_exc())
    sc.seconds = round(time.perf_counter() - start, 2)
    return sc
