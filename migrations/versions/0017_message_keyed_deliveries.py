"""a leaner send: no space row written, deliveries keyed by their message

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-02 15:00:00.000000

A one-recipient send wrote 8.5 pages (WAL frames) after revision 0015
(``python -m bench pages``). This revision takes two b-trees out of it.
Frozen: the DDL is written out here, never imported from live code.

- The space's counters (``last_seq``, ``log_bytes``, ``last_bcast``) are no
  longer written by a send (one page each time): they are derived from the log
  (its last seq and broadcast number, one index seek each; its bytes, the
  space's ``sender_usage`` rows). The columns stay as floors: what the importer
  writes (the exported counters) and, from here on, never moved by a send. An
  upgraded store's columns hold its counters exactly, so every reading of them
  is unchanged. Nothing to do but the columns' comments (PostgreSQL keeps them).
- ``deliveries``: a row's rowid is its message's rowid times 2^20 plus its
  place among the message's deliveries (0, 1, ...), so the deliveries of a
  message are one rowid range and ``ix_deliveries_message_id`` goes (1.2 pages
  and 37 bytes per send), with the foreign key to ``messages`` it served (a
  delete of a message, a purge's, would scan the table for each row without
  it; the one writer of deliveries takes the rowid from the message itself).
  Rowids still grow with the log, so the waiting fold (revision 0015) and the
  exporter's follow keep reading ``rowid > position``; the fold's batch is now
  counted in messages (rowid >> 20). The ready index drops its wide keys
  (``created_at_utc, id``): ``(recipient_id)`` alone holds the rowid, which is
  the log's order within an inbox (S13); PostgreSQL has no rowid in an index
  of its own, so it gets ``(recipient_id, rowid)`` besides (hidden, as its
  other rowid indexes are), and ``messages`` gets the rowid column the other
  tables got in revision 0010, numbered in the log's order. SQLite rebuilds the table with the new rowids (in
  the order of the old ones, so the exporter's order is unchanged); PostgreSQL
  renumbers in place. The waiting counters are folded first, so every one is
  exact and ``folds.upto`` starts past the last row.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SHIFT = 1048576  # 2^20: a message's deliveries share its rowid times this

COLUMNS = (
    "id, space_id, message_id, recipient_id, state, created_at_utc, attempts, lease_token, "
    "lease_owner, lease_expires_at, acked_at_utc, last_error, quarantine_reason, "
    "lease_process, lost_lease_token"
)


def _deliveries(name: str, message_fk: bool) -> str:
    fk = (
        "CONSTRAINT fk_deliveries_message_id_messages FOREIGN KEY(message_id) "
        "REFERENCES messages (id), "
        if message_fk
        else ""
    )
    return (
        f"CREATE TABLE {name} (id VARCHAR(26) NOT NULL, space_id VARCHAR(40) NOT NULL, "
        "message_id VARCHAR(26) NOT NULL, recipient_id VARCHAR(26) NOT NULL, "
        "state VARCHAR(16) DEFAULT 'ready' NOT NULL, created_at_utc VARCHAR(27) NOT NULL, "
        "attempts INTEGER DEFAULT '0' NOT NULL, lease_token VARCHAR(40), "
        "lease_owner VARCHAR(200), lease_expires_at VARCHAR(27), acked_at_utc VARCHAR(27), "
        "last_error TEXT, quarantine_reason TEXT, lease_process VARCHAR(300), "
        "lost_lease_token VARCHAR(40), "
        "CONSTRAINT ck_deliveries_state CHECK (state IN "
        "('ready', 'processing', 'done', 'quarantine')), "
        "CONSTRAINT fk_deliveries_space_id_spaces FOREIGN KEY(space_id) REFERENCES spaces (id), "
        f"{fk}"
        "CONSTRAINT fk_deliveries_recipient_id_participants FOREIGN KEY(recipient_id) "
        "REFERENCES participants (id))"
    )


COMMON_INDEXES = [
    "CREATE INDEX ix_deliveries_lost_lease_token ON deliveries (lost_lease_token) "
    "WHERE lost_lease_token IS NOT NULL",
    "CREATE INDEX ix_deliveries_quarantine ON deliveries (space_id) WHERE state = 'quarantine'",
    "CREATE INDEX ix_deliveries_leased ON deliveries (recipient_id, lease_expires_at) "
    "WHERE state = 'processing'",
    "CREATE INDEX ix_deliveries_lease_token ON deliveries (lease_token) "
    "WHERE lease_token IS NOT NULL",
]
READY = "CREATE INDEX ix_deliveries_ready ON deliveries (recipient_id) WHERE state = 'ready'"
PG_READY_ROWID = (
    "CREATE INDEX ix_deliveries_ready_rowid ON deliveries (recipient_id, rowid) "
    "WHERE state = 'ready'"
)
READY_0015 = (
    "CREATE INDEX ix_deliveries_ready ON deliveries (recipient_id, created_at_utc, id) "
    "WHERE state = 'ready'"
)
MESSAGE_ID = "CREATE INDEX ix_deliveries_message_id ON deliveries (message_id)"

# The waiting fold of revision 0015, its batch counted in messages: rowid >> 20.
W_UPTO = "coalesce((SELECT upto FROM folds WHERE name = 'waiting'), 0)"
W_STATES = "('ready', 'processing')"
W_FOLD = (
    "UPDATE participants SET waiting = waiting + (SELECT count(*) FROM deliveries w "
    f"WHERE w.rowid > {W_UPTO} AND w.recipient_id = participants.id "
    f"AND w.state IN {W_STATES}) "
    f"WHERE id IN (SELECT recipient_id FROM deliveries WHERE rowid > {W_UPTO}); "
    "INSERT INTO folds (name, upto) "
    "SELECT 'waiting', coalesce(max(rowid), 0) FROM deliveries WHERE true "
    "ON CONFLICT (name) DO UPDATE SET upto = excluded.upto;"
)
W_UPDATE = (
    "CREATE TRIGGER IF NOT EXISTS deliveries_waiting_update AFTER UPDATE OF state ON deliveries "
    f"WHEN (OLD.state IN {W_STATES}) != (NEW.state IN {W_STATES}) "
    f"AND NEW.rowid <= {W_UPTO} "
    "BEGIN UPDATE participants SET waiting = waiting + "
    f"(CASE WHEN NEW.state IN {W_STATES} THEN 1 ELSE -1 END) WHERE id = NEW.recipient_id; END"
)
W_INSERT = (
    "CREATE TRIGGER IF NOT EXISTS deliveries_waiting_insert AFTER INSERT ON deliveries "
    f"WHEN (NEW.rowid >> 20) - ({W_UPTO} >> 20) >= 32 BEGIN {W_FOLD} END"
)
W_INSERT_0015 = (
    "CREATE TRIGGER IF NOT EXISTS deliveries_waiting_insert AFTER INSERT ON deliveries "
    f"WHEN NEW.rowid - {W_UPTO} >= 32 BEGIN {W_FOLD} END"
)
# Every new rowid, by the old rowid's order within each message.
NEW_ROWIDS = (
    f"SELECT m.rowid * {SHIFT} + row_number() OVER (PARTITION BY d.message_id "
    "ORDER BY d.rowid) - 1 AS new, d.rowid AS old FROM deliveries d "
    "JOIN messages m ON m.id = d.message_id"
)

# PostgreSQL keeps comments (the metadata's, word for word).
DELIVERIES_COMMENT = (
    "Inbox queues: one row per message per recipient (S13-S16). No primary key index: "
    "the rowid (an identity column on PostgreSQL) is the row''s key: its message''s "
    "rowid times 2^20 plus its place among the message''s deliveries (revision 0017)."
)
DELIVERIES_COMMENT_0015 = (
    "Inbox queues: one row per message per recipient (S13-S16). No primary key index: "
    "the rowid (an identity column on PostgreSQL) is the row''s key (revision 0015)."
)
COLUMN_COMMENTS = {
    ("spaces", "last_seq"): (
        "floor of the last log sequence number: the importer's; the counter is the "
        "log's (revision 0017)",
        "last log sequence number used",
    ),
    ("spaces", "last_bcast"): (
        "floor of the last broadcast-log number: the importer's; the counter is the "
        "log's (revision 0017)",
        "last broadcast-log number used",
    ),
    ("spaces", "log_bytes"): (
        "floor of the bytes of message bodies logged: the importer's; the counter is "
        "the sum of sender_usage (revision 0017)",
        "bytes of message bodies logged",
    ),
}


def _comments(index: int) -> None:
    for (table, column), texts in COLUMN_COMMENTS.items():
        text = texts[index].replace("'", "''")
        op.execute(f"COMMENT ON COLUMN {table}.{column} IS '{text}'")


def _rebuild(message_fk: bool, rowids: str, indexes: list[str], triggers: list[str]) -> None:
    """SQLite cannot drop a foreign key: a new table, every row copied with its
    new rowid (``rowids``: SELECT new, old), then its indexes and triggers."""
    op.execute("PRAGMA legacy_alter_table = ON")  # views name `deliveries`: leave them be
    try:
        op.execute(_deliveries("deliveries_0017", message_fk))
        op.execute(
            f"INSERT INTO deliveries_0017 (rowid, {COLUMNS}) "
            f"SELECT n.new, {', '.join('d.' + c.strip() for c in COLUMNS.split(','))} "
            f"FROM deliveries d JOIN ({rowids}) n ON n.old = d.rowid ORDER BY n.new"
        )
        op.execute("DROP TABLE deliveries")  # its indexes and triggers go with it
        op.execute("ALTER TABLE deliveries_0017 RENAME TO deliveries")
    finally:
        op.execute("PRAGMA legacy_alter_table = OFF")
    for ddl in indexes + triggers:
        op.execute(ddl)


# PostgreSQL: the log gets SQLite's rowid too (an identity column, as revision
# 0010 gave the tables the exporter follows), numbered in the log's order: by
# time, and by seq within a space (S44: a space's times never go back).
PG_MESSAGES_ROWID = [
    "ALTER TABLE messages ADD COLUMN rowid BIGINT",
    "ALTER TABLE messages DISABLE TRIGGER messages_append_only",
    "UPDATE messages SET rowid = n.r FROM (SELECT id, row_number() OVER "
    "(ORDER BY created_at_utc, space_id, seq) AS r FROM messages) n WHERE messages.id = n.id",
    "ALTER TABLE messages ENABLE TRIGGER messages_append_only",
    "ALTER TABLE messages ALTER COLUMN rowid SET NOT NULL",
    "ALTER TABLE messages ALTER COLUMN rowid ADD GENERATED BY DEFAULT AS IDENTITY",
    "SELECT setval(pg_get_serial_sequence('messages', 'rowid'), coalesce(max(rowid), 0) + 1, "
    "false) FROM messages",
    "CREATE UNIQUE INDEX ix_messages_rowid ON messages (rowid)",
]


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        for ddl in PG_MESSAGES_ROWID:
            op.execute(ddl)
        op.execute("ALTER TABLE deliveries DROP CONSTRAINT fk_deliveries_message_id_messages")
        op.execute("DROP INDEX ix_deliveries_message_id")
        op.execute("DROP INDEX ix_deliveries_ready")
        # Out of the way first: no new rowid meets an old one in the unique index.
        op.execute("UPDATE deliveries SET rowid = -rowid")
        op.execute(
            f"WITH n AS ({NEW_ROWIDS.replace('ORDER BY d.rowid', 'ORDER BY -d.rowid')}) "
            "UPDATE deliveries SET rowid = n.new FROM n WHERE deliveries.rowid = n.old"
        )
        op.execute(READY)
        op.execute(PG_READY_ROWID)
        op.execute(f"COMMENT ON TABLE deliveries IS '{DELIVERIES_COMMENT}'")
        _comments(0)
        return
    for statement in W_FOLD.split(";")[:2]:  # every counter exact: the new fold starts past
        op.execute(statement)  # the last row
    _rebuild(False, NEW_ROWIDS, [*COMMON_INDEXES, READY], [W_INSERT, W_UPDATE])
    op.execute(
        "INSERT INTO folds (name, upto) SELECT 'waiting', coalesce(max(rowid), 0) "
        "FROM deliveries WHERE true ON CONFLICT (name) DO UPDATE SET upto = excluded.upto"
    )


# Before 0017 every send wrote the counters: they go back into the row.
COUNTERS_BACK = (
    "UPDATE spaces SET "
    "last_seq = {m}(last_seq, coalesce((SELECT max(seq) FROM messages "
    "WHERE space_id = spaces.id), 0)), "
    "last_bcast = {m}(last_bcast, coalesce((SELECT max(bcast_no) FROM messages "
    "WHERE space_id = spaces.id), 0)), "
    "log_bytes = {m}(log_bytes, coalesce((SELECT sum(size_bytes) FROM messages "
    "WHERE space_id = spaces.id), 0))"
)


def downgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    op.execute(COUNTERS_BACK.format(m="max" if sqlite else "greatest"))
    if not sqlite:
        op.execute("DROP INDEX ix_deliveries_ready_rowid")
        op.execute("DROP INDEX ix_deliveries_ready")
        op.execute(READY_0015)
        op.execute(MESSAGE_ID)
        op.execute(
            "ALTER TABLE deliveries ADD CONSTRAINT fk_deliveries_message_id_messages "
            "FOREIGN KEY (message_id) REFERENCES messages (id)"
        )
        # The identity takes over again: past the largest rowid given.
        op.execute(
            "SELECT setval(pg_get_serial_sequence('deliveries', 'rowid'), "
            "coalesce(max(rowid), 0) + 1, false) FROM deliveries"
        )
        op.execute(f"COMMENT ON TABLE deliveries IS '{DELIVERIES_COMMENT_0015}'")
        _comments(1)
        op.execute("ALTER TABLE messages DROP COLUMN rowid")  # its index goes with it
        return
    for statement in W_FOLD.split(";")[:2]:
        op.execute(statement)
    dense = "SELECT row_number() OVER (ORDER BY rowid) AS new, rowid AS old FROM deliveries"
    _rebuild(True, dense, [*COMMON_INDEXES, MESSAGE_ID, READY_0015], [W_INSERT_0015, W_UPDATE])
    op.execute(
        "INSERT INTO folds (name, upto) SELECT 'waiting', coalesce(max(rowid), 0) "
        "FROM deliveries WHERE true ON CONFLICT (name) DO UPDATE SET upto = excluded.upto"
    )
