"""``broker mcp`` over stdio: one agent (or the operator) per process.

The identity is checked before the server starts, so a wrong token is one
line on stderr and exit 4, never a half-started server (S10, S29).
"""

from __future__ import annotations

import anyio

from broker.api.aio import AsyncAgent, AsyncOperator
from broker.api.handles import Agent, Operator, Store
from broker.frontends.mcp.server import agent_server, operator_server


def serve_agent(store: Store, space: str, address: str, token: str | None) -> None:
    """Serve the agent ``address`` of ``space`` on stdin/stdout until the client leaves."""
    agent = AsyncAgent.wrap(Agent.connect(store, space, address, token))  # raises AuthError
    server = agent_server(agent)
    anyio.run(server.run_stdio_async, backend="asyncio")


def serve_operator(store: Store) -> None:
    """Serve the operator's tools on stdin/stdout."""
    operator = AsyncOperator.wrap(Operator(store, via="mcp"))
    server = operator_server(operator)
    anyio.run(server.run_stdio_async, backend="asyncio")
