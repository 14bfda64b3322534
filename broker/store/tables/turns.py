"""Turns and what they showed (S17-S20): ``turns``, ``transcript``, ``history``."""

from __future__ import annotations

from sqlalchemy import Column, Index, Integer, String, Text, UniqueConstraint

from broker.store.tables import column
from broker.store.tables.base import one_of, partial_index, space_table
from broker.vocab import TRANSCRIPT_DIRECTIONS

turns = space_table(
    "turns",
    column.participant_ref(),
    Column("lease_token", String(40), nullable=False, comment="lease over the turn's deliveries"),
    Column(
        "bcast_upto", Integer, nullable=False, comment="broadcast-log number the turn showed up to"
    ),
    column.choice("state", ("open", "seen"), default="open"),
    column.utc("created_at_utc"),
    column.utc("expires_at"),
    column.utc("seen_at_utc", nullable=True),
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

transcript = space_table(
    "transcript",
    column.participant_ref(),
    Column("turn_id", String(column.ID), comment="the turn that showed it (received / injected)"),
    Column(
        "position", Integer, nullable=False, server_default="0", comment="order inside the turn"
    ),
    column.choice("direction", TRANSCRIPT_DIRECTIONS),
    Column("message_id", String(column.ID)),
    Column("kind", String(32), nullable=False, comment="message kind, or the notice's name"),
    Column("content", Text, nullable=False, comment="text as rendered for the model"),
    column.utc("at_utc"),
    Index("ix_transcript_participant_id_at_utc", "participant_id", "at_utc"),
    partial_index(
        "ix_transcript_participant_id_message_id",
        "participant_id",
        "message_id",
        where="message_id IS NOT NULL",
    ),
    one_of("direction", TRANSCRIPT_DIRECTIONS),
    comment="Per-participant transcript, turn by turn (S19). Append-only.",
)

history = space_table(
    "history",
    column.participant_ref(),
    Column(
        "message_id",
        String(column.ID),
        nullable=False,
        comment="dedupe key: a redelivery is not appended twice (S16)",
    ),
    Column("turn_id", String(column.ID), comment="the turn that delivered it"),
    Column("kind", String(32), nullable=False),
    Column("sender", String(200), nullable=False),
    Column("body", Text, nullable=False),
    column.utc("at_utc"),
    UniqueConstraint("participant_id", "message_id"),
    comment="Teammates' canonical histories (S26): each handled message once, appended before the ack.",
)
