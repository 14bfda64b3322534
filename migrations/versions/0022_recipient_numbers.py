"""deliveries name their recipient by a number: the participant's rowid

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-04 04:10:00.000000

A delivery held its recipient's id, a 26-byte ULID, in the row and again in
every inbox index: the ready index (one entry per message waiting), the leases
and quarantine. The participants row already has a number: its rowid on
SQLite, and on PostgreSQL an identity column ``rowid`` added here (with its
unique index), as the log has one since revision 0010. ``recipient_id`` goes;
``recipient_no`` (an integer, one or two bytes in a record) takes its place in
the row and in the three indexes. A statement that names an inbox by its
participant's id reads the number with one seek of the participants key. No
foreign key: a rowid is no declared key on SQLite; the one writer of
deliveries takes the number from the participants row, and only a purge
deletes participants, with their space's deliveries.

SQLite rebuilds the table (it cannot drop a column a foreign key or an index
holds), every rowid kept; PostgreSQL adds the column, fills it and drops the
old one (its indexes and foreign key go with it). The views that read the
column, the waiting triggers (SQLite) and the waiting function (PostgreSQL)
are written again. A delivery whose recipient is no participant (none can be
written: the foreign key refused it) is refused with one line, the store left
at revision 0021. Frozen: the DDL is written out here, never imported from
live code.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

REST = (
    "state, created_at_utc, attempts, lease_token, lease_owner, lease_expires_at, "
    "acked_at_utc, last_error, quarantine_reason, lease_process, lost_lease_token, queued"
)
TAIL = (
    "state VARCHAR(16) DEFAULT 'ready' NOT NULL, created_at_utc VARCHAR(27), "
    "attempts INTEGER DEFAULT '0' NOT NULL, lease_token VARCHAR(40), "
    "lease_owner VARCHAR(200), lease_expires_at VARCHAR(27), acked_at_utc VARCHAR(27), "
    "last_error TEXT, quarantine_reason TEXT, lease_process VARCHAR(300), "
    "lost_lease_token VARCHAR(40), queued BOOLEAN DEFAULT 1 NOT NULL, "
    "CONSTRAINT ck_deliveries_state CHECK (state IN "
    "('ready', 'processing', 'done', 'quarantine'))"
)
TABLE = f"CREATE TABLE {{name}} (id VARCHAR(26) NOT NULL, recipient_no INTEGER NOT NULL, {TAIL})"
TABLE_0021 = (
    "CREATE TABLE {name} (id VARCHAR(26) NOT NULL, recipient_id VARCHAR(26) NOT NULL, "
    f"{TAIL}, "
    "CONSTRAINT fk_deliveries_recipient_id_participants FOREIGN KEY(recipient_id) "
    "REFERENCES participants (id))"
)


def _indexes(recipient: str) -> list[str]:
    return [
        "CREATE INDEX ix_deliveries_lost_lease_token ON deliveries (lost_lease_token) "
        "WHERE lost_lease_token IS NOT NULL",
        f"CREATE INDEX ix_deliveries_leased ON deliveries ({recipient}, lease_expires_at) "
        "WHERE state = 'processing'",
        "CREATE INDEX ix_deliveries_lease_token ON deliveries (lease_token) "
        "WHERE lease_token IS NOT NULL",
        f"CREATE INDEX ix_deliveries_quarantine ON deliveries ({recipient}) "
        "WHERE state = 'quarantine'",
    ]


def _ready(dialect: str, recipient: str) -> list[str]:
    if dialect == "sqlite":
        return [
            f"CREATE INDEX ix_deliveries_ready ON deliveries ({recipient}) "
            "WHERE state = 'ready' AND queued = 1"
        ]
    return [
        f"CREATE INDEX ix_deliveries_ready ON deliveries ({recipient}) "
        "WHERE state = 'ready' AND queued = 1",
        f"CREATE INDEX ix_deliveries_ready_rowid ON deliveries ({recipient}, rowid) "
        "WHERE state = 'ready'",
    ]


# How a delivery `w`/`l`/`d` names the participant `p` (or the row `participants`).
NEW = {"w": "w.recipient_no = {p}.rowid", "key": "recipient_no", "of": "rowid"}
OLD = {"w": "w.recipient_id = {p}.id", "key": "recipient_id", "of": "id"}

UPTO = "coalesce((SELECT upto FROM folds WHERE name = 'waiting'), 0)"
STATES = "('ready', 'processing')"


def _fold(names: dict[str, str]) -> str:
    return (
        f"UPDATE deliveries SET queued = 1 WHERE rowid > {UPTO} AND queued = 0; "
        "UPDATE participants SET waiting = waiting + (SELECT count(*) FROM deliveries w "
        f"WHERE w.rowid > {UPTO} AND {names['w'].format(p='participants')} "
        f"AND w.state IN {STATES}) "
        f"WHERE {names['of']} IN (SELECT {names['key']} FROM deliveries WHERE rowid > {UPTO}); "
        "INSERT INTO folds (name, upto) "
        "SELECT 'waiting', coalesce(max(rowid), 0) FROM deliveries WHERE true "
        "ON CONFLICT (name) DO UPDATE SET upto = excluded.upto;"
    )


def _triggers(names: dict[str, str]) -> list[str]:
    """SQLite's waiting triggers (revision 0019's, the recipient named as ``names``)."""
    fold = _fold(names)
    return [
        "CREATE TRIGGER IF NOT EXISTS deliveries_waiting_insert AFTER INSERT ON deliveries "
        f"WHEN (NEW.rowid >> 20) - ({UPTO} >> 20) >= 32 BEGIN {fold} END",
        "CREATE TRIGGER IF NOT EXISTS deliveries_waiting_update AFTER UPDATE OF state "
        f"ON deliveries WHEN (OLD.state IN {STATES}) != (NEW.state IN {STATES}) "
        f"AND NEW.rowid <= {UPTO} BEGIN UPDATE participants SET waiting = waiting + "
        f"(CASE WHEN NEW.state IN {STATES} THEN 1 ELSE -1 END) "
        f"WHERE {names['of']} = NEW.{names['key']}; END",
        f"CREATE TRIGGER IF NOT EXISTS spaces_waiting AFTER DELETE ON spaces BEGIN {fold} END",
    ]


def _pg_waiting(names: dict[str, str]) -> str:
    where = f"WHERE {names['of']} = NEW.{names['key']}"
    return (
        "CREATE OR REPLACE FUNCTION broker_waiting() RETURNS trigger AS $$ BEGIN "
        f"IF TG_OP = 'INSERT' AND NEW.state IN {STATES} THEN "
        f"UPDATE participants SET waiting = waiting + 1 {where}; "
        f"ELSIF TG_OP = 'UPDATE' AND (OLD.state IN {STATES}) <> (NEW.state IN {STATES}) THEN "
        "UPDATE participants SET waiting = waiting + "
        f"(CASE WHEN NEW.state IN {STATES} THEN 1 ELSE -1 END) {where}; "
        "END IF; RETURN NULL; END $$ LANGUAGE plpgsql"
    )


NOW = {
    "sqlite": "(strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000Z')",
    "postgresql": "to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')",
}
V_INBOX = (
    "CREATE VIEW v_inbox AS SELECT m.space_id AS space_id, p.address AS recipient, "
    "p.id AS recipient_id, d.id AS delivery_id, m.id AS message_id, m.seq, m.kind, m.sender, "
    "m.urgent, m.body, d.state, d.attempts, "
    "coalesce(d.created_at_utc, m.created_at_utc) AS created_at_utc, d.lease_owner, "
    "d.lease_expires_at, CASE WHEN d.state = 'processing' AND d.lease_expires_at > {now} "
    "THEN 1 ELSE 0 END AS lease_live, d.acked_at_utc, d.last_error, d.quarantine_reason "
    "FROM deliveries d JOIN messages m ON m.rowid = d.rowid >> 20 "
    "JOIN participants p ON p.{of} = d.{key}"
)
V_QUARANTINE = (
    "CREATE VIEW v_quarantine AS SELECT m.space_id AS space_id, p.address AS recipient, "
    "d.id AS delivery_id, m.id AS message_id, m.seq, m.kind, m.sender, m.body, "
    "d.attempts, d.quarantine_reason, d.last_error, "
    "coalesce(d.created_at_utc, m.created_at_utc) AS created_at_utc "
    "FROM deliveries d JOIN messages m ON m.rowid = d.rowid >> 20 "
    "JOIN participants p ON p.{of} = d.{key} WHERE d.state = 'quarantine'"
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
    "(SELECT l.lease_owner FROM deliveries l WHERE l.{key} = p.{of} "
    "AND l.state = 'processing' ORDER BY l.lease_expires_at DESC LIMIT 1) AS lease_owner, "
    "c.lease_expires_at, p.bcast_seen FROM participants p LEFT JOIN (SELECT d.{key}, "
    "SUM(CASE WHEN d.state = 'ready' THEN 1 ELSE 0 END) AS ready, "
    "SUM(CASE WHEN d.state = 'processing' THEN 1 ELSE 0 END) AS processing, "
    "SUM(CASE WHEN d.state = 'done' THEN 1 ELSE 0 END) AS done, "
    "SUM(CASE WHEN d.state = 'quarantine' THEN 1 ELSE 0 END) AS quarantine, "
    "MIN(CASE WHEN d.state = 'ready' THEN coalesce(d.created_at_utc, m.created_at_utc) END) "
    "AS oldest_ready_at, "
    "MAX(CASE WHEN d.state = 'processing' THEN d.lease_expires_at END) AS lease_expires_at "
    "FROM deliveries d JOIN messages m ON m.rowid = d.rowid >> 20 GROUP BY d.{key}) "
    "c ON c.{key} = p.{of}) x"
)
V_PARTICIPANTS = (
    "CREATE VIEW v_participants AS SELECT p.space_id, p.id, p.address, "
    "p.codename, p.agent, p.run_id, p.step, p.parent, p.role, p.archetype, "
    "p.task, p.is_lead, p.messaging, p.status, CASE WHEN p.status IN ('running', "
    "'idle') THEN 1 ELSE 0 END AS live, {waiting}, p.bcast_seen, "
    "p.joined_at_utc, p.left_at_utc, p.last_seen_utc, CASE WHEN p.status = "
    "'left' THEN (SELECT e.reason FROM participant_events e WHERE "
    "e.participant_id = p.id AND e.event = 'left' ORDER BY e.at_utc DESC, e.id "
    "DESC LIMIT 1) END AS left_reason FROM participants p"
)
VIEWS = ("v_inbox", "v_quarantine", "v_inboxes", "v_participants")


def _waiting(dialect: str, names: dict[str, str]) -> str:
    if dialect != "sqlite":
        return "p.waiting"
    return (
        f"p.waiting + (SELECT count(*) FROM deliveries w WHERE w.rowid > {UPTO} "
        f"AND {names['w'].format(p='p')} AND w.state IN {STATES}) AS waiting"
    )


def _views(dialect: str, names: dict[str, str]) -> None:
    keys = {"key": names["key"], "of": names["of"]}
    op.execute(V_INBOX.format(now=NOW[dialect], **keys))
    op.execute(V_QUARANTINE.format(**keys))
    op.execute(V_INBOXES.format(**keys))
    op.execute(V_PARTICIPANTS.format(waiting=_waiting(dialect, names)))


def _drop_views() -> None:
    for view in VIEWS:  # they read the column: dropped before, written again after
        op.execute(f"DROP VIEW IF EXISTS {view}")


def _rebuild(table: str, key: str, value: str, names: dict[str, str]) -> None:
    """SQLite cannot drop a column a foreign key or an index holds: a new table,
    every row copied with its rowid (``value``: the recipient, read from the
    row ``d`` and its participant ``p``), then its indexes and triggers."""
    op.execute("DROP TRIGGER IF EXISTS spaces_waiting")  # it names the column too
    op.execute("PRAGMA legacy_alter_table = ON")  # the other views name `deliveries`
    try:
        op.execute(table.format(name="deliveries_0022"))
        old = "recipient_id" if key == "recipient_no" else "recipient_no"
        of = "id" if key == "recipient_no" else "rowid"
        op.execute(
            f"INSERT INTO deliveries_0022 (rowid, id, {key}, {REST}) "
            f"SELECT d.rowid, d.id, {value}, "
            + ", ".join(f"d.{c.strip()}" for c in REST.split(","))
            + f" FROM deliveries d JOIN participants p ON p.{of} = d.{old} ORDER BY d.rowid"
        )
        op.execute("DROP TABLE deliveries")  # its indexes and triggers go with it
        op.execute("ALTER TABLE deliveries_0022 RENAME TO deliveries")
    finally:
        op.execute("PRAGMA legacy_alter_table = OFF")
    for ddl in [*_indexes(key), *_ready("sqlite", key), *_triggers(names)]:
        op.execute(ddl)


# A delivery whose recipient is no participant: none is written (the foreign
# key refused it); refused here, not lost by the rebuild's join.
ORPHANS = (
    "SELECT count(*) FROM deliveries d WHERE NOT EXISTS "
    "(SELECT 1 FROM participants p WHERE p.id = d.recipient_id)"
)
PG_DELIVERY_INDEXES = (
    "ix_deliveries_ready",
    "ix_deliveries_ready_rowid",
    "ix_deliveries_leased",
    "ix_deliveries_quarantine",
    "ix_deliveries_lost_lease_token",
    "ix_deliveries_lease_token",
)
PG_COMMENTS = [
    "COMMENT ON COLUMN deliveries.recipient_no IS 'the recipient: its participants row''s "
    "rowid (an identity column on PostgreSQL), a number where its 26-byte id was, in the "
    "row and in the inbox indexes (revision 0022); the views name it by id "
    "(v_inbox.recipient_id)'",
    "COMMENT ON TABLE deliveries IS 'Inbox queues: one row per message per recipient "
    "(S13-S16). No primary key index: the rowid (an identity column on PostgreSQL) is the "
    "row''s key: its message''s rowid times 2^20 plus its place among the message''s "
    "deliveries (revision 0017). Its message, and so its space and time, are that rowid''s: "
    "no column repeats them (revision 0021). Its recipient is a participant''s number "
    "(revision 0022).'",
]
PG_COMMENTS_0021 = [
    "COMMENT ON TABLE deliveries IS 'Inbox queues: one row per message per recipient "
    "(S13-S16). No primary key index: the rowid (an identity column on PostgreSQL) is the "
    "row''s key: its message''s rowid times 2^20 plus its place among the message''s "
    "deliveries (revision 0017). Its message, and so its space and time, are that rowid''s: "
    "no column repeats them (revision 0021).'",
]


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    bad = op.get_bind().exec_driver_sql(ORPHANS).scalar()
    if bad:
        raise RuntimeError(
            f"revision 0022: {bad} deliveries name a recipient that is no participant; "
            "the store is left at revision 0021"
        )
    _drop_views()
    if dialect == "sqlite":
        _rebuild(TABLE, "recipient_no", "p.rowid", NEW)
    else:
        op.execute(
            "ALTER TABLE participants ADD COLUMN rowid BIGINT GENERATED BY DEFAULT AS IDENTITY"
        )
        op.execute("CREATE UNIQUE INDEX ix_participants_rowid ON participants (rowid)")
        op.execute("ALTER TABLE deliveries ADD COLUMN recipient_no INTEGER")
        op.execute(
            "UPDATE deliveries d SET recipient_no = p.rowid FROM participants p "
            "WHERE p.id = d.recipient_id"
        )
        op.execute("ALTER TABLE deliveries ALTER COLUMN recipient_no SET NOT NULL")
        for index in PG_DELIVERY_INDEXES:
            op.execute(f"DROP INDEX IF EXISTS {index}")
        op.execute("ALTER TABLE deliveries DROP COLUMN recipient_id")  # and its foreign key
        for ddl in [*_indexes("recipient_no"), *_ready(dialect, "recipient_no")]:
            op.execute(ddl)
        op.execute(_pg_waiting(NEW))
        for ddl in PG_COMMENTS:
            op.execute(ddl)
    _views(dialect, NEW)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    _drop_views()
    if dialect == "sqlite":
        _rebuild(TABLE_0021, "recipient_id", "p.id", OLD)
    else:
        op.execute("ALTER TABLE deliveries ADD COLUMN recipient_id VARCHAR(26)")
        op.execute(
            "UPDATE deliveries d SET recipient_id = p.id FROM participants p "
            "WHERE p.rowid = d.recipient_no"
        )
        op.execute("ALTER TABLE deliveries ALTER COLUMN recipient_id SET NOT NULL")
        op.execute(
            "ALTER TABLE deliveries ADD CONSTRAINT fk_deliveries_recipient_id_participants "
            "FOREIGN KEY (recipient_id) REFERENCES participants (id)"
        )
        for index in PG_DELIVERY_INDEXES:
            op.execute(f"DROP INDEX IF EXISTS {index}")
        op.execute("ALTER TABLE deliveries DROP COLUMN recipient_no")
        for ddl in [*_indexes("recipient_id"), *_ready(dialect, "recipient_id")]:
            op.execute(ddl)
        op.execute(_pg_waiting(OLD))
        op.execute("DROP INDEX ix_participants_rowid")
        op.execute("ALTER TABLE participants DROP COLUMN rowid")
        for ddl in PG_COMMENTS_0021:
            op.execute(ddl)
    _views(dialect, OLD)
