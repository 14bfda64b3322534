"""a log row keeps no copy of its recipients as the addresses it reached

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-04 05:40:00.000000

A log row holds the ``to`` forms as given (``recipients``) and the addresses it
reached (``reached``). For most of the log (a direct message to addresses that
all took it) the two are the same JSON text: ten bytes a message written
twice, which is what took a log row past the 19 rows a 4 KiB page holds.
``reached`` becomes nullable: NULL means "the recipients as given, each
reached", and the one INSERT of the log writes NULL where the two are equal.
Readers take ``coalesce(reached, recipients)`` (broker/store/sql/counters.sql,
reached_m / reached_row); the export layout is unchanged. Existing rows are
made the same way. SQLite rebuilds the table (it cannot change a column's NOT
NULL), every rowid kept, so the search index and every delivery still name
their rows; the log's indexes and triggers are written again as revision
0025 left them. PostgreSQL drops the NOT NULL and clears the copies (its
append-only trigger held off for that one UPDATE). ``v_log`` is written
again. Frozen: the DDL is written out here, never imported from live code.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = (
    "id, space_no, seq, kind, sender, recipients, body, urgent, via, ref, reached, "
    "not_reached, reached_n, bcast_no, idempotency_key, size_bytes, created_at_utc, thread, "
    "reply_to, importance, ack_required"
)
TABLE = (
    "CREATE TABLE {name} (id VARCHAR(26) NOT NULL, space_no INTEGER NOT NULL, seq INTEGER "
    "NOT NULL, kind VARCHAR(16) NOT NULL, sender VARCHAR(200) NOT NULL, recipients TEXT "
    "DEFAULT '[]' NOT NULL, body TEXT DEFAULT '' NOT NULL, urgent BOOLEAN DEFAULT 0 NOT "
    "NULL, via VARCHAR(8), ref VARCHAR(26), reached TEXT DEFAULT '[]', not_reached TEXT "
    "DEFAULT '[]' NOT NULL, reached_n INTEGER DEFAULT '0' NOT NULL, bcast_no INTEGER, "
    "idempotency_key VARCHAR(200), size_bytes INTEGER DEFAULT '0' NOT NULL, created_at_utc "
    "VARCHAR(27) NOT NULL, thread VARCHAR(64), reply_to VARCHAR(26), importance VARCHAR(8),"
    " ack_required BOOLEAN, CONSTRAINT ck_messages_kind CHECK (kind IN ('direct', "
    "'broadcast', 'post', 'directive', 'retract', 'operator', 'seen')), CONSTRAINT "
    "uq_messages_space_no_seq UNIQUE (space_no, seq))"
)
TABLE_0025 = (
    "CREATE TABLE {name} (id VARCHAR(26) NOT NULL, space_no INTEGER NOT NULL, seq INTEGER "
    "NOT NULL, kind VARCHAR(16) NOT NULL, sender VARCHAR(200) NOT NULL, recipients TEXT "
    "DEFAULT '[]' NOT NULL, body TEXT DEFAULT '' NOT NULL, urgent BOOLEAN DEFAULT 0 NOT "
    "NULL, via VARCHAR(8), ref VARCHAR(26), reached TEXT DEFAULT '[]' NOT NULL, not_reached"
    " TEXT DEFAULT '[]' NOT NULL, reached_n INTEGER DEFAULT '0' NOT NULL, bcast_no INTEGER,"
    " idempotency_key VARCHAR(200), size_bytes INTEGER DEFAULT '0' NOT NULL, created_at_utc"
    " VARCHAR(27) NOT NULL, thread VARCHAR(64), reply_to VARCHAR(26), importance "
    "VARCHAR(8), ack_required BOOLEAN, CONSTRAINT ck_messages_kind CHECK (kind IN "
    "('direct', 'broadcast', 'post', 'directive', 'retract', 'operator', 'seen')), "
    "CONSTRAINT uq_messages_space_no_seq UNIQUE (space_no, seq))"
)
DDL = [
    ("CREATE INDEX ix_messages_ref ON messages (ref) WHERE ref IS NOT NULL"),
    (
        "CREATE INDEX ix_messages_space_no_bcast_no ON messages (space_no, bcast_no) WHERE "
        "bcast_no IS NOT NULL"
    ),
    (
        "CREATE INDEX ix_messages_space_no_kind_seq ON messages (space_no, kind, seq) WHERE "
        "kind IN ('post', 'directive', 'retract')"
    ),
    (
        "CREATE UNIQUE INDEX ix_messages_space_no_sender_idempotency_key ON messages (space_no,"
        " sender, idempotency_key) WHERE idempotency_key IS NOT NULL"
    ),
    (
        "CREATE INDEX ix_messages_space_no_thread_seq ON messages (space_no, thread, seq) WHERE"
        " thread IS NOT NULL"
    ),
    (
        "CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages WHEN OLD.rowid <= "
        "coalesce((SELECT upto FROM folds WHERE name = 'search'), 0) BEGIN INSERT INTO "
        "messages_fts (messages_fts, rowid, body, thread) VALUES ('delete', OLD.rowid, "
        "OLD.body, OLD.thread); END"
    ),
    (
        "CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages WHEN NEW.rowid - "
        "coalesce((SELECT upto FROM folds WHERE name = 'search'), 0) >= 32 BEGIN INSERT INTO "
        "messages_fts (rowid, body, thread) SELECT rowid, body, thread FROM messages WHERE "
        "rowid > coalesce((SELECT upto FROM folds WHERE name = 'search'), 0); INSERT INTO folds"
        " (name, upto) SELECT 'search', coalesce(max(rowid), 0) FROM messages WHERE true ON "
        "CONFLICT (name) DO UPDATE SET upto = excluded.upto; END"
    ),
    (
        "CREATE TRIGGER messages_no_delete BEFORE DELETE ON messages WHEN NOT EXISTS (SELECT 1 "
        "FROM purging WHERE space_id = (SELECT id FROM spaces WHERE rowid = OLD.space_no)) "
        "BEGIN SELECT RAISE(ABORT, 'append-only: messages refuses DELETE'); END"
    ),
    (
        "CREATE TRIGGER messages_no_replace BEFORE INSERT ON messages WHEN EXISTS (SELECT 1 "
        "FROM messages WHERE space_no = NEW.space_no AND seq = NEW.seq) OR EXISTS (SELECT 1 "
        "FROM messages WHERE space_no = NEW.space_no AND sender = NEW.sender AND "
        "idempotency_key = NEW.idempotency_key) BEGIN SELECT RAISE(ABORT, 'append-only: "
        "messages refuses REPLACE'); END"
    ),
    (
        "CREATE TRIGGER messages_no_update BEFORE UPDATE ON messages BEGIN SELECT RAISE(ABORT, "
        "'append-only: messages refuses UPDATE'); END"
    ),
    (
        "CREATE TRIGGER messages_sender_usage AFTER INSERT ON messages WHEN NEW.rowid - "
        "coalesce((SELECT upto FROM folds WHERE name = 'sender_usage'), 0) >= 32 BEGIN INSERT "
        "INTO space_usage (space_id, log_bytes) SELECT s.id, sum(m.size_bytes) FROM messages m "
        "JOIN spaces s ON s.rowid = m.space_no WHERE m.rowid > coalesce((SELECT upto FROM folds"
        " WHERE name = 'sender_usage'), 0) GROUP BY s.id ON CONFLICT (space_id) DO UPDATE SET "
        "log_bytes = log_bytes + excluded.log_bytes; INSERT INTO sender_usage (space_id, "
        "sender, log_bytes, messages) SELECT s.id, m.sender, sum(m.size_bytes), count(*) FROM "
        "messages m JOIN spaces s ON s.rowid = m.space_no WHERE m.rowid > coalesce((SELECT upto"
        " FROM folds WHERE name = 'sender_usage'), 0) GROUP BY s.id, m.sender ON CONFLICT "
        "(space_id, sender) DO UPDATE SET log_bytes = log_bytes + excluded.log_bytes, messages "
        "= messages + excluded.messages; INSERT INTO folds (name, upto) SELECT 'sender_usage', "
        "coalesce(max(rowid), 0) FROM messages WHERE true ON CONFLICT (name) DO UPDATE SET upto"
        " = excluded.upto; END"
    ),
]

V_LOG: dict[str, str] = {
    "sqlite": (
        "SELECT sp.id AS space_id, m.seq, m.id, m.created_at_utc, m.kind, m.sender, "
        "m.recipients, m.body, m.urgent, m.via, m.ref, coalesce(m.reached, m.recipients) AS "
        "reached, m.not_reached, m.reached_n, m.bcast_no, CASE WHEN m.kind = 'seen' THEN "
        "'receipt' WHEN m.reached_n > 0 AND m.not_reached = '[]' THEN 'delivered' WHEN "
        "m.reached_n > 0 THEN 'partial' WHEN m.not_reached <> '[]' THEN 'reached_nobody' ELSE "
        "'logged' END AS outcome FROM messages m JOIN spaces sp ON sp.rowid = m.space_no"
    ),
    "postgresql": (
        "SELECT sp.id AS space_id, m.seq, m.id, m.created_at_utc, m.kind, m.sender, "
        "m.recipients, m.body, m.urgent, m.via, m.ref, coalesce(m.reached, m.recipients) AS "
        "reached, m.not_reached, m.reached_n, m.bcast_no, CASE WHEN m.kind = 'seen' THEN "
        "'receipt' WHEN m.reached_n > 0 AND m.not_reached = '[]' THEN 'delivered' WHEN "
        "m.reached_n > 0 THEN 'partial' WHEN m.not_reached <> '[]' THEN 'reached_nobody' ELSE "
        "'logged' END AS outcome FROM messages m JOIN spaces sp ON sp.rowid = m.space_no"
    ),
}
V_LOG_0025: dict[str, str] = {
    "sqlite": (
        "SELECT sp.id AS space_id, m.seq, m.id, m.created_at_utc, m.kind, m.sender, "
        "m.recipients, m.body, m.urgent, m.via, m.ref, m.reached, m.not_reached, m.reached_n, "
        "m.bcast_no, CASE WHEN m.kind = 'seen' THEN 'receipt' WHEN m.reached_n > 0 AND "
        "m.not_reached = '[]' THEN 'delivered' WHEN m.reached_n > 0 THEN 'partial' WHEN "
        "m.not_reached <> '[]' THEN 'reached_nobody' ELSE 'logged' END AS outcome FROM messages"
        " m JOIN spaces sp ON sp.rowid = m.space_no"
    ),
    "postgresql": (
        "SELECT sp.id AS space_id, m.seq, m.id, m.created_at_utc, m.kind, m.sender, "
        "m.recipients, m.body, m.urgent, m.via, m.ref, m.reached, m.not_reached, m.reached_n, "
        "m.bcast_no, CASE WHEN m.kind = 'seen' THEN 'receipt' WHEN m.reached_n > 0 AND "
        "m.not_reached = '[]' THEN 'delivered' WHEN m.reached_n > 0 THEN 'partial' WHEN "
        "m.not_reached <> '[]' THEN 'reached_nobody' ELSE 'logged' END AS outcome FROM messages"
        " m JOIN spaces sp ON sp.rowid = m.space_no"
    ),
}

PG_COMMENT = (
    "COMMENT ON COLUMN messages.reached IS 'JSON list of addresses reached; NULL: the "
    "recipients as given (each form an address, each reached: a send writes no copy of "
    "them, revision 0026)'"
)
PG_COMMENT_0025 = "COMMENT ON COLUMN messages.reached IS 'JSON list of addresses reached'"


def _rebuild(table: str, reached: str) -> None:
    """SQLite cannot change a column's NOT NULL: a new table, every row copied
    with its rowid (``reached``: the column's new value, read from the row),
    then the log's indexes and triggers."""
    op.execute("DROP VIEW IF EXISTS v_log")
    op.execute("PRAGMA legacy_alter_table = ON")  # the other views name `messages`
    try:
        op.execute(table.format(name="messages_0026"))
        values = COLUMNS.replace(" reached,", f" {reached},")
        op.execute(
            f"INSERT INTO messages_0026 (rowid, {COLUMNS}) SELECT rowid, {values} "
            "FROM messages ORDER BY rowid"
        )
        op.execute("DROP TABLE messages")  # its indexes and triggers go with it
        op.execute("ALTER TABLE messages_0026 RENAME TO messages")
    finally:
        op.execute("PRAGMA legacy_alter_table = OFF")
    for ddl in DDL:
        op.execute(ddl)


def _pg(set_to: str, where: str, null: str, comment: str) -> None:
    op.execute("DROP VIEW IF EXISTS v_log")
    op.execute("ALTER TABLE messages DISABLE TRIGGER messages_append_only")
    if null == "DROP":
        op.execute("ALTER TABLE messages ALTER COLUMN reached DROP NOT NULL")
    op.execute(f"UPDATE messages SET reached = {set_to} WHERE {where}")
    op.execute("ALTER TABLE messages ENABLE TRIGGER messages_append_only")
    if null == "SET":
        op.execute("ALTER TABLE messages ALTER COLUMN reached SET NOT NULL")
    op.execute(comment)


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        _rebuild(TABLE, "CASE WHEN reached = recipients THEN NULL ELSE reached END")
    else:
        _pg("NULL", "reached = recipients", "DROP", PG_COMMENT)
    op.execute(f"CREATE VIEW v_log AS {V_LOG[dialect]}")


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        _rebuild(TABLE_0025, "coalesce(reached, recipients)")
    else:
        _pg("recipients", "reached IS NULL", "SET", PG_COMMENT_0025)
    op.execute(f"CREATE VIEW v_log AS {V_LOG_0025[dialect]}")
