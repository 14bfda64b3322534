"""Messages: what a send returns, the log, search, receipts and contact policies (S6-S12, S35-S38).

Part of ``broker.model.records`` (import them from there).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from broker.record_type import DOCSTRINGS, record
from broker.store.groups import MAIL
from broker.vocab import Reason


@record
class NotReached:
    address: str
    reason: Reason


@record
class SendResult:
    __pydantic_config__ = DOCSTRINGS

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


_LOGGED = {f.name: f.default for f in fields(LogEntry)}
MAIL_DEFAULTS: dict[str, Any] = {name: _LOGGED[name] for name in MAIL}
"""Each mail attribute of a message (S35, ``broker.store.groups.MAIL``) and its
default: the log entry shows every one of them."""


def mail_of(row: Mapping[str, Any]) -> dict[str, Any]:
    """A message's mail attributes read by name from a row. The log holds an
    attribute at its default as NULL (``broker.mail.threads.mail``), so NULL
    reads as the default, and a value as the default's type (SQLite's 1 is True)."""
    out = {}
    for name, default in MAIL_DEFAULTS.items():
        value = row[name]
        out[name] = value if default is None else default if value is None else type(default)(value)
    return out


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
class AckStatus:
    """Who has seen a message (``msg status``): from their ``seen`` receipts (S18)."""

    id: str
    ack_required: bool
    reached: list[str]
    seen: list[str]
    not_seen: list[str]


@record
class ContactPolicy:
    """Who may message a participant directly (S38); ``allow``: the addresses a
    ``listed`` policy lets in."""

    policy: str
    allow: list[str]


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
