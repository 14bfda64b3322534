-- Retention (broker.interchange.purge): the only statements that delete rows. A purge runs
-- them in one transaction, after the marker row in `purging` that the append-only
-- triggers consult, for an archived space whose export was verified.

-- name: space
SELECT id, kind, state FROM spaces WHERE id = :space_id

-- name: rows_spaces
-- Every column of the space's spaces rows: the purge's fingerprint of them.
SELECT id, kind, state, settings, last_seq, last_bcast, log_bytes, created_at_utc, updated_at_utc
FROM spaces WHERE id = :space_id

-- name: rows_deliveries
-- Every column of the space's deliveries rows: the purge's fingerprint of them
-- (the message's id, space and time as before revision 0021, which keeps them
-- in the message only; the recipient's id as before revision 0022).
SELECT {delivery_id} AS id, CAST(:space_id AS text) AS space_id, m.id AS message_id,
  (SELECT p.id FROM participants p WHERE p.rowid = d.recipient_no) AS recipient_id, d.state,
  coalesce(d.created_at_utc, m.created_at_utc) AS created_at_utc, d.attempts, d.lease_token,
  d.lease_owner, d.lease_expires_at, d.acked_at_utc, d.last_error, d.quarantine_reason
FROM messages m JOIN deliveries d ON {of_message} WHERE m.space_no = {space_no}

-- name: rows_turns
-- Every column of the space's turns rows: the purge's fingerprint of them.
SELECT id, space_id, participant_id, lease_token, bcast_upto, state, created_at_utc, expires_at, seen_at_utc
FROM turns WHERE space_id = :space_id

-- name: rows_transcript
-- Every column of the space's transcript rows: the purge's fingerprint of them.
SELECT id, space_id, participant_id, turn_id, position, direction, message_id, kind, content, at_utc
FROM transcript WHERE space_id = :space_id

-- name: rows_history
-- Every column of the space's history rows: the purge's fingerprint of them.
SELECT id, space_id, participant_id, message_id, turn_id, kind, sender, body, at_utc
FROM history WHERE space_id = :space_id

-- name: rows_participant_events
-- Every column of the space's participant_events rows: the purge's fingerprint of them.
SELECT id, space_id, participant_id, event, address, codename, agent, run_id, step, parent, reason, at_utc
FROM participant_events WHERE space_id = :space_id

-- name: rows_claim_journal
-- Every column of the space's claim_journal rows: the purge's fingerprint of them.
SELECT id, space_id, key, event, owner, token, lease_expires_at, at_utc, reason
FROM claim_journal WHERE space_id = :space_id

-- name: rows_board_claims
-- Every column of the space's board_claims rows: the purge's fingerprint of them.
SELECT space_id, key, holder, token, claimed_at_utc, lease_expires_at
FROM board_claims WHERE space_id = :space_id

-- name: rows_reservations
-- Every column of the space's reservations rows: the purge's fingerprint of them.
SELECT space_id, token, pattern, mode, holder, reason, claimed_at_utc, lease_expires_at,
  ended_at_utc
FROM reservations WHERE space_id = :space_id

-- name: rows_messages
-- Every column of the space's messages rows: the purge's fingerprint of them.
SELECT id, CAST(:space_id AS text) AS space_id, seq, kind, sender, recipients, body, urgent, via, ref, {reached_row} AS reached, not_reached, reached_n, bcast_no, idempotency_key, size_bytes, created_at_utc
FROM messages WHERE space_no = {space_no}

-- name: rows_participants
-- Every column of the space's participants rows: the purge's fingerprint of them.
SELECT id, space_id, address, codename, agent, run_id, step, parent, role, archetype, task, is_lead, messaging, tools, token_hash, status, bcast_seen, {waiting} AS waiting, pid, joined_at_utc, left_at_utc, last_seen_utc
FROM participants WHERE space_id = :space_id

-- name: journal
-- The store-level record of the purge, written in the purge's transaction.
INSERT INTO purges (id, space_id, space_kind, via, os_user, pid, export_dir, digest, files,
                    counts, at_utc)
VALUES (:id, :space_id, :space_kind, :via, :os_user, :pid, :export_dir, :digest, :files,
        :counts, :at_utc)

-- name: mark
-- Lets the append-only triggers pass DELETEs of this space's rows (and no other's);
-- refused by a trigger unless the space is archived.
INSERT INTO purging (space_id, purge_id) VALUES (:space_id, :purge_id)

-- name: unmark
DELETE FROM purging WHERE space_id = :space_id

-- name: delete_deliveries
-- The rowid ranges of the space's log (revision 0021).
DELETE FROM deliveries WHERE rowid IN (
  SELECT d.rowid FROM messages m JOIN deliveries d ON {of_message} WHERE m.space_no = {space_no})

-- name: delete_turns
DELETE FROM turns WHERE space_id = :space_id

-- name: delete_transcript
DELETE FROM transcript WHERE space_id = :space_id

-- name: delete_history
DELETE FROM history WHERE space_id = :space_id

-- name: delete_participant_events
DELETE FROM participant_events WHERE space_id = :space_id

-- name: delete_claim_journal
DELETE FROM claim_journal WHERE space_id = :space_id

-- name: delete_board_claims
DELETE FROM board_claims WHERE space_id = :space_id

-- name: delete_reservations
DELETE FROM reservations WHERE space_id = :space_id

-- name: delete_messages
DELETE FROM messages WHERE space_no = {space_no}

-- name: delete_message_aliases
-- The space's message aliases (revision 0018): an index of its log, not counted.
DELETE FROM message_aliases WHERE space_id = :space_id

-- name: delete_participants
DELETE FROM participants WHERE space_id = :space_id

-- name: delete_space
DELETE FROM spaces WHERE id = :space_id

-- name: purges
-- The purge journal, newest last.
SELECT id, space_id, space_kind, via, os_user, pid, export_dir, digest, files, counts, at_utc
FROM purges ORDER BY at_utc, id
