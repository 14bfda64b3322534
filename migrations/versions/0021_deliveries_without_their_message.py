"""deliveries without their message's columns: the rowid names the message

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-04 00:10:00.000000

Since revision 0017 a delivery's rowid is its message's rowid times 2^20 plus
its place among the message's deliveries, so the row names its message, and
through it its space and its time. Three columns still repeated them in every
delivery: ``message_id`` (26 bytes), ``space_id`` (30) and ``created_at_utc``
(27), 83 of the row's ~142 bytes. ``message_id`` and ``space_id`` go;
``created_at_utc`` stays, NULL for "its message's time", which is every row a
send writes (a NULL is one header byte): only an imported row that names
another time keeps it, so an export stays byte-identical. Readers take the
message by the rowid (``m.rowid = d.rowid >> 20``, or the rowid range of a
message for a reader that starts from the log). The quarantine index is keyed
by the recipient, not the space (an operator's requeue reads the space's
participants). SQLite rebuilds the table (it cannot drop a column that a
foreign key or an index holds), every rowid kept; PostgreSQL drops the columns
in place. The three views that read the columns are written again. Frozen:
the DDL is written out here, never imported from live code.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KEPT = (
    "id, recipient_id, state, created_at_utc, attempts, lease_token, lease_owner, "
    "lease_expires_at, acked_at_utc, last_error, quarantine_reason, lease_process, "
    "lost_lease_token, queued"
)
COLUMNS_0020 = (
    "id, space_id, message_id, recipient_id, state, created_at_utc, attempts, lease_token, "
    "lease_owner, lease_expires_at, acked_at_utc, last_error, quarantine_reason, "
    "lease_process, lost_lease_token, queued"
)
TAIL = (
    "attempts INTEGER DEFAULT '0' NOT NULL, lease_token VARCHAR(40), "
    "lease_owner VARCHAR(200), lease_expires_at VARCHAR(27), acked_at_utc VARCHAR(27), "
    "last_error TEXT, quarantine_reason TEXT, lease_process VARCHAR(300), "
    "lost_lease_token VARCHAR(40), queued BOOLEAN DEFAULT 1 NOT NULL, "
    "CONSTRAINT ck_deliveries_state CHECK (state IN "
    "('ready', 'processing', 'done', 'quarantine')), "
)
TABLE = (
    "CREATE TABLE {name} (id VARCHAR(26) NOT NULL, recipient_id VARCHAR(26) NOT NULL, "
    "state VARCHAR(16) DEFAULT 'ready' NOT NULL, created_at_utc VARCHAR(27), "
    f"{TAIL}"
    "CONSTRAINT fk_deliveries_recipient_id_participants FOREIGN KEY(recipient_id) "
    "REFERENCES participants (id))"
)
TABLE_0020 = (
    "CREATE TABLE {name} (id VARCHAR(26) NOT NULL, space_id VARCHAR(40) NOT NULL, "
    "message_id VARCHAR(26) NOT NULL, recipient_id VARCHAR(26) NOT NULL, "
    "state VARCHAR(16) DEFAULT 'ready' NOT NULL, created_at_utc VARCHAR(27) NOT NULL, "
    f"{TAIL}"
    "CONSTRAINT fk_deliveries_space_id_spaces FOREIGN KEY(space_id) REFERENCES spaces (id), "
    "CONSTRAINT fk_deliveries_recipient_id_participants FOREIGN KEY(recipient_id) "
    "REFERENCES participants (id))"
)
# The rows of deliveries with their message (d, m); m outer or inner alike.
OF_MESSAGE = (
    "m.rowid = d.rowid >> 20 AND d.rowid BETWEEN m.rowid * 1048576 AND m.rowid * 1048576 + 1048575"
)

QUARANTINE = (
    "CREATE INDEX ix_deliveries_quarantine ON deliveries (recipient_id) WHERE state = 'quarantine'"
)
QUARANTINE_0020 = (
    "CREATE INDEX ix_deliveries_quarantine ON deliveries (space_id) WHERE state = 'quarantine'"
)
INDEXES = [
    "CREATE INDEX ix_deliveries_lost_lease_token ON deliveries (lost_lease_token) "
    "WHERE lost_lease_token IS NOT NULL",
    "CREATE INDEX ix_deliveries_leased ON deliveries (recipient_id, lease_expires_at) "
    "WHERE state = 'processing'",
    "CREATE INDEX ix_deliveries_lease_token ON deliveries (lease_token) "
    "WHERE lease_token IS NOT NULL",
    "CREATE INDEX ix_deliveries_ready ON deliveries (recipient_id) "
    "WHERE state = 'ready' AND queued = 1",
]
UPTO = "coalesce((SELECT upto FROM folds WHERE name = 'waiting'), 0)"
STATES = "('ready', 'processing')"
FOLD = (
    f"UPDATE deliveries SET queued = 1 WHERE rowid > {UPTO} AND queued = 0; "
    "UPDATE participants SET waiting = waiting + (SELECT count(*) FROM deliveries w "
    f"WHERE w.rowid > {UPTO} AND w.recipient_id = participants.id AND w.state IN {STATES}) "
    f"WHERE id IN (SELECT recipient_id FROM deliveries WHERE rowid > {UPTO}); "
    "INSERT INTO folds (name, upto) "
    "SELECT 'waiting', coalesce(max(rowid), 0) FROM deliveries WHERE true "
    "ON CONFLICT (name) DO UPDATE SET upto = excluded.upto;"
)
TRIGGERS = [
    "CREATE TRIGGER IF NOT EXISTS deliveries_waiting_insert AFTER INSERT ON deliveries "
    f"WHEN (NEW.rowid >> 20) - ({UPTO} >> 20) >= 32 BEGIN {FOLD} END",
    "CREATE TRIGGER IF NOT EXISTS deliveries_waiting_update AFTER UPDATE OF state ON deliveries "
    f"WHEN (OLD.state IN {STATES}) != (NEW.state IN {STATES}) AND NEW.rowid <= {UPTO} "
    "BEGIN UPDATE participants SET waiting = waiting + "
    f"(CASE WHEN NEW.state IN {STATES} THEN 1 ELSE -1 END) WHERE id = NEW.recipient_id; END",
]

NOW = {
    "sqlite": "(strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000Z')",
    "postgresql": "to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')",
}
V_INBOX = (
    "CREATE VIEW v_inbox AS SELECT {space} AS space_id, p.address AS recipient, "
    "d.recipient_id, d.id AS delivery_id, {message} AS message_id, m.seq, m.kind, m.sender, "
    "m.urgent, m.body, d.state, d.attempts, {time} AS created_at_utc, d.lease_owner, "
    "d.lease_expires_at, CASE WHEN d.state = 'processing' AND d.lease_expires_at > {now} "
    "THEN 1 ELSE 0 END AS lease_live, d.acked_at_utc, d.last_error, d.quarantine_reason "
    "FROM deliveries d JOIN messages m ON m.rowid = d.rowid >> 20 "
    "JOIN participants p ON p.id = d.recipient_id"
)
V_QUARANTINE = (
    "CREATE VIEW v_quarantine AS SELECT {space} AS space_id, p.address AS recipient, "
    "d.id AS delivery_id, {message} AS message_id, m.seq, m.kind, m.sender, m.body, "
    "d.attempts, d.quarantine_reason, d.last_error, {time} AS created_at_utc "
    "FROM deliveries d JOIN messages m ON m.rowid = d.rowid >> 20 "
    "JOIN participants p ON p.id = d.recipient_id WHERE d.state = 'quarantine'"
)
V_INBOXES = (
    "CREATE VIEW v_inboxes AS SELECT x.space_id, x.address, x.status, x.ready, x.processing, "
    "x.done, x.quarantine, x.unread_broadcasts, x.ready + x.unread_broadcasts AS unread, "
    "x.oldest_ready_at, x.lease_owner, x.lease_expires_at, x.bcast_seen FROM ("
    "SELECT p.space_id, p.address, p.status, COALESCE(c.ready, 0) AS ready, "
    "COALESCE(c.processing, 0) AS processing, COALESCE(c.done, 0) AS done, "
    "COALESCE(c.quarantine, 0) AS quarantine, (SELECT COUNT(*) FROM messages b "
    "WHERE b.space_id = p.space_id AND b.bcast_no IS NOT NULL AND b.bcast_no > p.bcast_seen "
    "AND b.sender <> p.address) AS unread_broadcasts, c.oldest_ready_at, "
    "(SELECT l.lease_owner FROM deliveries l WHERE l.recipient_id = p.id "
    "AND l.state = 'processing' ORDER BY l.lease_expires_at DESC LIMIT 1) AS lease_owner, "
    "c.lease_expires_at, p.bcast_seen FROM participants p LEFT JOIN (SELECT d.recipient_id, "
    "SUM(CASE WHEN d.state = 'ready' THEN 1 ELSE 0 END) AS ready, "
    "SUM(CASE WHEN d.state = 'processing' THEN 1 ELSE 0 END) AS processing, "
    "SUM(CASE WHEN d.state = 'done' THEN 1 ELSE 0 END) AS done, "
    "SUM(CASE WHEN d.state = 'quarantine' THEN 1 ELSE 0 END) AS quarantine, "
    "MIN(CASE WHEN d.state = 'ready' THEN {time} END) AS oldest_ready_at, "
    "MAX(CASE WHEN d.state = 'processing' THEN d.lease_expires_at END) AS lease_expires_at "
    "FROM deliveries d {join}GROUP BY d.recipient_id) c ON c.recipient_id = p.id) x"
)
NEW = {
    "space": "m.space_id",
    "message": "m.id",
    "time": "coalesce(d.created_at_utc, m.created_at_utc)",
    "join": "JOIN messages m ON m.rowid = d.rowid >> 20 ",
}
OLD = {"space": "d.space_id", "message": "d.message_id", "time": "d.created_at_utc", "join": ""}


VIEWS = ("v_inbox", "v_quarantine", "v_inboxes")
# The columns a rebuild copies as they are: attempts to queued.
AS_THEY_ARE = ", ".join("d." + c.strip() for c in KEPT.split(",")[4:])


def _drop_views() -> None:
    for view in VIEWS:  # they read the columns: dropped before, written again after
        op.execute(f"DROP VIEW IF EXISTS {view}")


def _views(dialect: str, names: dict[str, str]) -> None:
    op.execute(V_INBOX.format(now=NOW[dialect], **names))
    op.execute(V_QUARANTINE.format(**names))
    op.execute(V_INBOXES.format(**names))


def _rebuild(table: str, columns: str, head: str, quarantine: str) -> None:
    """SQLite cannot drop a column a foreign key or an index holds: a new table,
    every row copied with its rowid (``head``: the columns before attempts, read
    from the row ``d`` and its message ``m``), then its indexes and triggers."""
    op.execute("PRAGMA legacy_alter_table = ON")  # the other views name `deliveries`
    try:
        op.execute(table.format(name="deliveries_0021"))
        op.execute(
            f"INSERT INTO deliveries_0021 (rowid, {columns}) SELECT d.rowid, {head}, "
            f"{AS_THEY_ARE} FROM deliveries d JOIN messages m ON {OF_MESSAGE} ORDER BY d.rowid"
        )
        op.execute("DROP TABLE deliveries")  # its indexes and triggers go with it
        op.execute("ALTER TABLE deliveries_0021 RENAME TO deliveries")
    finally:
        op.execute("PRAGMA legacy_alter_table = OFF")
    for ddl in [*INDEXES, quarantine, *TRIGGERS]:
        op.execute(ddl)


# A row whose columns disagree with its rowid's message: none is written since
# revision 0017 (the one writer takes them from the message); refused, not lost.
MISMATCH = (
    "SELECT count(*) FROM deliveries d LEFT JOIN messages m ON m.rowid = d.rowid >> 20 "
    "WHERE m.id IS NULL OR m.id <> d.message_id OR m.space_id <> d.space_id"
)

PG_COMMENTS = [
    "COMMENT ON COLUMN deliveries.created_at_utc IS 'NULL: its message''s time (every row a "
    "send writes); set only where an imported row names another time (revision 0021)'",
    "COMMENT ON TABLE deliveries IS 'Inbox queues: one row per message per recipient "
    "(S13-S16). No primary key index: the rowid (an identity column on PostgreSQL) is the "
    "row''s key: its message''s rowid times 2^20 plus its place among the message''s "
    "deliveries (revision 0017). Its message, and so its space and time, are that rowid''s: "
    "no column repeats them (revision 0021).'",
]
PG_COMMENTS_0020 = [
    "COMMENT ON COLUMN deliveries.created_at_utc IS 'the message''s time: FIFO key with id'",
    "COMMENT ON COLUMN deliveries.message_id IS 'the message delivered; no index and no "
    "foreign key: its deliveries are the rowids from its rowid times 2^20 on (revision 0017)'",
    "COMMENT ON TABLE deliveries IS 'Inbox queues: one row per message per recipient "
    "(S13-S16). No primary key index: the rowid (an identity column on PostgreSQL) is the "
    "row''s key: its message''s rowid times 2^20 plus its place among the message''s "
    "deliveries (revision 0017).'",
]


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    bad = op.get_bind().exec_driver_sql(MISMATCH).scalar()
    if bad:
        raise RuntimeError(
            f"revision 0021: {bad} deliveries do not match the message their rowid names; "
            "the store is left at revision 0020"
        )
    _drop_views()
    if dialect == "sqlite":
        _rebuild(
            TABLE,
            KEPT,
            "d.id, d.recipient_id, d.state, CASE WHEN d.created_at_utc = m.created_at_utc "
            "THEN NULL ELSE d.created_at_utc END",
            QUARANTINE,
        )
    else:
        op.execute("DROP INDEX ix_deliveries_quarantine")
        op.execute("ALTER TABLE deliveries DROP COLUMN space_id, DROP COLUMN message_id")
        op.execute("ALTER TABLE deliveries ALTER COLUMN created_at_utc DROP NOT NULL")
        op.execute(
            "UPDATE deliveries d SET created_at_utc = NULL FROM messages m "
            "WHERE m.rowid = d.rowid >> 20 AND d.created_at_utc = m.created_at_utc"
        )
        op.execute(QUARANTINE)
        for ddl in PG_COMMENTS:
            op.execute(ddl)
    _views(dialect, NEW)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    _drop_views()
    if dialect == "sqlite":
        _rebuild(
            TABLE_0020,
            COLUMNS_0020,
            "d.id, m.space_id, m.id, d.recipient_id, d.state, "
            "coalesce(d.created_at_utc, m.created_at_utc)",
            QUARANTINE_0020,
        )
    else:
        op.execute("DROP INDEX ix_deliveries_quarantine")
        op.execute(
            "ALTER TABLE deliveries ADD COLUMN space_id VARCHAR(40), "
            "ADD COLUMN message_id VARCHAR(26)"
        )
        op.execute(
            "UPDATE deliveries d SET space_id = m.space_id, message_id = m.id, "
            "created_at_utc = coalesce(d.created_at_utc, m.created_at_utc) "
            "FROM messages m WHERE m.rowid = d.rowid >> 20"
        )
        for column in ("space_id", "message_id", "created_at_utc"):
            op.execute(f"ALTER TABLE deliveries ALTER COLUMN {column} SET NOT NULL")
        op.execute(
            "ALTER TABLE deliveries ADD CONSTRAINT fk_deliveries_space_id_spaces "
            "FOREIGN KEY (space_id) REFERENCES spaces (id)"
        )
        op.execute(QUARANTINE_0020)
        for ddl in PG_COMMENTS_0020:
            op.execute(ddl)
    _views(dialect, OLD)
