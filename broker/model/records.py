"""What the broker returns: plain frozen, slotted records (no pydantic).

Results are built on every call (a send, a claim, a turn), and the CLI runs
once per agent tool call, so they cost neither pydantic's import (~80 ms) nor
its validation. pydantic stays at the edges: ``broker.model.inputs`` validates
inputs. A server can still derive JSON schemas from these classes
(``pydantic.TypeAdapter(Lease)``): the field descriptions are attribute
docstrings, and ``__pydantic_config__`` (a plain dict) asks for them.

Defined here: what an agent's hot calls return (a send, a claim, a turn, a
board claim). The others load on first use of their name here, so a CLI call
builds only the classes it can return: ``broker.model.records_space`` (a space, its
roster, threads and board) and ``broker.model.records_more`` (search, reservations,
history, transcripts, the operator's views, ``doctor`` and the like).

``to_dict`` (from ``broker.model.record_json``) turns a record into what
``json.dumps`` takes. One name per concept, in every record: the sender of a
message is ``sender``, a fencing token ``fence``, an inbox lease's token
``lease_token``, an expiry ``expires_at``; ``token`` is only ever a secret.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from broker.model.record_json import to_dict as to_dict  # records as JSON: part of this surface
from broker.record_type import record
from broker.vocab import Reason, TurnGroup

if TYPE_CHECKING:
    from broker.model.records_more import AckStatus as AckStatus
    from broker.model.records_more import BackupResult as BackupResult
    from broker.model.records_more import ContactPolicy as ContactPolicy
    from broker.model.records_more import Finding as Finding
    from broker.model.records_more import HistoryEntry as HistoryEntry
    from broker.model.records_more import InboxStats as InboxStats
    from broker.model.records_more import InboxUse as InboxUse
    from broker.model.records_more import ParticipantEvent as ParticipantEvent
    from broker.model.records_more import PathCheck as PathCheck
    from broker.model.records_more import Purged as Purged
    from broker.model.records_more import QuarantinedDelivery as QuarantinedDelivery
    from broker.model.records_more import QueueStats as QueueStats
    from broker.model.records_more import Reservation as Reservation
    from broker.model.records_more import SearchHit as SearchHit
    from broker.model.records_more import SenderUse as SenderUse
    from broker.model.records_more import SpaceActivity as SpaceActivity
    from broker.model.records_more import SpaceUsage as SpaceUsage
    from broker.model.records_more import TranscriptEntry as TranscriptEntry
    from broker.model.records_more import TurnRecord as TurnRecord
    from broker.model.records_more import VacuumResult as VacuumResult
    from broker.model.records_space import BoardEntry as BoardEntry
    from broker.model.records_space import CreatedSpace as CreatedSpace
    from broker.model.records_space import Joined as Joined
    from broker.model.records_space import JoinKey as JoinKey
    from broker.model.records_space import Participant as Participant
    from broker.model.records_space import Space as Space
    from broker.model.records_space import Thread as Thread

# The records built on first use: name -> module (broker.records_<module>).
_LATER = {
    "AckStatus": "more",
    "BackupResult": "more",
    "BoardEntry": "space",
    "ContactPolicy": "more",
    "CreatedSpace": "space",
    "Finding": "more",
    "HistoryEntry": "more",
    "InboxStats": "more",
    "InboxUse": "more",
    "JoinKey": "space",
    "Joined": "space",
    "Participant": "space",
    "ParticipantEvent": "more",
    "PathCheck": "more",
    "Purged": "more",
    "QuarantinedDelivery": "more",
    "QueueStats": "more",
    "Reservation": "more",
    "SearchHit": "more",
    "SenderUse": "more",
    "Space": "space",
    "SpaceActivity": "more",
    "SpaceUsage": "more",
    "Thread": "space",
    "TranscriptEntry": "more",
    "TurnRecord": "more",
    "VacuumResult": "more",
}


def __getattr__(name: str) -> Any:
    where = _LATER.get(name)
    if where == "more":
        from broker.model import records_more

        value = getattr(records_more, name)
    elif where == "space":
        from broker.model import records_space

        value = getattr(records_space, name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LATER})


# Read by pydantic (TypeAdapter) only: field descriptions from attribute docstrings.
_DOCSTRINGS = {"use_attribute_docstrings": True}


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


def log_matches(entry: LogEntry, sender: str | None, to: str | None, since: str | None) -> bool:
    """The log filters of ``Operator.log`` / ``follow`` beyond the kinds (one
    predicate for the library and the served client): ``sender`` an exact
    sender address; ``to`` named by the entry's ``to`` forms or reached by it;
    ``since`` an ISO-8601 time, UTC or with an offset (``created_at_utc >= since``)."""
    if sender is not None and entry.sender != sender:
        return False
    if to is not None and to not in entry.to and to not in entry.reached:
        return False
    return since is None or entry.created_at_utc >= since


# --- the board (S21-S23) -------------------------------------------------------------
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
    reason: str | None = None
    """why someone other than the holder ended it (``left``, ``operator: ...``)"""


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
