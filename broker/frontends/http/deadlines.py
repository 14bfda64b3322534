"""Deadlines on a connection's request, below the app: uvicorn's HTTP protocol
(httptools) with a head deadline, a head size cap and a body backstop.

uvicorn times out only an idle keep-alive connection (``timeout_keep_alive``,
armed after a response). A client that sends half a request head and then a
byte now and then (slowloris) holds its connection, and a slot, for ever: the
app never sees it, since it runs only once the head is whole. So:

- The head of each request (request line and headers) must arrive whole
  within ``header_timeout_s`` of its first byte (of the connection, for the
  first request); past it the connection gets a 408 and is closed.
- A head over ``MAX_HEAD`` bytes is a 431 and the connection is closed.
- The body is the app's (``middleware.BodyCap``: 408 past ``body_timeout_s``);
  here a backstop closes a connection whose body is still arriving
  ``BACKSTOP_S`` later (one that goes on sending after the 413 of an
  oversized body, which uvicorn reads and drops).

And the lean lane (``lane.py``): an agent's declared write on a remembered
token is read here, head and body, and answered here, without the ASGI cycle;
whatever the lane does not take goes on to the app as it came.

And one write per response: uvicorn writes a response's head and its body
with a system call each, and on a loopback connection each is a wake-up of
the client too. The connection's writes are gathered until the event loop
turns (``Gathered``), so a JSON answer leaves in one ``write`` (the swarm's
profile: the transport's writes were the largest single cost of the loop).
"""

from __future__ import annotations

import asyncio
import functools
import time
from typing import Any

BACKSTOP_S = 5.0  # after the app's body deadline
MAX_HEAD = 64 * 1024  # bytes of request line and headers


def _base() -> Any:
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # pragma: no cover - httptools is in the serve extra
        return None
    return HttpToolsProtocol


class Gathered:
    """A transport whose writes made in one turn of the event loop go out as one
    ``write`` at the end of it (a response's head and body together). Closing
    it sends what it holds first; everything else is the transport's."""

    __slots__ = ("_loop", "_parts", "transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.transport = transport
        self._loop = loop
        self._parts: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not self._parts:
            self._loop.call_soon(self.flush)
        self._parts.append(data)

    def flush(self) -> None:
        if self._parts:
            data = b"".join(self._parts)
            self._parts.clear()
            if not self.transport.is_closing():
                self.transport.write(data)

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


class _NoEvent:
    """The cycle's body event, which only the app's ``receive`` waits on."""

    __slots__ = ()

    def set(self) -> None:
        pass


class _Lean:
    """A request the lean lane reads, where uvicorn keeps its cycle: the
    protocol's callbacks fill its body and mark it disconnected; a shutdown
    clears its keep-alive; a request pipelined behind it waits for it.

    It holds nothing of the requests before it: a connection keeps one
    request's objects at a time, however many it has sent (a link to the
    previous cycle once kept every request of a kept-alive connection, its
    body too, until the connection closed)."""

    __slots__ = (
        "body",
        "call",
        "disconnected",
        "keep_alive",
        "message_event",
        "more_body",
        "response_complete",
        "started",
    )

    def __init__(self, call: Any) -> None:
        self.call = call
        self.body = bytearray()
        self.more_body = True
        self.response_complete = False
        self.keep_alive = True
        self.disconnected = False
        self.message_event = _NoEvent()
        self.started = time.perf_counter()


_SKIP = frozenset((b"transfer-encoding", b"x-forwarded-for", b"x-forwarded-proto", b"forwarded"))


def _lines(headers: Any) -> tuple[bytes, bool]:
    """``headers`` as head lines, and whether one of them says ``connection: close``."""
    out: list[bytes] = []
    closes = False
    for name, value in headers:
        if name == b"connection" and b"close" in [t.strip().lower() for t in value.split(b",")]:
            closes = True
        out += [name, b": ", value, b"\r\n"]
    return b"".join(out), closes


def protocol(header_timeout_s: float, body_timeout_s: float, lane: Any = None) -> Any:
    """The HTTP protocol class for ``uvicorn.Config(http=...)``: uvicorn's
    httptools protocol with the deadlines above and the lean ``lane`` (the
    app's ``ServerState.lane``; None: none), or ``"auto"`` without httptools (then
    only uvicorn's own keep-alive timeout applies)."""
    base = _base()
    if base is None:  # pragma: no cover
        return "auto"
    import httptools
    from uvicorn.protocols.http.httptools_impl import STATUS_LINE

    from broker.frontends.http.middleware import body_late, logged

    # An answer's head lines: uvicorn's default headers (date, server), the
    # response's own, the lane's (a worker's name) and whether one says close.
    # The defaults are joined once a second (uvicorn makes their list anew
    # with each new date), the lane's once.
    made: list[Any] = [None, b"", False]  # the defaults list, its lines, closes
    tail, tail_closes = _lines(lane.headers) if lane is not None else (b"", False)

    class Deadlines(base):  # type: ignore[misc, valid-type]
        cycle: Any  # uvicorn's request cycle, a ``_Lean`` the lane reads, or None

        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            self.transport = Gathered(transport, self.loop)  # one write per response
            self._head = 0
            self._timer: asyncio.TimerHandle | None = None
            # A deadline of the request under way (its loop time, what runs
            # then), armed only if the request is still under way when this
            # read's data has been parsed (``data_received``).
            self._due: tuple[float, Any] | None = None
            self._refused = False
            # The lane's call of this connection's last request, by what named
            # it (method, target, credential): a kept-alive agent repeats a few.
            self._seen: tuple[bytes, bytes, bytes, Any] | None = None
            self._arm(header_timeout_s, self._head_late)  # the first head counts from connect

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if not self._refused:
                super().data_received(data)
            if self._due is not None:
                # What is still arriving after this read. A request that came
                # whole in one read (a kept-alive agent's, nearly always)
                # arms no timer: the two a request made and cancelled cost
                # ~1.5 % of a served request's CPU (bench.served_step).
                at, then = self._due
                self._due = None
                if not self.transport.is_closing():
                    self._timer = self.loop.call_at(at, then)

        def _arm(self, seconds: float, then: Any) -> None:
            self._disarm()
            self._timer = self.loop.call_later(seconds, then)

        def _due_in(self, seconds: float, then: Any) -> None:
            """``_arm`` once this read is parsed, if the request is still under
            way then; the deadline counts from now all the same."""
            self._disarm()
            self._due = (self.loop.time() + seconds, then)

        def _disarm(self) -> None:
            self._due = None
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        # --- the head -------------------------------------------------------------
        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._head = 0
            if self._timer is None:  # a next request on a kept-alive connection
                self._due_in(header_timeout_s, self._head_late)

        def on_url(self, url: bytes) -> None:
            self._head += len(url)
            if self._head > MAX_HEAD:
                self._too_large()
            self.url += url  # uvicorn's own

        def on_header(self, name: bytes, value: bytes) -> None:
            # Called for every header of every request: the count and uvicorn's
            # own on_header in one call (with a call to each, a kept-alive
            # agent's five headers took a fifth of the protocol's Python).
            self._head += len(name) + len(value) + 4
            if self._head > MAX_HEAD:
                self._too_large()
            # uvicorn's: the name lower-cased, the value without trailing
            # whitespace (RFC 9110 §5.5), an Expect: 100-continue noted.
            name = name.lower()
            value = value.rstrip(b" \t")
            if name == b"expect" and value.lower() == b"100-continue":
                self.expect_100_continue = True
            self.headers.append((name, value))

        def _too_large(self) -> None:
            if not self._refused:
                self._refuse(431, "Request Header Fields Too Large", "request head too large")

        def on_headers_complete(self) -> None:
            if self._refused:
                return
            if lane is not None and (lean := self._lean()) is not None:
                self.cycle = lean
                self._due_in(body_timeout_s, self._lean_late)
                return
            # From here the body's deadline is the app's; this one is a backstop.
            self._arm(body_timeout_s + BACKSTOP_S, self._body_late)
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._disarm()
            super().on_message_complete()
            cycle = self.cycle
            if type(cycle) is _Lean and not cycle.more_body and not cycle.response_complete:
                answer = functools.partial(self._answer, cycle)
                if not lane.run(cycle.call, bytes(cycle.body), answer):
                    self._to_app(cycle)

        # --- the lean lane ----------------------------------------------------------
        def _lean(self) -> _Lean | None:
            """The lane's request, if this head is one it may take (a plain
            keep-alive HTTP/1.1 POST with one bearer token, a small body by
            Content-Length, nothing pipelined before it)."""
            if (self.cycle is not None and not self.cycle.response_complete) or self.pipeline:
                return None
            parser = self.parser
            if (
                self.root_path
                or self.limit_concurrency is not None
                or self.expect_100_continue
                or parser.get_http_version() != "1.1"
                or not parser.should_keep_alive()
                or parser.should_upgrade()
            ):
                return None
            token = length = None
            for name, value in self.headers:
                if name == b"authorization":
                    if token is not None:
                        return None  # two: no credential at all, the app says so
                    token = value
                elif name == b"content-length":
                    if length is not None:
                        return None
                    length = value
                elif name in _SKIP:
                    return None
            if token is None or length is None or not length.isdigit():
                return None
            if int(length) > lane.max_body:
                return None
            method = parser.get_method()
            seen = self._seen
            if seen is not None and seen[2] == token and seen[1] == self.url and seen[0] == method:
                call = seen[3]
            else:
                call = self._call(method, token)
                self._seen = (method, self.url, token, call)
            return None if call is None else _Lean(call)

        def _call(self, method: bytes, token: bytes) -> Any:
            """The lane's call a request names (``Lane.call``), or None."""
            scheme, _, secret = token.decode("latin-1").partition(" ")
            if scheme.lower() != "bearer" or not secret.strip():
                return None
            url = httptools.parse_url(self.url)
            if url.query or b"%" in url.path:
                return None
            return lane.call(method, url.path.decode("ascii"), secret.strip())

        def _to_app(self, lean: _Lean) -> None:
            """The request goes on to the app as it came, its body whole: the
            parser still holds its head. The lane took it only with nothing
            before it in flight (``_lean``), which uvicorn reads from a cycle
            of None as from a complete one: it starts the app's at once."""
            self.cycle = None
            super().on_headers_complete()
            self.cycle.body = lean.body
            self.cycle.more_body = False
            self.cycle.message_event.set()

        def _answer(self, lean: _Lean, response: Any) -> None:
            """Write the lane's ``response`` as uvicorn writes the app's: its
            default headers (date, server) first, a ``connection: close`` when
            the connection ends with it."""
            if lean.response_complete:
                return
            lean.response_complete = True
            if lean.disconnected or self.transport.is_closing():
                return
            defaults = self.server_state.default_headers  # a new list each second
            if made[0] is not defaults:
                made[:] = [defaults, *_lines(defaults)]
            own, own_closes = _lines(response.raw_headers)
            said_close = made[2] or own_closes or tail_closes
            keep = lean.keep_alive and not said_close
            self.transport.write(
                b"".join(
                    (
                        STATUS_LINE[response.status_code],
                        made[1],
                        own,
                        tail,
                        b"" if keep or said_close else b"connection: close\r\n",
                        b"\r\n",
                        response.body,
                    )
                )
            )
            logged(
                "POST",
                lean.call.path,
                response.status_code,
                len(response.body),
                lean.started,
                self.client,
            )
            if not keep:
                self.transport.close()
            self.on_response_complete()

        def _lean_late(self) -> None:
            """The lane's body did not arrive in time: the app's 408 (BodyCap)."""
            self._timer = None
            lean = self.cycle
            if type(lean) is _Lean and lean.more_body:
                lean.keep_alive = False
                self._answer(lean, body_late(body_timeout_s))

        def _head_late(self) -> None:
            self._timer = None
            self._refuse(408, "Request Timeout", "request head not received in time")

        def _body_late(self) -> None:
            self._timer = None
            self._refused = True
            self.transport.close()

        def _refuse(self, status: int, reason: str, message: str) -> None:
            """Answer (unless a response is under way on this connection) and close."""
            self._refused = True
            self._disarm()
            if self.transport.is_closing():
                return
            if self.cycle is None or self.cycle.response_complete:
                body = f'{{"error":"request_timeout","message":"{message}"}}'
                if status == 431:
                    body = f'{{"error":"header_too_large","message":"{message}"}}'
                self.transport.write(
                    f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
                    f"content-length: {len(body)}\r\nconnection: close\r\n\r\n{body}".encode()
                )
            self.transport.close()

    return Deadlines
