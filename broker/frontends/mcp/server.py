"""Assembling the MCP servers: an agent's (tools, resources, mail
notifications) and the operator's.

Resources: ``broker://inbox`` (how much is waiting for the agent, never the
bodies: those are read framed, through ``inbox_next``, S17) and
``broker://board`` (the board's latest entries). When mail arrives, the
agent's doorbell (S20) rings a watcher that tells subscribed clients
``broker://inbox`` changed: on the handshake protocol versions by
``notifications/resources/updated`` after ``resources/subscribe``, on
2026-07-28 by the ``subscriptions/listen`` stream. A client can so wake on
mail without polling.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
from mcp.server.subscriptions import InMemorySubscriptionBus, ResourceUpdated
from mcp_types import EmptyResult, SubscribeRequestParams, UnsubscribeRequestParams

from broker import errors
from broker.api.aio import AsyncAgent, AsyncOperator
from broker.frontends.mcp import agent as agent_tools
from broker.frontends.mcp import operator as operator_tools
from broker.frontends.mcp.core import BrokerMCP, rpc_error
from broker.model.records import to_dict
from broker.vocab import BOARD_READ_MAX

log = logging.getLogger("broker.mcp")

INBOX_URI = "broker://inbox"
BOARD_URI = "broker://board"
BOARD_RESOURCE_LIMIT = 100


class AgentServer(BrokerMCP[AsyncAgent]):
    """One agent's MCP server: its tools, its resources, its mail notifications."""

    def __init__(self, agent: AsyncAgent) -> None:
        self._bus = InMemorySubscriptionBus()
        self._legacy: dict[Any, set[str]] = {}  # session -> subscribed URIs (handshake era)
        super().__init__(
            agent,
            agent_tools.AGENT_TOOLS,
            offered=lambda: agent_tools.granted(agent),
            instructions=agent_tools.instructions(agent),
            subscriptions=self._bus,
            lifespan=_watching,
        )
        self.resource(
            INBOX_URI,
            name="inbox",
            title="Your inbox",
            description=(
                "How many messages wait for you. Subscribe to it to be told when mail "
                "arrives; read the messages themselves with inbox_next."
            ),
            mime_type="application/json",
        )(self._inbox)
        self.resource(
            BOARD_URI,
            name="board",
            title="The board",
            description=f"The board's latest {BOARD_RESOURCE_LIMIT} posts, directives and "
            "retractions (board_read pages through all of it).",
            mime_type="application/json",
        )(self._board)
        low = self._lowlevel_server
        low.add_request_handler("resources/subscribe", SubscribeRequestParams, self._subscribe)
        low.add_request_handler(
            "resources/unsubscribe", UnsubscribeRequestParams, self._unsubscribe
        )

    # --- resources -----------------------------------------------------------------
    async def _waiting(self) -> int:
        # The token first: ``me()`` reads the row by address, so alone it
        # would answer a left holder's old token with its successor's count.
        await self.caller.granted()
        return (await self.caller.me()).waiting

    async def _inbox(self) -> str:
        try:
            waiting = await self._waiting()
        except errors.BrokerError as exc:
            raise rpc_error(exc) from None
        return json.dumps(
            {
                "address": self.caller.address,
                "space": self.caller.space_id,
                "waiting": waiting,
                "next": "call inbox_next to take them" if waiting else "nothing waiting",
            }
        )

    async def _board(self) -> str:
        try:
            entries = await self.caller.board_read(limit=BOARD_READ_MAX)
        except errors.BrokerError as exc:
            raise rpc_error(exc) from None
        latest = entries[-BOARD_RESOURCE_LIMIT:]
        return json.dumps({"entries": [to_dict(e) for e in latest]}, ensure_ascii=False)

    # --- resources/subscribe (protocol versions up to 2025-11-25) -------------------
    async def _subscribe(self, ctx: Any, params: SubscribeRequestParams) -> EmptyResult:
        self._legacy.setdefault(ctx.session, set()).add(str(params.uri))
        return EmptyResult()

    async def _unsubscribe(self, ctx: Any, params: UnsubscribeRequestParams) -> EmptyResult:
        self._legacy.get(ctx.session, set()).discard(str(params.uri))
        return EmptyResult()

    async def notify(self, uri: str) -> None:
        """Tell every subscriber (either protocol era) that ``uri`` changed."""
        await self._bus.publish(ResourceUpdated(uri=uri))
        for session, uris in list(self._legacy.items()):
            if uri not in uris:
                continue
            try:
                await session.send_resource_updated(uri)
            except Exception:  # noqa: BLE001 - a closed session stops listening
                self._legacy.pop(session, None)

    async def watch_inbox(self) -> None:
        """Ring ``broker://inbox`` subscribers each time new mail is waiting.

        The doorbell is bound before the first count (the order of S20), so
        mail committed in between is still seen."""
        agent = self.caller
        seen = -1
        async with agent.doorbell() as bell:
            while True:
                waiting = await self._waiting()
                if waiting > 0 and waiting != seen:
                    await self.notify(INBOX_URI)
                seen = waiting
                await bell.wait(3600.0)


@contextlib.asynccontextmanager
async def _watching(server: Any) -> AsyncIterator[dict[str, Any]]:
    """The server's lifespan: the inbox watcher runs while the server does."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(_watch_forever, server)
        try:
            yield {}
        finally:
            tg.cancel_scope.cancel()


async def _watch_forever(server: AgentServer) -> None:
    try:
        await server.watch_inbox()
    except errors.BrokerError as exc:  # the agent left, its token was replaced: nothing to watch
        log.info("the inbox watcher of %s ended: %s", server.caller.address, exc.code)
    except Exception:  # noqa: BLE001 - notifications are a convenience: never kill the server
        log.exception("the inbox watcher stopped; clients will not be told of new mail")


def agent_server(agent: AsyncAgent) -> AgentServer:
    """The MCP server of one agent (its identity fixed for the server's life)."""
    return AgentServer(agent)


def operator_server(operator: AsyncOperator) -> BrokerMCP[AsyncOperator]:
    """The operator's MCP server (``messages_send`` and the views)."""
    return BrokerMCP(
        operator,
        operator_tools.OPERATOR_TOOLS,
        instructions=operator_tools.INSTRUCTIONS,
    )
