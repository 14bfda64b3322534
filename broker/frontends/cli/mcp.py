"""`broker mcp`: serve the broker's tools to an MCP client over stdio.

An agent: identity from --space/--as/--token or BROKER_SPACE/BROKER_AS/
BROKER_TOKEN, checked before anything is served (a wrong one is one line on
stderr and exit 4). The operator: ``--operator``. ``--print-config`` prints
the client configuration entry instead of serving.
"""

from __future__ import annotations

import json
import os
import sys

import click

from broker import errors
from broker.frontends.cli._common import identity_options, main, store


@main.command("mcp")
@click.option("--operator", is_flag=True, help="Serve the operator's tools instead of an agent's.")
@click.option(
    "--print-config",
    "print_config",
    is_flag=True,
    help="Print the MCP client entry (.mcp.json 'mcpServers') for this identity and exit.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="With --print-config: the entry on one line of JSON."
)
@identity_options
def mcp(
    operator: bool,
    print_config: bool,
    as_json: bool,
    space: str | None,
    as_: str | None,
    token: str | None,
) -> None:
    """Serve MCP tools on stdin/stdout for one agent (or the operator).

    Point an MCP client at `broker mcp` with BROKER_SPACE, BROKER_AS and
    BROKER_TOKEN in its environment: the agent's tools (msg_send, board_*,
    inbox_next, inbox_seen) act as that agent, and no tool takes a sender.
    `broker mcp --print-config` prints that client entry for you."""
    if print_config:
        _print_config(operator, space, as_, token, as_json)
        return
    try:
        from broker.frontends.mcp import stdio
    except ImportError as exc:
        raise errors.InvalidInput(
            f"the MCP SDK is not installed ({exc.name}): pip install 'swarm-broker[mcp]'"
        ) from None
    closed = [name for name in ("stdin", "stdout") if getattr(sys, name) is None]
    if closed:  # `<&-` or `>&-`: there is nothing to serve on
        raise errors.InvalidInput(
            f"broker mcp serves on stdin and stdout, but {' and '.join(closed)} is closed"
        )
    if operator:
        stdio.serve_operator(store())
        return
    if not space:
        raise errors.AuthError("no space: pass --space or set BROKER_SPACE")
    stdio.serve_agent(store(), space, as_ or "", token)


def _print_config(
    operator: bool, space: str | None, as_: str | None, token: str | None, as_json: bool
) -> None:
    from broker.frontends.mcp import config

    root = click.get_current_context().find_root().obj or {}
    url = root.get("url") or os.environ.get("BROKER_URL") or ""
    served = url.startswith(config.SERVED)
    if not served:
        url = store().url
    if operator:
        if not served:
            from broker.api.handles import Operator

            Operator(store())  # the operator key is checked here once the store has one (S29)
        entry = config.operator_entry(url)
    else:
        if not space:
            raise errors.AuthError("no space: pass --space or set BROKER_SPACE")
        if not token:
            raise errors.token_refused()
        if not served:
            from broker.api.handles import Agent

            Agent.connect(store(), space, as_ or "", token)  # never print a wrong identity
        entry = config.agent_entry(url, space, as_ or "", token)
    click.echo(json.dumps(entry) if as_json else json.dumps(entry, indent=2))
