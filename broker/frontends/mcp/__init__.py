"""broker over the Model Context Protocol (spec §Served mode).

``broker mcp`` serves one agent over stdio (its identity from the
environment at start), ``broker mcp --operator`` the operator; ``http_app``
is the streamable-HTTP app ``broker serve`` mounts at ``/mcp`` (identity
from the Bearer token). Built on the official MCP Python SDK (the ``mcp``
extra); the tools are in ``broker.frontends.mcp.agent`` and ``broker.frontends.mcp.operator``.
Names load on first use, so ``broker.frontends.mcp.config`` works without the SDK.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from broker.frontends.mcp.http import http_app as http_app
    from broker.frontends.mcp.server import AgentServer as AgentServer
    from broker.frontends.mcp.server import agent_server as agent_server
    from broker.frontends.mcp.server import operator_server as operator_server

_WHERE = {
    "AgentServer": "broker.frontends.mcp.server",
    "http_app": "broker.frontends.mcp.http",
    "agent_server": "broker.frontends.mcp.server",
    "operator_server": "broker.frontends.mcp.server",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'broker.frontends.mcp' has no attribute {name!r}")
