"""S41 over MCP at ``/mcp`` of a real ``broker serve``: many identities hold
one doorbell socket in the server, and an agent's MCP waits count against the
same caps as its HTTP long-polls.

Before the fix every identity's inbox watcher (and every waiting
``inbox_next``) bound a doorbell socket of its own in the server: a thousand
sybil identities pinned about a thousand sockets."""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trusted
from mcphelp import doorbell_waiters, text

from broker import Store
from broker.delivery import wake
from tests.served import Server

pytest.importorskip("mcp")
from test_mcp_http import http_session  # noqa: E402

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc"),
]
N = 24


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    srv = Server(tmp_path / "home", "--quiet", "--max-waits-per-agent", "1")
    try:
        yield srv
    finally:
        srv.stop()


def _doorbell_sockets(store: Store, pid: int) -> int:
    """Sockets process ``pid`` has bound anywhere under the store's doorbell folder."""
    n = 0
    for folder, _, names in os.walk(wake.root_path(store)):
        for name in names:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(folder, name))
                n += stat.S_ISSOCK(st.st_mode) and name.startswith(f"{pid}-")
    return n


def _sockets(pid: int) -> int:
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            n += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
    return n


def test_S41_many_mcp_identities_in_one_server_share_one_doorbell_socket(server: Server) -> None:
    store = Store(server.url)
    try:
        with server.operator() as op:
            space = op.post("/api/spaces", json={"kind": "workflow"}).json()["id"]
        joined = [trusted.join(store, space, f"s{i}")[1] for i in range(N)]
        pids = [j.participant_id for j in joined]
        mcp = f"{server.base}/mcp"

        async def main() -> tuple[int, int, int]:
            async with contextlib.AsyncExitStack() as stack:
                for j in joined:
                    s = await stack.enter_async_context(http_session(mcp, j.token))
                    await s.ok("board_read")
                # every identity's inbox watcher waits on its own doorbell key ...
                for _ in range(3000):
                    if all(doorbell_waiters(store, p) for p in pids):
                        break
                    await asyncio.sleep(0.01)
                assert all(doorbell_waiters(store, p) for p in pids)
                # ... through the server's one socket
                return (
                    _doorbell_sockets(store, server.proc.pid),
                    _sockets(server.proc.pid),
                    len(pids),
                )

        bound, sockets, identities = asyncio.run(main())
    finally:
        store.close()
    assert identities == N
    assert bound == 1  # before: one per identity
    # the server's sockets are its listeners, the clients' connections and that one
    assert sockets < 2 * N + 10, sockets


def test_S41_an_agents_mcp_waits_count_against_its_cap_of_parked_waits(server: Server) -> None:
    store = Store(server.url)
    try:
        with server.operator() as op:
            space = op.post("/api/spaces", json={"kind": "workflow"}).json()["id"]
        _, b = trusted.join(store, space, "b")
        sender, _ = trusted.join(store, space, "a")
        mcp = f"{server.base}/mcp"

        async def main() -> None:
            async with http_session(mcp, b.token) as s1, http_session(mcp, b.token) as s2:
                health = f"{server.base}/healthz"
                idle = (await asyncio.to_thread(httpx.get, health)).json()["waiting"]
                waiting = asyncio.create_task(s1.call("inbox_next", wait=60))
                # Parked, not only rung: the doorbell is registered before the
                # wait's first claim, the park counted after it; /healthz counts
                # the waits asleep on a doorbell, which are past their park.
                for _ in range(3000):
                    now = (await asyncio.to_thread(httpx.get, health)).json()["waiting"]
                    if now > idle:
                        break
                    await asyncio.sleep(0.01)
                assert now == idle + 1
                refused = await s2.call("inbox_next", wait=60)
                assert refused.is_error
                assert text(refused).startswith("too_many_waits: b already has 1 waits parked")
                assert refused.structured_content is not None
                assert refused.structured_content["retry_after"] == 1
                await asyncio.to_thread(sender.send, "b", "wake")
                result = await asyncio.wait_for(waiting, 60)
                assert not result.is_error, text(result)
                assert result.structured_content is not None
                assert [i["body"] for i in result.structured_content["items"]] == ["wake"]

        asyncio.run(main())
    finally:
        store.close()
