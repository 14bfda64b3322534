"""The ASGI application of ``broker serve``: routes, auth, errors, logs.

Handlers run the public library (``broker.api.handles``): reads and other blocking
calls on a bounded thread pool, writes through the group committer
(``commit.py``), long-polls parked on the doorbell by the asyncio API (``broker.api.aio``: no
thread per waiter), and SSE through one shared follower per space (``sse.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio.to_thread
from anyio import CapacityLimiter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from broker import __version__, errors
from broker.api import aio
from broker.api.aio import AsyncAgent, AsyncOperator
from broker.api.handles import Agent, Operator
from broker.frontends.http import operations, routes_agent, routes_operator
from broker.frontends.http.api import (
    KINDS,
    PREFIXES,
    Call,
    Endpoint,
    echo,
    json_response,
    parse_body,
    parse_object,
    parse_query,
    whole_number,
)
from broker.frontends.http.budget import FdBudget, Shed, busy
from broker.frontends.http.commit import Committer
from broker.frontends.http.credentials import Credentials, bearer
from broker.frontends.http.errors import error_response, plain
from broker.frontends.http.lane import AGENT_PATH, Lane
from broker.frontends.http.live import Views
from broker.frontends.http.middleware import AccessLog, BodyCap
from broker.frontends.http.middleware import (
    log_to_stderr as log_to_stderr,  # the CLI imports it here
)
from broker.frontends.http.results import Health
from broker.frontends.http.sse import Hubs
from broker.model.records import Space

T = TypeVar("T")
STATIC = Path(__file__).parent / "static"
log = logging.getLogger("broker.server")


@dataclass(frozen=True)
class Options:
    max_body: int = 4 * 1024 * 1024  # bytes of a request body (413 past it)
    keepalive_s: float = 15.0  # SSE comment line when the log is quiet
    stall_s: float = 10.0  # an SSE subscriber that takes no write this long is cut off
    max_batch: int = 64  # writes per group-commit transaction
    workers: int = 16  # threads for reads and other blocking library calls
    body_timeout_s: float = 30.0  # a request body must arrive whole this soon (408 past it)
    header_timeout_s: float = 10.0  # a request's head must arrive this soon (deadlines.py)
    # S41: parked waits per participant and per space (429 past them), and the
    # file descriptors kept for the operator and the server's own files
    # (None: a quarter of RLIMIT_NOFILE; 503 for agents past the rest).
    waits_per_agent: int = aio.Parking.PER_PARTICIPANT
    waits_per_space: int = aio.Parking.PER_SPACE
    fd_reserve: int | None = None
    # One of several worker processes (broker serve --workers N): every
    # response names this process (X-Broker-Worker: its pid).
    worker_header: bool = False


class ServerState:
    """Everything a handler needs, shared by all requests."""

    def __init__(self, store: Any, options: Options) -> None:
        self.store = store
        self.options = options
        self.credentials = Credentials(store)
        self.committer = Committer(store, max_batch=options.max_batch)
        self.pool = CapacityLimiter(options.workers)
        # Every connection the store may hold: one per thread that may call it
        # (the request workers, the asyncio API's, the committer, the store's
        # keeper, the doorbell and the loop) and the loop's second, for the
        # group commit it runs itself (``Store.write_now``).
        threads = options.workers + aio.WORKERS + 5
        self.budget = FdBudget(options.fd_reserve, lambda: store.files_to_open(threads))
        self.parking = aio.Parking(
            options.waits_per_agent, options.waits_per_space, room=self.budget.room
        )
        self.hubs: Hubs | None = None
        self.views: Views | None = None
        self.lane: Lane | None = None  # create_app's, when the app has one
        self._twins: dict[str, AsyncAgent] = {}
        self._internal = Operator(store, via="cp")  # the followers' reads; no request reaches it

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.hubs = Hubs(AsyncOperator.wrap(self._internal), loop)
        self.views = Views(self.hubs, self.run)

    def aio(self, agent: Agent) -> AsyncAgent:
        """The asyncio twin of ``agent``, kept per participant: a turn taken by a
        cancelled wait is handed to that participant's next turn request."""
        key = agent.identity.participant_id
        twin = self._twins.get(key)
        if twin is None or twin.identity != agent.identity:
            if len(self._twins) > 4096:
                self._twins.clear()
            # its parked waits' steps through the group committer, as every write here
            twin = self._twins[key] = AsyncAgent.wrap(agent, self.parking, self.committer.job)
        return twin

    def shutdown(self) -> None:
        if self.hubs is not None:
            self.hubs.close()  # sets the shutdown every stream ends on, views' included
        if self.views is not None:
            self.views.close()

    def close(self) -> None:
        self.shutdown()
        self.committer.close()

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """A blocking library call on the worker pool."""
        return await anyio.to_thread.run_sync(functools.partial(fn, *args), limiter=self.pool)

    async def write(self, fn: Callable[[Any], T]) -> T:
        """A write, group-committed with its neighbours (``fn(tx)``)."""
        return await self.committer.submit(fn)

    async def read(self, fn: Callable[[], T]) -> T:
        """A read on the worker pool (the MCP tools' executor, as ``write`` is)."""
        return await self.run(fn)

    async def wait(
        self,
        request: Request,
        waiting: Callable[[float], Awaitable[T]],
        now: Callable[[], Awaitable[T]],
        wait: float,
        undo: Callable[[T], Awaitable[Any]] | None = None,
    ) -> T | Response:
        """A long-poll: ``waiting(wait)`` parks on the caller's doorbell (the
        asyncio API: no thread per waiter). On shutdown the wait is cut short
        and the caller gets what is there now (``now()``), so in-flight
        requests finish instead of holding the process. When the client goes
        away the wait is cancelled: the asyncio API gives back a claim that
        already ran, and ``undo`` gives back what a finished wait took in the
        same instant; nothing is taken for a client that is no longer there."""
        assert self.hubs is not None
        parked = asyncio.ensure_future(waiting(wait))
        stop = asyncio.ensure_future(self.hubs.shutdown.wait())
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            await asyncio.wait({parked, stop, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            gone.cancel()
        left = gone.done() and not gone.cancelled()
        if parked.done() and not left:
            return parked.result()
        if parked.done():
            if parked.exception() is None and undo is not None:
                await undo(parked.result())
        else:
            parked.cancel()  # a claim that ran is given back by the asyncio API
            with contextlib.suppress(asyncio.CancelledError):
                await parked
        if left:
            return Response(status_code=499)  # nobody reads it: the access log says why
        return await now()

    def twin(self, agent: Agent) -> AsyncAgent | None:
        """The asyncio twin of ``agent`` if a long-poll made one: it may hold a
        turn a cancelled wait took, which its next turn request returns."""
        twin = self._twins.get(agent.identity.participant_id)
        return twin if twin is not None and twin.identity == agent.identity else None

    def agent_for(self, me: Agent, kind: str, ref: str) -> Agent:
        """The caller as a participant; the path's space (``kind``, ``ref``) must
        be its own (401)."""
        ref = ref.lower()
        sid = me.space_id
        if not sid.startswith(PREFIXES[kind]) or ref not in (sid, sid.split("_", 1)[1]):
            raise errors.token_refused()  # someone else's space: S10's one message
        return me

    async def refusal(
        self, exc: errors.BrokerError, secret: str | None, *, from_cache: bool, after_leave: bool
    ) -> Response:
        """The answer to a refused call. A call let in on a remembered token is
        refused as the edge would have refused it first, if it would
        (credentials.py: the order of the errors is kept); a credential that
        no longer holds is forgotten."""
        if from_cache and not isinstance(exc, errors.AuthError):
            try:
                await self.run(self.credentials.agent, secret, after_leave)
            except errors.BrokerError as refused:
                exc = refused
        if isinstance(exc, errors.AuthError | errors.ParticipantLeft | errors.SpaceNotRunning):
            self.credentials.forget(secret)
        if isinstance(exc, errors.StoreError) and self.budget.exhausted(exc):
            exc = busy()  # out of descriptors: the server's budget, not a store fault
        return error_response(exc)

    def crashed(self, method: str, path: str, exc: BaseException) -> Response:
        """The answer to a failure that is not a refusal: a 503 when this
        process is out of descriptors (S41), else a 500, logged (a bug)."""
        if self.budget.exhausted(exc):
            return error_response(busy())
        log.error("server error on %s %s", method, path, exc_info=exc)
        return plain("server_error", "internal error (logged); this is a bug", 500)

    @staticmethod
    def check_kind(kind: str, space: Space) -> None:
        if space.kind not in KINDS[kind]:
            raise errors.SpaceNotFound(f"no {kind[:-1]} {space.id}: it is a {space.kind}")

    @staticmethod
    def resume_point(call: Call) -> int:
        header = call.request.headers.get("last-event-id")
        if header is not None:
            return whole_number("Last-Event-ID", header, 0, 2**62)
        after: int | None = call.query.get("after_seq")
        return after or 0


def _dispatch(handlers: dict[str, Callable[[Request], Any]]) -> Callable[[Request], Any]:
    async def dispatch(request: Request) -> Response:
        method = "GET" if request.method == "HEAD" else request.method
        response: Response = await handlers[method](request)
        return response

    return dispatch


def _not_allowed(request: Request, allow: str) -> Response:
    """405 with the methods the path takes (RFC 9110: ``Allow`` is required)."""
    response = plain("method_not_allowed", f"{request.method} is not allowed here", 405)
    response.headers["Allow"] = allow
    return response


async def _disconnected(request: Request) -> None:
    """Returns when the client has gone (the body was read whole before: only
    ``http.disconnect`` comes after it)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _handler(state: ServerState, ep: Endpoint) -> Callable[[Request], Any]:
    # A declared operation's token may be remembered (credentials.py); the
    # others are checked on every request.
    remembered = ep.op is not None and not ep.after_leave

    async def handle(request: Request) -> Response:
        secret = bearer(request.headers)
        request.state.who = ep.auth
        from_cache = False
        if ep.stream and request.method == "HEAD":
            # Starlette answers HEAD for every GET route by running it: a
            # stream's head would hold a subscriber that never ends.
            return _not_allowed(request, "GET")
        try:
            if "kind" in request.path_params and request.path_params["kind"] not in KINDS:
                raise errors.NotFound(f"no such collection {echo(request.path_params['kind'])}")
            # Who calls, before anything else is read: 401/403 first. A declared
            # operation's token checked before is remembered: the operation
            # re-checks it in its own transaction, and a failure re-checks it
            # here (credentials.py: the order of the errors is kept).
            caller: Any = None
            if ep.auth == "operator":
                caller = state.credentials.operator(secret)
            elif ep.auth == "agent":
                if remembered and (caller := state.credentials.cached(secret)) is not None:
                    from_cache = True
                else:
                    caller = await state.run(state.credentials.agent, secret, ep.after_leave)
                    if remembered and secret is not None:
                        state.credentials.remember(secret, caller)
            body = None
            query: dict[str, Any] = {}
            if ep.op is not None and ep.method == "GET":  # its input record reads the query
                body = operations.from_query(ep.op, request.query_params)
            elif ep.op is not None:
                body = parse_object(await request.body())
            elif ep.body is not None:
                body = parse_body(ep.body, await request.body())
            elif ep.method in ("POST", "PATCH") and (await request.body()).strip() not in (
                b"",
                b"{}",
            ):
                raise errors.InvalidInput("this endpoint takes no body")
            if ep.op is None:
                query = parse_query(ep.query, request)
            call = Call(
                request=request,
                state=state,
                body=body,
                query=query,
                params=dict(request.path_params),
                secret=secret,
                caller=caller,
            )
            result = await ep.handler(call)
        except errors.BrokerError as exc:
            return await state.refusal(
                exc, secret, from_cache=from_cache, after_leave=ep.after_leave
            )
        if isinstance(result, Response):
            return result
        return json_response(result, ep.status)

    return handle


def route_order(endpoints: list[Endpoint]) -> list[Endpoint]:
    """The declared operations first: routes are matched in order, one regex
    each, and an agent's send, claim and ack are most of the requests (the
    swarm's profile: ~55 matches a request before). No two paths that can match
    the same URL change their order (tests/frontends/http/test_served_workers.py):
    a declared route that a hand-written one before it could shadow
    (``/api/{kind}/{id}`` after ``/api/spaces/stream``) keeps its place."""
    first: list[Endpoint] = []
    rest: list[Endpoint] = []
    for ep in endpoints:  # hoisted past the routes left in place before it, unless one overlaps
        if ep.op is not None and not any(_overlap(ep.path, e.path) for e in rest):
            first.append(ep)
        else:
            rest.append(ep)
    return first + rest


def _overlap(a: str, b: str) -> bool:
    """Whether one URL can match both paths: as many segments, each the same
    word or a ``{parameter}`` on either side (a ``{x:path}`` takes the rest)."""
    sa, sb = a.strip("/").split("/"), b.strip("/").split("/")
    if any(":path}" in seg for seg in sa + sb):
        return True  # a path parameter matches any number of segments: keep the order
    if len(sa) != len(sb):
        return False
    return all(
        x == y or x.startswith("{") or y.startswith("{") for x, y in zip(sa, sb, strict=True)
    )


def create_app(
    store: Any, options: Options | None = None, *, mcp: ASGIApp | None = None
) -> Starlette:
    """The app serving ``store`` (a ``broker.Store``)."""
    options = options or Options()
    state = ServerState(store, options)
    endpoints = routes_operator.endpoints() + routes_agent.endpoints() + operations.endpoints()
    routes: list[Any] = []
    # One route per path, whatever its methods: a 405's Allow lists them all.
    by_path: dict[str, dict[str, Callable[[Request], Any]]] = {}
    for ep in route_order(endpoints):
        by_path.setdefault(ep.path, {})[ep.method] = _handler(state, ep)
    for path, handlers in by_path.items():
        routes.append(Route(path, _dispatch(handlers), methods=list(handlers)))

    async def healthz(request: Request) -> Response:
        s = state.committer.stats
        subs = sum(h.subscribers for h in state.hubs.hubs.values()) if state.hubs else 0
        lean = state.lane.taken if state.lane is not None else 0
        return json_response(
            Health(
                "ok",
                __version__,
                s.transactions,
                s.on_loop,
                s.jobs,
                s.careful,
                subs,
                aio.waiting(),
                lean,
            )
        )

    document: dict[str, Any] = {}
    page: list[str] = []  # /docs, made from the document once

    def openapi_document() -> dict[str, Any]:
        if not document:
            from broker.frontends.http.openapi import build

            document.update(build(endpoints))
        return document

    async def openapi(request: Request) -> Response:
        return JSONResponse(openapi_document())

    async def docs(request: Request) -> Response:
        if not page:
            from broker.frontends.http.apidocs import render

            page.append(render(openapi_document()))
        return HTMLResponse(page[0], headers=_CONSOLE_HEADERS)

    async def console(request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers=_CONSOLE_HEADERS)

    async def asset(request: Request) -> Response:
        name = request.path_params["name"]
        path = STATIC / name
        if name not in _ASSETS or not path.is_file():
            return plain("not_found", f"no asset {echo(name)}", 404)
        return FileResponse(path, headers=_CONSOLE_HEADERS)

    routes += [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        Route("/docs", docs, methods=["GET"]),
        Route("/", console, methods=["GET"]),
        Route("/static/{name}", asset, methods=["GET"]),
    ]
    if mcp is not None:
        if hasattr(mcp, "executor"):  # its tools' writes join the group committer too
            mcp.executor = state
        if hasattr(mcp, "parking"):
            mcp.parking = state.parking  # MCP's waits count with the API's (S41)
        # /mcp itself answers (a Mount alone redirects it to /mcp/, and some MCP
        # clients do not follow a redirect of a POST); /mcp/ and below too.
        routes += [Route("/mcp", mcp), Mount("/mcp", app=mcp)]

    async def not_found(request: Request, exc: Exception) -> Response:
        return plain("not_found", f"no endpoint {request.method} {request.url.path}", 404)

    async def not_allowed(request: Request, exc: Exception) -> Response:
        allow = (getattr(exc, "headers", None) or {}).get("Allow", "")
        return _not_allowed(request, allow)

    async def crashed(request: Request, exc: Exception) -> Response:
        return state.crashed(request.method, request.url.path, exc)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        state.start(asyncio.get_running_loop())
        try:
            yield
        finally:
            state.close()

    app = Starlette(
        routes=routes,
        exception_handlers={404: not_found, 405: not_allowed, Exception: crashed},
        lifespan=lifespan,
    )
    app.state.broker = state
    fast_routes = _fast_routes(endpoints)
    fast = _Fast(
        app, {key: by_path[ep.path][ep.method] for key, ep in fast_routes.items()}, crashed
    )
    state.lane = Lane(state, fast_routes, worker_header=options.worker_header)
    capped = BodyCap(fast, options.max_body, options.body_timeout_s)
    shed: ASGIApp = Shed(capped, state.budget, state.credentials.is_operator)
    if options.worker_header:
        shed = _Named(shed)
    return AccessLog(shed)  # type: ignore[return-value]


def _fast_routes(endpoints: list[Endpoint]) -> dict[tuple[str, str], Endpoint]:
    """The declared agent operations whose path has no parameter of its own
    (``/send``, ``/inbox/claim``...), by (method, path below ``/agent``), unless
    another endpoint's path could match the same URL (then the router decides,
    as before)."""
    base = operations.AGENT
    out: dict[tuple[str, str], Endpoint] = {}
    for ep in endpoints:
        rest = ep.path.removeprefix(base)
        if ep.op is None or rest == ep.path or "{" in rest:
            continue
        if any(_overlap(ep.path, e.path) for e in endpoints if e.path != ep.path):
            continue
        out[(ep.method, rest)] = ep
    return out


class _Fast:
    """The agent's declared operations (most of a swarm's requests) before
    Starlette's router: one dictionary lookup instead of a regular expression
    per route, and none of its middleware's per-request work. The handler is
    the router's own (``_handler``); an unexpected failure is the app's 500
    (``crashed``). Anything else goes on to the app."""

    def __init__(
        self,
        app: Starlette,
        routes: dict[tuple[str, str], Callable[[Request], Any]],
        crashed: Callable[[Request, Exception], Awaitable[Response]],
    ) -> None:
        self.app = app
        self.routes = routes
        self.crashed = crashed
        self.state = app.state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (found := AGENT_PATH.fullmatch(scope["path"])):
            handler = self.routes.get((scope["method"], found.group(3)))
            if handler is not None:
                scope["app"] = self.app
                scope["path_params"] = {"kind": found.group(1), "id": found.group(2)}
                request = Request(scope, receive, send)
                try:
                    response = await handler(request)
                except Exception as exc:  # noqa: BLE001 - the app's 500, as the router's
                    response = await self.crashed(request, exc)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class _Named:
    """Adds ``X-Broker-Worker: <pid>`` to every response of this process."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.state = getattr(app, "state", None)
        self.header = (b"x-broker-worker", str(os.getpid()).encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def named(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), self.header]}
            await send(message)

        await self.app(scope, receive, named)


_ASSETS = {"console.js", "console.css", "docs.css"}
_CONSOLE_HEADERS = {
    # Agent text is rendered as text (textContent), and no script runs but ours.
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
