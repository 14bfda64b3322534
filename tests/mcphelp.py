"""Driving a real ``broker mcp`` process with the MCP SDK's own client.

``agent_session`` starts ``python -m broker mcp`` over stdio (the SDK's
``stdio_client`` spawns it, and stops and reaps it on exit) and yields an
initialized ``ClientSession``. The server's stderr goes to a file the test
can read (``Session.stderr``)."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp_types import CallToolResult

from broker import Store
from broker.delivery import wake


@dataclass
class Session:
    client: ClientSession
    errlog: Path

    @property
    def stderr(self) -> str:
        return self.errlog.read_text(encoding="utf-8", errors="replace")

    async def call(self, tool: str, **arguments: Any) -> CallToolResult:
        return await self.client.call_tool(tool, arguments)

    async def ok(self, tool: str, **arguments: Any) -> dict[str, Any]:
        """Call a tool that must succeed; its structured result."""
        result = await self.call(tool, **arguments)
        assert not result.is_error, f"{tool}: {text(result)}"
        assert result.structured_content is not None
        return result.structured_content

    async def tool_names(self) -> set[str]:
        return {t.name for t in (await self.client.list_tools()).tools}


def text(result: CallToolResult) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


def env_for(
    store: Store,
    *,
    space: str | None = None,
    address: str | None = None,
    token: str | None = None,
    **extra: str,
) -> dict[str, str]:
    env = {"BROKER_URL": store.url, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    for key, value in (("BROKER_SPACE", space), ("BROKER_AS", address), ("BROKER_TOKEN", token)):
        if value is not None:
            env[key] = value
    env.update(extra)
    return env


@contextlib.asynccontextmanager
async def session(
    store: Store,
    *args: str,
    message_handler: Any = None,
    modern: bool = False,
    **identity: str | None,
) -> AsyncIterator[Session]:
    """A ClientSession on a real ``broker mcp ARGS`` process: the handshake
    protocol (``initialize``), or with ``modern`` the 2026-07-28 one
    (``server/discover``)."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "broker", "mcp", *args],
        env=env_for(store, **identity),  # type: ignore[arg-type]
    )
    fd, name = tempfile.mkstemp(prefix="broker-mcp-", suffix=".stderr")
    errlog = Path(name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as err:
            async with stdio_client(params, errlog=err) as (read, write):  # noqa: SIM117
                async with ClientSession(read, write, message_handler=message_handler) as client:
                    await (client.discover() if modern else client.initialize())
                    yield Session(client, errlog)
    finally:
        errlog.unlink(missing_ok=True)


def agent_session(store: Store, space: str, address: str, token: str, **kw: Any) -> Any:
    return session(store, space=space, address=address, token=token, **kw)


def doorbell_waiters(store: Store, participant_id: str) -> int:
    """Waiters registered on a participant's doorbell now (S20), in any
    process: each process's marker in the key's folder is as many bytes long
    as it has waiters there. A barrier for tests that must send only once the
    other side waits."""
    folder = Path(wake.root_path(store)) / wake.participant_key(participant_id)
    try:
        return sum(f.stat().st_size for f in folder.iterdir())
    except FileNotFoundError:
        return 0


def dumps(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)
