"""``broker mcp --print-config``: the entry an MCP client needs, as JSON.

The shape is the ``mcpServers`` map most clients read (Claude Code's
``.mcp.json``, Claude Desktop, Cursor, ...): a command to start with its
environment for stdio, or a URL and an Authorization header for a served
store (streamable HTTP at ``/mcp``). On a local store the identity is checked
before anything is printed, so a wrong token is never written into a
client's config (a served store checks it on the first request). The
operator key is never printed: ``broker mcp --operator`` finds it beside the
database (or in BROKER_OPERATOR_KEY) by itself.
"""

from __future__ import annotations

import re
from typing import Any

SERVED = ("http://", "https://", "unix://")


def _command() -> list[str]:
    # The client starts the server from a folder of its own choosing (often
    # a shared working tree): never `python -m broker` from there, nor a
    # `broker` found on a PATH that may name that folder (S39).
    from broker.api.handles import broker_command

    return broker_command()


def _server_name(address: str) -> str:
    # Clients prefix tool names with the server's name: keep it to [A-Za-z0-9_-].
    return "broker-" + (re.sub(r"[^A-Za-z0-9_-]+", "-", address).strip("-") or "agent")


def agent_entry(url: str, space: str, address: str, token: str) -> dict[str, Any]:
    """The ``mcpServers`` entry serving one agent."""
    if url.startswith(SERVED):
        server: dict[str, Any] = {
            "type": "http",
            "url": url.rstrip("/") + "/mcp/",
            "headers": {"Authorization": f"Bearer {token}"},
        }
    else:
        cmd = _command()
        server = {
            "command": cmd[0],
            "args": [*cmd[1:], "mcp"],
            "env": {
                "BROKER_URL": url,
                "BROKER_SPACE": space,
                "BROKER_AS": address,
                "BROKER_TOKEN": token,
            },
        }
    return {"mcpServers": {_server_name(address): server}}


def operator_entry(url: str) -> dict[str, Any]:
    """The ``mcpServers`` entry serving the operator (the key is found, not printed)."""
    if url.startswith(SERVED):
        server: dict[str, Any] = {
            "type": "http",
            "url": url.rstrip("/") + "/mcp/",
            "headers": {"Authorization": "Bearer ${BROKER_OPERATOR_KEY}"},
        }
    else:
        cmd = _command()
        server = {
            "command": cmd[0],
            "args": [*cmd[1:], "mcp", "--operator"],
            "env": {"BROKER_URL": url},
        }
    return {"mcpServers": {"broker-operator": server}}
