"""The records of a space, its roster, its threads and its board as the reading
and managing calls return them (``Space``, ``Participant``, ``Joined``, ``Thread``,
``BoardEntry``...).

Part of ``broker.model.records`` (import them from there), built on first use of one
of these names: an agent's hot calls (``msg send``, ``inbox claim|ack|next|seen``,
``board claim|release``) return none of them, and each record class costs
~0.5 ms to build at import, on every CLI call.
"""

from __future__ import annotations

from typing import Any, Literal

from broker.record_type import record
from broker.vocab import SpaceKind, SpaceState, Status

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


# --- the log's threads (S35) ---------------------------------------------------------------
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
