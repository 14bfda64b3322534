"""The route table: each endpoint declares its auth, body, query and result.

One declaration serves three readers: the dispatcher (parse the body with the
pydantic input model, check the query, authenticate, call the handler, turn
the result record into JSON), the OpenAPI document (``openapi.py``), and the
documentation. Handlers get a ``Call`` and return a record, a list of records
or a plain dict; a ``BrokerError`` becomes its JSON error (``errors.py``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from broker import errors
from broker.api.declaration import Operation
from broker.frontends.http.edge import echo, loads, utc_time, validation_error
from broker.model.records import to_dict
from broker.vocab import ascii_digits

Auth = Literal["operator", "agent", "joiner", "none"]
"""who an endpoint takes: the operator key, a participant's token, a joiner (no Bearer
header: the join credential is a secret field of the body), or anyone"""
# The collections of spec §Served mode, and ``spaces`` for any kind (clients that know only the id).
KINDS = {
    "runs": ("workflow", "run"),
    "sessions": ("session",),
    "agentiflows": ("agentiflow",),
    "spaces": ("workflow", "run", "session", "agentiflow"),
}
PREFIXES: dict[str, tuple[str, ...]] = {
    "runs": ("run_",),
    "sessions": ("ses_",),
    "agentiflows": ("af_",),
}
PREFIXES["spaces"] = PREFIXES["runs"] + PREFIXES["sessions"] + PREFIXES["agentiflows"]


@dataclass(frozen=True)
class Query:
    """A query parameter: ``int`` (bounded), ``str``, ``bool`` (true|false),
    ``time`` (ISO-8601 UTC, handed on in the store's form), a repeated ``list``
    or a ``number`` (a declared operation's: its input record reads them)."""

    name: str
    type: Literal["int", "str", "bool", "time", "list", "number"]
    description: str
    minimum: int | None = None
    maximum: int | None = None
    choices: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Endpoint:
    method: str
    path: str
    handler: Callable[[Call], Awaitable[Any]]
    auth: Auth
    summary: str
    body: type[BaseModel] | None = None
    query: tuple[Query, ...] = ()
    returns: Any = None  # a record type, list[...] of one, or a dataclass of the server's
    status: int = 200
    stream: bool = False  # text/event-stream
    tag: str = "operator"
    path_params: dict[str, str] = field(default_factory=dict)
    op: Operation | None = None
    """a declared operation (broker.api.operations): its input record is the body"""
    after_leave: bool = False
    """an agent's that answers once its caller has left (S4: its own row)"""


@dataclass
class Call:
    """What a handler gets: the parsed request."""

    request: Request
    state: Any  # app.ServerState
    body: Any
    query: dict[str, Any]
    params: dict[str, str]
    secret: str | None
    caller: Any = None  # the Operator or Agent the credential is, checked before the body


def invalid(exc: ValidationError) -> errors.InvalidInput:
    """A pydantic refusal as ``invalid_input`` naming the field (S10, S33)."""
    first = exc.errors()[0]
    if first["type"] == "missing" and first["loc"]:
        where = ".".join(str(p) for p in first["loc"])
        return errors.InvalidInput(f"missing field {where!r}", field=str(first["loc"][0]))
    return validation_error(exc, "endpoint", "body")


def parse_body(model: type[BaseModel], raw: bytes) -> Any:
    """The body as ``model``: JSON with no key given twice, its types as sent
    (strict: ``true`` is not 1, ``"5"`` not 5; ``edge.py``)."""
    if not raw.strip():
        raw = b"{}"
    loads(raw)
    try:
        return model.model_validate_json(raw, strict=True)
    except ValidationError as exc:
        if any(e["type"] == "json_invalid" for e in exc.errors()):
            raise errors.InvalidInput("the request body is not valid JSON") from None
        raise invalid(exc) from None


def parse_object(raw: bytes) -> dict[str, Any]:
    """A declared operation's body: a JSON object (no key given twice), which
    its input record checks (an empty body is ``{}``)."""
    data = loads(raw) if raw.strip() else {}
    if not isinstance(data, dict):
        raise errors.InvalidInput("the request body is not a JSON object of named fields")
    return data


def parse_query(spec: tuple[Query, ...], request: Request) -> dict[str, Any]:
    out: dict[str, Any] = {}
    known = {q.name for q in spec}
    for name in request.query_params:
        if name not in known:
            raise errors.InvalidInput(f"unknown query parameter {echo(name)}", field=name)
    for q in spec:
        values = request.query_params.getlist(q.name)
        if q.type == "list":
            for v in values:
                _check_text(q.name, v)
                if q.choices is not None and v not in q.choices:
                    raise errors.InvalidInput(
                        f"bad {q.name} {echo(v)}: one of {', '.join(q.choices)}", field=q.name
                    )
            out[q.name] = values
            continue
        if not values:
            out[q.name] = None
            continue
        if len(values) > 1:
            raise errors.InvalidInput(
                f"query parameter {q.name!r} given more than once", field=q.name
            )
        value = values[0]
        _check_text(q.name, value)
        if q.type == "int":
            out[q.name] = whole_number(q.name, value, q.minimum, q.maximum)
        elif q.type == "bool":
            if value not in ("true", "false"):
                raise errors.InvalidInput(
                    f"bad {q.name} {echo(value)}: true or false", field=q.name
                )
            out[q.name] = value == "true"
        elif q.type == "time":
            out[q.name] = utc_time(q.name, value)
        else:
            if q.choices is not None and value not in q.choices:
                raise errors.InvalidInput(
                    f"bad {q.name} {echo(value)}: one of {', '.join(q.choices)}", field=q.name
                )
            if not value or len(value) > 400:
                raise errors.InvalidInput(f"bad {q.name}: 1 to 400 characters", field=q.name)
            out[q.name] = value
    return out


def whole_number(name: str, value: str, low: int | None, high: int | None) -> int:
    """``value`` as a whole number in ``low..high``, written in ASCII digits only.

    Not ``str.isdigit`` + ``int``: ``isdigit`` takes '²' (then ``int`` raises:
    a 500), and ``int`` reads '٣', ' 3', '+3' and '1_000' as numbers."""
    text = value[1:] if value.startswith("-") else value
    if not ascii_digits(text) or len(text) > 19:
        raise errors.InvalidInput(f"bad {name} {echo(value)}: a whole number", field=name)
    number = int(value)
    if (low is not None and number < low) or (high is not None and number > high):
        raise errors.InvalidInput(f"bad {name} {number}: {low} to {high}", field=name)
    return number


def _check_text(name: str, value: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise errors.InvalidInput(f"bad {name}: not valid UTF-8", field=name) from None
    if "\x00" in value:
        raise errors.InvalidInput(f"bad {name}: contains a NUL character", field=name)


def to_json(value: Any) -> Any:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    return to_dict(value)


# One encoder for every answer: ``json.dumps`` with arguments builds one per call.
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def json_body(value: Any) -> bytes:
    """A result as the API's JSON (every answer's body; the lean lane's too)."""
    return _ENCODE(to_json(value)).encode("utf-8")


def json_response(value: Any, status: int = 200) -> Response:
    return Response(json_body(value), status_code=status, media_type="application/json")


def finite(value: float) -> bool:
    return math.isfinite(value)


__all__ = ["Call", "Endpoint", "JSONResponse", "Query", "echo", "json_response", "parse_body"]
