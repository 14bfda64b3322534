"""The lean lane: an agent's declared write answered from the HTTP protocol.

Most of a swarm's requests are an agent's send, claim, ack: small POSTs with a
token the server has seen before. Through the ASGI app each one costs a task,
the scope and message dictionaries, five middleware layers, a Starlette
``Request`` and a second response object, about as much CPU again as the
write itself (the served swarm's profile). The lane takes such a request from
the protocol once its body is whole (``deadlines.Deadlines``) and runs it as
the app's handler would (``app._handler`` and ``operations._handler``): the
remembered token's participant, the path's space its own, the body a JSON
object that the operation's input record takes, the write one job of the
group committer, the answer ``json_response`` of its result or
``ServerState.refusal`` of its error, the access line ``middleware.logged``.

It takes only what it can answer exactly as the app would, and it decides
before anything runs: a request it does not take goes on to the app whole
(its body replayed), with nothing done. It does not take a token it has not
seen (the app checks it and remembers it), a call that may wait (a long-poll
parks in the app), a read, an operation that resumes a turn, a server past its
descriptor budget (``Shed`` answers), a body the operation's record refuses
(the app words the refusal, in its order), a request a proxy forwarded (the
access line's client is the proxy's to say) or a large body.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.responses import Response

from broker import errors
from broker.frontends.http.api import KINDS, Endpoint, json_body, parse_object

AGENT_PATH = re.compile(r"/api/([^/]+)/([^/]+)/agent(/[^{}]+)")
_UNSEEN: Any = object()
MAX_BODY = 64 * 1024  # larger bodies take the app's way (uvicorn's read-ahead limit)


@dataclass(frozen=True, slots=True)
class Answer:
    """A result's answer, as ``json_response`` makes it (its headers in
    Starlette's order), without the response object the app would send it by."""

    status_code: int
    body: bytes

    @property
    def raw_headers(self) -> list[tuple[bytes, bytes]]:
        return [(b"content-length", b"%d" % len(self.body)), (b"content-type", _JSON)]


_JSON = b"application/json"


@dataclass(slots=True)
class Call:
    """One request the lane may take: its operation's endpoint, the path's
    space (``kind``, ``ref``) and the caller's secret."""

    ep: Endpoint
    path: str
    kind: str
    ref: str
    secret: str


class Lane:
    """The agent's declared writes that the protocol may answer itself."""

    def __init__(self, state: Any, routes: dict[tuple[str, str], Endpoint], *, worker_header: bool):
        self.state = state
        # (method, path below /agent) -> endpoint: writes that never wait or resume
        self.routes = {
            key: ep
            for key, ep in routes.items()
            if ep.op is not None
            and ep.method == "POST"
            and ep.op.write
            and not ep.op.resumes
            and not ep.op.path_fields
            and not ep.after_leave  # its token is checked anew on every call (app._handler)
        }
        self.max_body = min(MAX_BODY, state.options.max_body)
        self.taken = 0  # requests it answered (/healthz: ``lean``)
        self._paths: dict[str, tuple[Endpoint, str, str] | None] = {}  # path -> its route
        # every response of one of several workers names it (app._Named)
        self.headers = [(b"x-broker-worker", str(os.getpid()).encode())] if worker_header else []

    def call(self, method: bytes, path: str, secret: str) -> Call | None:
        """The call a request head names, if the lane may take it."""
        if method != b"POST":
            return None
        found = self._paths.get(path, _UNSEEN)
        if found is _UNSEEN:
            found = self._route(path)
            if len(self._paths) >= 4096:  # a bound: every space has its own paths
                self._paths.clear()
            self._paths[path] = found
        if found is None:
            return None
        ep, kind, ref = found
        return Call(ep, path, kind, ref, secret)

    def _route(self, path: str) -> tuple[Endpoint, str, str] | None:
        found = AGENT_PATH.fullmatch(path)
        if found is None or found.group(1) not in KINDS:
            return None
        ep = self.routes.get(("POST", found.group(3)))
        return None if ep is None else (ep, found.group(1), found.group(2))

    def run(self, call: Call, body: bytes, answer: Callable[[Answer | Response], None]) -> bool:
        """Start ``call`` with its whole ``body``; ``answer`` gets its response.
        False: the lane does not take it (nothing was done; the app will)."""
        state = self.state
        op = call.ep.op
        assert op is not None
        caller = state.credentials.cached(call.secret)
        if caller is None or not state.budget.has_room():
            return False
        try:
            data = parse_object(body)
            agent = state.agent_for(caller, call.kind, call.ref)
            inp = op.input.parse(data)
        except Exception:  # noqa: BLE001 - nothing ran: the app answers it, in its order of checks
            return False
        if op.waits is not None and getattr(inp, op.waits) > 0:
            return False  # a long-poll: the app parks it
        self.taken += 1
        future = state.committer.job(lambda tx: agent.call(op, inp, tx))
        future.add_done_callback(lambda done: self._answer(call, done, answer))
        return True

    def _answer(
        self, call: Call, done: asyncio.Future[Any], answer: Callable[[Answer | Response], None]
    ) -> None:
        if done.cancelled():  # the committer never cancels a job; the loop's end may
            return
        exc = done.exception()
        if exc is None:
            answer(Answer(call.ep.status, json_body(done.result())))
        elif isinstance(exc, errors.BrokerError):
            task = asyncio.ensure_future(self._refused(call, exc))
            task.add_done_callback(lambda t: None if t.cancelled() else answer(t.result()))
        else:
            answer(self.state.crashed("POST", call.path, exc))

    async def _refused(self, call: Call, exc: errors.BrokerError) -> Response:
        try:
            return await self.state.refusal(  # type: ignore[no-any-return]
                exc, call.secret, from_cache=True, after_leave=call.ep.after_leave
            )
        except Exception as failed:  # noqa: BLE001 - the app's 500, as for any handler
            return self.state.crashed("POST", call.path, failed)  # type: ignore[no-any-return]
