"""Agent endpoints: the participant's token as Bearer; the server derives the
sender from it (S10). Bodies are closed (a ``sender`` field is refused).

Paths name the space (``/api/{kind}/{id}/agent/...``); a token of another
space is ``auth_failed`` (401), like a wrong one. Writes go through the group
committer; ``wait`` on a claim or a turn is a long-poll woken by the
participant's doorbell.
"""

from __future__ import annotations

from typing import Any

from broker.api.handles import Agent
from broker.frontends.http import bodies
from broker.frontends.http.api import Call, Endpoint
from broker.frontends.http.results import Me
from broker.model.records import SendResult


def _me(call: Call) -> Agent:
    me: Agent = call.state.agent_for(call)
    return me


async def me(call: Call) -> Any:
    agent: Agent = call.caller
    return Me(space_id=agent.space_id, address=agent.address)


async def send_many(call: Call) -> Any:
    a, b = _me(call), call.body
    return await call.state.write(lambda tx: a.send_many(b.items, tx=tx))


AGENT = "/api/{kind}/{id}/agent"


def endpoints() -> list[Endpoint]:
    def ep(method: str, path: str, fn: Any, summary: str, **kw: Any) -> Endpoint:
        return Endpoint(method, AGENT + path, fn, "agent", summary, tag="agent", **kw)

    return [
        Endpoint("GET", "/api/me", me, "agent", "Who this token is (space and address)",
                 returns=Me, tag="agent"),
        ep("POST", "/send-many", send_many, "Many msg.send in one transaction",
           body=bodies.SendManyBody, returns=list[SendResult]),
    ]  # fmt: skip
