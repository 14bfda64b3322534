"""The declared operations in client mode: each a method of the remote twins.

For every operation of ``broker.api.operations`` on the HTTP API, the remote
``Agent`` or ``Operator`` gets a method of the library method's name and
parameters (the declaration's signature, less ``tx``: a served call is its own
transaction). It checks its input with the operation's input record here, in
this process (the same one-line refusal the library gives, without a round
trip), sends it to the operation's route and decodes the result's record (or the
field of it the library method returns: ``Operation.answer``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import quote

from broker.api.declaration import Caller, Operation
from broker.api.operations import OPERATIONS
from broker.model.typecheck import arguments, self_checked

C = TypeVar("C", bound=type)


def derived(caller: Caller) -> Callable[[C], C]:
    """Give the class a method for each of ``caller``'s operations on the HTTP
    API; the class provides ``call(op, inp)``, which sends one."""

    def add(cls: C) -> C:
        for op in OPERATIONS:
            if op.caller == caller and op.http is not None:
                setattr(cls, op.method, _method(cls, op))
        return cls

    return add


def _method(cls: type, op: Operation) -> Callable[..., Any]:
    sig = op.signature()
    bind = arguments(sig)  # a wrong call is a TypeError, as the library's

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return op.answer(self.call(op, op.input.parse(bind(*args, **kwargs))))

    # With **settings, self is positional-only (as the library's: a setting is never "self").
    kind = (
        inspect.Parameter.POSITIONAL_ONLY if op.spread else inspect.Parameter.POSITIONAL_OR_KEYWORD
    )
    self_param = inspect.Parameter("self", kind)
    method.__signature__ = sig.replace(parameters=[self_param, *sig.parameters.values()])  # type: ignore[attr-defined]
    method.__name__ = op.method
    method.__qualname__ = f"{cls.__qualname__}.{op.method}"
    method.__doc__ = f"``{op.name}`` over HTTP: {op.summary}."
    method.__operation__ = op  # type: ignore[attr-defined]
    return self_checked(method)  # its input record is its check


def route(op: Operation, values: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The operation's path below the caller's base, the fields it names put in
    (``/turn/{turn_id}/seen``), and the rest of ``values``: the body."""
    assert op.http is not None
    path, body = op.http.path, dict(values)
    for name in op.path_fields:
        path = path.replace("{" + name + "}", quote(str(body.pop(name)), safe=""))
    return path, body


def carried(op: Operation, values: dict[str, Any]) -> dict[str, Any]:
    """How the fields the path does not name travel: a ``GET``'s as its query
    string, any other method's as the JSON body (``conn.call``'s keywords)."""
    assert op.http is not None
    keys = op.input.WIRE  # each field as the wire names it (``from``)
    named = {keys.get(k, k): v for k, v in values.items()}
    if op.http.method == "GET":
        return {"query": {k: _query_text(v) for k, v in named.items()}}
    return {"body": named}


def _query_text(value: Any) -> Any:
    """A field's value as a query string carries it (None: left out; a list repeats)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None or isinstance(value, list):
        return value
    return str(value)
