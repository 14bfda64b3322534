"""Live views as Server-Sent Events, for the console: a space's state (who is
in it, what they hold, its queues) and the list of spaces.

A view is a reading, not a log: each event carries the whole of it (``event:
state`` or ``event: spaces``, ``data`` the JSON), so a subscriber needs no
resume point and one that falls behind loses nothing by skipping readings.

Each view has ONE watcher per server, shared by its subscribers, parked on the
doorbell of what it shows (``AsyncOperator.doorbell``: a space's, rung by its
sends, joins, leaves, statuses and every change of a hold; or the list's),
never polling the tables. On a ring it pauses briefly, so a burst of commits makes one
reading, reads the view on the worker pool, and publishes it only if it
changed. Claims, reservations and leases also end without a commit when they
run out: the watcher wakes at the earliest expiry its reading shows. A watcher
with no subscriber left ends.

Bounded like the log stream (``sse.py``): a subscriber holds one event at most
(the latest reading; it never queues them), and one that does not take a
write within ``stall_s`` is cut off with a last ``cutoff`` event. Keep-alive
comments flow when nothing changes; on shutdown every stream ends with a
``shutdown`` event.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from starlette.types import Send

from broker import errors
from broker.api.aio import AsyncOperator
from broker.frontends.http.sse import Hubs, Source, Stream
from broker.model.records import to_dict

log = logging.getLogger("broker.server")

SETTLE_S = 0.1  # after a ring: let the rest of a burst of commits land first
MIN_GAP_S = 0.25  # at most four readings a second, however busy the space
# A view's readings take at most this share of the time: a reading of a space
# of a thousand participants takes ~25 ms of the interpreter the event loop
# shares, and four a second cost a busy server an eighth of its one core and
# its sends a p99 of 13 ms instead of 2.4 (bench/results/2026-12-05-stop47-keeper).
READ_SHARE = 0.05
IDLE_S = 15.0  # a quiet watcher looks this often whether anyone still subscribes


Reading = tuple[str, bytes, float | None]  # event name, JSON data, seconds to the next expiry


class View(Source):
    """One watched view: the latest reading and the subscribers waiting for it;
    it ends when its watcher does."""

    def __init__(self, views: Views, name: str, space_id: str | None, read: Callable[[], Reading]):
        super().__init__()
        self.views = views
        self.name = name
        self.space_id = space_id
        self.read = read
        self.event = b""  # the latest reading, encoded as one SSE event
        self.version = 0

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._watch())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _watch(self) -> None:
        op = self.views.operator
        try:
            # The doorbell first, then the reading: a commit in between rings it.
            async with op.doorbell(self.space_id) as bell:
                loop = asyncio.get_running_loop()
                while self.subscribers and not self.views.closing.is_set():
                    began = loop.time()
                    name, data, expiry = await self.views.run(self.read)
                    read_s = loop.time() - began
                    event = f"event: {name}\ndata: {data.decode()}\n\n".encode()
                    if event != self.event:
                        self.event = event
                        self.version += 1
                        self._wake()
                    due = None if expiry is None else loop.time() + max(expiry, 0.0) + 0.05
                    while self.subscribers and not self.views.closing.is_set():
                        left = IDLE_S if due is None else min(IDLE_S, due - loop.time())
                        if await bell.wait(max(left, 0.0)) or (
                            due is not None and loop.time() >= due
                        ):
                            break  # rung, or a hold ran out: read again
                    await asyncio.sleep(pause(read_s, loop.time() - began))
        except asyncio.CancelledError:
            pass
        except errors.BrokerError as exc:  # the space was purged while watched
            body = json.dumps({"error": exc.code, "message": exc.message})
            self.event = f"event: gone\ndata: {body}\n\n".encode()
            self.version += 1
        except Exception:  # noqa: BLE001 - a watcher must not die silently
            log.exception("live view %s failed", self.name)
        finally:
            self.ended = True
            self._task = None
            self.views.drop(self)
            self._wake()


def pause(read_s: float, since_s: float) -> float:
    """How long a watcher rests, once rung, before it reads again: ``SETTLE_S``
    for the rest of a burst; and long enough that readings start at least
    ``MIN_GAP_S`` apart and take at most ``READ_SHARE`` of the time
    (``read_s``: the last reading took that long; ``since_s``: it began that
    long ago). A costly view is read less often, never a cheap one less."""
    return max(SETTLE_S, MIN_GAP_S - since_s, read_s / READ_SHARE - since_s)


class Views:
    """Every live view of the server, by name (a space id, or ``spaces``)."""

    def __init__(self, hubs: Hubs, run: Callable[..., Any]) -> None:
        self.operator: AsyncOperator = hubs.operator
        self.closing = hubs.closing
        self.shutdown = hubs.shutdown
        self.run = run
        self.views: dict[str, View] = {}
        self.cutoffs = 0

    def space(self, space_id: str) -> View:
        return self._get(space_id, space_id, lambda: space_state(self.operator, space_id))

    def spaces(self) -> View:
        return self._get("spaces", None, lambda: space_list(self.operator))

    def _get(self, name: str, space_id: str | None, read: Callable[[], Reading]) -> View:
        view = self.views.get(name)
        if view is None or view.ended:
            view = self.views[name] = View(self, name, space_id, read)
        return view

    def close(self) -> None:
        """Shutdown: the watchers stop (their subscribers end on ``shutdown``)."""
        for view in list(self.views.values()):
            view.stop()

    def drop(self, view: View) -> None:
        """Forget an ended view (its watcher ends once no subscriber is left)."""
        if self.views.get(view.name) is view and view.ended:
            del self.views[view.name]


def _json(obj: Any) -> bytes:
    # A reading is made of new containers, never a cycle: no cycle check, which
    # is ~10 % of encoding a space of a thousand participants.
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), check_circular=False).encode()


def space_state(op: AsyncOperator, space_id: str) -> Reading:
    """A space's state as the console shows it, and when the first hold in it
    runs out (seconds from the reading; None: nothing held)."""
    sync = op.sync
    activity = sync.activity(space_id)
    claims = sync.claims(space_id)
    reservations = sync.reservations(space_id)
    state = {
        "space": to_dict(sync.get_space(space_id)),
        "participants": [to_dict(p) for p in sync.participants(space_id)],
        "claims": [to_dict(c) for c in claims],
        "reservations": [to_dict(r) for r in reservations],
        "activity": to_dict(activity),
    }
    ends = [c.expires_at for c in claims] + [r.expires_at for r in reservations]
    expiry = None
    if ends:
        expiry = (_time(min(ends)) - _time(activity.at_utc)).total_seconds()
    return "state", _json(state), expiry


def _time(stored: str) -> datetime:
    return datetime.fromisoformat(stored)  # the store's ISO-8601 UTC ("...Z")


def space_list(op: AsyncOperator) -> Reading:
    return "spaces", _json([to_dict(s) for s in op.sync.spaces()]), None


class ViewStream(Stream[View]):
    """One subscriber of a view."""

    def __init__(self, views: Views, view: View, *, keepalive_s: float, stall_s: float) -> None:
        super().__init__(views.shutdown, keepalive_s=keepalive_s, stall_s=stall_s)
        self.views = views
        self.view = view

    def _subscribe(self) -> View:
        self.view.subscribers += 1
        self.view.start()
        return self.view

    def _unsubscribe(self, view: View) -> None:
        view.subscribers -= 1
        self.views.drop(view)

    def _cutoff(self) -> bytes:
        self.views.cutoffs += 1
        log.warning("live view subscriber of %s cut off: stalled", self.view.name)
        return b'event: cutoff\ndata: {"reason":"stalled"}\n\n'

    async def _stream(self, view: View, send: Send, gone: asyncio.Event) -> None:
        seen = 0
        await self._write(send, b"retry: 1000\n\n")
        while not gone.is_set():
            if self.shutdown.is_set():
                await self._write(send, b"event: shutdown\ndata: {}\n\n")
                return
            if view.version > seen:
                seen = view.version
                await self._write(send, view.event)
                continue
            if view.ended:
                await self._write(send, b"event: end\ndata: {}\n\n")
                return
            await self._wait(view, self.keepalive_s, gone)
            if view.version == seen and not view.ended and not gone.is_set():
                await self._write(send, b": keep-alive\n\n")
