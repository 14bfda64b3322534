"""a delivery sent keeps no id of its own: it is derived from its message's

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-04 05:00:00.000000

A delivery held a ULID of its own, 26 bytes of its row, read by nobody inside
the store (its key is its rowid). A send now writes none (NULL, one header
byte): the id it shows is derived from its message's, the message id's first
22 characters (its time, its seq and 20 random bits: two messages of a space
differ there) and the delivery's place among the message's deliveries (the
low 20 bits of its rowid, revision 0017) in four Crockford base32 characters
(broker/store/sql/counters.sql, delivery_id). A row keeps the id it was given
where it has one: every row from before this revision, and every imported
one, so an export stays byte-identical. The column becomes nullable: SQLite
rebuilds the table, every row and rowid kept; PostgreSQL drops the NOT NULL.
The two views that show the id are written again. Going back writes each
derived id into its row. Frozen: the DDL is written out here, never imported
from live code.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = (
    "id, recipient_no, state, created_at_utc, attempts, lease_token, lease_owner, "
    "lease_expires_at, acked_at_utc, last_error, quarantine_reason, lease_process, "
    "lost_lease_token, queued"
)
TABLE = (
    "CREATE TABLE {name} (id VARCHAR(26){null}, recipient_no INTEGER NOT NULL, "
    "state VARCHAR(16) DEFAULT 'ready' NOT NULL, created_at_utc VARCHAR(27), "
    "attempts INTEGER DEFAULT '0' NOT NULL, lease_token VARCHAR(40), "
    "lease_owner VARCHAR(200), lease_expires_at VARCHAR(27), acked_at_utc VARCHAR(27), "
    "last_error TEXT, quarantine_reason TEXT, lease_process VARCHAR(300), "
    "lost_lease_token VARCHAR(40), queued BOOLEAN DEFAULT 1 NOT NULL, "
    "CONSTRAINT ck_deliveries_state CHECK (state IN "
    "('ready', 'processing', 'done', 'quarantine')))"
)
INDEXES = [
    "CREATE INDEX ix_deliveries_lost_lease_token ON deliveries (lost_lease_token) "
    "WHERE lost_lease_token IS NOT NULL",
    "CREATE INDEX ix_deliveries_leased ON deliveries (recipient_no, lease_expires_at) "
    "WHERE state = 'processing'",
    "CREATE INDEX ix_deliveries_lease_token ON deliveries (lease_token) "
    "WHERE lease_token IS NOT NULL",
    "CREATE INDEX ix_deliveries_quarantine ON deliveries (recipient_no) WHERE state = 'quarantine'",
    "CREATE INDEX ix_deliveries_ready ON deliveries (recipient_no) "
    "WHERE state = 'ready' AND queued = 1",
]
UPTO = "coalesce((SELECT upto FROM folds WHERE name = 'waiting'), 0)"
STATES = "('ready', 'processing')"
FOLD = (
    f"UPDATE deliveries SET queued = 1 WHERE rowid > {UPTO} AND queued = 0; "
    "UPDATE participants SET waiting = waiting + (SELECT count(*) FROM deliveries w "
    f"WHERE w.rowid > {UPTO} AND w.recipient_no = participants.rowid "
    f"AND w.state IN {STATES}) "
    f"WHERE rowid IN (SELECT recipient_no FROM deliveries WHERE rowid > {UPTO}); "
    "INSERT INTO folds (name, upto) "
    "SELECT 'waiting', coalesce(max(rowid), 0) FROM deliveries WHERE true "
    "ON CONFLICT (name) DO UPDATE SET upto = excluded.upto;"
)
TRIGGERS = [
    "CREATE TRIGGER IF NOT EXISTS deliveries_waiting_insert AFTER INSERT ON deliveries "
    f"WHEN (NEW.rowid >> 20) - ({UPTO} >> 20) >= 32 BEGIN {FOLD} END",
    "CREATE TRIGGER IF NOT EXISTS deliveries_waiting_update AFTER UPDATE OF state "
    f"ON deliveries WHEN (OLD.state IN {STATES}) != (NEW.state IN {STATES}) "
    f"AND NEW.rowid <= {UPTO} BEGIN UPDATE participants SET waiting = waiting + "
    f"(CASE WHEN NEW.state IN {STATES} THEN 1 ELSE -1 END) "
    "WHERE rowid = NEW.recipient_no; END",
]
# The id a row without one shows: its message's (d, m), as counters.sql derives it.
CROCKFORD = "'0123456789ABCDEFGHJKMNPQRSTVWXYZ'"
DERIVED = "substr(m.id, 1, 22) || " + " || ".join(
    f"substr({CROCKFORD}, CAST(((d.rowid >> {shift}) & 31) + 1 AS int), 1)"
    for shift in (15, 10, 5, 0)
)

PG_COMMENTS = {
    "null": "COMMENT ON COLUMN deliveries.id IS 'the delivery''s external id, not indexed "
    "(inside the store a row is its rowid). NULL: the one a send gives it, derived from its "
    "message''s id and its place (broker/store/sql/counters.sql, delivery_id; revision "
    "0024); kept where an import or a send before revision 0024 gave it another'",
    "not null": "COMMENT ON COLUMN deliveries.id IS 'ULID: the delivery''s external id, kept "
    "once and not indexed; inside the store a row is its rowid (the claim''s one UPDATE "
    "finds its rows by it through the ready index, which holds it)'",
}

VIEWS: dict[str, dict[str, str]] = {
    "sqlite": {
        "v_inbox": (
            "SELECT sp.id AS space_id, p.address AS recipient, p.id AS recipient_id, coalesce(d.id,"
            " substr(m.id, 1, 22) || substr('0123456789ABCDEFGHJKMNPQRSTVWXYZ', CAST(((d.rowid >> "
            "15) & 31) + 1 AS int), 1) || substr('0123456789ABCDEFGHJKMNPQRSTVWXYZ', CAST(((d.rowid"
            " >> 10) & 31) + 1 AS int), 1) || substr('0123456789ABCDEFGHJKMNPQRSTVWXYZ', "
            "CAST(((d.rowid >> 5) & 31) + 1 AS int), 1) || "
            "substr('0123456789ABCDEFGHJKMNPQRSTVWXYZ', CAST((d.rowid & 31) + 1 AS int), 1)) AS "
            "delivery_id, m.id AS message_id, m.seq, m.kind, m.sender, m.urgent, m.body, d.state, "
            "d.attempts, coalesce(d.created_at_utc, m.created_at_utc) AS created_at_utc, "
            "d.lease_owner, d.lease_expires_at, CASE WHEN d.state = 'processing' AND "
            "d.lease_expires_at > (strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000Z') THEN 1 ELSE 0 "
            "END AS lease_live, d.acked_at_utc, d.last_error, d.quarantine_reason FROM deliveries d"
            " JOIN messages m ON m.rowid = d.rowid >> 20 JOIN spaces sp ON sp.rowid = m.space_no "
            "JOIN participants p ON p.rowid = d.recipient_no"
        ),
        "v_quarantine": (
            "SELECT sp.id AS space_id, p.address AS recipient, coalesce(d.id, substr(m.id, 1, 22) "
            "|| substr('0123456789ABCDEFGHJKMNPQRSTVWXYZ', CAST(((d.rowid >> 15) & 31) + 1 AS int),"
            " 1) || substr('0123456789ABCDEFGHJKMNPQRSTVWXYZ', CAST(((d.rowid >> 10) & 31) + 1 AS "
            "int), 1) || substr('0123456789ABCDEFGHJKMNPQRSTVWXYZ', CAST(((d.rowid >> 5) & 31) + 1 "
            "AS int), 1) || substr('0123456789ABCDEFGHJKMNPQRSTVWXYZ', CAST((d.rowid & 31) + 1 AS "
            "int), 1)) AS delivery_id, m.id AS message_id, m.seq, m.kind, m.sender, m.body, "
            "d.attempts, d.quarantine_reason, d.last_error, coalesce(d.created_at_utc, "
            "m.created_at_utc) AS created_at_utc FROM deliveries d JOIN messages m ON m.rowid = "
            "d.rowid >> 20 JOIN spaces sp ON sp.rowid = m.space_no JOIN participants p ON p.rowid ="
            " d.recipient_no WHERE d.state = 'quarantine'"
        ),
    },
    "postgresql": {
        "v_inbox": (
            "SELECT sp.id AS space_id, p.address AS recipient, p.id AS recipient_id, coalesce(d.id,"
            " substr(m.id, 1, 22) || substr('0123456789ABCDEFGHJKMNPQRSTVWXYZ', CAST(((d.rowid >> "
            "15) & 31) + 1 AS int), 1) || substr('0123456789ABCDEFGHJKMNPQRSTVWXYZ', CAST(((d.rowid"
            " >> 10) & 31) + 1 AS int), 1) || substr('0123456789ABCDEFGHJKMNPQRSTVWXYZ', "
            "CAST(((d.rowid >> 5) & 31) + 1 AS int), 1) || "
            "substr('0123456789ABCDEFGHJKMNPQRSTVWXYZ', CAST((d.rowid & 31) + 1 AS int), 1)) AS "
            "delivery_id, m.id AS message_id, m.seq, m.kind, m.sender, m.urgent, m.body, d.state, "
            "d.attempts, coalesce(d.created_at_utc, m.created_at_utc) AS created_at_utc, "
            "d.lease_owner, d.lease_expires_at, CASE WHEN d.state = 'processing' AND "
            "d.lease_expires_at > to_char(now() AT TIME ZONE 'UTC', "
            '\'YYYY-MM-DD"T"HH24:MI:SS.US"Z"\') THEN 1 ELSE 0 END AS lease_live, d.acked_at_utc, '
            "d.last_error, d.quarantine_reason FROM deliveries d JOIN messages m ON m.rowid = "
            "d.rowid >> 20 JOIN spaces sp ON sp.rowid = m.space_no JOIN participants p ON p.rowid ="
            " d.recipient_no"
        ),
        "v_quarantine": (
            "SELECT sp.id AS space_id, p.address AS recipient, coalesce(d.id, substr(m.id, 1, 22) "
            "|| substr('0123456789ABCDEFGHJKMNPQRSTVWXYZ', CAST(((d.rowid >> 15) & 31) + 1 AS int),"
            " 1) || substr('0123456789ABCDEFGHJKMNPQRSTVWXYZ', CAST(((d.rowid >> 10) & 31) + 1 AS "
            "int), 1) || substr('0123456789ABCDEFGHJKMNPQRSTVWXYZ', CAST(((d.rowid >> 5) & 31) + 1 "
            "AS int), 1) || substr('0123456789ABCDEFGHJKMNPQRSTVWXYZ', CAST((d.rowid & 31) + 1 AS "
            "int), 1)) AS delivery_id, m.id AS message_id, m.seq, m.kind, m.sender, m.body, "
            "d.attempts, d.quarantine_reason, d.last_error, coalesce(d.created_at_utc, "
            "m.created_at_utc) AS created_at_utc FROM deliveries d JOIN messages m ON m.rowid = "
            "d.rowid >> 20 JOIN spaces sp ON sp.rowid = m.space_no JOIN participants p ON p.rowid ="
            " d.recipient_no WHERE d.state = 'quarantine'"
        ),
    },
}
VIEWS_0023: dict[str, dict[str, str]] = {
    "sqlite": {
        "v_inbox": (
            "SELECT sp.id AS space_id, p.address AS recipient, p.id AS recipient_id, d.id AS "
            "delivery_id, m.id AS message_id, m.seq, m.kind, m.sender, m.urgent, m.body, d.state, "
            "d.attempts, coalesce(d.created_at_utc, m.created_at_utc) AS created_at_utc, "
            "d.lease_owner, d.lease_expires_at, CASE WHEN d.state = 'processing' AND "
            "d.lease_expires_at > (strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000Z') THEN 1 ELSE 0 "
            "END AS lease_live, d.acked_at_utc, d.last_error, d.quarantine_reason FROM deliveries d"
            " JOIN messages m ON m.rowid = d.rowid >> 20 JOIN spaces sp ON sp.rowid = m.space_no "
            "JOIN participants p ON p.rowid = d.recipient_no"
        ),
        "v_quarantine": (
            "SELECT sp.id AS space_id, p.address AS recipient, d.id AS delivery_id, m.id AS "
            "message_id, m.seq, m.kind, m.sender, m.body, d.attempts, d.quarantine_reason, "
            "d.last_error, coalesce(d.created_at_utc, m.created_at_utc) AS created_at_utc FROM "
            "deliveries d JOIN messages m ON m.rowid = d.rowid >> 20 JOIN spaces sp ON sp.rowid = "
            "m.space_no JOIN participants p ON p.rowid = d.recipient_no WHERE d.state = "
            "'quarantine'"
        ),
    },
    "postgresql": {
        "v_inbox": (
            "SELECT sp.id AS space_id, p.address AS recipient, p.id AS recipient_id, d.id AS "
            "delivery_id, m.id AS message_id, m.seq, m.kind, m.sender, m.urgent, m.body, d.state, "
            "d.attempts, coalesce(d.created_at_utc, m.created_at_utc) AS created_at_utc, "
            "d.lease_owner, d.lease_expires_at, CASE WHEN d.state = 'processing' AND "
            "d.lease_expires_at > to_char(now() AT TIME ZONE 'UTC', "
            '\'YYYY-MM-DD"T"HH24:MI:SS.US"Z"\') THEN 1 ELSE 0 END AS lease_live, d.acked_at_utc, '
            "d.last_error, d.quarantine_reason FROM deliveries d JOIN messages m ON m.rowid = "
            "d.rowid >> 20 JOIN spaces sp ON sp.rowid = m.space_no JOIN participants p ON p.rowid ="
            " d.recipient_no"
        ),
        "v_quarantine": (
            "SELECT sp.id AS space_id, p.address AS recipient, d.id AS delivery_id, m.id AS "
            "message_id, m.seq, m.kind, m.sender, m.body, d.attempts, d.quarantine_reason, "
            "d.last_error, coalesce(d.created_at_utc, m.created_at_utc) AS created_at_utc FROM "
            "deliveries d JOIN messages m ON m.rowid = d.rowid >> 20 JOIN spaces sp ON sp.rowid = "
            "m.space_no JOIN participants p ON p.rowid = d.recipient_no WHERE d.state = "
            "'quarantine'"
        ),
    },
}


def _views(dialect: str, views: dict[str, dict[str, str]]) -> None:
    for view, sql in views[dialect].items():
        op.execute(f"DROP VIEW IF EXISTS {view}")
        op.execute(f"CREATE VIEW {view} AS {sql}")


def _rebuild(null: str, value: str) -> None:
    """SQLite cannot change a column's NOT NULL: a new table, every row copied
    with its rowid (``value``: its id, read from the row ``d`` and its message
    ``m``), then its indexes and triggers."""
    op.execute("PRAGMA legacy_alter_table = ON")  # the views name `deliveries`
    try:
        op.execute(TABLE.format(name="deliveries_0024", null=null))
        op.execute(
            f"INSERT INTO deliveries_0024 (rowid, {COLUMNS}) SELECT d.rowid, {value}, "
            + ", ".join(f"d.{c.strip()}" for c in COLUMNS.split(",")[1:])
            + " FROM deliveries d JOIN messages m ON m.rowid = d.rowid >> 20 ORDER BY d.rowid"
        )
        op.execute("DROP TABLE deliveries")  # its indexes and triggers go with it
        op.execute("ALTER TABLE deliveries_0024 RENAME TO deliveries")
    finally:
        op.execute("PRAGMA legacy_alter_table = OFF")
    for ddl in [*INDEXES, *TRIGGERS]:
        op.execute(ddl)


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        _rebuild("", "d.id")
    else:
        op.execute("ALTER TABLE deliveries ALTER COLUMN id DROP NOT NULL")
        op.execute(PG_COMMENTS["null"])
    _views(dialect, VIEWS)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        _rebuild(" NOT NULL", f"coalesce(d.id, {DERIVED})")
    else:
        op.execute(
            f"UPDATE deliveries d SET id = {DERIVED} FROM messages m "
            "WHERE m.rowid = d.rowid >> 20 AND d.id IS NULL"
        )
        op.execute("ALTER TABLE deliveries ALTER COLUMN id SET NOT NULL")
        op.execute(PG_COMMENTS["not null"])
    _views(dialect, VIEWS_0023)
