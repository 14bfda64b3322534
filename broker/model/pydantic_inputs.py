"""Pydantic models at the edge: what callers pass in.

Input models refuse fields they do not list (S10): a tool call cannot smuggle a
``from`` or a ``sender``. What the broker returns is in ``broker.model.records``
(plain records, no pydantic); the vocabularies are in ``broker.vocab`` and
re-exported here.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
)

from broker.errors import InvalidInput
from broker.model.bounds import control_char, text_flaw
from broker.vocab import Archetype as Archetype
from broker.vocab import Reason as Reason
from broker.vocab import SpaceKind as SpaceKind
from broker.vocab import SpaceState as SpaceState
from broker.vocab import Status as Status
from broker.vocab import TurnGroup as TurnGroup
from broker.vocab import Via as Via

INT64_MAX = 2**63 - 1


def _storable(text: str) -> str:
    flaw = text_flaw(text)
    if flaw is not None:
        raise ValueError(f"not valid text ({flaw})")
    return text


Target = Annotated[
    str,
    StringConstraints(min_length=1, max_length=400, strip_whitespace=True),
    AfterValidator(_storable),
]


class _In(BaseModel):
    # defer_build: schemas are built on first use, not at import (CLI start-up time).
    # strict (S33): a bool is not a number, text is not a number, a number is not
    # a bool; nothing is coerced into what the caller did not say.
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True, strict=True)


# --- inputs -----------------------------------------------------------------------
def _one_line(text: str) -> str:
    bad = control_char(text)
    if bad is not None:
        raise ValueError(f"it holds the control character {bad!r}")
    return text


# A name or label a participant gives itself (shown in the directory, one per
# line): no C0, DEL or C1 control is stored (S31, S33).
Label = AfterValidator(_one_line)


class JoinInput(_In):
    """A join. The directory fields (step, parent, role, archetype, task) left
    out (None) keep what a re-join's address stored; an empty one clears it
    (S40)."""

    codename: Annotated[
        str, StringConstraints(min_length=1, max_length=400, strip_whitespace=True), Label
    ]
    agent: Annotated[str, StringConstraints(min_length=1, max_length=200), Label] | None = None
    run_id: Annotated[str, StringConstraints(min_length=1, max_length=200), Label] | None = None
    step: Annotated[str, StringConstraints(max_length=200), Label] | None = None
    parent: Annotated[str, StringConstraints(max_length=200), Label] | None = None
    role: Annotated[str, StringConstraints(max_length=200), Label] | None = None
    archetype: Archetype | Literal[""] | None = None
    task: Annotated[str, StringConstraints(max_length=2000), Label] | None = None
    lead: bool = False
    messaging: bool = True
    tools: list[str] | None = None
    pid: Annotated[int, Field(ge=1, le=INT64_MAX)] | None = None


def validation_error(
    exc: ValidationError, taker: str = "tool", whole: str = "input"
) -> InvalidInput:
    """One ``invalid_input`` line for a pydantic refusal: the first field, and
    an unknown field named as such (S10, S33); ``field`` names the argument
    (``to`` for ``to.3``). ``taker`` is what refuses it (a tool, an endpoint),
    ``whole`` what an error of no one field is about (the input, a body)."""
    first = exc.errors()[0]
    loc = first["loc"]
    where = ".".join(str(p) for p in loc) or whole
    field = str(loc[0]) if loc else whole
    if first["type"] == "extra_forbidden":
        return InvalidInput(f"unknown field {where!r}: this {taker} does not take it", field=field)
    return InvalidInput(f"bad {where}: {first['msg']}", field=field)


def parse_input(model: type[Any], data: dict[str, Any]) -> Any:
    """Validate a tool call's arguments; unknown fields are refused (S10)."""
    try:
        return model(**data)
    except ValidationError as exc:
        raise validation_error(exc) from None
