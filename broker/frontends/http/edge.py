"""What every served surface (HTTP API, MCP over HTTP and stdio) checks at its
edge, in one place: JSON without repeated keys (HTTP bodies and MCP over HTTP;
over stdio the MCP SDK reads each line itself), request models that take JSON
types as they are, and times.

- A repeated key (``{"text": "cancel", "text": "run"}``) is refused naming
  it: JSON parsers disagree on which one wins (most keep the last, a proxy or
  a logger in front may read the first), so either reading would be a guess.
- Request models are strict (S33): ``true`` is not the number 1, ``"5"`` not
  5, ``"yes"`` not a bool. Only an integer is taken where a float is wanted
  (JSON has one number type).
- A time (``since``) is an ISO-8601 time (UTC, or with an offset), read by
  the library's one reader (``broker.api.handles.utc_time``), refused otherwise, and handed
  on in the store's own form (``2026-11-30T03:52:00.000000Z``): the log
  compares times as text, so ``2026-11-30T03:52Z`` as given would sort after
  every row of that minute.

Light (pydantic, the standard library and the library it fronts): ``broker mcp``
imports it without the server's packages.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from broker import errors
from broker.api import handles
from broker.model.records import json_text


class Strict(BaseModel):
    """The base of the served request models: closed (S10) and strict (S33)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True, strict=True)


def validation_error(
    exc: ValidationError, taker: str = "tool", whole: str = "input"
) -> errors.InvalidInput:
    """One ``invalid_input`` line for a pydantic refusal of a hand-written
    surface's request model: the first field, and an unknown field named as
    such (S10, S33); ``field`` names the argument (``to`` for ``to.3``).
    ``taker`` is what refuses it (a tool, an endpoint), ``whole`` what an error
    of no one field is about (the input, a body)."""
    first = exc.errors()[0]
    loc = first["loc"]
    where = ".".join(str(p) for p in loc) or whole
    field = str(loc[0]) if loc else whole
    if first["type"] == "extra_forbidden":
        return errors.InvalidInput(
            f"unknown field {where!r}: this {taker} does not take it", field=field
        )
    return errors.InvalidInput(f"bad {where}: {first['msg']}", field=field)


def echo(value: object, limit: int = 80) -> str:
    """``value`` as an error message quotes it: repr, at most ``limit`` characters
    (a message never carries a caller's megabyte back)."""
    return clip(repr(value), limit)


# A quoted value as a repr writes it: a quote that opens after a non-word
# character and closes before one, so the apostrophe of "participant's" in a
# message's own words never opens a "quote" that runs to the next one.
_QUOTED = re.compile("(?<!\\w)(?:'[^']{80,}'|\"[^\"]{80,}\")(?!\\w)")
MESSAGE_MAX = 400
FIELD_MAX = 200  # a field (a path, a key) may be long and legitimate; not a megabyte


def clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def clipped(error: dict[str, Any]) -> dict[str, Any]:
    """A refusal as served: what it quotes of the caller's input cut to 80
    characters in the message (a 5,000-character turn id comes back as its
    first 79 and '…'), fields to ``FIELD_MAX``, the message to ``MESSAGE_MAX``. The library's messages quote input
    whole; a server answering strangers does not echo megabytes back."""
    out: dict[str, Any] = {}
    for key, value in error.items():
        if key == "message" and isinstance(value, str):
            value = clip(_QUOTED.sub(lambda m: clip(m.group(0)[:-1]) + m.group(0)[-1], value),
                         MESSAGE_MAX)  # fmt: skip
        elif isinstance(value, str):
            value = clip(value, FIELD_MAX)
        out[key] = value
    return out


class _Repeated(ValueError):
    def __init__(self, key: str) -> None:
        self.key = key


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Repeated(key)
        out[key] = value
    return out


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# One decoder for every body: ``json.loads`` with hooks builds a decoder and
# its scanner per call (a fiftieth of a served request's CPU).
_DECODER = json.JSONDecoder(object_pairs_hook=_object, parse_constant=_constant)


def loads(raw: bytes | str) -> Any:
    """``raw`` as JSON, refused (``invalid_input``) if it is not JSON or if an
    object repeats a key (named, as the field)."""
    try:
        return _DECODER.decode(raw if isinstance(raw, str) else json_text(raw))
    except _Repeated as exc:
        raise errors.InvalidInput(
            f"the key {echo(exc.key)} is given twice in one object: send it once",
            field=exc.key[:80],
        ) from None
    except (ValueError, RecursionError):
        raise errors.InvalidInput("the request body is not valid JSON") from None


def utc_time(name: str, value: str) -> str:
    """``value`` in the store's form, or ``invalid_input`` naming ``name``: the
    library's one reading of a time (``broker.api.handles.utc_time``), the input quoted
    at most ``echo``'s length."""
    try:
        return handles.utc_time(value, name)
    except errors.InvalidInput:
        raise errors.InvalidInput(
            f"bad {name} {echo(value)}: an ISO-8601 time (2026-11-30T03:52:00Z)", field=name
        ) from None
