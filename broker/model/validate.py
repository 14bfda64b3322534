"""The post input checked without pydantic: the library's hot path (until
``board.post`` is a declared operation, whose input record is its one check).

``broker board post`` is one process per tool call, and importing pydantic and
building its models was most of its start-up. The rules here are those of
``broker.model.pydantic_inputs.PostInput`` (S10, S33), with the same one-line
errors; tests/unit/model/test_validate.py checks that both agree on valid and invalid
inputs.

The plain checks take the input as the library is called with it (``str``,
``list`` of ``str``, ``bool``, ``None``). Anything else -- a number for the
text, ``"yes"`` for a flag, a string with a lone surrogate or a NUL in an
address -- is handed to the pydantic model (strict: it coerces nothing), which
words the refusal exactly as it always has; pydantic is imported only then.
"""

from __future__ import annotations

from typing import Any

from broker.errors import InvalidInput
from broker.model.bounds import text_flaw
from broker.record_type import record

TARGET_MAX = 400
TARGETS_MAX = 64
KEY_MAX = 200


@record
class PostArgs:
    """``board.post``'s checked input (``broker.model.pydantic_inputs.PostInput``'s fields)."""

    text: str
    addressed_to: list[str]
    idempotency_key: str | None = None


class _Defer(Exception):
    """Not an input the plain checks take: the pydantic model decides."""


def post_args(data: dict[str, Any]) -> PostArgs:
    """``board.post``'s input checked (``InvalidInput`` naming the first bad field)."""
    try:
        return _post(data)
    except _Defer:
        return PostArgs(**_by_model("PostInput", data, PostArgs))


def _post(data: dict[str, Any]) -> PostArgs:
    _plain_dict(data)
    text = _text(data)
    to = _targets(data, "addressed_to", required=False)
    key = _key(data)
    _unknown_last(data, PostArgs.__dataclass_fields__)
    return PostArgs(text, to, key)


def _plain_dict(data: dict[str, Any]) -> None:
    if not isinstance(data, dict) or not all(type(k) is str for k in data):
        raise _Defer


def _unknown_last(data: dict[str, Any], fields: dict[str, Any]) -> None:
    # pydantic reports an unknown field after every error of a known one.
    for name in data:
        if name not in fields:
            raise InvalidInput(f"unknown field {name!r}: this tool does not take it", field=name)


def _targets(data: dict[str, Any], name: str, *, required: bool) -> list[str]:
    if name not in data:
        if required:
            raise InvalidInput(f"bad {name}: Field required", field=name)
        return []
    given = data[name]
    if type(given) is not list:
        raise _Defer
    out: list[str] = []
    for n, item in enumerate(given):
        if n == TARGETS_MAX:  # pydantic stops at the first item past the cap
            raise InvalidInput(
                f"bad {name}: List should have at most {TARGETS_MAX} items after validation, "
                f"not {len(given)}",
                field=name,
            )
        if type(item) is not str or not _encodable(item):
            raise _Defer
        item = item.strip()
        if not item:
            raise InvalidInput(
                f"bad {name}.{n}: String should have at least 1 character", field=name
            )
        if len(item) > TARGET_MAX:
            raise InvalidInput(
                f"bad {name}.{n}: String should have at most {TARGET_MAX} characters", field=name
            )
        out.append(item)
    if required and not out:
        raise InvalidInput(
            f"bad {name}: List should have at least 1 item after validation, not 0", field=name
        )
    return out


def _text(data: dict[str, Any]) -> str:
    if "text" not in data:
        raise InvalidInput("bad text: Field required", field="text")
    text = data["text"]
    if type(text) is not str:
        raise _Defer
    if not text.strip():
        raise InvalidInput("bad text: Value error, message text is empty", field="text")
    flaw = text_flaw(text)
    if flaw is not None:  # S33: it could never be stored (or not on every backend)
        raise InvalidInput(
            f"bad text: Value error, message text is not valid text ({flaw})", field="text"
        )
    return text


def _key(data: dict[str, Any]) -> str | None:
    key = data.get("idempotency_key")
    if key is None:
        return None
    if type(key) is not str or not _encodable(key):
        raise _Defer
    if not key:
        raise InvalidInput(
            "bad idempotency_key: String should have at least 1 character", field="idempotency_key"
        )
    if len(key) > KEY_MAX:
        raise InvalidInput(
            f"bad idempotency_key: String should have at most {KEY_MAX} characters",
            field="idempotency_key",
        )
    return key


def _encodable(text: str) -> bool:
    """Text both backends store (no lone surrogate, no NUL); other text is
    the pydantic model's to word."""
    return text_flaw(text) is None


def _by_model(model: str, data: dict[str, Any], plain: type[Any]) -> dict[str, Any]:
    """The pydantic model's answer for an input the plain checks do not take."""
    from broker.model import pydantic_inputs as inputs  # the edge: loaded only for such inputs

    inp = inputs.parse_input(getattr(inputs, model), data)
    return {name: getattr(inp, name) for name in plain.__dataclass_fields__}
