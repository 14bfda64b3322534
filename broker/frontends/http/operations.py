"""The declared operations over HTTP: one route each, one handler for all.

Each operation of ``broker.api.operations`` with an ``http`` place becomes an
``Endpoint``: an agent's below ``/api/{kind}/{id}/agent``, the operator's and a
joiner's below the space's ``/api/{kind}/{id}`` (or ``/api`` when it names no
space). A joiner's route takes no Bearer header: its credential is a secret
field of its input, checked by the library in the join's transaction. The
handler reads the input (the JSON body; a ``GET``'s query string; fields the
path names), checks it with the operation's input record (the one validator),
runs it as the caller (writes through the group committer, reads on the
worker pool, waits as a long-poll on the caller's doorbell) and answers the
result as JSON.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from broker import errors
from broker.api.handles import Joiner
from broker.api.operations import OPERATIONS, Operation
from broker.frontends.http.api import PREFIXES, Call, Endpoint
from broker.model.fields import Input

AGENT = "/api/{kind}/{id}/agent"
SPACE = "/api/{kind}/{id}"


def endpoints() -> list[Endpoint]:
    """An endpoint for every declared operation that is on the HTTP API."""
    return [_endpoint(op) for op in OPERATIONS if op.http is not None]


def _endpoint(op: Operation) -> Endpoint:
    assert op.http is not None
    base = AGENT if op.caller == "agent" else SPACE if base_space(op) else "/api"
    return Endpoint(
        op.http.method,
        base + op.http.path,
        _handler(op),
        op.caller,
        op.summary,
        returns=op.result_type(),
        status=op.http.status,
        tag=op.caller,
        path_params={name: op.input.field(name).help for name in op.path_fields},
        op=op,
        after_leave=op.after_leave,
    )


def _handler(op: Operation) -> Callable[[Call], Awaitable[Any]]:
    async def handle(call: Call) -> Any:
        data: dict[str, Any] = call.body
        handle: Any
        for name in op.path_fields:
            _from_path(data, name)
            data[name] = call.params[name]
        if op.caller == "agent":
            handle = call.state.agent_for(call)
        else:
            handle = call.caller if op.caller == "operator" else Joiner(call.state.store)
            if base_space(op) and op.caller == "joiner":
                _from_path(data, "space")
                sid = await call.state.run(handle.space_id, call.params["id"])
                if not sid.startswith(PREFIXES[call.params["kind"]]):
                    raise errors.SpaceNotFound(f"no {call.params['kind'][:-1]} {sid}")
                data["space"] = sid
            elif base_space(op):
                _from_path(data, "space")
                space = await call.state.run(handle.get_space, call.params["id"])
                call.state.check_kind(call.params["kind"], space)
                data["space"] = space.id
        inp = op.input.parse(data)
        if op.waits is not None and getattr(inp, op.waits) > 0:
            return await _long_poll(call, op, handle, inp)
        if op.resumes and (twin := call.state.twin(handle)) is not None:
            # it may hold what a wait its client left had taken: that first
            return await getattr(twin, op.method)(**inp.values())
        if op.write:
            return await call.state.write(lambda tx: handle.call(op, inp, tx))
        return await call.state.run(handle.call, op, inp)

    handle.__name__ = op.method
    handle.__module__ = f"{__name__}_{op.caller}"  # the OpenAPI operationId's prefix
    return handle


def base_space(op: Operation) -> bool:
    """Whether the operator's (or a joiner's) operation names its space in the path."""
    return op.caller != "agent" and "space" in op.input.NAMES


def _from_path(data: dict[str, Any], name: str) -> None:
    if name in data:
        raise errors.InvalidInput(
            f"unknown field {name!r}: the path names it, not the body", field=name
        )


async def _long_poll(call: Call, op: Operation, handle: Any, inp: Input) -> Any:
    """A call that waits: parked on the caller's doorbell (the asyncio API, no
    thread per waiter), answered at once on shutdown, given back if the client
    has gone (``state.wait``)."""
    field = op.waits or ""
    twin = call.state.aio(handle)
    waited = getattr(inp, field)

    async def waiting(left: float) -> Any:
        return await getattr(twin, op.method)(**inp.replace(**{field: left}).values())

    async def now() -> Any:
        at_once = inp.replace(**{field: 0.0})
        return await call.state.write(lambda tx: handle.call(op, at_once, tx))

    async def give_back(result: Any) -> None:
        if op.undo is not None:
            await call.state.run(getattr(twin, op.undo), result)

    return await call.state.wait(call.request, waiting, now, waited, give_back)
