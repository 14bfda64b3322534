"""The inbox and the board as MCP resources, and a notification when mail
arrives, driven by the doorbell (S20, spec §Served mode): a client wakes on
mail without polling. Both protocol eras the SDK speaks: the handshake one
(resources/subscribe, notifications/resources/updated) and 2026-07-28
(subscriptions/listen). Real ``broker mcp`` processes, the SDK's client."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

import pytest
import trusted
from mcphelp import agent_session

from broker import Store

pytest.importorskip("mcp")

from mcp.client.subscriptions import ResourceUpdated, listen  # noqa: E402
from mcp_types import ResourceUpdatedNotification  # noqa: E402

SEND = (
    "import sys; from broker import Agent, Store; "
    "url, space, me, token, to, body = sys.argv[1:7]; "
    "print(Agent.connect(Store(url), space, me, token).send(to, body).id)"
)


def send_from_another_process(store: Store, space: str, me: str, token: str, to: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", SEND, store.url, space, me, token, to, "mail"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


async def read_json(s: Any, uri: str) -> Any:
    result = await s.client.read_resource(uri)
    return json.loads(result.contents[0].text)


# The SDK warns that resources/subscribe is gone from 2026-07-28 on; clients
# of the handshake versions (every major one today) still use it.
@pytest.mark.filterwarnings("ignore:resources/subscribe is removed")
def test_S20_inbox_subscribers_are_told_of_new_mail_handshake_protocol(
    store: Store, space: str
) -> None:
    _, ja = trusted.join(store, space, "a")
    _, jb = trusted.join(store, space, "b")
    updates: asyncio.Queue[str] = asyncio.Queue()

    async def on_message(message: Any) -> None:
        if isinstance(message, ResourceUpdatedNotification):
            await updates.put(str(message.params.uri))

    async def main() -> None:
        async with agent_session(store, space, "b", jb.token, message_handler=on_message) as s:
            listed = await s.client.list_resources()
            assert {str(r.uri) for r in listed.resources} == {"broker://inbox", "broker://board"}
            assert (await read_json(s, "broker://inbox"))["waiting"] == 0
            await s.client.subscribe_resource("broker://inbox")
            await asyncio.to_thread(send_from_another_process, store, space, "a", ja.token, "b")
            assert await asyncio.wait_for(updates.get(), 30) == "broker://inbox"
            assert (await read_json(s, "broker://inbox"))["waiting"] == 1
            turn = await s.ok("inbox_next")
            assert [i["body"] for i in turn["items"]] == ["mail"]

    asyncio.run(main())


def test_S20_inbox_listeners_are_told_of_new_mail_2026_protocol(store: Store, space: str) -> None:
    _, ja = trusted.join(store, space, "a")
    _, jb = trusted.join(store, space, "b")

    async def main() -> None:
        async with agent_session(store, space, "b", jb.token, modern=True) as s:  # noqa: SIM117
            async with listen(s.client, resource_subscriptions=["broker://inbox"]) as events:
                await asyncio.to_thread(send_from_another_process, store, space, "a", ja.token, "b")
                event = await asyncio.wait_for(events.__anext__(), 30)
                assert isinstance(event, ResourceUpdated) and event.uri == "broker://inbox"

    asyncio.run(main())


def test_S21_the_board_resource_shows_the_latest_entries(store: Store, space: str) -> None:
    a, _ = trusted.join(store, space, "a")
    _, jb = trusted.join(store, space, "b")
    for i in range(3):
        a.post(f"post {i}")

    async def main() -> Any:
        async with agent_session(store, space, "b", jb.token) as s:
            return await read_json(s, "broker://board")

    board = asyncio.run(main())
    assert [e["body"] for e in board["entries"]] == ["post 0", "post 1", "post 2"]
