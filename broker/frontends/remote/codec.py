"""Client mode's codec: the library's records and errors rebuilt from the
server's JSON (no pydantic: a CLI call's start-up is an agent's latency)."""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from typing import Any

from broker import errors
from broker.api.declaration import Operation
from broker.model import records

# --- records from JSON -----------------------------------------------------------------
_BUILDERS: dict[type, Any] = {}


def from_dict(cls: type, data: Any) -> Any:
    """A record of ``cls`` from its ``to_dict`` form (nested records rebuilt)."""
    if not isinstance(data, dict):
        raise errors.StoreError(f"the server sent {type(data).__name__} for a {cls.__name__}")
    build = _BUILDERS.get(cls) or _builder(cls)
    try:
        return build(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise errors.StoreError(f"the server sent a malformed {cls.__name__}: {exc}") from None


def _builder(cls: type) -> Any:
    convert: dict[str, Any] = {}
    for f in fields(cls):
        text = str(f.type).removesuffix(" | None")
        inner = text[5:-1] if text.startswith("list[") else None
        record = getattr(records, inner or text, None)
        if isinstance(record, type) and is_dataclass(record):
            convert[f.name] = (record, inner is not None)
    names = [f.name for f in fields(cls)]

    def build(data: dict[str, Any]) -> Any:
        kw: dict[str, Any] = {}
        for name in names:
            if name not in data:
                continue  # a field with a default; a missing required one fails below
            value = data[name]
            how = convert.get(name)
            if how is not None and value is not None:
                rec, many = how
                value = [from_dict(rec, v) for v in value] if many else from_dict(rec, value)
            kw[name] = value
        return cls(**kw)

    _BUILDERS[cls] = build
    return build


# --- errors from JSON ------------------------------------------------------------------
def _codes() -> dict[str, type[errors.BrokerError]]:
    out: dict[str, type[errors.BrokerError]] = {}
    todo: list[type[errors.BrokerError]] = [errors.BrokerError]
    while todo:
        cls = todo.pop()
        out.setdefault(cls.code, cls)
        todo.extend(cls.__subclasses__())
    return out


_BY_STATUS: dict[int, type[errors.BrokerError]] = {
    401: errors.AuthError,
    403: errors.Forbidden,
    404: errors.NotFound,
    409: errors.Conflict,
    413: errors.BodyTooLarge,
    422: errors.InvalidInput,
    429: errors.TooManyWaits,
    503: errors.StoreBusy,
}


def error_from(status: int, body: Any) -> errors.BrokerError:
    """The library's error for a refusal the server sent."""
    if not isinstance(body, dict) or not isinstance(body.get("error"), str):
        cls = _BY_STATUS.get(status, errors.StoreError)
        return cls(f"the server answered {status} without an error body")
    code, message = body["error"], str(body.get("message", ""))
    cls = _codes().get(code) or _BY_STATUS.get(status, errors.BrokerError)
    exc = cls.__new__(cls)
    extra = {k: v for k, v in body.items() if k not in ("error", "message")}
    errors.BrokerError.__init__(exc, message, **extra)
    if exc.code != code:
        exc.code = code  # a code this client does not know: keep the server's
    return exc


def list_of(cls: type, data: Any) -> list[Any]:
    if not isinstance(data, list):
        raise errors.StoreError(f"the server sent {type(data).__name__} for a list")
    return [from_dict(cls, d) for d in data]


def decode(op: Operation, data: Any) -> Any:
    """A declared operation's result from the server's JSON: its record, or a
    list of them."""
    kind = op.result
    if kind == "list[str]":
        if not isinstance(data, list) or not all(isinstance(v, str) for v in data):
            raise errors.StoreError(f"the server sent {type(data).__name__} for a list of names")
        return data
    if kind.startswith("list["):
        return list_of(getattr(records, kind[5:-1]), data)
    return from_dict(getattr(records, kind), data)
