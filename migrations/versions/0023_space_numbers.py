"""the log names its space by a number: the space's rowid

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-04 04:40:00.000000

Every log row held its space's id, 30 bytes of text, in the row and again in
the log's key (space, seq) that every read of a space's log seeks: about 60
bytes of each message. The spaces row already has a number: its rowid on
SQLite, and on PostgreSQL an identity column ``rowid`` added here (with its
unique index), as the log and the participants have one. ``space_id`` goes;
``space_no`` (an integer, a byte in a record) takes its place in the row, in
the key and in the log's partial indexes. A statement that names a space by
its id reads the number with one seek of the spaces key. No foreign key: a
rowid is no declared key on SQLite; the one writer of the log takes the
number from the spaces row, and a space's row goes only with its log (a
purge).

SQLite rebuilds the table (it cannot drop a column a foreign key or an index
holds), every rowid kept, so the search index and every delivery still name
their rows; its triggers (append-only, the usage fold, the search index) are
written again, and the space delete's usage fold with them. PostgreSQL adds
the column, fills it (its append-only trigger held off for that one UPDATE)
and drops the old one; its append-only and usage functions are written
again. The views that read the column are written again, with the same
columns. A log row whose space is no space row (none can be written: the
foreign key refused it) is refused with one line, the store left at revision
0022. Frozen: the DDL is written out here, never imported from live code.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

REST = (
    "seq, kind, sender, recipients, body, urgent, via, ref, reached, not_reached, reached_n, "
    "bcast_no, idempotency_key, size_bytes, created_at_utc, thread, reply_to, importance, "
    "ack_required"
)
TAIL = (
    "seq INTEGER NOT NULL, kind VARCHAR(16) NOT NULL, sender VARCHAR(200) NOT NULL, "
    "recipients TEXT DEFAULT '[]' NOT NULL, body TEXT DEFAULT '' NOT NULL, "
    "urgent BOOLEAN DEFAULT 0 NOT NULL, via VARCHAR(8), ref VARCHAR(26), "
    "reached TEXT DEFAULT '[]' NOT NULL, not_reached TEXT DEFAULT '[]' NOT NULL, "
    "reached_n INTEGER DEFAULT '0' NOT NULL, bcast_no INTEGER, idempotency_key VARCHAR(200), "
    "size_bytes INTEGER DEFAULT '0' NOT NULL, created_at_utc VARCHAR(27) NOT NULL, "
    "thread VARCHAR(64), reply_to VARCHAR(26), importance VARCHAR(8), ack_required BOOLEAN, "
    "CONSTRAINT ck_messages_kind CHECK (kind IN ('direct', 'broadcast', 'post', 'directive', "
    "'retract', 'operator', 'seen'))"
)
TABLE = (
    "CREATE TABLE {name} (id VARCHAR(26) NOT NULL, space_no INTEGER NOT NULL, "
    f"{TAIL}, CONSTRAINT uq_messages_space_no_seq UNIQUE (space_no, seq))"
)
TABLE_0022 = (
    "CREATE TABLE {name} (id VARCHAR(26) NOT NULL, space_id VARCHAR(40) NOT NULL, "
    f"{TAIL}, CONSTRAINT fk_messages_space_id_spaces FOREIGN KEY(space_id) REFERENCES "
    "spaces (id), CONSTRAINT uq_messages_space_id_seq UNIQUE (space_id, seq))"
)

# How the log names its space: the column, the space's key it holds, and the
# space id of a row (OLD/NEW) in a trigger.
NEW = {
    "key": "space_no",
    "of": "rowid",
    "id": "(SELECT id FROM spaces WHERE rowid = {row}.space_no)",
}
OLD = {"key": "space_id", "of": "id", "id": "{row}.space_id"}


def _indexes(key: str) -> list[str]:
    return [
        f"CREATE UNIQUE INDEX ix_messages_{key}_sender_idempotency_key ON messages "
        f"({key}, sender, idempotency_key) WHERE idempotency_key IS NOT NULL",
        f"CREATE INDEX ix_messages_{key}_bcast_no ON messages ({key}, bcast_no) "
        "WHERE bcast_no IS NOT NULL",
        f"CREATE INDEX ix_messages_{key}_kind_seq ON messages ({key}, kind, seq) "
        "WHERE kind IN ('post', 'directive', 'retract')",
        f"CREATE INDEX ix_messages_{key}_thread_seq ON messages ({key}, thread, seq) "
        "WHERE thread IS NOT NULL",
    ]


REF = "CREATE INDEX ix_messages_ref ON messages (ref) WHERE ref IS NOT NULL"
UPTO = "coalesce((SELECT upto FROM folds WHERE name = 'sender_usage'), 0)"
INDEXED = "coalesce((SELECT max(id) FROM messages_fts_docsize), 0)"


def _fold(names: dict[str, str]) -> str:
    """SQLite's usage fold (revision 0020's, the space named as ``names``)."""
    if names["key"] == "space_no":
        space = "SELECT s.id, {cols} FROM messages m JOIN spaces s ON s.rowid = m.space_no "
        where, group = f"WHERE m.rowid > {UPTO} GROUP BY s.id", ", m.sender"
        size, sender = "m.size_bytes", "m.sender"
    else:
        space = "SELECT space_id, {cols} FROM messages "
        where, group = f"WHERE rowid > {UPTO} GROUP BY space_id", ", sender"
        size, sender = "size_bytes", "sender"
    return (
        "INSERT INTO space_usage (space_id, log_bytes) "
        + space.format(cols=f"sum({size})")
        + f"{where} "
        "ON CONFLICT (space_id) DO UPDATE SET log_bytes = log_bytes + excluded.log_bytes; "
        "INSERT INTO sender_usage (space_id, sender, log_bytes, messages) "
        + space.format(cols=f"{sender}, sum({size}), count(*)")
        + f"{where}{group} "
        "ON CONFLICT (space_id, sender) DO UPDATE SET "
        "log_bytes = log_bytes + excluded.log_bytes, messages = messages + excluded.messages; "
        "INSERT INTO folds (name, upto) "
        "SELECT 'sender_usage', coalesce(max(rowid), 0) FROM messages WHERE true "
        "ON CONFLICT (name) DO UPDATE SET upto = excluded.upto;"
    )


def _triggers(names: dict[str, str]) -> list[str]:
    """SQLite's triggers on the log (and the space delete's usage fold)."""
    key, fold = names["key"], _fold(names)
    return [
        "CREATE TRIGGER IF NOT EXISTS messages_no_update BEFORE UPDATE ON messages "
        "BEGIN SELECT RAISE(ABORT, 'append-only: messages refuses UPDATE'); END",
        "CREATE TRIGGER IF NOT EXISTS messages_no_delete BEFORE DELETE ON messages "
        "WHEN NOT EXISTS (SELECT 1 FROM purging WHERE space_id = "
        f"{names['id'].format(row='OLD')}) "
        "BEGIN SELECT RAISE(ABORT, 'append-only: messages refuses DELETE'); END",
        "CREATE TRIGGER IF NOT EXISTS messages_no_replace BEFORE INSERT ON messages "
        f"WHEN EXISTS (SELECT 1 FROM messages WHERE {key} = NEW.{key} AND seq = NEW.seq) "
        f"OR EXISTS (SELECT 1 FROM messages WHERE {key} = NEW.{key} AND sender = NEW.sender "
        "AND idempotency_key = NEW.idempotency_key) "
        "BEGIN SELECT RAISE(ABORT, 'append-only: messages refuses REPLACE'); END",
        "CREATE TRIGGER IF NOT EXISTS messages_sender_usage AFTER INSERT ON messages "
        f"WHEN NEW.rowid - {UPTO} >= 32 BEGIN {fold} END",
        "CREATE TRIGGER IF NOT EXISTS spaces_sender_usage AFTER DELETE ON spaces "
        f"BEGIN {fold} DELETE FROM sender_usage WHERE space_id = OLD.id; "
        "DELETE FROM space_usage WHERE space_id = OLD.id; END",
        "CREATE TRIGGER IF NOT EXISTS messages_fts_insert AFTER INSERT ON messages "
        f"WHEN NEW.rowid - {INDEXED} >= 32 BEGIN "
        "INSERT INTO messages_fts (rowid, body, thread) SELECT rowid, body, thread "
        f"FROM messages WHERE rowid > {INDEXED}; END",
        "CREATE TRIGGER IF NOT EXISTS messages_fts_delete AFTER DELETE ON messages "
        f"WHEN OLD.rowid <= {INDEXED} BEGIN "
        "INSERT INTO messages_fts (messages_fts, rowid, body, thread) "
        "VALUES ('delete', OLD.rowid, OLD.body, OLD.thread); END",
    ]


def _pg_functions(names: dict[str, str]) -> list[str]:
    if names["key"] == "space_no":
        append_only = (
            "CREATE OR REPLACE FUNCTION broker_append_only() RETURNS trigger AS $$ "
            "DECLARE s text; BEGIN IF TG_OP = 'DELETE' THEN "
            "IF TG_TABLE_NAME = 'messages' THEN "
            "s := (SELECT id FROM spaces WHERE rowid = OLD.space_no); "
            "ELSE s := OLD.space_id; END IF; "
            "IF EXISTS (SELECT 1 FROM purging WHERE space_id = s) THEN RETURN OLD; END IF; "
            "END IF; "
        )
    else:
        append_only = (
            "CREATE OR REPLACE FUNCTION broker_append_only() RETURNS trigger AS $$ BEGIN "
            "IF TG_OP = 'DELETE' AND EXISTS (SELECT 1 FROM purging WHERE space_id = OLD.space_id) "
            "THEN RETURN OLD; END IF; "
        )
    append_only += (
        "RAISE EXCEPTION 'append-only: % refuses %', TG_TABLE_NAME, TG_OP; END $$ LANGUAGE plpgsql"
    )
    space = names["id"].format(row="NEW")
    usage = (
        "CREATE OR REPLACE FUNCTION broker_sender_usage() RETURNS trigger AS $$ BEGIN "
        "IF TG_TABLE_NAME = 'spaces' THEN "
        "DELETE FROM sender_usage WHERE space_id = OLD.id; "
        "DELETE FROM space_usage WHERE space_id = OLD.id; RETURN NULL; END IF; "
        "INSERT INTO sender_usage (space_id, sender, log_bytes, messages) "
        f"VALUES ({space}, NEW.sender, NEW.size_bytes, 1) "
        "ON CONFLICT (space_id, sender) DO UPDATE SET "
        "log_bytes = sender_usage.log_bytes + excluded.log_bytes, "
        "messages = sender_usage.messages + 1; "
        "INSERT INTO space_usage (space_id, log_bytes) "
        f"VALUES ({space}, NEW.size_bytes) "
        "ON CONFLICT (space_id) DO UPDATE SET "
        "log_bytes = space_usage.log_bytes + excluded.log_bytes; "
        "RETURN NULL; END $$ LANGUAGE plpgsql"
    )
    return [append_only, usage]


PG_COMMENTS = {
    "space_no": [
        "COMMENT ON COLUMN messages.space_no IS 'the space: its spaces row''s rowid (an "
        "identity column on PostgreSQL), a number where its 30-byte id was, in the row and "
        "in the log''s keys (revision 0023); the views name it by id (v_log.space_id)'",
        "COMMENT ON COLUMN messages.id IS 'ULID; the stable id consumers de-duplicate by. No "
        "index: its random part starts with the row''s seq, so (space_no, seq) finds it (an "
        "imported id naming another seq has a row in message_aliases; revision 0018)'",
        "COMMENT ON TABLE messages IS 'The append-only log (S7, S11). Its space is a number "
        "(revision 0023).'",
    ],
    "space_id": [
        "COMMENT ON COLUMN messages.id IS 'ULID; the stable id consumers de-duplicate by. No "
        "index: its random part starts with the row''s seq, so (space_id, seq) finds it (an "
        "imported id naming another seq has a row in message_aliases; revision 0018)'",
        "COMMENT ON TABLE messages IS 'The append-only log (S7, S11).'",
    ],
}

VIEWS: dict[str, dict[str, str]] = {
    "sqlite": {
        "v_log": (
            "SELECT sp.id AS space_id, m.seq, m.id, m.created_at_utc, m.kind, m.sender, "
            "m.recipients, m.body, m.urgent, m.via, m.ref, m.reached, m.not_reached, m.reached_n, "
            "m.bcast_no, CASE WHEN m.kind = 'seen' THEN 'receipt' WHEN m.reached_n > 0 AND "
            "m.not_reached = '[]' THEN 'delivered' WHEN m.reached_n > 0 THEN 'partial' WHEN "
            "m.not_reached <> '[]' THEN 'reached_nobody' ELSE 'logged' END AS outcome FROM messages"
            " m JOIN spaces sp ON sp.rowid = m.space_no"
        ),
        "v_not_reached": (
            "SELECT sp.id AS space_id, m.seq, m.id AS message_id, m.created_at_utc, m.kind, "
            "m.sender, json_extract(j.value, '$.address') AS address, json_extract(j.value, "
            "'$.reason') AS reason, m.reached_n FROM spaces sp JOIN messages m ON m.space_no = "
            "sp.rowid, json_each(m.not_reached) j"
        ),
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
        "v_inboxes": (
            "SELECT x.space_id, x.address, x.status, x.ready, x.processing, x.done, x.quarantine, "
            "x.unread_broadcasts, x.ready + x.unread_broadcasts AS unread, x.oldest_ready_at, "
            "x.lease_owner, x.lease_expires_at, x.bcast_seen FROM (SELECT p.space_id, p.address, "
            "p.status, COALESCE(c.ready, 0) AS ready, COALESCE(c.processing, 0) AS processing, "
            "COALESCE(c.done, 0) AS done, COALESCE(c.quarantine, 0) AS quarantine, (SELECT COUNT(*)"
            " FROM messages b WHERE b.space_no = (SELECT sp.rowid FROM spaces sp WHERE sp.id = "
            "p.space_id) AND b.bcast_no IS NOT NULL AND b.bcast_no > p.bcast_seen AND b.sender <> "
            "p.address) AS unread_broadcasts, c.oldest_ready_at, (SELECT l.lease_owner FROM "
            "deliveries l WHERE l.recipient_no = p.rowid AND l.state = 'processing' ORDER BY "
            "l.lease_expires_at DESC LIMIT 1) AS lease_owner, c.lease_expires_at, p.bcast_seen FROM"
            " participants p LEFT JOIN (SELECT d.recipient_no, SUM(CASE WHEN d.state = 'ready' THEN"
            " 1 ELSE 0 END) AS ready, SUM(CASE WHEN d.state = 'processing' THEN 1 ELSE 0 END) AS "
            "processing, SUM(CASE WHEN d.state = 'done' THEN 1 ELSE 0 END) AS done, SUM(CASE WHEN "
            "d.state = 'quarantine' THEN 1 ELSE 0 END) AS quarantine, MIN(CASE WHEN d.state = "
            "'ready' THEN coalesce(d.created_at_utc, m.created_at_utc) END) AS oldest_ready_at, "
            "MAX(CASE WHEN d.state = 'processing' THEN d.lease_expires_at END) AS lease_expires_at "
            "FROM deliveries d JOIN messages m ON m.rowid = d.rowid >> 20 GROUP BY d.recipient_no) "
            "c ON c.recipient_no = p.rowid) x"
        ),
        "v_quarantine": (
            "SELECT sp.id AS space_id, p.address AS recipient, d.id AS delivery_id, m.id AS "
            "message_id, m.seq, m.kind, m.sender, m.body, d.attempts, d.quarantine_reason, "
            "d.last_error, coalesce(d.created_at_utc, m.created_at_utc) AS created_at_utc FROM "
            "deliveries d JOIN messages m ON m.rowid = d.rowid >> 20 JOIN spaces sp ON sp.rowid = "
            "m.space_no JOIN participants p ON p.rowid = d.recipient_no WHERE d.state = "
            "'quarantine'"
        ),
        "v_directives": (
            "SELECT sp.id AS space_id, m.seq, m.id, m.sender, m.recipients, m.body, "
            "m.created_at_utc, r.id AS retracted_by, r.created_at_utc AS retracted_at, CASE WHEN "
            "r.id IS NULL THEN 1 ELSE 0 END AS in_force FROM messages m JOIN spaces sp ON sp.rowid "
            "= m.space_no LEFT JOIN messages r ON r.kind = 'retract' AND r.ref = m.id AND "
            "r.space_no = m.space_no AND r.seq = (SELECT MIN(r2.seq) FROM messages r2 WHERE r2.kind"
            " = 'retract' AND r2.ref = m.id AND r2.space_no = m.space_no) WHERE m.kind = "
            "'directive'"
        ),
        "v_threads": (
            "SELECT sp.id AS space_id, m.thread, COUNT(*) AS messages, (SELECT f.id FROM messages f"
            " WHERE f.space_no = m.space_no AND f.thread = m.thread ORDER BY f.seq LIMIT 1) AS "
            "first_id, MIN(m.created_at_utc) AS first_at, (SELECT l.id FROM messages l WHERE "
            "l.space_no = m.space_no AND l.thread = m.thread ORDER BY l.seq DESC LIMIT 1) AS "
            "last_id, MAX(m.created_at_utc) AS last_at, COUNT(DISTINCT m.sender) AS participants, "
            "(SELECT json_group_array(w.sender) FROM (SELECT s.sender, MIN(s.seq) AS first FROM "
            "messages s WHERE s.space_no = m.space_no AND s.thread = m.thread GROUP BY s.sender "
            "ORDER BY first) w) AS senders FROM messages m JOIN spaces sp ON sp.rowid = m.space_no "
            "WHERE m.thread IS NOT NULL GROUP BY m.space_no, sp.id, m.thread"
        ),
    },
    "postgresql": {
        "v_log": (
            "SELECT sp.id AS space_id, m.seq, m.id, m.created_at_utc, m.kind, m.sender, "
            "m.recipients, m.body, m.urgent, m.via, m.ref, m.reached, m.not_reached, m.reached_n, "
            "m.bcast_no, CASE WHEN m.kind = 'seen' THEN 'receipt' WHEN m.reached_n > 0 AND "
            "m.not_reached = '[]' THEN 'delivered' WHEN m.reached_n > 0 THEN 'partial' WHEN "
            "m.not_reached <> '[]' THEN 'reached_nobody' ELSE 'logged' END AS outcome FROM messages"
            " m JOIN spaces sp ON sp.rowid = m.space_no"
        ),
        "v_not_reached": (
            "SELECT sp.id AS space_id, m.seq, m.id AS message_id, m.created_at_utc, m.kind, "
            "m.sender, j.value ->> 'address' AS address, j.value ->> 'reason' AS reason, "
            "m.reached_n FROM spaces sp JOIN messages m ON m.space_no = sp.rowid, "
            "jsonb_array_elements(m.not_reached::jsonb) j"
        ),
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
        "v_inboxes": (
            "SELECT x.space_id, x.address, x.status, x.ready, x.processing, x.done, x.quarantine, "
            "x.unread_broadcasts, x.ready + x.unread_broadcasts AS unread, x.oldest_ready_at, "
            "x.lease_owner, x.lease_expires_at, x.bcast_seen FROM (SELECT p.space_id, p.address, "
            "p.status, COALESCE(c.ready, 0) AS ready, COALESCE(c.processing, 0) AS processing, "
            "COALESCE(c.done, 0) AS done, COALESCE(c.quarantine, 0) AS quarantine, (SELECT COUNT(*)"
            " FROM messages b WHERE b.space_no = (SELECT sp.rowid FROM spaces sp WHERE sp.id = "
            "p.space_id) AND b.bcast_no IS NOT NULL AND b.bcast_no > p.bcast_seen AND b.sender <> "
            "p.address) AS unread_broadcasts, c.oldest_ready_at, (SELECT l.lease_owner FROM "
            "deliveries l WHERE l.recipient_no = p.rowid AND l.state = 'processing' ORDER BY "
            "l.lease_expires_at DESC LIMIT 1) AS lease_owner, c.lease_expires_at, p.bcast_seen FROM"
            " participants p LEFT JOIN (SELECT d.recipient_no, SUM(CASE WHEN d.state = 'ready' THEN"
            " 1 ELSE 0 END) AS ready, SUM(CASE WHEN d.state = 'processing' THEN 1 ELSE 0 END) AS "
            "processing, SUM(CASE WHEN d.state = 'done' THEN 1 ELSE 0 END) AS done, SUM(CASE WHEN "
            "d.state = 'quarantine' THEN 1 ELSE 0 END) AS quarantine, MIN(CASE WHEN d.state = "
            "'ready' THEN coalesce(d.created_at_utc, m.created_at_utc) END) AS oldest_ready_at, "
            "MAX(CASE WHEN d.state = 'processing' THEN d.lease_expires_at END) AS lease_expires_at "
            "FROM deliveries d JOIN messages m ON m.rowid = d.rowid >> 20 GROUP BY d.recipient_no) "
            "c ON c.recipient_no = p.rowid) x"
        ),
        "v_quarantine": (
            "SELECT sp.id AS space_id, p.address AS recipient, d.id AS delivery_id, m.id AS "
            "message_id, m.seq, m.kind, m.sender, m.body, d.attempts, d.quarantine_reason, "
            "d.last_error, coalesce(d.created_at_utc, m.created_at_utc) AS created_at_utc FROM "
            "deliveries d JOIN messages m ON m.rowid = d.rowid >> 20 JOIN spaces sp ON sp.rowid = "
            "m.space_no JOIN participants p ON p.rowid = d.recipient_no WHERE d.state = "
            "'quarantine'"
        ),
        "v_directives": (
            "SELECT sp.id AS space_id, m.seq, m.id, m.sender, m.recipients, m.body, "
            "m.created_at_utc, r.id AS retracted_by, r.created_at_utc AS retracted_at, CASE WHEN "
            "r.id IS NULL THEN 1 ELSE 0 END AS in_force FROM messages m JOIN spaces sp ON sp.rowid "
            "= m.space_no LEFT JOIN messages r ON r.kind = 'retract' AND r.ref = m.id AND "
            "r.space_no = m.space_no AND r.seq = (SELECT MIN(r2.seq) FROM messages r2 WHERE r2.kind"
            " = 'retract' AND r2.ref = m.id AND r2.space_no = m.space_no) WHERE m.kind = "
            "'directive'"
        ),
        "v_threads": (
            "SELECT sp.id AS space_id, m.thread, COUNT(*) AS messages, (SELECT f.id FROM messages f"
            " WHERE f.space_no = m.space_no AND f.thread = m.thread ORDER BY f.seq LIMIT 1) AS "
            "first_id, MIN(m.created_at_utc) AS first_at, (SELECT l.id FROM messages l WHERE "
            "l.space_no = m.space_no AND l.thread = m.thread ORDER BY l.seq DESC LIMIT 1) AS "
            "last_id, MAX(m.created_at_utc) AS last_at, COUNT(DISTINCT m.sender) AS participants, "
            "(SELECT '[' || coalesce(string_agg(to_json(w.sender)::text, ',' ORDER BY w.first), '')"
            " || ']' FROM (SELECT s.sender, MIN(s.seq) AS first FROM messages s WHERE s.space_no = "
            "m.space_no AND s.thread = m.thread GROUP BY s.sender ORDER BY first) w) AS senders "
            "FROM messages m JOIN spaces sp ON sp.rowid = m.space_no WHERE m.thread IS NOT NULL "
            "GROUP BY m.space_no, sp.id, m.thread"
        ),
    },
}
VIEWS_0022: dict[str, dict[str, str]] = {
    "sqlite": {
        "v_log": (
            "SELECT m.space_id, m.seq, m.id, m.created_at_utc, m.kind, m.sender, m.recipients, "
            "m.body, m.urgent, m.via, m.ref, m.reached, m.not_reached, m.reached_n, m.bcast_no, "
            "CASE WHEN m.kind = 'seen' THEN 'receipt' WHEN m.reached_n > 0 AND m.not_reached = '[]'"
            " THEN 'delivered' WHEN m.reached_n > 0 THEN 'partial' WHEN m.not_reached <> '[]' THEN "
            "'reached_nobody' ELSE 'logged' END AS outcome FROM messages m"
        ),
        "v_not_reached": (
            "SELECT m.space_id, m.seq, m.id AS message_id, m.created_at_utc, m.kind, m.sender, "
            "json_extract(j.value, '$.address') AS address, json_extract(j.value, '$.reason') AS "
            "reason, m.reached_n FROM messages m, json_each(m.not_reached) j"
        ),
        "v_inbox": (
            "SELECT m.space_id AS space_id, p.address AS recipient, p.id AS recipient_id, d.id AS "
            "delivery_id, m.id AS message_id, m.seq, m.kind, m.sender, m.urgent, m.body, d.state, "
            "d.attempts, coalesce(d.created_at_utc, m.created_at_utc) AS created_at_utc, "
            "d.lease_owner, d.lease_expires_at, CASE WHEN d.state = 'processing' AND "
            "d.lease_expires_at > (strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000Z') THEN 1 ELSE 0 "
            "END AS lease_live, d.acked_at_utc, d.last_error, d.quarantine_reason FROM deliveries d"
            " JOIN messages m ON m.rowid = d.rowid >> 20 JOIN participants p ON p.rowid = "
            "d.recipient_no"
        ),
        "v_inboxes": (
            "SELECT x.space_id, x.address, x.status, x.ready, x.processing, x.done, x.quarantine, "
            "x.unread_broadcasts, x.ready + x.unread_broadcasts AS unread, x.oldest_ready_at, "
            "x.lease_owner, x.lease_expires_at, x.bcast_seen FROM (SELECT p.space_id, p.address, "
            "p.status, COALESCE(c.ready, 0) AS ready, COALESCE(c.processing, 0) AS processing, "
            "COALESCE(c.done, 0) AS done, COALESCE(c.quarantine, 0) AS quarantine, (SELECT COUNT(*)"
            " FROM messages b WHERE b.space_id = p.space_id AND b.bcast_no IS NOT NULL AND "
            "b.bcast_no > p.bcast_seen AND b.sender <> p.address) AS unread_broadcasts, "
            "c.oldest_ready_at, (SELECT l.lease_owner FROM deliveries l WHERE l.recipient_no = "
            "p.rowid AND l.state = 'processing' ORDER BY l.lease_expires_at DESC LIMIT 1) AS "
            "lease_owner, c.lease_expires_at, p.bcast_seen FROM participants p LEFT JOIN (SELECT "
            "d.recipient_no, SUM(CASE WHEN d.state = 'ready' THEN 1 ELSE 0 END) AS ready, SUM(CASE "
            "WHEN d.state = 'processing' THEN 1 ELSE 0 END) AS processing, SUM(CASE WHEN d.state = "
            "'done' THEN 1 ELSE 0 END) AS done, SUM(CASE WHEN d.state = 'quarantine' THEN 1 ELSE 0 "
            "END) AS quarantine, MIN(CASE WHEN d.state = 'ready' THEN coalesce(d.created_at_utc, "
            "m.created_at_utc) END) AS oldest_ready_at, MAX(CASE WHEN d.state = 'processing' THEN "
            "d.lease_expires_at END) AS lease_expires_at FROM deliveries d JOIN messages m ON "
            "m.rowid = d.rowid >> 20 GROUP BY d.recipient_no) c ON c.recipient_no = p.rowid) x"
        ),
        "v_quarantine": (
            "SELECT m.space_id AS space_id, p.address AS recipient, d.id AS delivery_id, m.id AS "
            "message_id, m.seq, m.kind, m.sender, m.body, d.attempts, d.quarantine_reason, "
            "d.last_error, coalesce(d.created_at_utc, m.created_at_utc) AS created_at_utc FROM "
            "deliveries d JOIN messages m ON m.rowid = d.rowid >> 20 JOIN participants p ON p.rowid"
            " = d.recipient_no WHERE d.state = 'quarantine'"
        ),
        "v_directives": (
            "SELECT m.space_id, m.seq, m.id, m.sender, m.recipients, m.body, m.created_at_utc, r.id"
            " AS retracted_by, r.created_at_utc AS retracted_at, CASE WHEN r.id IS NULL THEN 1 ELSE"
            " 0 END AS in_force FROM messages m LEFT JOIN messages r ON r.kind = 'retract' AND "
            "r.ref = m.id AND r.space_id = m.space_id AND r.seq = (SELECT MIN(r2.seq) FROM messages"
            " r2 WHERE r2.kind = 'retract' AND r2.ref = m.id AND r2.space_id = m.space_id) WHERE "
            "m.kind = 'directive'"
        ),
        "v_threads": (
            "SELECT m.space_id, m.thread, COUNT(*) AS messages, (SELECT f.id FROM messages f WHERE "
            "f.space_id = m.space_id AND f.thread = m.thread ORDER BY f.seq LIMIT 1) AS first_id, "
            "MIN(m.created_at_utc) AS first_at, (SELECT l.id FROM messages l WHERE l.space_id = "
            "m.space_id AND l.thread = m.thread ORDER BY l.seq DESC LIMIT 1) AS last_id, "
            "MAX(m.created_at_utc) AS last_at, COUNT(DISTINCT m.sender) AS participants, (SELECT "
            "json_group_array(w.sender) FROM (SELECT s.sender, MIN(s.seq) AS first FROM messages s "
            "WHERE s.space_id = m.space_id AND s.thread = m.thread GROUP BY s.sender ORDER BY "
            "first) w) AS senders FROM messages m WHERE m.thread IS NOT NULL GROUP BY m.space_id, "
            "m.thread"
        ),
    },
    "postgresql": {
        "v_log": (
            "SELECT m.space_id, m.seq, m.id, m.created_at_utc, m.kind, m.sender, m.recipients, "
            "m.body, m.urgent, m.via, m.ref, m.reached, m.not_reached, m.reached_n, m.bcast_no, "
            "CASE WHEN m.kind = 'seen' THEN 'receipt' WHEN m.reached_n > 0 AND m.not_reached = '[]'"
            " THEN 'delivered' WHEN m.reached_n > 0 THEN 'partial' WHEN m.not_reached <> '[]' THEN "
            "'reached_nobody' ELSE 'logged' END AS outcome FROM messages m"
        ),
        "v_not_reached": (
            "SELECT m.space_id, m.seq, m.id AS message_id, m.created_at_utc, m.kind, m.sender, "
            "j.value ->> 'address' AS address, j.value ->> 'reason' AS reason, m.reached_n FROM "
            "messages m, jsonb_array_elements(m.not_reached::jsonb) j"
        ),
        "v_inbox": (
            "SELECT m.space_id AS space_id, p.address AS recipient, p.id AS recipient_id, d.id AS "
            "delivery_id, m.id AS message_id, m.seq, m.kind, m.sender, m.urgent, m.body, d.state, "
            "d.attempts, coalesce(d.created_at_utc, m.created_at_utc) AS created_at_utc, "
            "d.lease_owner, d.lease_expires_at, CASE WHEN d.state = 'processing' AND "
            "d.lease_expires_at > to_char(now() AT TIME ZONE 'UTC', "
            '\'YYYY-MM-DD"T"HH24:MI:SS.US"Z"\') THEN 1 ELSE 0 END AS lease_live, d.acked_at_utc, '
            "d.last_error, d.quarantine_reason FROM deliveries d JOIN messages m ON m.rowid = "
            "d.rowid >> 20 JOIN participants p ON p.rowid = d.recipient_no"
        ),
        "v_inboxes": (
            "SELECT x.space_id, x.address, x.status, x.ready, x.processing, x.done, x.quarantine, "
            "x.unread_broadcasts, x.ready + x.unread_broadcasts AS unread, x.oldest_ready_at, "
            "x.lease_owner, x.lease_expires_at, x.bcast_seen FROM (SELECT p.space_id, p.address, "
            "p.status, COALESCE(c.ready, 0) AS ready, COALESCE(c.processing, 0) AS processing, "
            "COALESCE(c.done, 0) AS done, COALESCE(c.quarantine, 0) AS quarantine, (SELECT COUNT(*)"
            " FROM messages b WHERE b.space_id = p.space_id AND b.bcast_no IS NOT NULL AND "
            "b.bcast_no > p.bcast_seen AND b.sender <> p.address) AS unread_broadcasts, "
            "c.oldest_ready_at, (SELECT l.lease_owner FROM deliveries l WHERE l.recipient_no = "
            "p.rowid AND l.state = 'processing' ORDER BY l.lease_expires_at DESC LIMIT 1) AS "
            "lease_owner, c.lease_expires_at, p.bcast_seen FROM participants p LEFT JOIN (SELECT "
            "d.recipient_no, SUM(CASE WHEN d.state = 'ready' THEN 1 ELSE 0 END) AS ready, SUM(CASE "
            "WHEN d.state = 'processing' THEN 1 ELSE 0 END) AS processing, SUM(CASE WHEN d.state = "
            "'done' THEN 1 ELSE 0 END) AS done, SUM(CASE WHEN d.state = 'quarantine' THEN 1 ELSE 0 "
            "END) AS quarantine, MIN(CASE WHEN d.state = 'ready' THEN coalesce(d.created_at_utc, "
            "m.created_at_utc) END) AS oldest_ready_at, MAX(CASE WHEN d.state = 'processing' THEN "
            "d.lease_expires_at END) AS lease_expires_at FROM deliveries d JOIN messages m ON "
            "m.rowid = d.rowid >> 20 GROUP BY d.recipient_no) c ON c.recipient_no = p.rowid) x"
        ),
        "v_quarantine": (
            "SELECT m.space_id AS space_id, p.address AS recipient, d.id AS delivery_id, m.id AS "
            "message_id, m.seq, m.kind, m.sender, m.body, d.attempts, d.quarantine_reason, "
            "d.last_error, coalesce(d.created_at_utc, m.created_at_utc) AS created_at_utc FROM "
            "deliveries d JOIN messages m ON m.rowid = d.rowid >> 20 JOIN participants p ON p.rowid"
            " = d.recipient_no WHERE d.state = 'quarantine'"
        ),
        "v_directives": (
            "SELECT m.space_id, m.seq, m.id, m.sender, m.recipients, m.body, m.created_at_utc, r.id"
            " AS retracted_by, r.created_at_utc AS retracted_at, CASE WHEN r.id IS NULL THEN 1 ELSE"
            " 0 END AS in_force FROM messages m LEFT JOIN messages r ON r.kind = 'retract' AND "
            "r.ref = m.id AND r.space_id = m.space_id AND r.seq = (SELECT MIN(r2.seq) FROM messages"
            " r2 WHERE r2.kind = 'retract' AND r2.ref = m.id AND r2.space_id = m.space_id) WHERE "
            "m.kind = 'directive'"
        ),
        "v_threads": (
            "SELECT m.space_id, m.thread, COUNT(*) AS messages, (SELECT f.id FROM messages f WHERE "
            "f.space_id = m.space_id AND f.thread = m.thread ORDER BY f.seq LIMIT 1) AS first_id, "
            "MIN(m.created_at_utc) AS first_at, (SELECT l.id FROM messages l WHERE l.space_id = "
            "m.space_id AND l.thread = m.thread ORDER BY l.seq DESC LIMIT 1) AS last_id, "
            "MAX(m.created_at_utc) AS last_at, COUNT(DISTINCT m.sender) AS participants, (SELECT "
            "'[' || coalesce(string_agg(to_json(w.sender)::text, ',' ORDER BY w.first), '') || ']' "
            "FROM (SELECT s.sender, MIN(s.seq) AS first FROM messages s WHERE s.space_id = "
            "m.space_id AND s.thread = m.thread GROUP BY s.sender ORDER BY first) w) AS senders "
            "FROM messages m WHERE m.thread IS NOT NULL GROUP BY m.space_id, m.thread"
        ),
    },
}


def _drop_views() -> None:
    for view in VIEWS["sqlite"]:  # they read the column: dropped before, written again after
        op.execute(f"DROP VIEW IF EXISTS {view}")


def _views(dialect: str, views: dict[str, dict[str, str]]) -> None:
    for view, sql in views[dialect].items():
        op.execute(f"CREATE VIEW {view} AS {sql}")


def _rebuild(table: str, names: dict[str, str], value: str) -> None:
    """SQLite cannot drop a column a foreign key or an index holds: a new table,
    every row copied with its rowid (``value``: the space, read from the row
    ``m`` and its space ``s``), then its indexes and triggers."""
    key = names["key"]
    old, of = ("space_id", "id") if key == "space_no" else ("space_no", "rowid")
    op.execute("DROP TRIGGER IF EXISTS spaces_sender_usage")  # it reads the column too
    op.execute("PRAGMA legacy_alter_table = ON")  # the other views name `messages`
    try:
        op.execute(table.format(name="messages_0023"))
        op.execute(
            f"INSERT INTO messages_0023 (rowid, id, {key}, {REST}) SELECT m.rowid, m.id, {value}, "
            + ", ".join(f"m.{c.strip()}" for c in REST.split(","))
            + f" FROM messages m JOIN spaces s ON s.{of} = m.{old} ORDER BY m.rowid"
        )
        op.execute("DROP TABLE messages")  # its indexes and triggers go with it
        op.execute("ALTER TABLE messages_0023 RENAME TO messages")
    finally:
        op.execute("PRAGMA legacy_alter_table = OFF")
    for ddl in [*_indexes(key), REF, *_triggers(names)]:
        op.execute(ddl)


# A log row whose space is no space row: none is written (the foreign key
# refused it); refused here, not lost by the rebuild's join.
ORPHANS = (
    "SELECT count(*) FROM messages m WHERE NOT EXISTS "
    "(SELECT 1 FROM spaces s WHERE s.id = m.space_id)"
)


def _pg_fill(column: str, value: str, join: str) -> None:
    """A new column of the log filled from the spaces: the append-only trigger
    refuses every UPDATE of the log, so it is held off for this one."""
    op.execute("ALTER TABLE messages DISABLE TRIGGER messages_append_only")
    op.execute(f"UPDATE messages m SET {column} = s.{value} FROM spaces s WHERE {join}")
    op.execute("ALTER TABLE messages ENABLE TRIGGER messages_append_only")
    op.execute(f"ALTER TABLE messages ALTER COLUMN {column} SET NOT NULL")


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    bad = op.get_bind().exec_driver_sql(ORPHANS).scalar()
    if bad:
        raise RuntimeError(
            f"revision 0023: {bad} log rows name a space that has no row; "
            "the store is left at revision 0022"
        )
    _drop_views()
    if dialect == "sqlite":
        _rebuild(TABLE, NEW, "s.rowid")
    else:
        op.execute("ALTER TABLE spaces ADD COLUMN rowid BIGINT GENERATED BY DEFAULT AS IDENTITY")
        op.execute("CREATE UNIQUE INDEX ix_spaces_rowid ON spaces (rowid)")
        op.execute("ALTER TABLE messages ADD COLUMN space_no INTEGER")
        _pg_fill("space_no", "rowid", "s.id = m.space_id")
        op.execute("ALTER TABLE messages DROP CONSTRAINT uq_messages_space_id_seq")
        for ddl in _indexes("space_id"):
            op.execute(f"DROP INDEX IF EXISTS {ddl.split(' ON ')[0].split()[-1]}")
        op.execute("ALTER TABLE messages DROP COLUMN space_id")  # and its foreign key
        op.execute(
            "ALTER TABLE messages ADD CONSTRAINT uq_messages_space_no_seq UNIQUE (space_no, seq)"
        )
        for ddl in [*_indexes("space_no"), *_pg_functions(NEW), *PG_COMMENTS["space_no"]]:
            op.execute(ddl)
    _views(dialect, VIEWS)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    _drop_views()
    if dialect == "sqlite":
        _rebuild(TABLE_0022, OLD, "s.id")
    else:
        op.execute("ALTER TABLE messages ADD COLUMN space_id VARCHAR(40)")
        _pg_fill("space_id", "id", "s.rowid = m.space_no")
        op.execute(
            "ALTER TABLE messages ADD CONSTRAINT fk_messages_space_id_spaces "
            "FOREIGN KEY (space_id) REFERENCES spaces (id)"
        )
        op.execute("ALTER TABLE messages DROP CONSTRAINT uq_messages_space_no_seq")
        for ddl in _indexes("space_no"):
            op.execute(f"DROP INDEX IF EXISTS {ddl.split(' ON ')[0].split()[-1]}")
        op.execute("ALTER TABLE messages DROP COLUMN space_no")
        op.execute(
            "ALTER TABLE messages ADD CONSTRAINT uq_messages_space_id_seq UNIQUE (space_id, seq)"
        )
        for ddl in [*_indexes("space_id"), *_pg_functions(OLD), *PG_COMMENTS["space_id"]]:
            op.execute(ddl)
        op.execute("DROP INDEX ix_spaces_rowid")
        op.execute("ALTER TABLE spaces DROP COLUMN rowid")
    _views(dialect, VIEWS_0022)
