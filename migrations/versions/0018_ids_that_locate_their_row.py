"""ids that locate their row: no index of message ids

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-03 10:00:00.000000

A one-recipient send wrote five b-trees (``python -m bench pages``): the log,
its (space_id, seq) key, its primary key of ids, the delivery and the ready
index. This revision takes the index of ids out. A message id the broker makes
from here on names its row: the first 40 of its 80 bits past the time are the
message's seq (``broker.ids.message_id``), so a lookup by id reads the
(space_id, seq) key the id spells and checks the id there. A message whose id
does not spell its seq (every id logged before this revision, and an imported
one that names another seq) has a row in ``message_aliases``, which a lookup
reads first. The ids themselves do not change: exports are byte-identical.

SQLite cannot drop a primary key: the log is rebuilt with every rowid kept
(deliveries are keyed by their message's rowid, revision 0017; the search
index by the rowid too), then its indexes and triggers; the REPLACE guard
(revision 0016) no longer looks for the id, which no key holds. The two views
that joined a delivery to its message by id join by rowid. PostgreSQL drops
the primary key constraint. Frozen: the DDL is written out here, never
imported from live code.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = (
    "id, space_id, seq, kind, sender, recipients, body, urgent, via, ref, reached, "
    "not_reached, reached_n, bcast_no, idempotency_key, size_bytes, created_at_utc, thread, "
    "reply_to, importance, ack_required"
)


def _messages(name: str, primary_key: bool) -> str:
    pk = "CONSTRAINT pk_messages PRIMARY KEY (id), " if primary_key else ""
    return (
        f"CREATE TABLE {name} (id VARCHAR(26) NOT NULL, space_id VARCHAR(40) NOT NULL, "
        "seq INTEGER NOT NULL, kind VARCHAR(16) NOT NULL, sender VARCHAR(200) NOT NULL, "
        "recipients TEXT DEFAULT '[]' NOT NULL, body TEXT DEFAULT '' NOT NULL, "
        "urgent BOOLEAN DEFAULT 0 NOT NULL, via VARCHAR(8), ref VARCHAR(26), "
        "reached TEXT DEFAULT '[]' NOT NULL, not_reached TEXT DEFAULT '[]' NOT NULL, "
        "reached_n INTEGER DEFAULT '0' NOT NULL, bcast_no INTEGER, "
        "idempotency_key VARCHAR(200), size_bytes INTEGER DEFAULT '0' NOT NULL, "
        "created_at_utc VARCHAR(27) NOT NULL, thread VARCHAR(64), reply_to VARCHAR(26), "
        "importance VARCHAR(8), ack_required BOOLEAN, "
        f"{pk}"
        "CONSTRAINT ck_messages_kind CHECK (kind IN ('direct', 'broadcast', 'post', "
        "'directive', 'retract', 'operator', 'seen')), "
        "CONSTRAINT fk_messages_space_id_spaces FOREIGN KEY(space_id) REFERENCES spaces (id), "
        "CONSTRAINT uq_messages_space_id_seq UNIQUE (space_id, seq))"
    )


INDEXES = [
    "CREATE INDEX ix_messages_ref ON messages (ref) WHERE ref IS NOT NULL",
    "CREATE INDEX ix_messages_space_id_bcast_no ON messages (space_id, bcast_no) "
    "WHERE bcast_no IS NOT NULL",
    "CREATE INDEX ix_messages_space_id_kind_seq ON messages (space_id, kind, seq) "
    "WHERE kind IN ('post', 'directive', 'retract')",
    "CREATE INDEX ix_messages_space_id_thread_seq ON messages (space_id, thread, seq) "
    "WHERE thread IS NOT NULL",
    "CREATE UNIQUE INDEX ix_messages_space_id_sender_idempotency_key ON messages "
    "(space_id, sender, idempotency_key) WHERE idempotency_key IS NOT NULL",
]
FTS_UPTO = "coalesce((SELECT max(id) FROM messages_fts_docsize), 0)"
USAGE_UPTO = "coalesce((SELECT upto FROM folds WHERE name = 'sender_usage'), 0)"
TRIGGERS = [
    "CREATE TRIGGER messages_no_update BEFORE UPDATE ON messages "
    "BEGIN SELECT RAISE(ABORT, 'append-only: messages refuses UPDATE'); END",
    "CREATE TRIGGER messages_no_delete BEFORE DELETE ON messages "
    "WHEN NOT EXISTS (SELECT 1 FROM purging WHERE space_id = OLD.space_id) "
    "BEGIN SELECT RAISE(ABORT, 'append-only: messages refuses DELETE'); END",
    f"CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages WHEN NEW.rowid - {FTS_UPTO} "
    ">= 32 BEGIN INSERT INTO messages_fts (rowid, body, thread) SELECT rowid, body, thread "
    f"FROM messages WHERE rowid > {FTS_UPTO}; END",
    f"CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages WHEN OLD.rowid <= {FTS_UPTO} "
    "BEGIN INSERT INTO messages_fts (messages_fts, rowid, body, thread) "
    "VALUES ('delete', OLD.rowid, OLD.body, OLD.thread); END",
    f"CREATE TRIGGER messages_sender_usage AFTER INSERT ON messages WHEN NEW.rowid - {USAGE_UPTO} "
    ">= 32 BEGIN INSERT INTO sender_usage (space_id, sender, log_bytes, messages) "
    "SELECT space_id, sender, sum(size_bytes), count(*) FROM messages "
    f"WHERE rowid > {USAGE_UPTO} GROUP BY space_id, sender "
    "ON CONFLICT (space_id, sender) DO UPDATE SET "
    "log_bytes = log_bytes + excluded.log_bytes, messages = messages + excluded.messages; "
    "INSERT INTO folds (name, upto) "
    "SELECT 'sender_usage', coalesce(max(rowid), 0) FROM messages WHERE true "
    "ON CONFLICT (name) DO UPDATE SET upto = excluded.upto; END",
]
TAKEN_ID = "EXISTS (SELECT 1 FROM messages WHERE id = NEW.id) OR "
NO_REPLACE = (
    "CREATE TRIGGER messages_no_replace BEFORE INSERT ON messages WHEN {id}"
    "EXISTS (SELECT 1 FROM messages WHERE space_id = NEW.space_id AND seq = NEW.seq) OR "
    "EXISTS (SELECT 1 FROM messages WHERE space_id = NEW.space_id AND sender = NEW.sender "
    "AND idempotency_key = NEW.idempotency_key) "
    "BEGIN SELECT RAISE(ABORT, 'append-only: messages refuses REPLACE'); END"
)

ALIASES = {
    "sqlite": "CREATE TABLE message_aliases (space_id VARCHAR(40) NOT NULL, "
    "id VARCHAR(26) NOT NULL, seq INTEGER NOT NULL, "
    "CONSTRAINT pk_message_aliases PRIMARY KEY (space_id, id), "
    "CONSTRAINT fk_message_aliases_space_id_spaces FOREIGN KEY(space_id) REFERENCES spaces (id)"
    ") WITHOUT ROWID",
    "postgresql": "CREATE TABLE message_aliases (space_id VARCHAR(40) NOT NULL, "
    "id VARCHAR(26) NOT NULL, seq INTEGER NOT NULL, "
    "CONSTRAINT pk_message_aliases PRIMARY KEY (space_id, id), "
    "CONSTRAINT fk_message_aliases_space_id_spaces FOREIGN KEY(space_id) REFERENCES spaces (id))",
}
ALPHABET = "'0123456789ABCDEFGHJKMNPQRSTVWXYZ'"


def _spelled(position: str) -> str:
    """The seq an id spells: its characters 11 to 18, Crockford base32."""
    return " + ".join(  # bigint: PostgreSQL's integer would overflow past 2^31
        f"(CAST({position}({ALPHABET}, substr(id, {11 + k}, 1)) AS bigint) - 1) * {32 ** (7 - k)}"
        for k in range(8)
    )


# Every message logged before: an alias wherever its id does not spell its seq.
FILL = (
    "INSERT INTO message_aliases (space_id, id, seq) SELECT space_id, id, seq FROM messages "
    "WHERE length(id) <> 26 OR seq <> {spelled}"
)

COMMENTS = [
    "COMMENT ON TABLE message_aliases IS 'Where a message whose id does not name its seq is "
    "(revision 0018): the ids of messages logged before it, and imported ones. Written with "
    "the message; a lookup by id reads it first (broker/store/sql/counters.sql, id_seq).'",
    "COMMENT ON COLUMN message_aliases.id IS 'the message''s id'",
    "COMMENT ON COLUMN message_aliases.seq IS 'the message''s seq in the space'",
    "COMMENT ON COLUMN messages.id IS 'ULID; the stable id consumers de-duplicate by. No "
    "index: its random part starts with the row''s seq, so (space_id, seq) finds it (an "
    "imported id naming another seq has a row in message_aliases; revision 0018)'",
]
OLD_ID_COMMENT = "COMMENT ON COLUMN messages.id IS 'ULID; the stable id consumers de-duplicate by'"

LEASE_LIVE = {
    "sqlite": "(strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000Z')",
    "postgresql": "to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')",
}
V_INBOX = (
    "CREATE VIEW v_inbox AS SELECT d.space_id, p.address AS recipient, d.recipient_id, "
    "d.id AS delivery_id, d.message_id, m.seq, m.kind, m.sender, m.urgent, m.body, d.state, "
    "d.attempts, d.created_at_utc, d.lease_owner, d.lease_expires_at, CASE WHEN d.state = "
    "'processing' AND d.lease_expires_at > {now} THEN 1 ELSE 0 END AS lease_live, "
    "d.acked_at_utc, d.last_error, d.quarantine_reason FROM deliveries d JOIN messages m "
    "ON {join} JOIN participants p ON p.id = d.recipient_id"
)
V_QUARANTINE = (
    "CREATE VIEW v_quarantine AS SELECT d.space_id, p.address AS recipient, d.id AS "
    "delivery_id, d.message_id, m.seq, m.kind, m.sender, m.body, d.attempts, "
    "d.quarantine_reason, d.last_error, d.created_at_utc FROM deliveries d JOIN messages m "
    "ON {join} JOIN participants p ON p.id = d.recipient_id WHERE d.state = 'quarantine'"
)
BY_ROWID = "m.rowid = d.rowid >> 20"
BY_ID = "m.id = d.message_id"


def _views(dialect: str, join: str) -> None:
    op.execute("DROP VIEW v_quarantine")
    op.execute("DROP VIEW v_inbox")
    op.execute(V_INBOX.format(now=LEASE_LIVE[dialect], join=join))
    op.execute(V_QUARANTINE.format(join=join))


def _rebuild(primary_key: bool, no_replace_id: str) -> None:
    """SQLite cannot add or drop a primary key: a new table, every row copied
    with its rowid, then the indexes and triggers."""
    op.execute("PRAGMA legacy_alter_table = ON")  # views name `messages`: leave them be
    try:
        op.execute(_messages("messages_0018", primary_key))
        op.execute(
            f"INSERT INTO messages_0018 (rowid, {COLUMNS}) "
            f"SELECT rowid, {COLUMNS} FROM messages ORDER BY rowid"
        )
        op.execute("DROP TABLE messages")  # its indexes and triggers go with it
        op.execute("ALTER TABLE messages_0018 RENAME TO messages")
    finally:
        op.execute("PRAGMA legacy_alter_table = OFF")
    for ddl in [*INDEXES, *TRIGGERS, NO_REPLACE.format(id=no_replace_id)]:
        op.execute(ddl)


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    op.execute(ALIASES[dialect])
    if dialect == "sqlite":
        op.execute(FILL.format(spelled=_spelled("instr")))
        _rebuild(False, "")
    else:
        op.execute(FILL.format(spelled=_spelled("strpos")))
        op.execute("ALTER TABLE messages DROP CONSTRAINT pk_messages")
        for ddl in COMMENTS:
            op.execute(ddl)
    _views(dialect, BY_ROWID)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        _rebuild(True, TAKEN_ID)
    else:
        op.execute("ALTER TABLE messages ADD CONSTRAINT pk_messages PRIMARY KEY (id)")
        op.execute(OLD_ID_COMMENT)
    op.execute("DROP TABLE message_aliases")
    _views(dialect, BY_ID)
