"""Store-level tables: retention (``purges``, ``purging``), the operator key
(S29) and the log's size per sender and per space kept by triggers
(``sender_usage``, ``space_usage``, S30, S11).
"""

from __future__ import annotations

from sqlalchemy import CheckConstraint, Column, ForeignKey, Integer, String, Table, Text

from broker.store.tables import column
from broker.store.tables.base import metadata
from broker.vocab import SPACE_KINDS

purges = Table(
    "purges",
    metadata,
    column.ulid_key(),
    column.space_ref(
        foreign_key=False, comment="the space purged (its rows are gone, so no foreign key)"
    ),
    column.choice("space_kind", SPACE_KINDS),
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
    column.utc("at_utc"),
    comment="Store-level journal of purges (retention): who deleted which space when, "
    "and where its verified export is. Append-only.",
)

purging = Table(
    "purging",
    metadata,
    column.space_ref(primary_key=True),
    Column("purge_id", String(column.ID), ForeignKey("purges.id"), nullable=False),
    comment="The space a purge is deleting, only inside the purge's own transaction: "
    "the append-only triggers let that space's rows go, and no other.",
)

operator_key = Table(
    "operator_key",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False, comment="always 1: one row"),
    Column("key_hash", String(64), nullable=False, comment="SHA-256 of the operator key (S29)"),
    column.utc("created_at_utc"),
    CheckConstraint("id = 1", name="one_row"),
    comment="The store's operator key, hashed (S29). The secret itself is in the 0600 file "
    "<database>.operator-key or BROKER_OPERATOR_KEY; a server without a file (PostgreSQL) "
    "checks the same hash.",
)


sender_usage = Table(
    "sender_usage",
    metadata,
    column.space_ref(
        primary_key=True,
        foreign_key=False,
        comment="the space (no foreign key: a trigger removes the rows with the space)",
    ),
    Column("sender", String(200), primary_key=True, comment="a sender address, or operator"),
    column.counter("log_bytes", "sum of messages.size_bytes of this sender's log rows"),
    column.counter("messages", "its log rows"),
    comment="Per-sender share of a space's log (S30), kept by triggers on messages "
    "and spaces (no module writes it), so the share check is one primary-key read.",
)


space_usage = Table(
    "space_usage",
    metadata,
    column.space_ref(
        primary_key=True,
        foreign_key=False,
        comment="the space (no foreign key: a trigger removes the row with the space)",
    ),
    column.counter("log_bytes", "sum of messages.size_bytes of the space's log rows"),
    comment="A space's log size (S11), kept by the same triggers as sender_usage (no "
    "module writes it), so a send's log cap check is one primary-key read whatever the "
    "number of senders, not a sum over their rows (revision 0020).",
)


folds = Table(
    "folds",
    metadata,
    Column(
        "name",
        String(40),
        primary_key=True,
        comment="what is folded: sender_usage (and space_usage) | waiting",
    ),
    column.counter("upto", "the last log rowid folded in; later rows are the tail readers add"),
    comment="Batched derived state (SQLite): sender_usage and space_usage take the log and "
    "participants.waiting the deliveries in batches of 32 rows, as the search index takes "
    "the log (S7, S30, S36), so a send does not write their pages; readers add the rows "
    "past `upto`. Unused on PostgreSQL.",
)
