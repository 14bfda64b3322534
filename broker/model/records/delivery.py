"""Delivery: leases on inbox messages, turns, quarantine and queue views, histories and transcripts (S13-S19).

Part of ``broker.model.records`` (import them from there).
"""

from __future__ import annotations

from typing import Literal

from broker.record_type import DOCSTRINGS, record
from broker.vocab import Status, TurnGroup


@record
class Delivery:
    """One claimed message of an inbox. ``id`` is the MESSAGE id: the stable id
    consumers de-duplicate by (S16); ``delivery_id`` names the inbox row."""

    __pydantic_config__ = DOCSTRINGS

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

    __pydantic_config__ = DOCSTRINGS

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
class TurnMessages:
    """The messages of one of the caller's turns that an operation acted on:
    appended to its history, removed from it again, or quarantined (S16, S26)."""

    __pydantic_config__ = DOCSTRINGS

    turn_id: str
    message_ids: list[str]


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

    __pydantic_config__ = DOCSTRINGS

    ready: int
    processing: int
    done: int
    quarantine: int
    redeliveries: int
    """extra deliveries: the sum of (count - 1) over messages claimed more than once"""


@record
class InboxStats:
    """One participant's inbox as a queue, and what it sent lately (the console)."""

    __pydantic_config__ = DOCSTRINGS

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

    __pydantic_config__ = DOCSTRINGS

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
