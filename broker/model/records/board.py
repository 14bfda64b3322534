"""The board: posts and directives as read, key claims, the claim journal, path reservations (S21-S23, S37).

Part of ``broker.model.records`` (import them from there).
"""

from __future__ import annotations

from typing import Literal

from broker.record_type import DOCSTRINGS, record


@record
class BoardEntry:
    """One item of the board, as ``board.read`` returns it (a log row)."""

    __pydantic_config__ = DOCSTRINGS

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
    reason: str | None = None
    """why someone other than the holder ended it (``left``, ``operator: ...``)"""


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
