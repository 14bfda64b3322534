"""Spaces and who is in them: a space, its participants and their journal, join keys, usage and shares, purges (S1-S5, S25, S30).

Part of ``broker.model.records`` (import them from there).
"""

from __future__ import annotations

from typing import Any, Literal

from broker.record_type import DOCSTRINGS, record
from broker.vocab import SpaceKind, SpaceState, Status


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

    __pydantic_config__ = DOCSTRINGS

    join_key: str
    """secret: joins the space (``broker join --join-key``); stored only as a hash"""


@record
class JoinKey:
    """A space's new join key (``rotate_join_key``): the old one no longer works."""

    __pydantic_config__ = DOCSTRINGS

    space_id: str
    join_key: str
    """secret: shown once, stored only as a hash"""


@record
class Participant:
    __pydantic_config__ = DOCSTRINGS

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
    tool_grant: str | None = None
    """how its messaging tools were granted (S24), as the source records it:
    ``ambient:messaging_default`` (the default set), ``ambient:workflow_messaging``
    (the tools named at join), null when messaging is off (receive-only)"""


@record
class Joined:
    __pydantic_config__ = DOCSTRINGS

    space_id: str
    participant_id: str
    address: str
    token: str
    """secret; shown once, stored only as a hash"""


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


@record
class SenderUse:
    """One sender's part of a space's log (S30)."""

    __pydantic_config__ = DOCSTRINGS

    sender: str
    log_bytes: int
    messages: int
    share: float
    """its part of ``log_max_mb`` (the operator has no cap: it is listed all the same)"""


@record
class InboxUse:
    """One participant's inbox against ``inbox_cap`` (S30)."""

    __pydantic_config__ = DOCSTRINGS

    address: str
    status: Status
    waiting: int
    """deliveries ready or being processed"""
    cap: int
    holds: int = 0
    """its live key claims and path reservations (against ``holds_cap``, S41)"""


@record
class SpaceUsage:
    """A space's limits in effect and how much of them is used (S30)."""

    __pydantic_config__ = DOCSTRINGS

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
    holds: int = 0
    """live key claims and path reservations in the space (against ``space_holds_cap``, S41)"""
    board_bytes: int = 0
    """what the board keeps: key claim rows, reservation rows (ended ones too) and
    the claim journal, in bytes of their text and numbers"""
    join_key_members: int = 0
    """participants the join key admitted, with the children they admitted (S42)"""
    join_key_log_bytes: int = 0
    """what they hold of the log together"""
    join_key_log_cap_bytes: int = 0
    """what they may hold together (``join_key_share`` of ``log_max_mb``)"""


@record
class Purged:
    """A purged space (retention): its rows deleted after a verified export."""

    __pydantic_config__ = DOCSTRINGS

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
