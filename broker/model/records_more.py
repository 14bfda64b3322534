"""The records of the calls off an agent's hot path: search, contact policies,
receipts, path reservations, history, transcripts, the operator's queue views,
``doctor`` / ``backup`` / ``vacuum`` / ``purge`` and usage.

Part of ``broker.model.records`` (import them from there): split out because
building a record class costs ~0.5 ms at import and a CLI call runs once per
agent tool call, so ``broker msg send`` or ``inbox claim`` should not build the
classes of commands it never runs. ``broker.model.records`` loads this module on the
first use of one of these names.
"""

from __future__ import annotations

from typing import Any, Literal

from broker.record_type import record
from broker.vocab import SpaceKind, SpaceState, Status

# Read by pydantic (TypeAdapter) only: field descriptions from attribute docstrings.
_DOCSTRINGS = {"use_attribute_docstrings": True}


# --- messages: search, contact policies, receipts (S35-S38) -------------------------------
@record
class SearchHit:
    """One message found by search (S36), best first."""

    id: str
    seq: int
    kind: str
    sender: str
    to: list[str]
    thread: str | None
    created_at_utc: str
    snippet: str
    """the matching words between ``[`` and ``]``, ``…`` where text was cut"""
    rank: float
    """bm25 score: lower is a better match"""


@record
class ContactPolicy:
    """Who may message a participant directly (S38); ``allow``: the addresses a
    ``listed`` policy lets in."""

    policy: str
    allow: list[str]


@record
class AckStatus:
    """Who has seen a message (``msg status``): from their ``seen`` receipts (S18)."""

    id: str
    ack_required: bool
    reached: list[str]
    seen: list[str]
    not_seen: list[str]


# --- the roster's journal ------------------------------------------------------------------
@record
class ParticipantEvent:
    event: Literal["joined", "left"]
    address: str
    codename: str
    agent: str
    run_id: str
    step: str | None
    parent: str | None
    reason: str | None
    at_utc: str


# --- path reservations (S37) -------------------------------------------------------------
@record
class Reservation:
    """A grant of a path pattern (S37): exclusive or shared, who holds it, until
    when, and its fencing token (larger than every earlier grant of the space).
    Named in the new vocabulary (``fence``, ``expires_at``) from the start."""

    fence: int
    pattern: str
    mode: Literal["exclusive", "shared"]
    holder: str
    reason: str | None
    claimed_at_utc: str
    expires_at: str


@record
class PathCheck:
    """Who holds what covers one path (S37): the live reservations whose
    pattern matches it, by token; ``blocked`` when one of them is exclusive and
    held by someone other than the caller (always false for nobody's)."""

    path: str
    held_by: list[Reservation]
    blocked: bool


# --- delivery: the operator's queue views, history, transcripts (S15-S19) ----------------
@record
class QuarantinedDelivery:
    """A delivery set aside with its evidence (S15)."""

    delivery_id: str
    id: str
    recipient: str
    kind: str
    sender: str
    body: str
    created_at_utc: str
    deliveries: int
    reason: str | None
    last_error: str | None
    lease_owner: str | None


@record
class QueueStats:
    """A space's deliveries by state (S13-S15), for the operator."""

    __pydantic_config__ = _DOCSTRINGS

    ready: int
    processing: int
    done: int
    quarantine: int
    redeliveries: int
    """extra deliveries: the sum of (count - 1) over messages claimed more than once"""


@record
class InboxStats:
    """One participant's inbox as a queue, and what it sent lately (the console)."""

    __pydantic_config__ = _DOCSTRINGS

    address: str
    status: Status
    waiting: int
    """deliveries the next claim would take: ready, or leased and the lease ran out"""
    in_flight: int
    """deliveries leased and not expired (being processed)"""
    retried: int
    """of those waiting or in flight, the ones handed out before (a lease expired or was released)"""
    quarantined: int
    sent_last_minute: int
    """log rows it wrote in the last 60 seconds (receipts aside)"""


@record
class SpaceActivity:
    """A space's queues and send rate now (the console's queue view, S13-S15)."""

    __pydantic_config__ = _DOCSTRINGS

    space_id: str
    at_utc: str
    """the store's time of the reading"""
    sent_last_minute: int
    """log rows written in the last 60 seconds by anyone, the operator included
    (receipts aside; counted among the last 5000 rows)"""
    inboxes: list[InboxStats]
    """every participant's inbox, departed ones included, in join order"""


@record
class HistoryEntry:
    """One message of a teammate's canonical history (S16, S26): each handled
    message once, appended before the turn's ack."""

    message_id: str
    turn_id: str | None
    kind: str
    sender: str
    body: str
    at_utc: str


@record
class TranscriptEntry:
    direction: Literal["sent", "received", "injected", "notice"]
    at_utc: str
    turn_id: str | None
    position: int
    message_id: str | None
    kind: str
    content: str


@record
class TurnRecord:
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


# --- operations (broker doctor / backup / vacuum / purge, usage) ------------------------
@record
class Finding:
    """One check of ``broker doctor``."""

    __pydantic_config__ = _DOCSTRINGS

    check: str
    """what was checked: sqlite, journal_mode, wal, schema, integrity, file, doorbells, leases,
    quarantine, size, settings"""
    severity: Literal["ok", "info", "warning", "error"]
    message: str
    fix: str | None
    """the command (or step) that fixes it; None when there is nothing to fix"""
    path: str | None = None
    data: dict[str, Any] | None = None
    """the measured values behind the message"""


@record
class BackupResult:
    __pydantic_config__ = _DOCSTRINGS

    path: str
    bytes: int
    pages: int
    schema: str | None
    integrity: str
    """the copy's integrity check: "ok" (a copy that fails it is never kept)"""
    key_file: str | None
    """where the operator key file was copied beside the backup, if the store has one"""
    seconds: float


@record
class VacuumResult:
    __pydantic_config__ = _DOCSTRINGS

    path: str
    bytes_before: int
    """database + WAL, before"""
    bytes_after: int
    seconds: float


@record
class Purged:
    """A purged space (retention): its rows deleted after a verified export."""

    __pydantic_config__ = _DOCSTRINGS

    id: str
    """the purge's row in the store-level journal ``purges``"""
    space_id: str
    kind: SpaceKind
    export_dir: str
    """the space's folder in the export: import it to get the space back"""
    digest: str
    """SHA-256 over each exported file's SHA-256 and line count"""
    files: int
    counts: dict[str, int]
    """rows deleted, per table"""
    at_utc: str


@record
class SenderUse:
    """One sender's part of a space's log (S30)."""

    __pydantic_config__ = _DOCSTRINGS

    sender: str
    log_bytes: int
    messages: int
    share: float
    """its part of ``log_max_mb`` (the operator has no cap: it is listed all the same)"""


@record
class InboxUse:
    """One participant's inbox against ``inbox_cap`` (S30)."""

    __pydantic_config__ = _DOCSTRINGS

    address: str
    status: Status
    waiting: int
    """deliveries ready or being processed"""
    cap: int


@record
class SpaceUsage:
    """A space's limits in effect and how much of them is used (S30)."""

    __pydantic_config__ = _DOCSTRINGS

    space_id: str
    state: SpaceState
    limits: dict[str, Any]
    """every setting in effect (the space's overrides over the defaults)"""
    settings: dict[str, Any]
    """the space's own overrides, as stored"""
    log_bytes: int
    log_cap_bytes: int
    sender_log_cap_bytes: int
    """what one agent may hold of the log (``sender_share`` of ``log_max_mb``)"""
    sender_inbox_cap: int
    """deliveries one sender may have waiting in another's inbox"""
    messages: int
    top_senders: list[SenderUse]
    inboxes: list[InboxUse]
