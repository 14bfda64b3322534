"""Turns and what they showed (S17-S20): ``turns``, ``transcript``, ``history``."""

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
    UniqueConstraint,
)

from broker.store.tables.base import ID, TS, in_, metadata, partial_index
from broker.vocab import (
    TRANSCRIPT_DIRECTIONS,
)

turns = Table(
    "turns",
    metadata,
    Column("id", String(ID), primary_key=True),
    Column("space_id", String(40), ForeignKey("spaces.id"), nullable=False),
    Column("participant_id", String(ID), ForeignKey("participants.id"), nullable=False),
    Column("lease_token", String(40), nullable=False, comment="lease over the turn's deliveries"),
    Column(
        "bcast_upto", Integer, nullable=False, comment="broadcast-log number the turn showed up to"
    ),
    Column("state", String(16), nullable=False, server_default="open", comment="open | seen"),
    Column("created_at_utc", String(TS), nullable=False),
    Column("expires_at", String(TS), nullable=False),
    Column("seen_at_utc", String(TS)),
    Column(
        "lease_process",
        String(300),
        comment="process holding the turn (host:pid:start), for restart recovery (S32)",
    ),
    Column(
        "bcast_from",
        Integer,
        comment="broadcast-log number the turn's broadcasts start after (S18); "
        "NULL for turns older than revision 0004",
    ),
    Index("ix_turns_participant_id_created_at_utc", "participant_id", "created_at_utc"),
    partial_index(
        "ix_turns_open",
        "participant_id",
        "expires_at",
        where="state = 'open'",
    ),
    comment="Turns: what a participant was shown before one model call (S17-S18).",
)

transcript = Table(
    "transcript",
    metadata,
    Column("id", String(ID), primary_key=True),
    Column("space_id", String(40), ForeignKey("spaces.id"), nullable=False),
    Column("participant_id", String(ID), ForeignKey("participants.id"), nullable=False),
    Column("turn_id", String(ID), comment="the turn that showed it (received / injected)"),
    Column(
        "position", Integer, nullable=False, server_default="0", comment="order inside the turn"
    ),
    Column("direction", String(16), nullable=False, comment="sent | received | injected | notice"),
    Column("message_id", String(ID)),
    Column("kind", String(32), nullable=False, comment="message kind, or the notice's name"),
    Column("content", Text, nullable=False, comment="text as rendered for the model"),
    Column("at_utc", String(TS), nullable=False),
    Index("ix_transcript_participant_id_at_utc", "participant_id", "at_utc"),
    partial_index(
        "ix_transcript_participant_id_message_id",
        "participant_id",
        "message_id",
        where="message_id IS NOT NULL",
    ),
    CheckConstraint(in_("direction", TRANSCRIPT_DIRECTIONS), name="direction"),
    comment="Per-participant transcript, turn by turn (S19). Append-only.",
)

history = Table(
    "history",
    metadata,
    Column("id", String(ID), primary_key=True),
    Column("space_id", String(40), ForeignKey("spaces.id"), nullable=False),
    Column("participant_id", String(ID), ForeignKey("participants.id"), nullable=False),
    Column(
        "message_id",
        String(ID),
        nullable=False,
        comment="dedupe key: a redelivery is not appended twice (S16)",
    ),
    Column("turn_id", String(ID), comment="the turn that delivered it"),
    Column("kind", String(32), nullable=False),
    Column("sender", String(200), nullable=False),
    Column("body", Text, nullable=False),
    Column("at_utc", String(TS), nullable=False),
    UniqueConstraint("participant_id", "message_id"),
    comment="Teammates' canonical histories (S26): each handled message once, appended before the ack.",
)
