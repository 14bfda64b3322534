"""MCP tool-call round trips over stdio, beside the CLI's whole-process cost.

An agent reached through MCP pays one JSON-RPC round trip per tool call to a
``broker mcp`` process that stays up; an agent using the CLI pays a process
start per call. Both are measured in the same run on the same store:

- ``broker_mcp_msg_send``: ``msg_send`` (one recipient) from the MCP SDK's client to a
  real ``broker mcp`` process over stdio, call to result;
- ``broker_mcp_inbox_next``: ``inbox_next`` with one message waiting (a framed turn),
  then ``inbox_seen`` outside the timing (so every turn has exactly one item);
- ``broker_cli_msg_send`` / ``broker_cli_inbox_claim``: ``broker msg send`` and ``broker inbox
  claim`` as fresh processes (the ``cli`` scenario's launcher);
- ``broker_library_send``: ``Agent.send`` in this process, the floor under both.

Every message sent is accounted for: each MCP-sent one is taken by exactly one
``inbox_next`` (``lost`` and ``duplicates`` are counted).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

from bench.core import Ctx, Row, Scenario, body, pct
from bench.scenarios.cli import _broker_cmd, _run


def mcp(ctx: Ctx) -> Scenario:
    sc = Scenario(
        "mcp",
        "MCP tool call round trip (stdio) beside the CLI's process cost (p50)",
        unit="p50 ms",
        higher_is_better=False,
    )
    try:
        from mcp import ClientSession, StdioServerParameters, stdio_client
    except ImportError as exc:
        sc.add(Row("mcp_sdk", status="skipped", reason=f"MCP SDK not installed ({exc})"))
        return sc

    from broker import Operator, Store

    calls = max(50, ctx.sizes.turns)
    cli_runs = ctx.sizes.cli_runs
    sc.params = {"calls": calls, "cli_runs": cli_runs, "transport": "stdio"}
    folder = ctx.scratch("mcp")
    store = Store(f"sqlite:///{folder / 'broker.db'}")
    space = Operator(store).create_space("workflow", inbox_cap=calls * 4 + 100, sender_share=1).id
    sender, sj = Operator(store).join(space, "sender")
    worker, wj = Operator(store).join(space, "worker")
    base = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}

    def env(address: str, token: str) -> dict[str, str]:
        return {
            **base,
            "BROKER_URL": store.url,
            "BROKER_SPACE": space,
            "BROKER_AS": address,
            "BROKER_TOKEN": token,
        }

    def params(address: str, token: str) -> Any:
        return StdioServerParameters(
            command=sys.executable, args=["-m", "broker", "mcp"], env=env(address, token)
        )

    send_ms: list[float] = []
    next_ms: list[float] = []
    sent: list[str] = []
    taken: list[str] = []

    async def run_mcp() -> None:
        async with (
            stdio_client(params("sender", sj.token)) as (sr, sw),
            ClientSession(sr, sw) as s,
            stdio_client(params("worker", wj.token)) as (wr, ww),
            ClientSession(wr, ww) as w,
        ):
            await s.initialize()
            await w.initialize()
            for i in range(5):  # warm both servers (imports, first statements)
                await s.call_tool("msg_send", {"to": ["worker"], "text": body(i)})
                turn = await w.call_tool("inbox_next", {})
                assert turn.structured_content is not None
                await w.call_tool("inbox_seen", {"turn_id": turn.structured_content["id"]})
            for i in range(calls):
                t0 = time.perf_counter()
                res = await s.call_tool("msg_send", {"to": ["worker"], "text": body(i)})
                send_ms.append((time.perf_counter() - t0) * 1000)
                assert not res.is_error and res.structured_content is not None
                sent.append(res.structured_content["id"])
                t0 = time.perf_counter()
                got = await w.call_tool("inbox_next", {})
                next_ms.append((time.perf_counter() - t0) * 1000)
                assert not got.is_error and got.structured_content is not None
                turn = got.structured_content
                taken.extend(item["id"] for item in turn["items"])
                await w.call_tool("inbox_seen", {"turn_id": turn["id"]})

    try:
        asyncio.run(run_mcp())
        lib_ms: list[float] = []
        for i in range(calls):
            t0 = time.perf_counter()
            sender.send("worker", body(i))
            lib_ms.append((time.perf_counter() - t0) * 1000)
        worker.next_turn(limit=10_000)  # drain what the library floor sent
        cli_walls: dict[str, list[float]] = {
            "broker_cli_msg_send": [],
            "broker_cli_inbox_claim": [],
        }
        cli_errors = {"broker_cli_msg_send": 0, "broker_cli_inbox_claim": 0}
        for _ in range(cli_runs):
            wall, _, code = _run(
                [*_broker_cmd(), "msg", "send", "--to", "worker", "from the cli"],
                env("sender", sj.token),
            )
            cli_walls["broker_cli_msg_send"].append(wall * 1000)
            cli_errors["broker_cli_msg_send"] += code != 0
            wall, _, code = _run(
                [*_broker_cmd(), "inbox", "claim", "--json"], env("worker", wj.token)
            )
            cli_walls["broker_cli_inbox_claim"].append(wall * 1000)
            cli_errors["broker_cli_inbox_claim"] += code != 0
    finally:
        store.close()

    def add(system: str, values: list[float], how: str, errors: int = 0) -> None:
        stats = {
            "p50_ms": round(pct(values, 50), 3),
            "p99_ms": round(pct(values, 99), 3),
            "n": len(values),
            "errors": errors,
        }
        sc.add(Row(system, stats["p50_ms"], "p50 ms", how=how, stats=stats))
        ctx.log(f"  mcp {system}: p50 {stats['p50_ms']} ms, p99 {stats['p99_ms']} ms")

    add("broker_mcp_msg_send", send_ms, "msg_send over stdio to a broker mcp process (SDK client)")
    add("broker_mcp_inbox_next", next_ms, "inbox_next over stdio, one message waiting")
    add("broker_library_send", lib_ms, "Agent.send in process (the floor)")
    add(
        "broker_cli_msg_send",
        cli_walls["broker_cli_msg_send"],
        "`broker msg send` whole process",
        cli_errors["broker_cli_msg_send"],
    )
    add(
        "broker_cli_inbox_claim",
        cli_walls["broker_cli_inbox_claim"],
        "`broker inbox claim --json` whole process",
        cli_errors["broker_cli_inbox_claim"],
    )
    sc.counts = {
        "messages": {
            "sent": len(sent),
            "taken": len(taken),
            "lost": len(set(sent) - set(taken)),
            "duplicates": len(taken) - len(set(taken)),
            "unexpected": len(set(taken) - set(sent)),
        }
    }
    sc.ratio(
        "broker_cli_msg_send", "broker_mcp_msg_send", label="CLI process / MCP call (msg send)"
    )
    sc.ratio("broker_mcp_msg_send", "broker_library_send", label="MCP call / library call (send)")
    sc.notes.append(
        "MCP calls reuse one long-lived broker mcp process per agent; the CLI starts a "
        "process per call. Same store, same machine, same run."
    )
    return sc
