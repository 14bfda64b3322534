"""inspection views

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 12:00:00.000000

The views' documentation lives in ``broker.views``; their SQL as of this
revision is written out below (frozen: never imported from live code). A later
change to a view is a new revision that drops and re-creates it.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op


revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


CREATE: dict[str, list[str]] = {
    "postgresql": [
        "CREATE VIEW v_log AS SELECT m.space_id, m.seq, m.id, m.created_at_utc, "
        "m.kind, m.sender, m.recipients, m.body, m.urgent, m.via, m.ref, "
        "m.reached, m.not_reached, m.reached_n, m.bcast_no, CASE WHEN m.kind = "
        "'seen' THEN 'receipt' WHEN m.reached_n > 0 AND m.not_reached = '[]' "
        "THEN 'delivered' WHEN m.reached_n > 0 THEN 'partial' WHEN m.not_reached "
        "<> '[]' THEN 'reached_nobody' ELSE 'logged' END AS outcome FROM "
        "messages m",
        "CREATE VIEW v_not_reached AS SELECT m.space_id, m.seq, m.id AS "
        "message_id, m.created_at_utc, m.kind, m.sender, j.value ->> 'address' "
        "AS address, j.value ->> 'reason' AS reason, m.reached_n FROM messages "
        "m, jsonb_array_elements(m.not_reached::jsonb) j",
        "CREATE VIEW v_inbox AS SELECT d.space_id, p.address AS recipient, "
        "d.recipient_id, d.id AS delivery_id, d.message_id, m.seq, m.kind, "
        "m.sender, m.urgent, m.body, d.state, d.attempts, d.created_at_utc, "
        "d.lease_owner, d.lease_expires_at, CASE WHEN d.state = 'processing' AND "
        "d.lease_expires_at > to_char(now() AT TIME ZONE 'UTC', "
        '\'YYYY-MM-DD"T"HH24:MI:SS.US"Z"\') THEN 1 ELSE 0 END AS lease_live, '
        "d.acked_at_utc, d.last_error, d.quarantine_reason FROM deliveries d "
        "JOIN messages m ON m.id = d.message_id JOIN participants p ON p.id = "
        "d.recipient_id",
        "CREATE VIEW v_inboxes AS SELECT x.space_id, x.address, x.status, "
        "x.ready, x.processing, x.done, x.quarantine, x.unread_broadcasts, "
        "x.ready + x.unread_broadcasts AS unread, x.oldest_ready_at, "
        "x.lease_owner, x.lease_expires_at, x.bcast_seen FROM (SELECT "
        "p.space_id, p.address, p.status, COALESCE(c.ready, 0) AS ready, "
        "COALESCE(c.processing, 0) AS processing, COALESCE(c.done, 0) AS done, "
        "COALESCE(c.quarantine, 0) AS quarantine, (SELECT COUNT(*) FROM messages "
        "b WHERE b.space_id = p.space_id AND b.bcast_no IS NOT NULL AND "
        "b.bcast_no > p.bcast_seen AND b.sender <> p.address) AS "
        "unread_broadcasts, c.oldest_ready_at, (SELECT l.lease_owner FROM "
        "deliveries l WHERE l.recipient_id = p.id AND l.state = 'processing' "
        "ORDER BY l.lease_expires_at DESC LIMIT 1) AS lease_owner, "
        "c.lease_expires_at, p.bcast_seen FROM participants p LEFT JOIN (SELECT "
        "recipient_id, SUM(CASE WHEN state = 'ready' THEN 1 ELSE 0 END) AS "
        "ready, SUM(CASE WHEN state = 'processing' THEN 1 ELSE 0 END) AS "
        "processing, SUM(CASE WHEN state = 'done' THEN 1 ELSE 0 END) AS done, "
        "SUM(CASE WHEN state = 'quarantine' THEN 1 ELSE 0 END) AS quarantine, "
        "MIN(CASE WHEN state = 'ready' THEN created_at_utc END) AS "
        "oldest_ready_at, MAX(CASE WHEN state = 'processing' THEN "
        "lease_expires_at END) AS lease_expires_at FROM deliveries GROUP BY "
        "recipient_id) c ON c.recipient_id = p.id) x",
        "CREATE VIEW v_participants AS SELECT p.space_id, p.id, p.address, "
        "p.codename, p.agent, p.run_id, p.step, p.parent, p.role, p.archetype, "
        "p.task, p.is_lead, p.messaging, p.status, CASE WHEN p.status IN "
        "('running', 'idle') THEN 1 ELSE 0 END AS live, p.waiting, p.bcast_seen, "
        "p.joined_at_utc, p.left_at_utc, p.last_seen_utc, CASE WHEN p.status = "
        "'left' THEN (SELECT e.reason FROM participant_events e WHERE "
        "e.participant_id = p.id AND e.event = 'left' ORDER BY e.at_utc DESC, "
        "e.id DESC LIMIT 1) END AS left_reason FROM participants p",
        "CREATE VIEW v_live_claims AS SELECT c.space_id, c.key, c.holder, "
        "c.token, c.claimed_at_utc, c.lease_expires_at FROM board_claims c WHERE "
        "c.holder IS NOT NULL AND c.lease_expires_at > to_char(now() AT TIME "
        "ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')",
        "CREATE VIEW v_claim_journal AS SELECT j.space_id, j.at_utc, j.key, "
        "j.event, j.owner, j.token, j.lease_expires_at, j.id FROM claim_journal "
        "j",
        "CREATE VIEW v_claim_holds AS SELECT c.space_id, c.key, c.owner, "
        "c.token, c.at_utc AS held_from, (SELECT e.at_utc FROM claim_journal e "
        "WHERE e.space_id = c.space_id AND e.key = c.key AND e.token = c.token "
        "AND e.event IN ('released', 'expired') ORDER BY e.at_utc, e.id LIMIT 1) "
        "AS held_until, (SELECT e.event FROM claim_journal e WHERE e.space_id = "
        "c.space_id AND e.key = c.key AND e.token = c.token AND e.event IN "
        "('released', 'expired') ORDER BY e.at_utc, e.id LIMIT 1) AS ended_by, "
        "(SELECT MAX(e.lease_expires_at) FROM claim_journal e WHERE e.space_id = "
        "c.space_id AND e.key = c.key AND e.token = c.token AND e.event IN "
        "('claimed', 'renewed')) AS lease_expires_at FROM claim_journal c WHERE "
        "c.event = 'claimed'",
        "CREATE VIEW v_quarantine AS SELECT d.space_id, p.address AS recipient, "
        "d.id AS delivery_id, d.message_id, m.seq, m.kind, m.sender, m.body, "
        "d.attempts, d.quarantine_reason, d.last_error, d.created_at_utc FROM "
        "deliveries d JOIN messages m ON m.id = d.message_id JOIN participants p "
        "ON p.id = d.recipient_id WHERE d.state = 'quarantine'",
        "CREATE VIEW v_directives AS SELECT m.space_id, m.seq, m.id, m.sender, "
        "m.recipients, m.body, m.created_at_utc, r.id AS retracted_by, "
        "r.created_at_utc AS retracted_at, CASE WHEN r.id IS NULL THEN 1 ELSE 0 "
        "END AS in_force FROM messages m LEFT JOIN messages r ON r.kind = "
        "'retract' AND r.ref = m.id AND r.space_id = m.space_id AND r.seq = "
        "(SELECT MIN(r2.seq) FROM messages r2 WHERE r2.kind = 'retract' AND "
        "r2.ref = m.id AND r2.space_id = m.space_id) WHERE m.kind = 'directive'",
    ],
    "sqlite": [
        "CREATE VIEW v_log AS SELECT m.space_id, m.seq, m.id, m.created_at_utc, "
        "m.kind, m.sender, m.recipients, m.body, m.urgent, m.via, m.ref, m.reached, "
        "m.not_reached, m.reached_n, m.bcast_no, CASE WHEN m.kind = 'seen' THEN "
        "'receipt' WHEN m.reached_n > 0 AND m.not_reached = '[]' THEN 'delivered' "
        "WHEN m.reached_n > 0 THEN 'partial' WHEN m.not_reached <> '[]' THEN "
        "'reached_nobody' ELSE 'logged' END AS outcome FROM messages m",
        "CREATE VIEW v_not_reached AS SELECT m.space_id, m.seq, m.id AS message_id, "
        "m.created_at_utc, m.kind, m.sender, json_extract(j.value, '$.address') AS "
        "address, json_extract(j.value, '$.reason') AS reason, m.reached_n FROM "
        "messages m, json_each(m.not_reached) j",
        "CREATE VIEW v_inbox AS SELECT d.space_id, p.address AS recipient, "
        "d.recipient_id, d.id AS delivery_id, d.message_id, m.seq, m.kind, m.sender, "
        "m.urgent, m.body, d.state, d.attempts, d.created_at_utc, d.lease_owner, "
        "d.lease_expires_at, CASE WHEN d.state = 'processing' AND d.lease_expires_at "
        "> (strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000Z') THEN 1 ELSE 0 END AS "
        "lease_live, d.acked_at_utc, d.last_error, d.quarantine_reason FROM "
        "deliveries d JOIN messages m ON m.id = d.message_id JOIN participants p ON "
        "p.id = d.recipient_id",
        "CREATE VIEW v_inboxes AS SELECT x.space_id, x.address, x.status, x.ready, "
        "x.processing, x.done, x.quarantine, x.unread_broadcasts, x.ready + "
        "x.unread_broadcasts AS unread, x.oldest_ready_at, x.lease_owner, "
        "x.lease_expires_at, x.bcast_seen FROM (SELECT p.space_id, p.address, "
        "p.status, COALESCE(c.ready, 0) AS ready, COALESCE(c.processing, 0) AS "
        "processing, COALESCE(c.done, 0) AS done, COALESCE(c.quarantine, 0) AS "
        "quarantine, (SELECT COUNT(*) FROM messages b WHERE b.space_id = p.space_id "
        "AND b.bcast_no IS NOT NULL AND b.bcast_no > p.bcast_seen AND b.sender <> "
        "p.address) AS unread_broadcasts, c.oldest_ready_at, (SELECT l.lease_owner "
        "FROM deliveries l WHERE l.recipient_id = p.id AND l.state = 'processing' "
        "ORDER BY l.lease_expires_at DESC LIMIT 1) AS lease_owner, "
        "c.lease_expires_at, p.bcast_seen FROM participants p LEFT JOIN (SELECT "
        "recipient_id, SUM(CASE WHEN state = 'ready' THEN 1 ELSE 0 END) AS ready, "
        "SUM(CASE WHEN state = 'processing' THEN 1 ELSE 0 END) AS processing, "
        "SUM(CASE WHEN state = 'done' THEN 1 ELSE 0 END) AS done, SUM(CASE WHEN "
        "state = 'quarantine' THEN 1 ELSE 0 END) AS quarantine, MIN(CASE WHEN state "
        "= 'ready' THEN created_at_utc END) AS oldest_ready_at, MAX(CASE WHEN state "
        "= 'processing' THEN lease_expires_at END) AS lease_expires_at FROM "
        "deliveries GROUP BY recipient_id) c ON c.recipient_id = p.id) x",
        "CREATE VIEW v_participants AS SELECT p.space_id, p.id, p.address, "
        "p.codename, p.agent, p.run_id, p.step, p.parent, p.role, p.archetype, "
        "p.task, p.is_lead, p.messaging, p.status, CASE WHEN p.status IN ('running', "
        "'idle') THEN 1 ELSE 0 END AS live, p.waiting, p.bcast_seen, "
        "p.joined_at_utc, p.left_at_utc, p.last_seen_utc, CASE WHEN p.status = "
        "'left' THEN (SELECT e.reason FROM participant_events e WHERE "
        "e.participant_id = p.id AND e.event = 'left' ORDER BY e.at_utc DESC, e.id "
        "DESC LIMIT 1) END AS left_reason FROM participants p",
        "CREATE VIEW v_live_claims AS SELECT c.space_id, c.key, c.holder, c.token, "
        "c.claimed_at_utc, c.lease_expires_at FROM board_claims c WHERE c.holder IS "
        "NOT NULL AND c.lease_expires_at > (strftime('%Y-%m-%dT%H:%M:%f', 'now') || "
        "'000Z')",
        "CREATE VIEW v_claim_journal AS SELECT j.space_id, j.at_utc, j.key, j.event, "
        "j.owner, j.token, j.lease_expires_at, j.id FROM claim_journal j",
        "CREATE VIEW v_claim_holds AS SELECT c.space_id, c.key, c.owner, c.token, "
        "c.at_utc AS held_from, (SELECT e.at_utc FROM claim_journal e WHERE "
        "e.space_id = c.space_id AND e.key = c.key AND e.token = c.token AND e.event "
        "IN ('released', 'expired') ORDER BY e.at_utc, e.id LIMIT 1) AS held_until, "
        "(SELECT e.event FROM claim_journal e WHERE e.space_id = c.space_id AND "
        "e.key = c.key AND e.token = c.token AND e.event IN ('released', 'expired') "
        "ORDER BY e.at_utc, e.id LIMIT 1) AS ended_by, (SELECT "
        "MAX(e.lease_expires_at) FROM claim_journal e WHERE e.space_id = c.space_id "
        "AND e.key = c.key AND e.token = c.token AND e.event IN ('claimed', "
        "'renewed')) AS lease_expires_at FROM claim_journal c WHERE c.event = "
        "'claimed'",
        "CREATE VIEW v_quarantine AS SELECT d.space_id, p.address AS recipient, d.id "
        "AS delivery_id, d.message_id, m.seq, m.kind, m.sender, m.body, d.attempts, "
        "d.quarantine_reason, d.last_error, d.created_at_utc FROM deliveries d JOIN "
        "messages m ON m.id = d.message_id JOIN participants p ON p.id = "
        "d.recipient_id WHERE d.state = 'quarantine'",
        "CREATE VIEW v_directives AS SELECT m.space_id, m.seq, m.id, m.sender, "
        "m.recipients, m.body, m.created_at_utc, r.id AS retracted_by, "
        "r.created_at_utc AS retracted_at, CASE WHEN r.id IS NULL THEN 1 ELSE 0 END "
        "AS in_force FROM messages m LEFT JOIN messages r ON r.kind = 'retract' AND "
        "r.ref = m.id AND r.space_id = m.space_id AND r.seq = (SELECT MIN(r2.seq) "
        "FROM messages r2 WHERE r2.kind = 'retract' AND r2.ref = m.id AND "
        "r2.space_id = m.space_id) WHERE m.kind = 'directive'",
    ],
}

DROP: dict[str, list[str]] = {
    "postgresql": [
        "DROP VIEW IF EXISTS v_directives",
        "DROP VIEW IF EXISTS v_quarantine",
        "DROP VIEW IF EXISTS v_claim_holds",
        "DROP VIEW IF EXISTS v_claim_journal",
        "DROP VIEW IF EXISTS v_live_claims",
        "DROP VIEW IF EXISTS v_participants",
        "DROP VIEW IF EXISTS v_inboxes",
        "DROP VIEW IF EXISTS v_inbox",
        "DROP VIEW IF EXISTS v_not_reached",
        "DROP VIEW IF EXISTS v_log",
    ],
    "sqlite": [
        "DROP VIEW IF EXISTS v_directives",
        "DROP VIEW IF EXISTS v_quarantine",
        "DROP VIEW IF EXISTS v_claim_holds",
        "DROP VIEW IF EXISTS v_claim_journal",
        "DROP VIEW IF EXISTS v_live_claims",
        "DROP VIEW IF EXISTS v_participants",
        "DROP VIEW IF EXISTS v_inboxes",
        "DROP VIEW IF EXISTS v_inbox",
        "DROP VIEW IF EXISTS v_not_reached",
        "DROP VIEW IF EXISTS v_log",
    ],
}


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    for statement in DROP[dialect] + CREATE[dialect]:
        op.execute(statement)


def downgrade() -> None:
    for statement in DROP[op.get_bind().dialect.name]:
        op.execute(statement)
