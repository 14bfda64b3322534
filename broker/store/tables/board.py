"""The board and path reservations (S21-S23, S37): ``board_claims``,
``claim_journal``, ``reservations``.
"""

from __future__ import annotations

from sqlalchemy import (
    CheckConstraint,
    Column,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
)

from broker.store.tables.base import ID, TS, in_, metadata
from broker.vocab import (
    JOURNAL_EVENTS,
    RESERVATION_MODES,
)

board_claims = Table(
    "board_claims",
    metadata,
    Column("space_id", String(40), ForeignKey("spaces.id"), primary_key=True),
    Column("key", String(200), primary_key=True),
    Column("holder", String(200), comment="address holding the key; NULL when free"),
    Column(
        "token", Integer, nullable=False, comment="fencing token of the latest grant; only grows"
    ),
    Column("claimed_at_utc", String(TS)),
    Column("lease_expires_at", String(TS)),
    comment="Board key claims and their fencing tokens (S22).",
)

claim_journal = Table(
    "claim_journal",
    metadata,
    Column("id", String(ID), primary_key=True),
    Column("space_id", String(40), ForeignKey("spaces.id"), nullable=False),
    Column("key", String(200), nullable=False),
    Column("event", String(16), nullable=False, comment="claimed | released | expired | renewed"),
    Column("owner", String(200), nullable=False),
    Column("token", Integer, nullable=False),
    Column("lease_expires_at", String(TS)),
    Column("at_utc", String(TS), nullable=False),
    Column(
        "reason",
        Text,
        comment="why it was released by someone else: left | operator: ...; NULL otherwise",
    ),
    Index("ix_claim_journal_space_id_key", "space_id", "key"),
    CheckConstraint(in_("event", JOURNAL_EVENTS), name="event"),
    comment="Append-only claim journal (S23).",
)

reservations = Table(
    "reservations",
    metadata,
    Column("space_id", String(40), ForeignKey("spaces.id"), primary_key=True),
    Column(
        "token",
        Integer,
        primary_key=True,
        comment="fencing token of the grant: larger than every earlier grant of the space",
    ),
    Column("pattern", String(200), nullable=False, comment="the path pattern (broker.board.globs)"),
    Column("mode", String(16), nullable=False, comment="exclusive | shared"),
    Column("holder", String(200), nullable=False, comment="address holding the reservation"),
    Column("reason", Text, comment="why, as the holder said"),
    Column("claimed_at_utc", String(TS), nullable=False),
    Column("lease_expires_at", String(TS), nullable=False),
    Column("ended_at_utc", String(TS), comment="when it was released or expired; NULL while held"),
    Index("ix_reservations_space_id_ended_at_utc", "space_id", "ended_at_utc"),
    CheckConstraint(in_("mode", RESERVATION_MODES), name="mode"),
    comment="Path reservations (S37): one row per grant, kept after it ends.",
)
