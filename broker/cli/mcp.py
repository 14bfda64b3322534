"""`broker mcp`: serve the broker's tools to an MCP client over stdio.

An agent: identity from --space/--as/--token or BROKER_SPACE/BROKER_AS/
BROKER_TOKEN, checked before anything is served (a wrong one is one line on
stderr and exit 4). The operator: ``--operator``.
"""

from __future__ import annotations

import click

from broker import errors
from broker.cli._common import fail, identity_options, main, store


@main.command("mcp")
@click.option("--operator", is_flag=True, help="Serve the operator's tools instead of an agent's.")
@identity_options
def mcp(operator: bool, space: str | None, as_: str | None, token: str | None) -> None:
    """Serve MCP tools on stdin/stdout for one agent (or the operator).

    Point an MCP client at `broker mcp` with BROKER_SPACE, BROKER_AS and
    BROKER_TOKEN in its environment: the agent's tools (msg_send, board_*,
    inbox_next, inbox_seen) act as that agent, and no tool takes a sender."""
    try:
        from broker.mcp import stdio
    except ImportError as exc:
        fail(
            f"mcp_unavailable: the MCP SDK is not installed ({exc.name}): "
            "pip install 'swarm-broker[mcp]'",
            2,
        )
        return
    if operator:
        stdio.serve_operator(store())
        return
    if not space:
        raise errors.AuthError("no space: pass --space or set BROKER_SPACE")
    stdio.serve_agent(store(), space, as_ or "", token)
