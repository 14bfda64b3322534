"""Request bodies of the HTTP API: pydantic input models, closed (S10, S33).

The agent-side bodies reuse ``broker.model.pydantic_inputs`` where the library has one
(``PostInput``, ``DirectiveInput``); the others exist only
because HTTP carries them as JSON. Every model refuses unknown fields, so a
``sender`` or ``from`` in a body is ``invalid_input`` naming the field, and
every number has documented bounds (finite, in range).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, StringConstraints

from broker.frontends.http.edge import Strict
from broker.model.pydantic_inputs import (
    Archetype,
    DirectiveInput,
    PostInput,
)
from broker.vocab import MIN_SECONDS, SpaceKind

__all__ = [
    "CreateSpaceBody",
    "DirectiveInput",
    "JoinBody",
    "OperatorKeyReleaseBody",
    "OperatorReservationReleaseBody",
    "PostInput",
    "PruneBody",
    "RequeueBody",
    "PathsBody",
    "ReservationBody",
    "RetractBody",
    "SendManyBody",
    "SettingsBody",
]

Text = Annotated[str, StringConstraints(min_length=1, max_length=400)]
Id = Annotated[str, StringConstraints(min_length=1, max_length=200)]
Key = Annotated[str, StringConstraints(min_length=1, max_length=200)]
Seconds = Annotated[float, Field(ge=MIN_SECONDS, le=7 * 24 * 3600, allow_inf_nan=False)]
Ttl = Annotated[float, Field(ge=MIN_SECONDS, le=86400, allow_inf_nan=False)]
Fence = Annotated[int, Field(ge=0, le=2**62)]
Body = Annotated[str, StringConstraints(min_length=1)]


def _number(value: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"a number, not {type(value).__name__}")  # true is not 1 (strict)
    return value


Setting = Annotated[Any, AfterValidator(_number)]  # every limit is a number


class _Body(Strict):
    """Closed and strict (``edge.Strict``): the MCP tools' inputs share the base."""


# --- operator ------------------------------------------------------------------------


class CreateSpaceBody(_Body):
    kind: SpaceKind
    settings: dict[str, Setting] = Field(default_factory=dict)
    """per-space limits (``space set`` names); unknown ones are refused"""


class SettingsBody(_Body):
    settings: dict[str, Setting]
    """the limits to change; unknown ones are refused"""


class PruneBody(_Body):
    """``Operator.prune`` (S25): who counts as stale."""

    older_than: Annotated[float, Field(ge=0, le=10 * 365 * 86400, allow_inf_nan=False)] | None = (
        None
    )
    """seconds since the last heartbeat; omitted: heartbeats are not looked at"""
    check_pid: bool = True
    """also a registered process that is gone (on the server's host)"""
    dry_run: bool = False
    """list who would be pruned, write nothing"""


class RequeueBody(_Body):
    ids: Annotated[list[Id], Field(min_length=1, max_length=10_000)]
    """delivery or message ids of quarantined deliveries"""


class JoinBody(_Body):
    """Join a participant on an agent's behalf (the operator's key authenticates it).

    No ``pid``: the server cannot tell whose a client's process is, so a served
    participant is live by its heartbeat (its calls and long-polls), S27.
    A re-join keeps the directory fields it leaves out; ``""`` clears one (S40)."""

    codename: Text
    agent: Id | None = None
    run_id: Id | None = None
    step: Annotated[str, StringConstraints(max_length=200)] | None = None
    parent: Annotated[str, StringConstraints(max_length=200)] | None = None
    role: Annotated[str, StringConstraints(max_length=200)] | None = None
    archetype: Archetype | Literal[""] | None = None
    task: Annotated[str, StringConstraints(max_length=2000)] | None = None
    lead: bool = False
    messaging: bool = True
    tools: Annotated[list[Id], Field(max_length=64)] | None = None
    token: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = None
    """the address's last token: continue it while its holder is live (S27, S40)"""


class SendManyBody(_Body):
    """Many ``msg.send`` in one transaction; each item is checked as ``msg.send``'s input
    record (``broker.model.inputs.SendInput``)."""

    items: Annotated[list[dict[str, Any]], Field(max_length=1000)]
    """``{"to", "text", "idempotency_key"}`` objects"""


# --- the operator's retract and path check (S23, S37) ----------------------------------------
class RetractBody(_Body):
    directive_id: Id


PathText = Annotated[str, StringConstraints(min_length=1, max_length=4096)]  # globs.PATH_MAX


class PathsBody(_Body):
    paths: Annotated[list[PathText], Field(min_length=1, max_length=10_000)]


# --- path reservations (S37) -------------------------------------------------------------


class ReservationBody(_Body):
    fence: Fence


# The operator ends someone's hold (S22, S37): the reason is journaled.
Reason = Annotated[str, StringConstraints(max_length=500)]


class OperatorKeyReleaseBody(_Body):
    key: Key
    fence: Fence | None = None
    reason: Reason | None = None


class OperatorReservationReleaseBody(ReservationBody):
    reason: Reason | None = None
