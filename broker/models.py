"""Pydantic models at the edges: what callers pass in and get back.

Input models refuse fields they do not list (S10): a tool call cannot smuggle a
``from`` or a ``sender``. Output models are what the CLI prints with ``--json``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

SpaceKind = Literal["agentiflow", "workflow", "session", "run"]
SpaceState = Literal["running", "stopped", "archived"]
Status = Literal["running", "idle", "failed", "shutdown", "left"]
Archetype = Literal["specialist", "surveyor", "researcher", "planner", "interfacer"]
Via = Literal["cli", "cp", "mcp"]
Reason = Literal[
    "unknown_participant",
    "no_live_participant",
    "no_parent",
    "no_lead",
    "participant_left",
    "inbox_full",
    "broadcast_full",
]

Target = Annotated[str, StringConstraints(min_length=1, max_length=400, strip_whitespace=True)]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True)


# --- inputs -----------------------------------------------------------------------
class SendInput(_In):
    """``msg.send``: the sender is never an input (S10)."""

    to: list[Target] = Field(min_length=1, max_length=64)
    text: str
    idempotency_key: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = None


class PostInput(_In):
    """``board.post``: a channel post, or addressed to some participants."""

    text: str
    addressed_to: list[Target] = Field(default_factory=list, max_length=64)
    idempotency_key: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = None


class JoinInput(_In):
    codename: Annotated[str, StringConstraints(min_length=1, max_length=400, strip_whitespace=True)]
    agent: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = None
    run_id: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = None
    step: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = None
    parent: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = None
    role: Annotated[str, StringConstraints(max_length=200)] | None = None
    archetype: Archetype | None = None
    task: Annotated[str, StringConstraints(max_length=2000)] | None = None
    lead: bool = False
    messaging: bool = True
    tools: list[str] | None = None
    pid: int | None = None


# --- outputs ----------------------------------------------------------------------
class Space(_Out):
    id: str
    kind: SpaceKind
    state: SpaceState
    settings: dict[str, Any]
    created_at_utc: str
    updated_at_utc: str


class Participant(_Out):
    id: str
    space_id: str
    address: str
    codename: str
    agent: str
    run_id: str
    step: str | None
    parent: str | None
    role: str | None
    archetype: str | None
    task: str | None
    is_lead: bool
    messaging: bool
    tools: list[str] | None
    status: Status
    pid: int | None
    joined_at_utc: str
    left_at_utc: str | None
    last_seen_utc: str
    waiting: int = Field(0, description="deliveries ready or being processed")


class Joined(_Out):
    space_id: str
    participant_id: str
    address: str
    token: str = Field(description="secret; shown once, stored only as a hash")


class NotReached(_Out):
    address: str
    reason: Reason


class SendResult(_Out):
    id: str
    seq: int
    kind: str
    reached: list[str]
    not_reached: list[NotReached]
    duplicate: bool = Field(False, description="an idempotent repeat: nothing new was written")


class LogEntry(_Out):
    id: str
    space_id: str
    seq: int
    kind: str
    sender: str
    to: list[str]
    body: str
    urgent: bool
    via: str | None
    ref: str | None
    reached: list[str]
    not_reached: list[NotReached]
    idempotency_key: str | None
    created_at_utc: str


class ParticipantEvent(_Out):
    event: Literal["joined", "left"]
    address: str
    codename: str
    agent: str
    run_id: str
    step: str | None
    parent: str | None
    reason: str | None
    at_utc: str
