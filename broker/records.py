"""What the broker returns: plain frozen, slotted records (no pydantic).

Results are built on every call (a send, a claim, a turn), and the CLI runs
once per agent tool call, so they cost neither pydantic's import (~80 ms) nor
its validation. pydantic stays at the edges: ``broker.models`` validates
inputs. A server can still derive JSON schemas from these classes
(``pydantic.TypeAdapter(Lease)``): the field descriptions are attribute
docstrings, and ``__pydantic_config__`` (a plain dict) asks for them.

``to_dict`` (from ``broker.record_json``) turns a record into what
``json.dumps`` takes. One name per concept, in every record: the sender of a
message is ``sender``, a fencing token ``fence``, an inbox lease's token
``lease_token``, an expiry ``expires_at``; ``token`` is only ever a secret.
"""

from __future__ import annotations

from typing import Any, Literal

from broker.record_json import to_dict as to_dict  # records as JSON: part of this surface
from broker.record_type import record
from broker.vocab import Reason, SpaceKind, SpaceState, Status, TurnGroup

# Read by pydantic (TypeAdapter) only: field descriptions from attribute docstrings.
_DOCSTRINGS = {"use_attribute_docstrings": True}


@record
class Space:
    id: str
    kind: SpaceKind
    state: SpaceState
    settings: dict[str, Any]
    created_at_utc: str
    updated_at_utc: str


@record
class CreatedSpace(Space):
    """A space as its creator gets it: with its join key (S27), shown this once."""

    __pydantic_config__ = _DOCSTRINGS

    join_key: str
    """secret: joins the space (``broker join --join-key``); stored only as a hash"""


@record
class JoinKey:
    """A space's new join key (``rotate_join_key``): the old one no longer works."""

    __pydantic_config__ = _DOCSTRINGS

    space_id: str
    join_key: str
    """secret: shown once, stored only as a hash"""


@record
class Participant:
    __pydantic_config__ = _DOCSTRINGS

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
    waiting: int = 0
    """deliveries ready or being processed"""


@record
class Joined:
    __pydantic_config__ = _DOCSTRINGS

    space_id: str
    participant_id: str
    address: str
    token: str
    """secret; shown once, stored only as a hash"""


@record
class NotReached:
    address: str
    reason: Reason


@record
class SendResult:
    __pydantic_config__ = _DOCSTRINGS

    id: str
    seq: int
    kind: str
    reached: list[str]
    not_reached: list[NotReached]
    duplicate: bool = False
    """an idempotent repeat: nothing new was written"""


@record
class LogEntry:
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
    thread: str | None = None
    """the thread it belongs to (S35)"""
    reply_to: str | None = None
    """the message it answers (S35)"""
    importance: str = "normal"
    """low | normal | high (urgent: the operator's ``urgent``)"""
    ack_required: bool = False
    """its sender asks who has seen it (``msg status``)"""


@record
class Thread:
    """One thread of a space (S35), as the ``v_threads`` view sums it up."""

    thread: str
    messages: int
    first_id: str
    first_at: str
    last_id: str
    last_at: str
    participants: int
    senders: list[str]


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


def log_matches(entry: LogEntry, sender: str | None, to: str | None, since: str | None) -> bool:
    """The log filters of ``Operator.log`` / ``follow`` beyond the kinds (one
    predicate for the library and the served client): ``sender`` an exact
    sender address; ``to`` named by the entry's ``to`` forms or reached by it;
    ``since`` an ISO-8601 UTC time (``created_at_utc >= since``)."""
    if sender is not None and entry.sender != sender:
        return False
    if to is not None and to not in entry.to and to not in entry.reached:
        return False
    return since is None or entry.created_at_utc >= since


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


# --- the board (S21-S23) -------------------------------------------------------------
@record
class BoardEntry:
    """One item of the board, as ``board.read`` returns it (a log row)."""

    __pydantic_config__ = _DOCSTRINGS

    id: str
    seq: int
    kind: Literal["post", "directive", "retract"]
    sender: str
    to: list[str]
    """post: addressees (empty = channel); directive: its to forms"""
    body: str
    ref: str | None
    """retract: the directive it lifts"""
    reached: list[str]
    in_force: bool | None
    """directive: not retracted yet; None otherwise"""
    created_at_utc: str


@record
class ClaimGrant:
    """A claim on a board key: who holds it, until when, and its fencing token
    (what ``board.claim`` and ``board.renew`` return, and live claims list)."""

    key: str
    fence: int
    """the fencing token: larger than every earlier grant of the key (S22)"""
    holder: str
    claimed_at_utc: str
    expires_at: str


@record
class JournalEntry:
    """One line of the claim journal (S23)."""

    id: str
    key: str
    event: Literal["claimed", "released", "expired", "renewed"]
    owner: str
    fence: int
    expires_at: str | None
    """the lease expiry as of this event"""
    at_utc: str


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


# --- delivery: queues, turns, transcripts (S13-S20) ---------------------------------
@record
class Delivery:
    """One claimed message of an inbox. ``id`` is the MESSAGE id: the stable id
    consumers de-duplicate by (S16); ``delivery_id`` names the inbox row."""

    __pydantic_config__ = _DOCSTRINGS

    id: str
    delivery_id: str
    kind: str
    sender: str
    body: str
    urgent: bool
    created_at_utc: str
    deliveries: int
    """times this message was claimed from this inbox"""
    thread: str | None = None
    """the thread it belongs to (S35)"""
    importance: str = "normal"
    """low | normal | high, as its sender marked it"""


@record
class Lease:
    """A claim on some deliveries: present ``lease_token`` to ack, release, extend."""

    lease_token: str
    owner: str
    expires_at: str
    deliveries: list[Delivery]


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
class TurnItem:
    """One thing shown in a turn, with ``content`` as rendered for the model (S17)."""

    __pydantic_config__ = _DOCSTRINGS

    group: TurnGroup
    id: str
    kind: str
    sender: str
    body: str
    urgent: bool
    created_at_utc: str
    deliveries: int | None
    """claim count; None for broadcasts and directives"""
    content: str
    recorded: bool
    """written to the transcript in this turn (a re-shown directive is not)"""


@record
class Turn:
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


@record
class TurnSeen:
    turn_id: str
    receipt_id: str
    acked: int
    message_ids: list[str]


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


# --- operations (broker doctor / backup / vacuum) -------------------------------------
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
