"""The log and the queue (S7-S16): ``messages`` and ``deliveries``."""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    Column,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

from broker.store.tables import column
from broker.store.tables.base import metadata, one_of, partial_index
from broker.vocab import DELIVERY_STATES, MESSAGE_KINDS

messages = Table(
    "messages",
    metadata,
    Column(
        "id",
        String(column.ID),
        nullable=False,
        comment="ULID; the stable id consumers de-duplicate by. No index: its random part "
        "starts with the row's seq, so (space_no, seq) finds it (an imported id naming "
        "another seq has a row in message_aliases; revision 0018)",
    ),
    Column(
        "space_no",
        Integer,
        nullable=False,
        comment="the space: its spaces row's rowid (an identity column on PostgreSQL), a "
        "number where its 30-byte id was, in the row and in the log's keys (revision "
        "0023); the views name it by id (v_log.space_id)",
    ),
    Column("seq", Integer, nullable=False, comment="gap-free per-space sequence"),
    column.choice("kind", MESSAGE_KINDS),
    Column("sender", String(200), nullable=False, comment="sender address, or `operator`"),
    column.json_list("recipients", "JSON list: the `to` forms as given"),
    Column("body", Text, nullable=False, server_default=""),
    Column("urgent", Boolean, nullable=False, server_default=text("0")),
    Column("via", String(8), comment="operator surface: cli | cp | mcp"),
    Column("ref", String(column.ID), comment="retract: the directive; seen: the turn"),
    Column(
        "reached",
        Text,
        server_default="[]",
        comment="JSON list of addresses reached; NULL: the recipients as given (each form "
        "an address, each reached: a send writes no copy of them, revision 0026)",
    ),
    column.json_list("not_reached", "JSON list of {address, reason}"),
    column.counter("reached_n"),
    Column("bcast_no", Integer, comment="position in the broadcast log, if it was added"),
    Column("idempotency_key", String(200)),
    column.counter("size_bytes"),
    column.utc("created_at_utc"),
    Column("thread", String(64), comment="thread name (S35); a reply inherits its parent's"),
    Column("reply_to", String(column.ID), comment="the message this one answers (S35)"),
    Column("importance", String(8), comment="low | high | urgent; NULL = normal"),
    Column("ack_required", Boolean, comment="1: the sender asks who has seen it (msg status)"),
    UniqueConstraint("space_no", "seq"),
    partial_index(
        "ix_messages_space_no_sender_idempotency_key",
        "space_no",
        "sender",
        "idempotency_key",
        unique=True,
        where="idempotency_key IS NOT NULL",
    ),
    partial_index(
        "ix_messages_space_no_bcast_no",
        "space_no",
        "bcast_no",
        where="bcast_no IS NOT NULL",
    ),
    partial_index(
        "ix_messages_space_no_kind_seq",
        "space_no",
        "kind",
        "seq",
        where="kind IN ('post', 'directive', 'retract')",
    ),
    partial_index(
        "ix_messages_space_no_thread_seq",
        "space_no",
        "thread",
        "seq",
        where="thread IS NOT NULL",
    ),
    partial_index(
        "ix_messages_ref",
        "ref",
        where="ref IS NOT NULL",
    ),
    one_of("kind", MESSAGE_KINDS),
    comment="The append-only log (S7, S11). Its space is a number (revision 0023).",
)

message_aliases = Table(
    "message_aliases",
    metadata,
    column.space_ref(primary_key=True),
    Column("id", String(column.ID), primary_key=True, comment="the message's id"),
    Column("seq", Integer, nullable=False, comment="the message's seq in the space"),
    sqlite_with_rowid=False,
    comment="Where a message whose id does not name its seq is (revision 0018): the ids "
    "of messages logged before it, and imported ones. Written with the message; a "
    "lookup by id reads it first (broker/store/sql/counters.sql, id_seq).",
)

deliveries = Table(
    "deliveries",
    metadata,
    Column(
        "id",
        String(column.ID),
        comment="the delivery's external id, not indexed (inside the store a row is its "
        "rowid). NULL: the one a send gives it, derived from its message's id and its place "
        "(broker/store/sql/counters.sql, delivery_id; revision 0024); kept where an import "
        "or a send before revision 0024 gave it another",
    ),
    Column(
        "recipient_no",
        Integer,
        nullable=False,
        comment="the recipient: its participants row's rowid (an identity column on "
        "PostgreSQL), a number where its 26-byte id was, in the row and in the inbox "
        "indexes (revision 0022); the views name it by id (v_inbox.recipient_id)",
    ),
    column.choice("state", DELIVERY_STATES, default="ready"),
    column.utc(
        "created_at_utc",
        nullable=True,
        comment="NULL: its message's time (every row a send writes); set only where an "
        "imported row names another time (revision 0021)",
    ),
    column.counter("attempts", "times claimed (delivery count)"),
    Column("lease_token", String(40)),
    Column(
        "lease_owner",
        String(200),
        comment="who holds the lease while processing; after it (done, ready again, "
        "quarantine) the owner of the last lease, kept as evidence (S15); NULL when never "
        "claimed or requeued",
    ),
    column.utc("lease_expires_at", nullable=True),
    column.utc("acked_at_utc", nullable=True),
    Column("last_error", Text),
    Column("quarantine_reason", Text),
    Column(
        "lease_process",
        String(300),
        comment="process holding the lease (host:pid:start), for restart recovery (S32); "
        "NULL when the claimer was transient (a CLI call)",
    ),
    Column(
        "lost_lease_token",
        String(40),
        comment="the latest lease that lost this delivery without settling it: a claim "
        "took it after that lease expired, or restart recovery returned it (S14, S32)",
    ),
    Column(
        "queued",
        Boolean,
        nullable=False,
        server_default=text("1"),
        comment="1: in the ready index. SQLite inserts 0 and the waiting fold sets it for "
        "every row up to folds.upto ('waiting'), 32 messages at a time: a claim reads the "
        "index and the short tail past upto (revision 0019). PostgreSQL inserts 1",
    ),
    # The rowid it holds is the log's order within an inbox (S13). PostgreSQL
    # indexes (recipient_no, rowid) besides (its rowid column is not metadata).
    partial_index(
        "ix_deliveries_ready",
        "recipient_no",
        where="state = 'ready' AND queued = 1",
    ),
    partial_index(
        "ix_deliveries_leased",
        "recipient_no",
        "lease_expires_at",
        where="state = 'processing'",
    ),
    partial_index(
        "ix_deliveries_lease_token",
        "lease_token",
        # Not only while processing: the token stays on settled rows, so a repeated
        # ack is recognised (idempotent) and a lost lease is named (S14).
        where="lease_token IS NOT NULL",
    ),
    partial_index(
        "ix_deliveries_lost_lease_token",
        "lost_lease_token",
        # A late settle of a whole lease finds what it lost (S14): an error path only.
        where="lost_lease_token IS NOT NULL",
    ),
    partial_index(
        "ix_deliveries_quarantine",
        "recipient_no",
        where="state = 'quarantine'",
    ),
    one_of("state", DELIVERY_STATES),
    comment="Inbox queues: one row per message per recipient (S13-S16). No primary key "
    "index: the rowid (an identity column on PostgreSQL) is the row's key: its message's "
    "rowid times 2^20 plus its place among the message's deliveries (revision 0017). "
    "Its message, and so its space and time, are that rowid's: no column repeats them "
    "(revision 0021). Its recipient is a participant's number (revision 0022).",
)
