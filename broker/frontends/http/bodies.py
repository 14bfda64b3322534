"""Request bodies of the HTTP API: pydantic input models, closed (S10, S33).

The agent-side bodies reuse ``broker.model.pydantic_inputs`` where the library has one
(``PostInput``, ``DirectiveInput``); the others exist only
because HTTP carries them as JSON. Every model refuses unknown fields, so a
``sender`` or ``from`` in a body is ``invalid_input`` naming the field, and
every number has documented bounds (finite, in range).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints

from broker.frontends.http.edge import Strict
from broker.model.pydantic_inputs import (
    Archetype,
    DirectiveInput,
    PostInput,
)
from broker.vocab import MIN_SECONDS

__all__ = [
    "AckAndClaimBody",
    "DirectiveInput",
    "ExtendBody",
    "JoinBody",
    "KeyClaimBody",
    "KeyReleaseBody",
    "KeyRenewBody",
    "PathsBody",
    "PostInput",
    "QuarantineBody",
    "ReleaseBody",
    "ReservationBody",
    "ReservationRenewBody",
    "ReserveBody",
    "RetractBody",
    "SendManyBody",
    "SettleBody",
    "StatusBody",
    "TurnBody",
]

Text = Annotated[str, StringConstraints(min_length=1, max_length=400)]
Id = Annotated[str, StringConstraints(min_length=1, max_length=200)]
Key = Annotated[str, StringConstraints(min_length=1, max_length=200)]
Seconds = Annotated[float, Field(ge=MIN_SECONDS, le=7 * 24 * 3600, allow_inf_nan=False)]
Wait = Annotated[float, Field(ge=0, le=300, allow_inf_nan=False)]
Ttl = Annotated[float, Field(ge=MIN_SECONDS, le=86400, allow_inf_nan=False)]
Fence = Annotated[int, Field(ge=0, le=2**62)]
Body = Annotated[str, StringConstraints(min_length=1)]
IdList = Annotated[list[Id], Field(max_length=10_000)]


class _Body(Strict):
    """Closed and strict (``edge.Strict``): the MCP tools' inputs share the base."""


# --- operator ------------------------------------------------------------------------
class PolicyBody(_Body):
    """A participant's own contact policy (S38)."""

    policy: Annotated[str, StringConstraints(max_length=32)]
    allow: Annotated[list[Text], Field(max_length=256)] = Field(default_factory=list)


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


# --- agent: the inbox queue (S13-S16) -------------------------------------------------
class SettleBody(_Body):
    lease_token: Id
    ids: IdList | None = None
    """message ids to settle; omitted: the whole lease"""


class ReleaseBody(SettleBody):
    error: Annotated[str, StringConstraints(max_length=8000)] | None = None


class ExtendBody(SettleBody):
    seconds: Seconds | None = None


class QuarantineBody(_Body):
    lease_token: Id
    message_id: Id
    reason: Annotated[str, StringConstraints(min_length=1, max_length=2000)]
    error: Annotated[str, StringConstraints(max_length=8000)] | None = None


class TurnBody(_Body):
    wait: Wait = 0.0
    lease: Seconds | None = None
    limit: Annotated[int, Field(ge=1, le=10_000)] | None = None


class AckAndClaimBody(SettleBody):
    """Ack (the whole lease, or ``ids``) and claim the next ``limit``, in one transaction."""

    limit: Annotated[int, Field(ge=1, le=10_000)] = 1
    lease: Seconds | None = None


class SendManyBody(_Body):
    """Many ``msg.send`` in one transaction; each item is checked as ``msg.send``'s input
    record (``broker.model.inputs.SendInput``)."""

    items: Annotated[list[dict[str, Any]], Field(max_length=1000)]
    """``{"to", "text", "idempotency_key"}`` objects"""


class StatusBody(_Body):
    status: Literal["running", "idle", "failed", "shutdown"]


# --- agent: the board (S21-S23) -------------------------------------------------------
class RetractBody(_Body):
    directive_id: Id


class KeyClaimBody(_Body):
    key: Key
    ttl: Ttl = 300.0


class KeyReleaseBody(_Body):
    key: Key
    fence: Fence


class KeyRenewBody(KeyReleaseBody):
    ttl: Ttl = 300.0


# --- path reservations (S37): the library checks each pattern and path itself ------------
PathText = Annotated[str, StringConstraints(min_length=1, max_length=4096)]  # globs.PATH_MAX


class ReserveBody(_Body):
    patterns: Annotated[list[PathText], Field(min_length=1, max_length=100)]
    shared: bool = False
    ttl: Ttl = 300.0
    reason: Annotated[str, StringConstraints(max_length=500)] | None = None


class ReservationBody(_Body):
    fence: Fence


class ReservationRenewBody(ReservationBody):
    ttl: Ttl = 300.0


class PathsBody(_Body):
    paths: Annotated[list[PathText], Field(min_length=1, max_length=10_000)]
