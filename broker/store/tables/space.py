"""Spaces and who is in them (S1-S5, S25): ``spaces``, ``participants``,
``participant_events``.
"""

from __future__ import annotations

from sqlalchemy import Boolean, Column, Index, Integer, String, Table, Text, UniqueConstraint, text

from broker.store.tables import column
from broker.store.tables.base import metadata, one_of, space_table
from broker.vocab import PARTICIPANT_EVENTS, PARTICIPANT_STATUSES, SPACE_KINDS, SPACE_STATES

spaces = Table(
    "spaces",
    metadata,
    Column(
        "id",
        String(column.SPACE_ID),
        primary_key=True,
        comment="kind prefix + ULID: af_…, wf_…, ses_…, run_…",
    ),
    column.choice("kind", SPACE_KINDS),
    column.choice("state", SPACE_STATES, default="running"),
    Column(
        "settings",
        Text,
        nullable=False,
        server_default="{}",
        comment="JSON: per-space limit overrides",
    ),
    # A send writes none of the three (revision 0017): each is derived from the
    # log (broker/store/sql/messages.sql), never below the floor kept here.
    column.counter(
        "last_seq",
        "floor of the last log sequence number: the importer's; the counter is the "
        "log's (revision 0017)",
    ),
    column.counter(
        "last_bcast",
        "floor of the last broadcast-log number: the importer's; the counter is the "
        "log's (revision 0017)",
    ),
    column.counter(
        "log_bytes",
        "floor of the bytes of message bodies logged: the importer's; the counter is "
        "the sum of sender_usage (revision 0017)",
    ),
    column.utc("created_at_utc"),
    column.utc("updated_at_utc"),
    Column(
        "join_key_hash",
        String(64),
        comment="SHA-256 of the space's join key (S27); NULL for a space made before "
        "join keys (rotate one with `broker space join-key RUN_ID --rotate`)",
    ),
    one_of("kind", SPACE_KINDS),
    one_of("state", SPACE_STATES),
    comment="One message space per root run (S1).",
)

participants = space_table(
    "participants",
    Column(
        "address",
        String(200),
        nullable=False,
        comment="codename below the root, retry attempt dropped (S3)",
    ),
    Column("codename", String(400), nullable=False, comment="full codename of the latest join"),
    Column(
        "agent", String(200), nullable=False, comment="agent name; `role:NAME` addresses match it"
    ),
    Column("run_id", String(200), nullable=False, comment="the participant's own run id"),
    Column("step", String(200), comment="workflow step; `step:NAME` addresses match it"),
    Column("parent", String(200), comment="address of the run that launched it"),
    Column("role", String(200), comment="directory: short role description (S25)"),
    Column(
        "archetype",
        String(32),
        comment="directory: specialist | surveyor | researcher | planner | interfacer",
    ),
    Column("task", Text, comment="directory: one-line task"),
    Column("is_lead", Boolean, nullable=False, server_default=text("0")),
    Column(
        "messaging",
        Boolean,
        nullable=False,
        server_default=text("1"),
        comment="off = receive-only (S24)",
    ),
    Column("tools", Text, comment="JSON list of tools named at join; NULL = the default set"),
    Column(
        "token_hash",
        String(64),
        nullable=False,
        comment="sha256 of the secret token; the token is never stored",
    ),
    column.choice("status", PARTICIPANT_STATUSES, default="running"),
    column.counter("bcast_seen", "broadcast-log number seen up to (cursor)"),
    column.counter(
        "waiting",
        "deliveries ready or processing; kept by triggers on deliveries (inbox cap, "
        "S7); on SQLite in batches: its readers add the inbox's rows past folds.upto",
    ),
    Column("pid", Integer, comment="OS process id of the latest join, for prune"),
    column.utc("joined_at_utc"),
    column.utc("left_at_utc", nullable=True),
    column.utc("last_seen_utc", comment="heartbeat: refreshed by turns and claims"),
    Column(
        "contact_policy",
        String(16),
        comment="who may message it directly (S38): parent-and-lead | listed | closed; NULL = open",
    ),
    Column("contact_allow", Text, comment="JSON list of addresses a `listed` policy lets in"),
    UniqueConstraint("space_id", "address"),
    Index("ix_participants_token_hash", "token_hash", unique=True),
    one_of("status", PARTICIPANT_STATUSES),
    comment="Participants of a space; also the directory (S2-S5, S25).",
)

participant_events = space_table(
    "participant_events",
    column.participant_ref(),
    column.choice("event", PARTICIPANT_EVENTS),
    Column("address", String(200), nullable=False),
    Column("codename", String(400), nullable=False),
    Column("agent", String(200), nullable=False),
    Column("run_id", String(200), nullable=False),
    Column("step", String(200)),
    Column("parent", String(200)),
    Column("reason", String(200), comment="why it left (leave, prune, shutdown)"),
    column.utc("at_utc"),
    Index("ix_participant_events_space_id_at_utc", "space_id", "at_utc"),
    one_of("event", PARTICIPANT_EVENTS),
    comment="Append-only journal of joins and leaves (S4).",
)
