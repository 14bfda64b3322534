"""Store-level tables: retention (``purges``, ``purging``), the operator key
(S29) and the per-sender log share kept by triggers (``sender_usage``, S30).
"""

from __future__ import annotations

from sqlalchemy import (
    CheckConstraint,
    Column,
    ForeignKey,
    Integer,
    String,
    Table,
    Text,
)

from broker.store.tables.base import ID, TS, metadata

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


folds = Table(
    "folds",
    metadata,
    Column("name", String(40), primary_key=True, comment="what is folded: sender_usage"),
    Column(
        "upto",
        Integer,
        nullable=False,
        server_default="0",
        comment="the last log rowid folded in; later rows are the tail readers add",
    ),
    comment="Batched derived state (SQLite): sender_usage takes the log in batches of 32 "
    "rows, as the search index does (S30, S36), so a send does not write its page; "
    "readers add the rows past `upto`. Unused on PostgreSQL.",
)
