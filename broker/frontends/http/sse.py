"""The log as Server-Sent Events: one hub per space, pulled by its subscribers.

Each event is one log row: ``id`` is its ``seq``, ``event: message``, ``data``
the row as JSON. A client resumes with ``Last-Event-ID`` (the last seq it got)
and receives exactly the rows after it: nothing missed, nothing repeated,
because seqs are gap-free per space and every subscriber only ever moves
forward from its own position.

A space with subscribers has ONE follower (``AsyncOperator.follow``, parked on
the space's doorbell, never polling the table), shared by all of them: it
reads each new batch once, encodes it once, and keeps the recent events in a
bounded cache. Subscribers pull from that cache at their own pace; one that
is further behind than the cache reads pages from the database itself. So no
subscriber buffers anything for another, and a writer never waits for any
reader: a write commits whether or not anyone is listening.

Each subscriber's outgoing buffer is bounded (the transport's high-water mark
plus one page); a subscriber that does not take a write within ``stall_s`` is
cut off with a last ``cutoff`` event naming its resume point (best effort: it
may be the write that stalls), and its position is logged. On shutdown every
stream ends with a ``shutdown`` event carrying the resume point.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from broker.api import aio
from broker.api.aio import AsyncOperator
from broker.model.records import LogEntry, to_dict

log = logging.getLogger("broker.server")

PAGE = 500  # rows per database read and per write to a subscriber
CACHE = 4096  # recent events a hub keeps for its subscribers
IDLE_S = 2.0  # a follower with no subscriber left ends after this quiet time

S = TypeVar("S", bound="Source")


def encode(entry: LogEntry) -> bytes:
    data = json.dumps(to_dict(entry), ensure_ascii=False, separators=(",", ":"))
    return f"id: {entry.seq}\nevent: message\ndata: {data}\n\n".encode()


def control(event: str, resume_after: int, **more: Any) -> bytes:
    data = json.dumps({"resume_after": resume_after, **more}, separators=(",", ":"))
    return f"event: {event}\ndata: {data}\n\n".encode()


class Source:
    """What streams follow (a space's log here, a live view in ``live.py``):
    its subscribers, whether it ended (nothing more will come), the task that
    feeds it, and the wake-up of the subscribers waiting in ``changed``."""

    def __init__(self) -> None:
        self.subscribers = 0
        self.ended = False
        self._changed = asyncio.Event()
        self._task: asyncio.Future[None] | None = None

    async def changed(self, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), max(timeout, 0.001))

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()


class Hub(Source):
    """The shared follower of one space (see the module doc); it ends when
    the space stops."""

    def __init__(self, hubs: Hubs, space_id: str) -> None:
        super().__init__()
        self.hubs = hubs
        self.space_id = space_id
        self.head = 0  # last seq published to the cache
        self.cache: deque[tuple[int, bytes]] = deque(maxlen=CACHE)
        self.running = False
        self._stopped = False

    def start(self, head: int) -> None:
        """Follow from ``head``, a seq the starting subscriber has read up to."""
        if self.running or self.ended:
            return
        if head != self.head:
            self.cache.clear()  # the cache must stay contiguous up to head
            self.head = head
        self.running = True
        self._task = asyncio.ensure_future(self._follow(head))

    def after(self, pos: int) -> list[tuple[int, bytes]] | None:
        """Cached events after ``pos`` (at most a page); None when the cache does
        not reach back to ``pos`` (the subscriber reads the database instead)."""
        if pos >= self.head:
            return []
        if not self.cache or pos + 1 < self.cache[0][0]:
            return None
        start = pos + 1 - self.cache[0][0]
        return [self.cache[i] for i in range(start, min(len(self.cache), start + PAGE))]

    # --- the follower ------------------------------------------------------------------
    async def _follow(self, seq: int) -> None:
        op, closing = self.hubs.operator, self.hubs.closing
        try:
            while not closing.is_set():
                news = False
                async for batch in op.follow(self.space_id, after=seq, idle_timeout=IDLE_S):
                    self._publish([(e.seq, encode(e)) for e in batch])
                    seq = batch[-1].seq
                    news = True
                    if closing.is_set():
                        break
                if closing.is_set():
                    break
                if (await aio.run(op.sync.get_space, self.space_id)).state != "running":
                    self._stopped = True
                    break
                if not news and self.subscribers == 0:
                    break
        except asyncio.CancelledError:
            pass
        except Exception:  # noqa: BLE001 - a follower must not die silently
            log.exception("SSE follower of %s failed", self.space_id)
        finally:
            self._finish()

    def _publish(self, events: list[tuple[int, bytes]]) -> None:
        if events and events[0][0] == self.head + 1:
            self.cache.extend(events)
            self.head = events[-1][0]
        self._wake()

    def _finish(self) -> None:
        self.running = False
        self.ended = self._stopped
        if self.subscribers == 0:
            self.hubs.drop(self)
        self._wake()


class Hubs:
    """Every hub of the server, by space id."""

    def __init__(self, operator: AsyncOperator, loop: asyncio.AbstractEventLoop) -> None:
        self.operator = operator
        self.loop = loop
        self.hubs: dict[str, Hub] = {}
        self.closing = asyncio.Event()
        self.shutdown = asyncio.Event()
        self.cutoffs = 0

    def get(self, space_id: str) -> Hub:
        hub = self.hubs.get(space_id)
        if hub is None:
            hub = self.hubs[space_id] = Hub(self, space_id)
        return hub

    def drop(self, hub: Hub) -> None:
        if self.hubs.get(hub.space_id) is hub and hub.subscribers == 0 and not hub.running:
            del self.hubs[hub.space_id]

    def close(self) -> None:
        """Shutdown: every stream ends with its resume point; followers stop."""
        self.closing.set()
        self.shutdown.set()
        for hub in list(self.hubs.values()):
            if hub._task is not None:
                hub._task.cancel()


class Stream(Response, Generic[S]):
    """One subscriber of a source (an ASGI response with its own send loop).
    A write the client does not take within ``stall_s`` cuts it off, with a
    last ``cutoff`` event (best effort: it may be the write that stalls)."""

    media_type = "text/event-stream"

    def __init__(self, shutdown: asyncio.Event, *, keepalive_s: float, stall_s: float) -> None:
        self.status_code = 200
        self.background = None
        self.raw_headers = [  # no content-length: the body is open-ended
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-store"),
            (b"x-accel-buffering", b"no"),
        ]
        self.shutdown = shutdown
        self.keepalive_s = keepalive_s
        self.stall_s = stall_s
        self._last_write = 0.0

    def _subscribe(self) -> S:
        """Count this stream in as a subscriber of its source (started if need be)."""
        raise NotImplementedError

    def _unsubscribe(self, source: S) -> None:
        raise NotImplementedError

    async def _stream(self, source: S, send: Send, gone: asyncio.Event) -> None:
        """Write the source's events until it ends, the server shuts down or the client goes."""
        raise NotImplementedError

    def _cutoff(self) -> bytes:
        """The last event of a stalled stream (counted and logged)."""
        raise NotImplementedError

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gone = asyncio.Event()

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        watcher = asyncio.create_task(watch())
        source = self._subscribe()
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            await self._stream(source, send, gone)
        except _Stalled:
            cutoff = self._cutoff()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(send(_body(cutoff, more=False)), 0.1)
            return
        finally:
            watcher.cancel()
            self._unsubscribe(source)
        with contextlib.suppress(Exception):
            await send(_body(b"", more=False))

    async def _write(self, send: Send, data: bytes) -> None:
        try:
            await asyncio.wait_for(send(_body(data)), self.stall_s)
        except TimeoutError:
            raise _Stalled from None
        self._last_write = asyncio.get_running_loop().time()

    async def _wait(self, source: S, timeout: float, gone: asyncio.Event) -> None:
        """Until the source changes, the server shuts down or the client goes
        (at most ``timeout`` seconds)."""
        waits = [
            asyncio.ensure_future(source.changed(timeout)),
            asyncio.ensure_future(self.shutdown.wait()),
            asyncio.ensure_future(gone.wait()),
        ]
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for task in waits:
            task.cancel()


class EventStream(Stream[Hub]):
    """One subscriber of a space's log."""

    def __init__(
        self,
        hubs: Hubs,
        space_id: str,
        after: int,
        read_page: Callable[[int], Awaitable[list[LogEntry]]],
        *,
        keepalive_s: float,
        stall_s: float,
    ) -> None:
        super().__init__(hubs.shutdown, keepalive_s=keepalive_s, stall_s=stall_s)
        self.hubs = hubs
        self.space_id = space_id
        self.pos = after
        self.read_page = read_page

    def _subscribe(self) -> Hub:
        hub = self.hubs.get(self.space_id)
        hub.subscribers += 1
        return hub

    def _unsubscribe(self, hub: Hub) -> None:
        hub.subscribers -= 1
        self.hubs.drop(hub)

    def _cutoff(self) -> bytes:
        self.hubs.cutoffs += 1
        log.warning("SSE subscriber of %s cut off after seq %s: stalled", self.space_id, self.pos)
        return control("cutoff", self.pos, reason="stalled")

    async def _stream(self, hub: Hub, send: Send, gone: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        await self._write(send, f"retry: 1000\n: resume after {self.pos}\n\n".encode())
        while not gone.is_set():
            if self.shutdown.is_set():
                await self._write(send, control("shutdown", self.pos))
                return
            cached = hub.after(self.pos)
            if cached is None or (not cached and not hub.running and not hub.ended):
                # Behind the cache, or nobody follows yet: read a page ourselves.
                rows = await self.read_page(self.pos)
                cached = [(e.seq, encode(e)) for e in rows]
                if len(rows) < PAGE and not hub.running:
                    hub.start(rows[-1].seq if rows else self.pos)
            if cached:
                await self._write(send, b"".join(data for _, data in cached))
                self.pos = cached[-1][0]
                continue
            if hub.ended:
                await self._write(send, control("end", self.pos))
                return
            quiet = self.keepalive_s - (loop.time() - self._last_write)
            if quiet <= 0:
                await self._write(send, b": keep-alive\n\n")
                continue
            await self._wait(hub, quiet, gone)


class _Stalled(Exception):
    pass


def _body(data: bytes, more: bool = True) -> dict[str, Any]:
    return {"type": "http.response.body", "body": data, "more_body": more}
