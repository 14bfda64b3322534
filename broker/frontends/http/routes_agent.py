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
from broker.frontends.http.api import Call, Endpoint, Query
from broker.frontends.http.results import Me
from broker.model.records import (
    SearchHit,
    SendResult,
)
from broker.vocab import (
    SEARCH_DEFAULT,
    SEARCH_MAX,
    SEARCH_SYNTAX,
)


def _me(call: Call) -> Agent:
    me: Agent = call.state.agent_for(call)
    return me


async def me(call: Call) -> Any:
    agent: Agent = call.caller
    return Me(space_id=agent.space_id, address=agent.address)


async def search(call: Call) -> Any:
    a, q = _me(call), call.query
    return await call.state.run(
        lambda: a.search(
            q["query"] or "",
            sender=q["from"],
            to=q["to"],
            kinds=q["kind"] or None,
            since=q["since"],
            limit=q["limit"] or 20,
        )
    )


async def send_many(call: Call) -> Any:
    a, b = _me(call), call.body
    return await call.state.write(lambda tx: a.send_many(b.items, tx=tx))


AGENT = "/api/{kind}/{id}/agent"
SEARCH_QUERY = (
    Query("query", "str", f"the words to find: {SEARCH_SYNTAX}"),
    Query("from", "str", "only messages this address sent"),
    Query("to", "str", "only messages addressed to, or that reached, this address"),
    Query("kind", "list", "only these kinds (repeatable)"),
    Query("since", "time", "only messages logged at or after this UTC time"),
    Query("limit", "int", f"at most this many (default {SEARCH_DEFAULT})", 1, SEARCH_MAX),
)


def endpoints() -> list[Endpoint]:
    def ep(method: str, path: str, fn: Any, summary: str, **kw: Any) -> Endpoint:
        return Endpoint(method, AGENT + path, fn, "agent", summary, tag="agent", **kw)

    return [
        Endpoint("GET", "/api/me", me, "agent", "Who this token is (space and address)",
                 returns=Me, tag="agent"),
        ep("GET", "/search", search, "Full-text search of what you sent or received (S36)",
           query=SEARCH_QUERY, returns=list[SearchHit]),
        ep("POST", "/send-many", send_many, "Many msg.send in one transaction",
           body=bodies.SendManyBody, returns=list[SendResult]),
    ]  # fmt: skip
