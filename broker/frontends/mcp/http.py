"""Streamable-HTTP MCP: the ASGI app ``broker serve`` mounts at ``/mcp``.

The identity is the request's Bearer credential (spec §Served mode): an
agent's token serves that agent's tools, the operator key the operator's
(S29). Each identity gets its own MCP server and session manager, so a
session opened with one credential is unknown to every other: a request
carrying another credential cannot reach it (the SDK answers 404 for a
session it does not hold), and no tool takes an identity (S10). Every
request re-checks its credential against the store before it reaches the
session: a token the store no longer knows (re-joined, rotated) is 401 and
its server and sessions are dropped at once; a participant that left keeps
its session only to be told ``participant_left`` by each tool and resource
(every tool call re-checks the token inside its own transaction too).

The app needs no lifespan (Starlette does not run a mounted app's): each
identity's session manager runs in a task started on its first request and
stopped when the app is closed (``await app.aclose()``) or the loop ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings

from broker import errors
from broker.api.aio import AsyncAgent, AsyncOperator, Parking, run
from broker.api.handles import Agent, Operator, Store
from broker.frontends.http.edge import loads
from broker.frontends.http.errors import error_body, status_of
from broker.frontends.http.middleware import replaying
from broker.frontends.mcp.core import INVALID_PARAMS, BrokerMCP, Executor
from broker.frontends.mcp.server import agent_server, operator_server

PARSE_ERROR = -32700
_METHODS = ("GET", "POST", "DELETE")  # what the streamable-HTTP transport answers
# One text for a missing and a refused credential (S10: it never says which).
NO_CREDENTIAL = (
    "credential refused: send an agent's current token or the operator key as "
    "'Authorization: Bearer <secret>'"
)
MAX_IDENTITIES = 1024  # servers kept warm; the least recently used is stopped past this
# One credential's live sessions: an agent needs one or two (a reconnect before
# the old one idles out); the next initialize is 503 until one ends (DELETE)
# or idles out. Without it one token could open sessions until memory ran out.
MAX_SESSIONS = 32
SESSION_IDLE_S = 600.0  # a session with no request in flight this long is closed

Scope = dict[str, Any]
# Bearer credentials, not cookies: a rebound DNS name gives a page nothing to
# act with, and the host may be a socket or a proxy.
_NO_REBINDING_CHECK = TransportSecuritySettings(enable_dns_rebinding_protection=False)


def bearer(scope: Scope) -> str | None:
    """The secret of an ``Authorization: Bearer <secret>`` header, or None.
    Two or more ``Authorization`` headers are no credential (one request, one
    caller: the REST API's rule too)."""
    given = [v for n, v in scope.get("headers", ()) if n == b"authorization"]
    if len(given) != 1:
        return None
    header: str = bytes(given[0]).decode("latin-1")
    scheme, _, secret = header.partition(" ")
    if scheme.lower() == "bearer" and secret.strip():
        return secret.strip()
    return None


def identify(
    store: Store, secret: str, parking: Parking | None = None
) -> AsyncAgent | AsyncOperator:
    """The agent whose token ``secret`` is (its waits bounded by ``parking``),
    or the operator if it is the operator key; anything else is
    ``auth_failed`` (one message, no oracle)."""
    try:
        return AsyncAgent.wrap(Agent.from_token(store, secret), parking)
    except errors.AuthError:
        pass
    try:
        return AsyncOperator.wrap(Operator(store, key=secret, via="mcp"))
    except errors.AuthError:
        raise errors.AuthError(NO_CREDENTIAL) from None


@dataclass
class _Served:
    server: BrokerMCP[Any]
    manager: StreamableHTTPSessionManager
    task: asyncio.Task[None]
    ready: asyncio.Event


class MCPHttpApp:
    """The ``/mcp`` ASGI app (see the module docstring)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.parking: Parking | None = None  # the server's bounds on parked waits (S41)
        self._served: OrderedDict[str, _Served] = OrderedDict()
        self._lock = asyncio.Lock()
        # Where tools' library calls run: ``broker serve`` hands its own (the
        # group committer, one writer for the whole server); alone, worker threads.
        self.executor: Executor | None = None

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        if scope["method"] not in _METHODS:  # HEAD would open a session the SDK never answers
            await _send_json(send, 405, {"error": "method_not_allowed",
                             "message": f"{scope['method']} is not allowed here"},
                             [(b"allow", ", ".join(_METHODS).encode())])  # fmt: skip
            return
        secret = bearer(scope)
        try:
            if secret is None:
                raise errors.AuthError(NO_CREDENTIAL)
            served = await self._serve(secret)
        except errors.BrokerError as exc:
            await _error(send, exc)
            return
        if scope["method"] == "POST":
            # The SDK parses the body with pydantic, which keeps the last of a
            # repeated key: look first, and refuse it naming the key (edge.py).
            body, receive = await _read_body(receive)
            try:
                if body.strip():
                    loads(body)
            except errors.InvalidInput as exc:
                await _send_json(send, 422, {"jsonrpc": "2.0", "id": None, "error": {
                    "code": INVALID_PARAMS if exc.fields.get("field") else PARSE_ERROR,
                    "message": f"{exc.code}: {exc.message}", "data": exc.to_dict()}}, [])  # fmt: skip
                return
        await served.manager.handle_request(scope, receive, send)

    async def _recheck(self, digest: str, served: _Served, secret: str) -> None:
        """The credential of a cached server, checked against the store again:
        ``auth_failed`` drops the server (and every session of it)."""
        try:
            if isinstance(served.server.caller, AsyncAgent):
                # Left, or its space stopped: still this token's holder, and
                # its tools and resources say so.
                with contextlib.suppress(errors.ParticipantLeft, errors.SpaceNotRunning):
                    await run(Agent.from_token, self.store, secret)
            else:
                await run(lambda: Operator(self.store, key=secret, via="mcp"))
        except errors.AuthError:
            if self._served.get(digest) is served:
                del self._served[digest]
            served.task.cancel()
            raise errors.AuthError(NO_CREDENTIAL) from None

    async def _serve(self, secret: str) -> _Served:
        digest = hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()
        async with self._lock:
            served = self._served.get(digest)
            cached = served is not None and not served.task.done()
            if cached:
                self._served.move_to_end(digest)
        if cached:
            assert served is not None
            await self._recheck(digest, served, secret)  # off the lock: one read each
            await served.ready.wait()
            return served
        async with self._lock:
            served = self._served.get(digest)
            if served is None or served.task.done():
                caller = await run(identify, self.store, secret, self.parking)
                server: BrokerMCP[Any] = (
                    agent_server(caller)
                    if isinstance(caller, AsyncAgent)
                    else operator_server(caller)
                )
                if self.executor is not None:
                    server.executor = self.executor
                server.streamable_http_app(
                    streamable_http_path="/",
                    transport_security=_NO_REBINDING_CHECK,
                    session_idle_timeout=SESSION_IDLE_S,
                    max_sessions=MAX_SESSIONS,
                )
                manager = server.session_manager
                ready = asyncio.Event()
                task = asyncio.create_task(
                    _run_manager(manager, ready), name=f"broker-mcp-{digest[:8]}"
                )
                served = _Served(server, manager, task, ready)
                self._served[digest] = served
                while len(self._served) > MAX_IDENTITIES:
                    _, old = self._served.popitem(last=False)
                    old.task.cancel()
        await served.ready.wait()
        return served

    async def aclose(self) -> None:
        """Stop every identity's session manager."""
        tasks = [s.task for s in self._served.values()]
        self._served.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return


async def _run_manager(manager: StreamableHTTPSessionManager, ready: asyncio.Event) -> None:
    async with manager.run():
        ready.set()
        await asyncio.Event().wait()  # until cancelled


async def _read_body(receive: Any) -> tuple[bytes, Any]:
    """The request's body (``BodyCap`` capped it), and a ``receive`` that replays it."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"", receive  # gone before its body: the SDK sees the disconnect
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = b"".join(chunks)
    return body, replaying(body, receive)


async def _error(send: Any, exc: errors.BrokerError) -> None:
    # The HTTP API's status for each refusal (409 participant_left, 503
    # store_busy...), and its body: one mapping for every served surface.
    status = status_of(exc)
    extra = [(b"www-authenticate", b'Bearer realm="broker"')] if status == 401 else []
    await _send_json(send, status, error_body(exc), extra)


async def _send_json(
    send: Any, status: int, payload: dict[str, Any], extra: list[tuple[bytes, bytes]]
) -> None:
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers + extra})
    await send({"type": "http.response.body", "body": body})


def http_app(store: Store) -> MCPHttpApp:
    """The streamable-HTTP MCP app for ``store``; mount it at ``/mcp``."""
    return MCPHttpApp(store)
