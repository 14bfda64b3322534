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

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.datastructures import QueryParams

from broker import errors
from broker.api.declaration import Operation
from broker.api.handles import Joiner
from broker.api.operations import OPERATIONS
from broker.frontends.http.api import PREFIXES, Call, Endpoint, Query, whole_number
from broker.frontends.http.edge import echo
from broker.model import fields
from broker.model.fields import Input
from broker.model.records import Lease

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
        query=tuple(_query_doc(f) for f in query_fields(op)),
        returns=op.result_type(),
        status=op.http.status,
        tag=op.caller,
        path_params={name: op.input.field(name).help for name in op.path_fields},
        op=op,
        after_leave=op.after_leave,
    )


def query_fields(op: Operation) -> list[fields.Field]:
    """A ``GET``'s fields read from the query string (all but the path's)."""
    assert op.http is not None
    if op.http.method != "GET":
        return []
    skip = {*op.path_fields, "space"} if base_space(op) else set(op.path_fields)
    return [f for f in op.input.FIELDS if f.name not in skip]


def _query_doc(f: fields.Field) -> Query:
    """A query field as the API reference shows it."""
    if isinstance(f, fields.Record):
        raise TypeError(f"{f.name}: named values cannot travel in a query string")
    if isinstance(f, fields.Whole):
        return Query(f.key, "int", f.help, f.low, f.high)
    if isinstance(f, fields.Flag):
        return Query(f.key, "bool", f.help)
    if isinstance(f, fields.Texts):
        return Query(f.key, "list", f.help)
    if isinstance(f, fields.Number):
        return Query(f.key, "number", f.help)
    if isinstance(f, fields.Choice):
        return Query(f.key, "str", f.help, choices=f.choices)
    return Query(f.key, "str", f.help)


def from_query(op: Operation, params: QueryParams) -> dict[str, Any]:
    """A ``GET``'s input from its query string: each field's text read as the
    field's kind (a whole number, true or false, a number; a list repeats the
    name), for its input record to check like any other input."""
    # by every name its input record takes (``Field.key``: ``from``)
    by_name = {k: f for f in query_fields(op) for k in (f.name, f.key, f.tool_key)}
    out: dict[str, Any] = {}
    for name in params:
        f = by_name.get(name)
        values = params.getlist(name)
        if f is None:  # the input record refuses it, in the words every surface uses
            out[name] = values[0]
            continue
        if isinstance(f, fields.Texts):
            out[name] = values
            continue
        if len(values) > 1:
            raise errors.InvalidInput(f"query parameter {name!r} given more than once", field=name)
        out[name] = _read(f, values[0])
    return out


def _read(f: fields.Field, text: str) -> Any:
    if isinstance(f, fields.Whole):
        return whole_number(f.key, text, None, None)
    if isinstance(f, fields.Flag):
        if text not in ("true", "false"):
            raise errors.InvalidInput(f"bad {f.key} {echo(text)}: true or false", field=f.key)
        return text == "true"
    if isinstance(f, fields.Number):
        try:
            return float(text)
        except ValueError:
            raise errors.InvalidInput(f"bad {f.key} {echo(text)}: a number", field=f.key) from None
    return text


def _handler(op: Operation) -> Callable[[Call], Awaitable[Any]]:
    async def handle(call: Call) -> Any:
        data: dict[str, Any] = call.body
        handle: Any
        for name in op.path_fields:
            _from_path(data, name)
            data[name] = call.params[name]
        if op.caller == "agent":
            handle = call.state.agent_for(call.caller, call.params["kind"], call.params["id"])
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
                if op.write and op.waits is None and not op.resumes:
                    # The space looked up in the write's own transaction: one
                    # job of the group committer, not a read on the pool first
                    # (a thread hop and a transaction, ~1 ms of an operator's send).
                    return await call.state.write(lambda tx: _in_space(call, op, handle, data, tx))
                await call.state.run(_resolve_space, call, handle, data, None)
        inp = op.input.parse(data)
        if op.waits is not None and getattr(inp, op.waits) > 0:
            if not op.resumes and (found := await _at_once(call, op, handle, inp)) is not None:
                return found
            return await _long_poll(call, op, handle, inp)
        if op.resumes and (twin := call.state.twin(handle)) is not None:
            # it may hold what a wait its client left had taken: that first
            return await getattr(twin, op.method)(**inp.values())
        if op.write:
            result = await call.state.write(lambda tx: handle.call(op, inp, tx))
        else:
            result = await call.state.run(handle.call, op, inp)
        return result

    handle.__name__ = op.method
    handle.__module__ = f"{__name__}_{op.caller}"  # the OpenAPI operationId's prefix
    return handle


def _resolve_space(call: Call, handle: Any, data: dict[str, Any], tx: Any) -> None:
    """The space the path names, into ``data``: 404 if there is none or it is
    not of the path's kind."""
    space = handle.get_space(call.params["id"], tx=tx)
    call.state.check_kind(call.params["kind"], space)
    data["space"] = space.id


def _in_space(call: Call, op: Operation, handle: Any, data: dict[str, Any], tx: Any) -> Any:
    """An operator's write to the space its path names, inside ``tx``: the
    space resolved (404), then the input checked (422), then the operation;
    one transaction for all."""
    _resolve_space(call, handle, data, tx)
    return handle.call(op, op.input.parse(data), tx)


def base_space(op: Operation) -> bool:
    """Whether the operator's (or a joiner's) operation names its space in the path."""
    return op.caller != "agent" and "space" in op.input.NAMES


def _from_path(data: Mapping[str, Any], name: str) -> None:
    if name in data:
        raise errors.InvalidInput(
            f"unknown field {name!r}: the path names it, not the body", field=name
        )


async def _at_once(call: Call, op: Operation, handle: Any, inp: Input) -> Any:
    """A call that may wait, tried first as one that does not, through the group
    committer: a claim that finds mail (most of a busy swarm's) is a write like
    any other, batched with its neighbours, and parks nothing. None: nothing
    yet (no mail; the key held), so it waits (``_long_poll``). A turn is not
    tried so: a turn its client left behind comes first (``resumes``)."""
    at_once = inp.replace(**{op.waits or "": 0.0})
    try:
        got = await call.state.write(lambda tx: handle.call(op, at_once, tx))
    except errors.ClaimHeld:
        return None
    if isinstance(got, Lease) and not got.deliveries:
        return None
    return got


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
