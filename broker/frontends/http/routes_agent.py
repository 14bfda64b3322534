"""The agent's one hand-written endpoint: ``GET /api/me``, who a token is.

Every other agent endpoint is a declared operation's
(``broker.frontends.http.operations``). This one names no space in its path:
a client holding only a token asks it which space and address are its own
(``RemoteAgent.from_token``), before it can build the paths of the others.
"""

from __future__ import annotations

from typing import Any

from broker.api.handles import Agent
from broker.frontends.http.api import Call, Endpoint
from broker.frontends.http.results import Me


async def me(call: Call) -> Any:
    agent: Agent = call.caller
    return Me(space_id=agent.space_id, address=agent.address)


def endpoints() -> list[Endpoint]:
    return [
        Endpoint("GET", "/api/me", me, "agent", "Who this token is (space and address)",
                 returns=Me, tag="agent"),
    ]  # fmt: skip
