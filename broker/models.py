"""Pydantic models at the edges: what callers pass in and get back.

Input models refuse fields they do not list (S10): a tool call cannot smuggle a
``from`` or a ``sender``. Output models are what the CLI prints with ``--json``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

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


def _not_blank(text: str) -> str:
    if not text.strip():
        raise ValueError("message text is empty")
    return text


# A message body: kept exactly as given, but never empty or only white space.
Body = Annotated[str, AfterValidator(_not_blank)]


class _In(BaseModel):
    # defer_build: schemas are built on first use, not at import (CLI start-up time).
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)


# --- inputs -----------------------------------------------------------------------
class SendInput(_In):
    """``msg.send``: the sender is never an input (S10)."""

    to: list[Target] = Field(min_length=1, max_length=64)
    text: Body
    idempotency_key: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = None


class PostInput(_In):
    """``board.post``: a channel post, or addressed to some participants."""

    text: Body
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


# --- the board (S21-S23) -------------------------------------------------------------
class DirectiveInput(_In):
    """``board.directive``: a standing instruction for the participants it addresses."""

    to: list[Target] = Field(min_length=1, max_length=64)
    text: Annotated[str, StringConstraints(min_length=1)]
    idempotency_key: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = None


class BoardEntry(_Out):
    """One item of the board, as ``board.read`` returns it (a log row)."""

    id: str
    seq: int
    kind: Literal["post", "directive", "retract"]
    sender: str
    to: list[str] = Field(description="post: addressees (empty = channel); directive: its to forms")
    body: str
    ref: str | None = Field(description="retract: the directive it lifts")
    reached: list[str]
    in_force: bool | None = Field(description="directive: not retracted yet; None otherwise")
    created_at_utc: str


class ClaimGrant(_Out):
    """A claim on a board key: who holds it, until when, and its fencing token
    (what ``board.claim`` and ``board.renew`` return, and live claims list)."""

    key: str
    token: int
    holder: str
    claimed_at_utc: str
    lease_expires_at: str


class JournalEntry(_Out):
    """One line of the claim journal (S23)."""

    id: str
    key: str
    event: Literal["claimed", "released", "expired", "renewed"]
    owner: str
    token: int
    lease_expires_at: str | None
    at_utc: str


# --- delivery: queues, turns, transcripts (S13-S20) ---------------------------------
class _ByAlias(_Out):
    model_config = ConfigDict(
        frozen=True, serialize_by_alias=True, validate_by_name=True, defer_build=True
    )


class Delivery(_ByAlias):
    """One claimed message of an inbox. ``id`` is the MESSAGE id: the stable id
    consumers de-duplicate by (S16); ``delivery_id`` names the inbox row."""

    id: str
    delivery_id: str
    kind: str
    sender: str = Field(alias="from")
    body: str
    urgent: bool
    created_at_utc: str
    deliveries: int = Field(description="times this message was claimed from this inbox")


class Lease(_Out):
    """A claim on some deliveries: present ``token`` to ack, release, extend."""

    token: str
    owner: str
    expires_at: str
    deliveries: list[Delivery]


class QuarantinedDelivery(_ByAlias):
    """A delivery set aside with its evidence (S15)."""

    delivery_id: str
    id: str
    recipient: str
    kind: str
    sender: str = Field(alias="from")
    body: str
    created_at_utc: str
    deliveries: int
    reason: str | None
    last_error: str | None
    lease_owner: str | None


TurnGroup = Literal["urgent", "directive", "message", "broadcast"]


class TurnItem(_ByAlias):
    """One thing shown in a turn, with ``content`` as rendered for the model (S17)."""

    group: TurnGroup
    id: str
    kind: str
    sender: str = Field(alias="from")
    body: str
    urgent: bool
    created_at_utc: str
    deliveries: int | None = Field(description="claim count; None for broadcasts and directives")
    content: str
    recorded: bool = Field(
        description="written to the transcript in this turn (a re-shown directive is not)"
    )


class Turn(_Out):
    """What a participant is shown before one model call. ``id`` is None when
    nothing new arrived (only standing directives, re-shown): nothing to confirm."""

    id: str | None
    address: str
    created_at_utc: str
    expires_at: str | None
    items: list[TurnItem]

    @property
    def content(self) -> str:
        return "\n\n".join(item.content for item in self.items)


class TurnSeen(_Out):
    turn_id: str
    receipt_id: str
    acked: int
    message_ids: list[str]


class TranscriptEntry(_Out):
    direction: Literal["sent", "received", "injected", "notice"]
    at_utc: str
    turn_id: str | None
    position: int
    message_id: str | None
    kind: str
    content: str


class TurnRecord(_Out):
    """One turn of a rebuilt transcript (S19): what was received and injected,
    in the order the model saw it, then what the participant sent and the
    notices it got before its next turn. ``turn_id`` None: before the first turn."""

    turn_id: str | None
    at_utc: str | None
    state: str | None
    seen_at_utc: str | None
    received: list[TranscriptEntry]
    injected: list[TranscriptEntry]
    sent: list[TranscriptEntry]
    notices: list[TranscriptEntry]
