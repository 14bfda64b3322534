"""MCP over streamable HTTP at ``/mcp`` of a real ``broker serve`` process,
driven by the MCP SDK's client (spec §Served mode; S8, S10, S20, S24, S29).

The identity is the Bearer credential: an agent's token serves that agent's
tools, the operator key the operator's; a session opened with one credential
answers another with 404, and no tool takes an identity."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import trusted
from mcphelp import Session, doorbell_waiters, text

from broker import Operator, Store
from broker.frontends.cli._common import COMMANDS

pytest.importorskip("mcp")
if "serve" not in COMMANDS:
    pytest.skip("broker serve is not in this build yet", allow_module_level=True)

import httpx2  # noqa: E402
from mcp import ClientSession  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

# The operator key is Trust's (S29: Operator(store, key=...)); until that is in
# the build, the operator cases are skipped, not faked.
HAS_OPERATOR_KEY = "key" in inspect.signature(Operator.__init__).parameters
READY = re.compile(r"broker serve: unix://(\S+) http://(\S+)")
AGENT_DEFAULT = {
    "msg_send",
    "msg_send_many",  # msg.send's grant: one transaction of many sends
    "board_post",
    "board_read",
    "board_claim",
    "board_release",
    "board_renew",
    "board_reserve",
    "board_unreserve",
    "board_check",
    "inbox_next",
    "inbox_seen",
    "msg_search",  # S36: reads only what the agent sent or received
    "msg_status",
}
SEND = (
    "import sys; from broker import Agent, Store; "
    "url, space, me, token, to, body = sys.argv[1:7]; "
    "print(Agent.connect(Store(url), space, me, token).send(to, body).id)"
)


class Served:
    """``python -m broker serve --port 0`` on the test's store; stopped and reaped."""

    def __init__(self, store: Store) -> None:
        self.log = Path(f"{store.path}.serve.log")
        self._log = open(self.log, "w+b")  # noqa: SIM115 - closed in stop()
        env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
        env["BROKER_URL"] = store.url
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "broker", "serve", "--port", "0", "--quiet"],
            stdout=self._log,
            stderr=self._log,
            env=env,
        )
        deadline = time.monotonic() + 60
        while True:
            found = READY.search(self.log.read_text(errors="replace"))
            if found:
                self.mcp = f"http://{found.group(2)}/mcp"
                break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"broker serve did not start: {self.log.read_text()}")
            time.sleep(0.02)
        self.key = Path(f"{store.path}.operator-key").read_text().strip()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        self.log.unlink(missing_ok=True)


@pytest.fixture
def served(store: Store) -> Iterator[Served]:
    server = Served(store)
    try:
        yield server
    finally:
        server.stop()


@contextlib.asynccontextmanager
async def http_session(url: str, secret: str) -> AsyncIterator[Session]:
    headers = {"Authorization": f"Bearer {secret}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60, read=120)) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as client,
    ):
        await client.initialize()
        yield Session(client, Path(os.devnull))


def test_S24_agent_tools_over_http_by_grant_with_the_broker_errors(
    store: Store, space: str, served: Served
) -> None:
    _, a = trusted.join(store, space, "a")
    _, boss = trusted.join(store, space, "boss", tools=["board.*", "msg.send"])
    trusted.join(store, space, "b")

    async def main() -> None:
        async with http_session(served.mcp, boss.token) as s:
            assert await s.tool_names() == AGENT_DEFAULT | {"board_directive", "board_retract"}
        async with http_session(served.mcp, a.token) as s:
            assert await s.tool_names() == AGENT_DEFAULT
            sent = await s.ok("msg_send", to=["b", "zed"], text="over http")
            assert sent["reached"] == ["b"]
            assert sent["not_reached"] == [{"address": "zed", "reason": "no_live_participant"}]
            nobody = await s.call("msg_send", to=["zed"], text="anyone?")
            assert nobody.is_error and text(nobody).startswith("not_delivered: not delivered")
            spoof = await s.call("msg_send", to=["b"], text="x", sender="operator")
            assert spoof.is_error
            assert (
                text(spoof) == "invalid_input: unknown field 'sender': this tool does not take it"
            )
            refused = await s.call("board_directive", to=["b"], text="obey")
            assert refused.is_error and text(refused).startswith("tool_unavailable: ")
            grant = await s.ok("board_claim", key="k")
            await s.ok("board_release", key="k", fence=grant["fence"])

    asyncio.run(main())
    log = Operator(store).log(space)
    assert [(e.sender, e.body) for e in log] == [("a", "over http"), ("a", "anyone?")]


def test_S20_inbox_next_over_http_wakes_on_another_process_send(
    store: Store, space: str, served: Served
) -> None:
    b, jb = trusted.join(store, space, "b")
    _, ja = trusted.join(store, space, "a")
    pid = b.identity.participant_id

    async def main() -> None:
        async with http_session(served.mcp, jb.token) as s:
            waiting = asyncio.create_task(s.call("inbox_next", wait=60))
            deadline = time.monotonic() + 30
            while doorbell_waiters(store, pid) < 2:  # the server's watcher + inbox_next
                assert time.monotonic() < deadline, "inbox_next never parked on the doorbell"
                await asyncio.sleep(0.01)
            sender = await asyncio.create_subprocess_exec(
                sys.executable, "-c", SEND, store.url, space, "a", ja.token, "b", "wake up"
            )
            assert await sender.wait() == 0
            result = await asyncio.wait_for(waiting, 30)
            assert not result.is_error and result.structured_content is not None
            assert [i["body"] for i in result.structured_content["items"]] == ["wake up"]

    asyncio.run(main())


@pytest.mark.skipif(not HAS_OPERATOR_KEY, reason="Trust's operator key is not in this build yet")
def test_S29_the_operator_key_serves_the_operator_tools_over_http(
    store: Store, space: str, served: Served
) -> None:
    trusted.join(store, space, "b")

    async def main() -> None:
        async with http_session(served.mcp, served.key) as op:
            names = await op.tool_names()
            assert names == {
                "messages_send",
                "messages_list",
                "participants",
                "board_view",
                "board_release",
                "board_unreserve",
            }
            sent = await op.ok("messages_send", space=space, to=["b"], text="from the human")
            assert sent["reached"] == ["b"]

    asyncio.run(main())
    (entry,) = Operator(store).log(space)
    assert (entry.sender, entry.kind, entry.via) == ("operator", "operator", "mcp")


def _post(url: str, secret: str | None, payload: dict[str, Any], session: str | None = None) -> Any:
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": "2025-11-25",
    }
    if secret is not None:
        headers["Authorization"] = f"Bearer {secret}"
    if session is not None:
        headers["Mcp-Session-Id"] = session
    return httpx2.post(url, headers=headers, content=json.dumps(payload), timeout=60)


def test_S10_a_session_never_serves_another_credential(
    store: Store, space: str, served: Served
) -> None:
    _, ja = trusted.join(store, space, "a")
    _, jb = trusted.join(store, space, "b")
    other = Operator(store).create_space("workflow").id
    _, jc = trusted.join(store, other, "c")
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        },
    }
    opened = _post(served.mcp + "/", ja.token, init)  # the mount itself (/mcp redirects)
    assert opened.status_code == 200
    session = opened.headers["mcp-session-id"]
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "msg_send", "arguments": {"to": ["a"], "text": "as a?"}},
    }
    others = [jb.token, jc.token] + ([served.key] if HAS_OPERATOR_KEY else [])
    for secret in others:  # another agent, another space, the operator
        assert _post(served.mcp + "/", secret, call, session).status_code == 404
    for secret in (None, "not-a-token"):
        refused = _post(served.mcp + "/", secret, call, session)
        assert refused.status_code == 401
        assert refused.json()["error"] == "auth_failed"
    assert Operator(store).log(space) == []  # nobody spoke as a
