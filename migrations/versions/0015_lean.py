"""a lean send: deliveries keyed by rowid, sender_usage folded in batches

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02 07:30:00.000000

A one-recipient send wrote 11.6 pages (WAL frames) where a one-table queue
writes 2 (``python -m bench pages``). This revision takes two of them away,
on both engines where they apply. Frozen: the DDL is written out here, never
imported from live code.

- ``deliveries`` loses its primary key index on the ULID ``id`` (1.2 pages and
  37 bytes per send): the only statements that used it were the claim's one
  UPDATE and the head's quarantine, which now find their rows by the rowid
  the ready index already holds (on PostgreSQL: the ``rowid`` identity column
  of revision 0010 and its unique index). The ULID stays the delivery's
  external id, kept once in its row. SQLite rebuilds the table (it cannot drop
  a primary key), copying every row with its rowid, so the order the exporter
  reads rows in is unchanged; its indexes and triggers are made again.
- SQLite: ``sender_usage`` takes the log in batches of 32 rows past
  ``folds.upto`` (one page per send before); readers add the rows of the batch
  not folded yet. The counts are exact when this runs (the per-row trigger
  kept them), so ``upto`` starts at the log's last rowid. PostgreSQL keeps its
  per-row trigger (a row lock, not a page); ``folds`` is made there too, empty,
  so both engines have one schema.

- Two indexes no statement of the catalogue reads (the plans of every
  statement, tests/test_lean.py): ``ix_purges_space_id`` and
  ``ix_participants_space_id_contact_policy``.

Written beside revision 0016 on another branch: this one revises 0014.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FOLDS = (
    "CREATE TABLE folds (name VARCHAR(40) NOT NULL, upto INTEGER DEFAULT '0' NOT NULL, "
    "CONSTRAINT pk_folds PRIMARY KEY (name))"
)

COLUMNS = (
    "id, space_id, message_id, recipient_id, state, created_at_utc, attempts, lease_token, "
    "lease_owner, lease_expires_at, acked_at_utc, last_error, quarantine_reason, "
    "lease_process, lost_lease_token"
)


def _deliveries(name: str, primary_key: bool) -> str:
    pk = "CONSTRAINT pk_deliveries PRIMARY KEY (id), " if primary_key else ""
    return (
        f"CREATE TABLE {name} (id VARCHAR(26) NOT NULL, space_id VARCHAR(40) NOT NULL, "
        "message_id VARCHAR(26) NOT NULL, recipient_id VARCHAR(26) NOT NULL, "
        "state VARCHAR(16) DEFAULT 'ready' NOT NULL, created_at_utc VARCHAR(27) NOT NULL, "
        "attempts INTEGER DEFAULT '0' NOT NULL, lease_token VARCHAR(40), "
        "lease_owner VARCHAR(200), lease_expires_at VARCHAR(27), acked_at_utc VARCHAR(27), "
        "last_error TEXT, quarantine_reason TEXT, lease_process VARCHAR(300), "
        f"lost_lease_token VARCHAR(40), {pk}"
        "CONSTRAINT ck_deliveries_state CHECK (state IN "
        "('ready', 'processing', 'done', 'quarantine')), "
        "CONSTRAINT fk_deliveries_space_id_spaces FOREIGN KEY(space_id) REFERENCES spaces (id), "
        "CONSTRAINT fk_deliveries_message_id_messages FOREIGN KEY(message_id) "
        "REFERENCES messages (id), "
        "CONSTRAINT fk_deliveries_recipient_id_participants FOREIGN KEY(recipient_id) "
        "REFERENCES participants (id))"
    )


DELIVERY_INDEXES = [
    "CREATE INDEX ix_deliveries_lost_lease_token ON deliveries (lost_lease_token) "
    "WHERE lost_lease_token IS NOT NULL",
    "CREATE INDEX ix_deliveries_message_id ON deliveries (message_id)",
    "CREATE INDEX ix_deliveries_quarantine ON deliveries (space_id) WHERE state = 'quarantine'",
    "CREATE INDEX ix_deliveries_leased ON deliveries (recipient_id, lease_expires_at) "
    "WHERE state = 'processing'",
    "CREATE INDEX ix_deliveries_lease_token ON deliveries (lease_token) "
    "WHERE lease_token IS NOT NULL",
    "CREATE INDEX ix_deliveries_ready ON deliveries (recipient_id, created_at_utc, id) "
    "WHERE state = 'ready'",
]
WAITING_TRIGGERS = [
    "CREATE TRIGGER deliveries_waiting_insert AFTER INSERT ON deliveries "
    "WHEN NEW.state IN ('ready', 'processing') "
    "BEGIN UPDATE participants SET waiting = waiting + 1 WHERE id = NEW.recipient_id; END",
    "CREATE TRIGGER deliveries_waiting_update AFTER UPDATE OF state ON deliveries "
    "WHEN (OLD.state IN ('ready', 'processing')) != (NEW.state IN ('ready', 'processing')) "
    "BEGIN UPDATE participants SET waiting = waiting + "
    "(CASE WHEN NEW.state IN ('ready', 'processing') THEN 1 ELSE -1 END) "
    "WHERE id = NEW.recipient_id; END",
]

UPTO = "coalesce((SELECT upto FROM folds WHERE name = 'sender_usage'), 0)"
FOLD = (
    "INSERT INTO sender_usage (space_id, sender, log_bytes, messages) "
    "SELECT space_id, sender, sum(size_bytes), count(*) FROM messages "
    f"WHERE rowid > {UPTO} GROUP BY space_id, sender "
    "ON CONFLICT (space_id, sender) DO UPDATE SET "
    "log_bytes = log_bytes + excluded.log_bytes, messages = messages + excluded.messages; "
    "INSERT INTO folds (name, upto) "
    "SELECT 'sender_usage', coalesce(max(rowid), 0) FROM messages WHERE true "
    "ON CONFLICT (name) DO UPDATE SET upto = excluded.upto;"
)
USAGE_DROP = [
    "DROP TRIGGER IF EXISTS messages_sender_usage",
    "DROP TRIGGER IF EXISTS spaces_sender_usage",
]
USAGE_BATCHED = [
    "CREATE TRIGGER IF NOT EXISTS messages_sender_usage AFTER INSERT ON messages "
    f"WHEN NEW.rowid - {UPTO} >= 32 BEGIN {FOLD} END",
    "CREATE TRIGGER IF NOT EXISTS spaces_sender_usage AFTER DELETE ON spaces "
    f"BEGIN {FOLD} DELETE FROM sender_usage WHERE space_id = OLD.id; END",
]
# Revision 0007's: one log row counted per insert.
USAGE_PER_ROW = [
    "CREATE TRIGGER IF NOT EXISTS messages_sender_usage AFTER INSERT ON messages "
    "BEGIN INSERT INTO sender_usage (space_id, sender, log_bytes, messages) "
    "VALUES (NEW.space_id, NEW.sender, NEW.size_bytes, 1) "
    "ON CONFLICT (space_id, sender) DO UPDATE SET "
    "log_bytes = log_bytes + excluded.log_bytes, messages = messages + 1; END",
    "CREATE TRIGGER IF NOT EXISTS spaces_sender_usage AFTER DELETE ON spaces "
    "BEGIN DELETE FROM sender_usage WHERE space_id = OLD.id; END",
]


def _rebuild_deliveries(primary_key: bool) -> None:
    """SQLite cannot add or drop a primary key: a new table, every row copied
    with its rowid (the exporter's order), then its indexes and triggers."""
    op.execute("PRAGMA legacy_alter_table = ON")  # views name `deliveries`: leave them be
    try:
        op.execute(_deliveries("deliveries_0015", primary_key))
        op.execute(
            f"INSERT INTO deliveries_0015 (rowid, {COLUMNS}) "
            f"SELECT rowid, {COLUMNS} FROM deliveries ORDER BY rowid"
        )
        op.execute("DROP TABLE deliveries")  # its indexes and triggers go with it
        op.execute("ALTER TABLE deliveries_0015 RENAME TO deliveries")
    finally:
        op.execute("PRAGMA legacy_alter_table = OFF")
    for ddl in DELIVERY_INDEXES + WAITING_TRIGGERS:
        op.execute(ddl)


UNUSED_INDEXES = ["ix_purges_space_id", "ix_participants_space_id_contact_policy"]
UNUSED_INDEXES_BACK = [
    "CREATE INDEX ix_purges_space_id ON purges (space_id)",
    "CREATE INDEX ix_participants_space_id_contact_policy ON participants (space_id) "
    "WHERE contact_policy IS NOT NULL",
]


# PostgreSQL keeps table comments (the metadata's, word for word).
DELIVERIES_COMMENT = (
    "Inbox queues: one row per message per recipient (S13-S16). No primary key index: "
    "the rowid (an identity column on PostgreSQL) is the row''s key (revision 0015)."
)
DELIVERIES_COMMENT_0001 = "Inbox queues: one row per message per recipient (S13-S16)."
FOLDS_COMMENT = (
    "Batched derived state (SQLite): sender_usage takes the log in batches of 32 rows, "
    "as the search index does (S30, S36), so a send does not write its page; readers add "
    "the rows past `upto`. Unused on PostgreSQL."
)


def upgrade() -> None:
    op.execute(FOLDS)
    for name in UNUSED_INDEXES:
        op.execute(f"DROP INDEX {name}")
    if op.get_bind().dialect.name != "sqlite":
        op.execute("ALTER TABLE deliveries DROP CONSTRAINT pk_deliveries")
        op.execute(f"COMMENT ON TABLE deliveries IS '{DELIVERIES_COMMENT}'")
        op.execute(f"COMMENT ON TABLE folds IS '{FOLDS_COMMENT}'")
        return
    op.execute(
        "INSERT INTO folds (name, upto) "
        "SELECT 'sender_usage', coalesce(max(rowid), 0) FROM messages"
    )
    for ddl in USAGE_DROP + USAGE_BATCHED:
        op.execute(ddl)
    _rebuild_deliveries(primary_key=False)


def downgrade() -> None:
    for ddl in UNUSED_INDEXES_BACK:
        op.execute(ddl)
    if op.get_bind().dialect.name != "sqlite":
        op.execute("ALTER TABLE deliveries ADD CONSTRAINT pk_deliveries PRIMARY KEY (id)")
        op.execute(f"COMMENT ON TABLE deliveries IS '{DELIVERIES_COMMENT_0001}'")
        op.execute("DROP TABLE folds")
        return
    _rebuild_deliveries(primary_key=True)
    for ddl in USAGE_DROP:
        op.execute(ddl)
    for statement in FOLD.split(";")[:1]:  # the batch's tail into the counts
        op.execute(statement)
    for ddl in USAGE_PER_ROW:
        op.execute(ddl)
    op.execute("DROP TABLE folds")
