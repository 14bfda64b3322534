"""The ASGI layers around the app: the request body's cap and deadline, and
the access log.

``BodyCap`` reads the whole request body itself, before the app runs, and
hands the app a replay of it. So a body over the cap is a 413 and a body that
does not arrive in time a 408, whether or not it declared a Content-Length
(chunked), and neither ever reaches the app: an exception raised from inside
the app's ``receive()`` would be the app's failure (Starlette's 500 handler
takes it before any middleware could answer). Every route reads its body
whole anyway (JSON), so nothing streams that could have streamed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from typing import Any

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from broker.frontends.http.errors import plain
from broker.vocab import ascii_digits

access = logging.getLogger("broker.access")


class BodyCap:
    """413 past ``max_body`` bytes, 408 past ``timeout_s`` seconds of reading it."""

    def __init__(self, app: ASGIApp, max_body: int, timeout_s: float) -> None:
        self.app = app
        self.max_body = max_body
        self.timeout_s = timeout_s
        self.state = getattr(app, "state", None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope["headers"]:
            if name == b"content-length" and _digits(value) and int(value) > self.max_body:
                await self._too_large(scope, receive, send)
                return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        chunks: list[bytes] = []
        seen = 0
        while True:
            try:
                # A deadline on this task, not a new task per read (``wait_for``).
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                # A body trickled (or stopped) past the deadline: the client
                # is slow or hostile; answer and close the connection.
                await body_late(self.timeout_s)(scope, receive, send)
                return
            if message["type"] == "http.disconnect":
                return  # the client left before its request was whole: nothing to run
            chunk = message.get("body", b"")
            seen += len(chunk)
            more = message.get("more_body", False)
            if seen > self.max_body:
                # Drop the rest of the body (up to as much again, within the
                # deadline) before answering: a client still sending when the
                # connection closes gets a reset instead of the 413.
                while more and seen <= 2 * self.max_body and loop.time() < deadline:
                    try:
                        message = await asyncio.wait_for(receive(), deadline - loop.time())
                    except TimeoutError:
                        break
                    seen += len(message.get("body", b""))
                    more = message["type"] == "http.request" and message.get("more_body", False)
                await self._too_large(scope, receive, send, close=more)
                return
            chunks.append(chunk)
            if not more:
                break
        await self.app(scope, replaying(b"".join(chunks), receive), send)

    async def _too_large(
        self, scope: Scope, receive: Receive, send: Send, *, close: bool = False
    ) -> None:
        response = plain("body_too_large", f"request body over {self.max_body} bytes", 413)
        if close:
            response.headers["connection"] = "close"
        await response(scope, receive, send)


def body_late(timeout_s: float) -> Response:
    """The 408 of a body that did not arrive whole within ``timeout_s``; the
    connection is closed after it."""
    response = plain(
        "request_timeout", f"the request body did not arrive within {timeout_s:g} s", 408
    )
    response.headers["connection"] = "close"
    return response


def _digits(value: bytes | str) -> bool:
    """ASCII digits only: ``str.isdigit`` also takes '²' and '٣', which ``int`` refuses
    or reads as another number."""
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    return ascii_digits(text)


class AccessLog:
    """One JSON line per request on the ``broker.access`` logger: method, path,
    status, bytes, duration and who (operator / agent / none). Never the
    query's values beyond the path, never a header: no secret is logged."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.state = getattr(app, "state", None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not access.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)  # --quiet: no line, so nothing to watch
            return
        started = time.perf_counter()
        status = 0
        sent = 0

        async def watch(message: Message) -> None:
            nonlocal status, sent
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                sent += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            logged(scope["method"], scope["path"], status, sent, started, scope.get("client"))


def logged(method: str, path: str, status: int, sent: int, started: float, client: Any) -> None:
    """The access line of one request (``AccessLog``'s; the lean lane's too),
    if access lines are on."""
    if access.isEnabledFor(logging.INFO):
        access.info(
            json.dumps(
                {
                    "ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "method": method,
                    "path": path,
                    "status": status,
                    "bytes": sent,
                    "ms": round((time.perf_counter() - started) * 1000, 2),
                    "client": f"{client[0]}:{client[1]}" if client else "unix",
                },
                ensure_ascii=True,
            )
        )


def log_to_stderr() -> None:
    """Access lines and server errors as they are, one per line, on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    for name in ("broker.access", "broker.frontends.http"):
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


def replaying(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands ``body`` (read whole already) over once, then
    passes on to ``receive``: after the body only ``http.disconnect`` comes."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
