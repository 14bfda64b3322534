"""Spaces and who is in them (S1-S5, S25): ``spaces``, ``participants``,
``participant_events``.
"""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    Column,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

from broker.store.tables.base import ID, TS, in_, metadata
from broker.vocab import (
    PARTICIPANT_STATUSES,
    SPACE_KINDS,
    SPACE_STATES,
)

spaces = Table(
    "spaces",
    metadata,
    Column(
        "id", String(40), primary_key=True, comment="kind prefix + ULID: af_…, wf_…, ses_…, run_…"
    ),
    Column("kind", String(16), nullable=False, comment="agentiflow | workflow | session | run"),
    Column(
        "state",
        String(16),
        nullable=False,
        server_default="running",
        comment="running | stopped | archived",
    ),
    Column(
        "settings",
        Text,
        nullable=False,
        server_default="{}",
        comment="JSON: per-space limit overrides",
    ),
    Column(
        "last_seq",
        Integer,
        nullable=False,
        server_default="0",
        comment="last log sequence number used",
    ),
    Column(
        "last_bcast",
        Integer,
        nullable=False,
        server_default="0",
        comment="last broadcast-log number used",
    ),
    Column(
        "log_bytes",
        Integer,
        nullable=False,
        server_default="0",
        comment="bytes of message bodies logged",
    ),
    Column("created_at_utc", String(TS), nullable=False),
    Column("updated_at_utc", String(TS), nullable=False),
    Column(
        "join_key_hash",
        String(64),
        comment="SHA-256 of the space's join key (S27); NULL for a space made before "
        "join keys (rotate one with `broker space join-key RUN_ID --rotate`)",
    ),
    CheckConstraint(in_("kind", SPACE_KINDS), name="kind"),
    CheckConstraint(in_("state", SPACE_STATES), name="state"),
    comment="One message space per root run (S1).",
)

participants = Table(
    "participants",
    metadata,
    Column("id", String(ID), primary_key=True),
    Column("space_id", String(40), ForeignKey("spaces.id"), nullable=False),
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
    Column(
        "status",
        String(16),
        nullable=False,
        server_default="running",
        comment="running | idle | failed | shutdown | left",
    ),
    Column(
        "bcast_seen",
        Integer,
        nullable=False,
        server_default="0",
        comment="broadcast-log number seen up to (cursor)",
    ),
    Column(
        "waiting",
        Integer,
        nullable=False,
        server_default="0",
        comment="deliveries ready or processing; kept by triggers on deliveries (inbox cap, S7)",
    ),
    Column("pid", Integer, comment="OS process id of the latest join, for prune"),
    Column("joined_at_utc", String(TS), nullable=False),
    Column("left_at_utc", String(TS)),
    Column(
        "last_seen_utc",
        String(TS),
        nullable=False,
        comment="heartbeat: refreshed by turns and claims",
    ),
    Column(
        "contact_policy",
        String(16),
        comment="who may message it directly (S38): parent-and-lead | listed | closed; NULL = open",
    ),
    Column("contact_allow", Text, comment="JSON list of addresses a `listed` policy lets in"),
    UniqueConstraint("space_id", "address"),
    Index("ix_participants_token_hash", "token_hash", unique=True),
    CheckConstraint(in_("status", PARTICIPANT_STATUSES), name="status"),
    comment="Participants of a space; also the directory (S2-S5, S25).",
)

participant_events = Table(
    "participant_events",
    metadata,
    Column("id", String(ID), primary_key=True),
    Column("space_id", String(40), ForeignKey("spaces.id"), nullable=False),
    Column("participant_id", String(ID), ForeignKey("participants.id"), nullable=False),
    Column("event", String(16), nullable=False, comment="joined | left"),
    Column("address", String(200), nullable=False),
    Column("codename", String(400), nullable=False),
    Column("agent", String(200), nullable=False),
    Column("run_id", String(200), nullable=False),
    Column("step", String(200)),
    Column("parent", String(200)),
    Column("reason", String(200), comment="why it left (leave, prune, shutdown)"),
    Column("at_utc", String(TS), nullable=False),
    Index("ix_participant_events_space_id_at_utc", "space_id", "at_utc"),
    CheckConstraint("event IN ('joined', 'left')", name="event"),
    comment="Append-only journal of joins and leaves (S4).",
)
