"""The board and path reservations (S21-S23, S37): ``board_claims``,
``claim_journal``, ``reservations``.
"""

from __future__ import annotations

from sqlalchemy import Column, Index, Integer, String, Table, Text

from broker.store.tables import column
from broker.store.tables.base import metadata, one_of, space_table
from broker.vocab import JOURNAL_EVENTS, RESERVATION_MODES

board_claims = Table(
    "board_claims",
    metadata,
    column.space_ref(primary_key=True),
    Column("key", String(200), primary_key=True),
    Column("holder", String(200), comment="address holding the key; NULL when free"),
    Column(
        "token", Integer, nullable=False, comment="fencing token of the latest grant; only grows"
    ),
    column.utc("claimed_at_utc", nullable=True),
    column.utc("lease_expires_at", nullable=True),
    comment="Board key claims and their fencing tokens (S22).",
)

claim_journal = space_table(
    "claim_journal",
    Column("key", String(200), nullable=False),
    column.choice("event", JOURNAL_EVENTS),
    Column("owner", String(200), nullable=False),
    Column("token", Integer, nullable=False),
    column.utc("lease_expires_at", nullable=True),
    column.utc("at_utc"),
    Column(
        "reason",
        Text,
        comment="why it was released by someone else: left | operator: ...; NULL otherwise",
    ),
    Index("ix_claim_journal_space_id_key", "space_id", "key"),
    one_of("event", JOURNAL_EVENTS),
    comment="Append-only claim journal (S23).",
)

reservations = Table(
    "reservations",
    metadata,
    column.space_ref(primary_key=True),
    Column(
        "token",
        Integer,
        primary_key=True,
        comment="fencing token of the grant: larger than every earlier grant of the space",
    ),
    Column("pattern", String(200), nullable=False, comment="the path pattern (broker.board.globs)"),
    column.choice("mode", RESERVATION_MODES),
    Column("holder", String(200), nullable=False, comment="address holding the reservation"),
    Column("reason", Text, comment="why, as the holder said"),
    column.utc("claimed_at_utc"),
    column.utc("lease_expires_at"),
    column.utc(
        "ended_at_utc", nullable=True, comment="when it was released or expired; NULL while held"
    ),
    Index("ix_reservations_space_id_ended_at_utc", "space_id", "ended_at_utc"),
    one_of("mode", RESERVATION_MODES),
    comment="Path reservations (S37): one row per grant, kept after it ends.",
)
