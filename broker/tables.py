"""The schema: SQLAlchemy Core metadata, the one source of truth.

Alembic migrations are generated from this module and ``docs/schema.md`` is
rendered from it, so every table and column is documented here, in ``comment=``.

Overview (one database holds many spaces; every row carries ``space_id``):

``spaces``
    One message space per root run (S1): kind, state, settings, and two
    counters kept under the write lock: ``last_seq`` (the per-space log
    sequence) and ``log_bytes`` (for ``log_max_mb``, S11).
``participants``
    Runs that joined a space (S2-S5), and the directory (S25): one concept,
    one table. The address is unique per space; a re-join reuses the row, so
    the inbox, cursors and directives survive a retry (S3).
``participant_events``
    Append-only journal of joined / left (S4).
``messages``
    The log (S7, S11): every send and receipt, one row each, append-only
    (triggers refuse UPDATE and DELETE), with a gap-free ``seq`` per space and
    the outcome of the send (``reached`` / ``not_reached``). Board posts,
    directives and retractions are log rows too: the board is a view of it.
``deliveries``
    One row per (message, recipient inbox): the queue (S13-S16), states
    ready -> processing -> done | quarantine, with the lease that holds it.
``turns``
    A participant's turn (S17-S18): the lease over its deliveries and the
    broadcast range it showed, until confirmed ``seen``.
``transcript``
    Per-participant record of what was sent, received and injected, turn by
    turn (S19), plus notices (``tool_unavailable``, ``messaging_full``).
    Append-only.
``board_claims``
    Current holder and fencing token of each board key (S22); the row stays
    after release so the token keeps growing.
``claim_journal``
    Append-only history of claims: claimed / released / expired / renewed (S23).
``operator_key``
    One row: the hash of the store's operator key (S29).
``reservations``
    Path reservations (S37): one row per grant of a path pattern, exclusive or
    shared, kept after it ends so the per-space fencing token only grows; its
    claimed / renewed / released / expired lines go to ``claim_journal`` under
    the key ``path <pattern>``.
``purges``, ``purging``
    Retention: the store-level journal of purged spaces, and the marker a purge
    writes (and removes) inside its transaction so the append-only triggers let
    exactly that space's rows go.

Timestamps are text, fixed-width ISO-8601 UTC with microseconds (sortable);
ids are ULIDs (time-ordered), so ``(created_at_utc, id)`` orders totally.
JSON columns hold JSON text, portable across SQLite and PostgreSQL.
"""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    Column,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

from broker.vocab import (
    DELIVERY_STATES,
    JOURNAL_EVENTS,
    MESSAGE_KINDS,
    PARTICIPANT_STATUSES,
    RESERVATION_MODES,
    SPACE_KINDS,
    SPACE_STATES,
    TRANSCRIPT_DIRECTIONS,
)

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
metadata = MetaData(naming_convention=NAMING)


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


ID = 26  # ULID length
TS = 27  # len("2026-11-30T02:54:03.123456Z")

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
    CheckConstraint(_in("kind", SPACE_KINDS), name="kind"),
    CheckConstraint(_in("state", SPACE_STATES), name="state"),
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
    Index(
        "ix_participants_space_id_contact_policy",
        "space_id",
        sqlite_where=text("contact_policy IS NOT NULL"),
        postgresql_where=text("contact_policy IS NOT NULL"),
    ),
    CheckConstraint(_in("status", PARTICIPANT_STATUSES), name="status"),
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

messages = Table(
    "messages",
    metadata,
    Column(
        "id", String(ID), primary_key=True, comment="ULID; the stable id consumers de-duplicate by"
    ),
    Column("space_id", String(40), ForeignKey("spaces.id"), nullable=False),
    Column("seq", Integer, nullable=False, comment="gap-free per-space sequence"),
    Column(
        "kind",
        String(16),
        nullable=False,
        comment="direct | broadcast | post | directive | retract | operator | seen",
    ),
    Column("sender", String(200), nullable=False, comment="sender address, or `operator`"),
    Column(
        "recipients",
        Text,
        nullable=False,
        server_default="[]",
        comment="JSON list: the `to` forms as given",
    ),
    Column("body", Text, nullable=False, server_default=""),
    Column("urgent", Boolean, nullable=False, server_default=text("0")),
    Column("via", String(8), comment="operator surface: cli | cp | mcp"),
    Column("ref", String(ID), comment="retract: the directive; seen: the turn"),
    Column(
        "reached",
        Text,
        nullable=False,
        server_default="[]",
        comment="JSON list of addresses reached",
    ),
    Column(
        "not_reached",
        Text,
        nullable=False,
        server_default="[]",
        comment="JSON list of {address, reason}",
    ),
    Column("reached_n", Integer, nullable=False, server_default="0"),
    Column("bcast_no", Integer, comment="position in the broadcast log, if it was added"),
    Column("idempotency_key", String(200)),
    Column("size_bytes", Integer, nullable=False, server_default="0"),
    Column("created_at_utc", String(TS), nullable=False),
    Column("thread", String(64), comment="thread name (S35); a reply inherits its parent's"),
    Column("reply_to", String(ID), comment="the message this one answers (S35)"),
    Column("importance", String(8), comment="low | high | urgent; NULL = normal"),
    Column("ack_required", Boolean, comment="1: the sender asks who has seen it (msg status)"),
    UniqueConstraint("space_id", "seq"),
    Index(
        "ix_messages_space_id_idempotency_key",
        "space_id",
        "idempotency_key",
        unique=True,
        sqlite_where=text("idempotency_key IS NOT NULL"),
        postgresql_where=text("idempotency_key IS NOT NULL"),
    ),
    Index(
        "ix_messages_space_id_bcast_no",
        "space_id",
        "bcast_no",
        sqlite_where=text("bcast_no IS NOT NULL"),
        postgresql_where=text("bcast_no IS NOT NULL"),
    ),
    Index(
        "ix_messages_space_id_kind_seq",
        "space_id",
        "kind",
        "seq",
        sqlite_where=text("kind IN ('post', 'directive', 'retract')"),
        postgresql_where=text("kind IN ('post', 'directive', 'retract')"),
    ),
    Index(
        "ix_messages_space_id_thread_seq",
        "space_id",
        "thread",
        "seq",
        sqlite_where=text("thread IS NOT NULL"),
        postgresql_where=text("thread IS NOT NULL"),
    ),
    Index(
        "ix_messages_ref",
        "ref",
        sqlite_where=text("ref IS NOT NULL"),
        postgresql_where=text("ref IS NOT NULL"),
    ),
    CheckConstraint(_in("kind", MESSAGE_KINDS), name="kind"),
    comment="The append-only log (S7, S11).",
)

deliveries = Table(
    "deliveries",
    metadata,
    Column("id", String(ID), primary_key=True),
    Column("space_id", String(40), ForeignKey("spaces.id"), nullable=False),
    Column("message_id", String(ID), ForeignKey("messages.id"), nullable=False),
    Column("recipient_id", String(ID), ForeignKey("participants.id"), nullable=False),
    Column(
        "state",
        String(16),
        nullable=False,
        server_default="ready",
        comment="ready | processing | done | quarantine",
    ),
    Column(
        "created_at_utc", String(TS), nullable=False, comment="the message's time: FIFO key with id"
    ),
    Column(
        "attempts",
        Integer,
        nullable=False,
        server_default="0",
        comment="times claimed (delivery count)",
    ),
    Column("lease_token", String(40)),
    Column("lease_owner", String(200)),
    Column("lease_expires_at", String(TS)),
    Column("acked_at_utc", String(TS)),
    Column("last_error", Text),
    Column("quarantine_reason", Text),
    Column(
        "lease_process",
        String(300),
        comment="process holding the lease (host:pid:start), for restart recovery (S32); "
        "NULL when the claimer was transient (a CLI call)",
    ),
    Index(
        "ix_deliveries_ready",
        "recipient_id",
        "created_at_utc",
        "id",
        sqlite_where=text("state = 'ready'"),
        postgresql_where=text("state = 'ready'"),
    ),
    Index(
        "ix_deliveries_leased",
        "recipient_id",
        "lease_expires_at",
        sqlite_where=text("state = 'processing'"),
        postgresql_where=text("state = 'processing'"),
    ),
    Index(
        "ix_deliveries_lease_token",
        "lease_token",
        # Not only while processing: the token stays on settled rows, so a repeated
        # ack is recognised (idempotent) and a lost lease is named (S14).
        sqlite_where=text("lease_token IS NOT NULL"),
        postgresql_where=text("lease_token IS NOT NULL"),
    ),
    Index(
        "ix_deliveries_quarantine",
        "space_id",
        sqlite_where=text("state = 'quarantine'"),
        postgresql_where=text("state = 'quarantine'"),
    ),
    Index("ix_deliveries_message_id", "message_id"),
    CheckConstraint(_in("state", DELIVERY_STATES), name="state"),
    comment="Inbox queues: one row per message per recipient (S13-S16).",
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
    Index(
        "ix_turns_open",
        "participant_id",
        "expires_at",
        sqlite_where=text("state = 'open'"),
        postgresql_where=text("state = 'open'"),
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
    Index(
        "ix_transcript_participant_id_message_id",
        "participant_id",
        "message_id",
        sqlite_where=text("message_id IS NOT NULL"),
        postgresql_where=text("message_id IS NOT NULL"),
    ),
    CheckConstraint(_in("direction", TRANSCRIPT_DIRECTIONS), name="direction"),
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
    Index("ix_claim_journal_space_id_key", "space_id", "key"),
    CheckConstraint(_in("event", JOURNAL_EVENTS), name="event"),
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
    Column("pattern", String(200), nullable=False, comment="the path pattern (broker.globs)"),
    Column("mode", String(16), nullable=False, comment="exclusive | shared"),
    Column("holder", String(200), nullable=False, comment="address holding the reservation"),
    Column("reason", Text, comment="why, as the holder said"),
    Column("claimed_at_utc", String(TS), nullable=False),
    Column("lease_expires_at", String(TS), nullable=False),
    Column("ended_at_utc", String(TS), comment="when it was released or expired; NULL while held"),
    Index("ix_reservations_space_id_ended_at_utc", "space_id", "ended_at_utc"),
    CheckConstraint(_in("mode", RESERVATION_MODES), name="mode"),
    comment="Path reservations (S37): one row per grant, kept after it ends.",
)

purges = Table(
    "purges",
    metadata,
    Column("id", String(ID), primary_key=True),
    Column(
        "space_id",
        String(40),
        nullable=False,
        comment="the space purged (its rows are gone, so no foreign key)",
    ),
    Column(
        "space_kind", String(16), nullable=False, comment="agentiflow | workflow | session | run"
    ),
    Column("via", String(8), nullable=False, comment="operator surface: cli | cp | mcp"),
    Column("os_user", String(200), nullable=False, comment="the OS account that ran the purge"),
    Column("pid", Integer, nullable=False, comment="its process id"),
    Column("export_dir", Text, nullable=False, comment="the space's folder in the verified export"),
    Column(
        "digest",
        String(64),
        nullable=False,
        comment="SHA-256 over each exported file's SHA-256 and line count",
    ),
    Column("files", Integer, nullable=False, comment="files in the export"),
    Column("counts", Text, nullable=False, comment="JSON: rows deleted per table"),
    Column("at_utc", String(TS), nullable=False),
    Index("ix_purges_space_id", "space_id"),
    comment="Store-level journal of purges (retention): who deleted which space when, "
    "and where its verified export is. Append-only.",
)

purging = Table(
    "purging",
    metadata,
    Column("space_id", String(40), ForeignKey("spaces.id"), primary_key=True),
    Column("purge_id", String(ID), ForeignKey("purges.id"), nullable=False),
    comment="The space a purge is deleting, only inside the purge's own transaction: "
    "the append-only triggers let that space's rows go, and no other.",
)

operator_key = Table(
    "operator_key",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False, comment="always 1: one row"),
    Column("key_hash", String(64), nullable=False, comment="SHA-256 of the operator key (S29)"),
    Column("created_at_utc", String(TS), nullable=False),
    CheckConstraint("id = 1", name="one_row"),
    comment="The store's operator key, hashed (S29). The secret itself is in the 0600 file "
    "<database>.operator-key or BROKER_OPERATOR_KEY; a server without a file (PostgreSQL) "
    "checks the same hash.",
)


sender_usage = Table(
    "sender_usage",
    metadata,
    Column(
        "space_id",
        String(40),
        primary_key=True,
        comment="the space (no foreign key: a trigger removes the rows with the space)",
    ),
    Column("sender", String(200), primary_key=True, comment="a sender address, or operator"),
    Column(
        "log_bytes",
        Integer,
        nullable=False,
        server_default="0",
        comment="sum of messages.size_bytes of this sender's log rows",
    ),
    Column("messages", Integer, nullable=False, server_default="0", comment="its log rows"),
    comment="Per-sender share of a space's log (S30), kept by triggers on messages "
    "and spaces (no module writes it), so the share check is one primary-key read.",
)


__all__ = [
    "board_claims",
    "claim_journal",
    "deliveries",
    "messages",
    "metadata",
    "operator_key",
    "participant_events",
    "participants",
    "purges",
    "purging",
    "sender_usage",
    "reservations",
    "spaces",
    "transcript",
    "turns",
]
