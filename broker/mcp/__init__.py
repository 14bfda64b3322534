"""broker over the Model Context Protocol (spec §Served mode).

``broker mcp`` serves one agent over stdio (its identity from the
environment at start), ``broker mcp --operator`` the operator; ``http_app``
is the streamable-HTTP app ``broker serve`` mounts at ``/mcp`` (identity
from the Bearer token). Built on the official MCP Python SDK (the ``mcp``
extra); tools are in ``broker.mcp.agent`` and ``broker.mcp.operator``.
"""

from __future__ import annotations

from broker.mcp.server import AgentServer, agent_server, operator_server

__all__ = ["AgentServer", "agent_server", "operator_server"]
