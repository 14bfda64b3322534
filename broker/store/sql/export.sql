-- The exporter (broker.interchange.export): one statement per kind of line of the space
-- layout, selecting the line's fields under their names and in their order
-- (broker.interchange.export.lines checks that when the cursor opens). Extra columns come
-- last and start with '_'. Follow statements read what committed after a
-- position (rowid or seq); snapshot statements read in file order.

-- name: space_kind
SELECT kind, state FROM spaces WHERE id = :space_id

-- name: space
-- space.json (its format is the exporter's, added in Python).
SELECT spaces.id AS id, spaces.kind AS kind, spaces.state AS state,
       spaces.settings AS settings, {last_seq} AS last_seq, {last_bcast} AS last_bcast,
       {log_bytes} AS log_bytes, spaces.created_at_utc AS created_at_utc,
       spaces.updated_at_utc AS updated_at_utc
FROM spaces WHERE spaces.id = :space_id

-- name: log
-- log.jsonl (and the board and broadcast files that repeat its lines), after :after.
-- The outcome is named as in the v_log view.
SELECT m.id AS id, m.seq AS seq, m.created_at_utc AS created_at_utc, m.kind AS kind,
       m.sender AS sender, m.recipients AS "to", m.body AS body, m.urgent AS urgent,
       m.via AS via, m.ref AS ref, {reached_m} AS reached, m.not_reached AS not_reached,
       m.reached_n AS reached_n, m.bcast_no AS bcast_no,
       m.idempotency_key AS idempotency_key, m.size_bytes AS size_bytes,
       {m.mail},
       CASE WHEN m.kind = 'seen' THEN 'receipt'
            WHEN m.reached_n > 0 AND m.not_reached = '[]' THEN 'delivered'
            WHEN m.reached_n > 0 THEN 'partial'
            WHEN m.not_reached <> '[]' THEN 'reached_nobody'
            ELSE 'logged' END AS outcome
FROM messages m WHERE m.space_no = {space_no} AND m.seq > :after ORDER BY m.seq

-- name: events
-- participants.jsonl: the join/leave journal after rowid :after.
SELECT e.id AS id, e.participant_id AS participant_id, e.event AS event,
       e.address AS address, e.codename AS codename, e.agent AS agent, e.run_id AS run_id,
       e.step AS step, e.parent AS parent, e.reason AS reason, e.at_utc AS at_utc,
       e.rowid AS _rowid
FROM participant_events e WHERE e.space_id = :space_id AND e.rowid > :after ORDER BY e.rowid

-- name: directory
-- directory.jsonl: every participant, in join order. Never the token hash.
-- SQLite: `waiting` plus the inbox's deliveries past folds.upto ('waiting'),
-- fewer than 32, that the batched insert trigger has not counted yet (revision 0015).
SELECT p.id AS id, p.address AS address, p.codename AS codename, p.agent AS agent,
       p.run_id AS run_id, p.step AS step, p.parent AS parent, p.role AS role,
       p.archetype AS archetype, p.task AS task, p.is_lead AS is_lead,
       p.messaging AS messaging, p.tools AS tools, p.status AS status, p.waiting + (SELECT count(*) FROM deliveries w WHERE w.rowid > coalesce((SELECT upto FROM folds WHERE name = 'waiting'), 0) AND w.recipient_no = p.rowid AND w.state IN ('ready', 'processing')) AS waiting,
       p.pid AS pid, p.joined_at_utc AS joined_at_utc, p.left_at_utc AS left_at_utc,
       p.last_seen_utc AS last_seen_utc, p.contact_policy AS contact_policy,
       p.contact_allow AS contact_allow
FROM participants p WHERE p.space_id = :space_id ORDER BY p.joined_at_utc, p.id
-- postgresql:
SELECT p.id AS id, p.address AS address, p.codename AS codename, p.agent AS agent,
       p.run_id AS run_id, p.step AS step, p.parent AS parent, p.role AS role,
       p.archetype AS archetype, p.task AS task, p.is_lead AS is_lead,
       p.messaging AS messaging, p.tools AS tools, p.status AS status, p.waiting AS waiting,
       p.pid AS pid, p.joined_at_utc AS joined_at_utc, p.left_at_utc AS left_at_utc,
       p.last_seen_utc AS last_seen_utc, p.contact_policy AS contact_policy,
       p.contact_allow AS contact_allow
FROM participants p WHERE p.space_id = :space_id ORDER BY p.joined_at_utc, p.id

-- name: cursors
-- mailboxes/cursors.jsonl: each participant's broadcast cursor, in join order.
SELECT p.id AS participant_id, p.address AS address, p.bcast_seen AS bcast_seen
FROM participants p WHERE p.space_id = :space_id ORDER BY p.joined_at_utc, p.id

-- name: reservations
-- board/reservations.jsonl: every path reservation ever granted, by token.
SELECT r.token AS token, r.pattern AS pattern, r.mode AS mode, r.holder AS holder,
       r.reason AS reason, r.claimed_at_utc AS claimed_at_utc,
       r.lease_expires_at AS lease_expires_at, r.ended_at_utc AS ended_at_utc
FROM reservations r WHERE r.space_id = :space_id ORDER BY r.token

-- name: keys
-- board/keys.jsonl (and the live claim files): every key ever claimed.
SELECT c.key AS key, c.holder AS holder, c.token AS token,
       c.claimed_at_utc AS claimed_at_utc, c.lease_expires_at AS lease_expires_at
FROM board_claims c WHERE c.space_id = :space_id ORDER BY c.key

-- name: journal
-- board/claims.jsonl: the claim journal after rowid :after.
SELECT j.id AS id, j.key AS key, j.event AS event, j.owner AS owner, j.token AS token,
       j.lease_expires_at AS lease_expires_at, j.at_utc AS "at", j.reason AS reason,
       j.rowid AS _rowid
FROM claim_journal j WHERE j.space_id = :space_id AND j.rowid > :after ORDER BY j.rowid

-- fragment: deliveries
-- An inbox line's columns, with its recipient's address and its message's seq;
-- its message id, and its time unless an import kept another, are its
-- message's (revision 0021).
SELECT {delivery_id} AS id, m.id AS message_id, m.seq AS seq, p.id AS recipient_id,
       p.address AS recipient, d.state AS state,
       coalesce(d.created_at_utc, m.created_at_utc) AS created_at_utc,
       d.attempts AS attempts, d.lease_token AS lease_token, d.lease_owner AS lease_owner,
       d.lease_expires_at AS lease_expires_at, d.acked_at_utc AS acked_at_utc,
       d.last_error AS last_error, d.quarantine_reason AS quarantine_reason,
       d.lease_process AS lease_process, d.lost_lease_token AS lost_lease_token,
       d.rowid AS _rowid
FROM deliveries d JOIN messages m ON {of_message}
JOIN participants p ON p.rowid = d.recipient_no

-- name: inbox
-- mailboxes/<address>/inbox.jsonl: every delivery, by recipient, in FIFO order.
{deliveries}
WHERE m.space_no = {space_no} ORDER BY p.id, 7, 1

-- name: inbox_new
-- Deliveries written after rowid :after (follow).
{deliveries}
WHERE d.rowid > :after AND m.space_no = {space_no} ORDER BY d.rowid

-- name: inbox_reread
-- Deliveries that may have changed since their last line (follow): a JSON array of rowids.
{deliveries}
WHERE d.rowid IN (SELECT value FROM json_each(:rowids))
ORDER BY p.id, 7, 1
-- postgresql:
{deliveries}
WHERE d.rowid IN (SELECT jsonb_array_elements_text(:rowids::jsonb)::bigint)
ORDER BY p.id, 7, 1

-- name: turns
-- mailboxes/<address>/turns.jsonl: every turn, by participant, oldest first.
SELECT u.id AS id, u.participant_id AS participant_id, u.lease_token AS lease_token,
       u.bcast_upto AS bcast_upto, u.state AS state, u.created_at_utc AS created_at_utc,
       u.expires_at AS expires_at, u.seen_at_utc AS seen_at_utc,
       u.lease_process AS lease_process, u.bcast_from AS bcast_from, u.rowid AS _rowid
FROM turns u WHERE u.space_id = :space_id ORDER BY u.participant_id, u.created_at_utc, u.id

-- name: turns_new
SELECT u.id AS id, u.participant_id AS participant_id, u.lease_token AS lease_token,
       u.bcast_upto AS bcast_upto, u.state AS state, u.created_at_utc AS created_at_utc,
       u.expires_at AS expires_at, u.seen_at_utc AS seen_at_utc,
       u.lease_process AS lease_process, u.bcast_from AS bcast_from, u.rowid AS _rowid
FROM turns u WHERE u.space_id = :space_id AND u.rowid > :after ORDER BY u.rowid

-- name: turns_reread
SELECT u.id AS id, u.participant_id AS participant_id, u.lease_token AS lease_token,
       u.bcast_upto AS bcast_upto, u.state AS state, u.created_at_utc AS created_at_utc,
       u.expires_at AS expires_at, u.seen_at_utc AS seen_at_utc,
       u.lease_process AS lease_process, u.bcast_from AS bcast_from, u.rowid AS _rowid
FROM turns u WHERE u.rowid IN (SELECT value FROM json_each(:rowids)) ORDER BY u.rowid
-- postgresql:
SELECT u.id AS id, u.participant_id AS participant_id, u.lease_token AS lease_token,
       u.bcast_upto AS bcast_upto, u.state AS state, u.created_at_utc AS created_at_utc,
       u.expires_at AS expires_at, u.seen_at_utc AS seen_at_utc,
       u.lease_process AS lease_process, u.bcast_from AS bcast_from, u.rowid AS _rowid
FROM turns u WHERE u.rowid IN (SELECT jsonb_array_elements_text(:rowids::jsonb)::bigint)
ORDER BY u.rowid

-- name: transcript
-- mailboxes/<address>/transcript.jsonl: by participant, in the order written.
SELECT x.id AS id, x.participant_id AS participant_id, x.turn_id AS turn_id,
       x.position AS position, x.direction AS direction, x.message_id AS message_id,
       x.kind AS kind, x.content AS content, x.at_utc AS at_utc, x.rowid AS _rowid
FROM transcript x WHERE x.space_id = :space_id ORDER BY x.participant_id, x.rowid

-- name: transcript_new
SELECT x.id AS id, x.participant_id AS participant_id, x.turn_id AS turn_id,
       x.position AS position, x.direction AS direction, x.message_id AS message_id,
       x.kind AS kind, x.content AS content, x.at_utc AS at_utc, x.rowid AS _rowid
FROM transcript x WHERE x.space_id = :space_id AND x.rowid > :after ORDER BY x.rowid

-- name: history
-- mailboxes/<address>/history.jsonl: by participant, in the order written.
SELECT h.id AS id, h.participant_id AS participant_id, h.message_id AS message_id,
       h.turn_id AS turn_id, h.kind AS kind, h.sender AS sender, h.body AS body,
       h.at_utc AS at_utc, h.rowid AS _rowid
FROM history h WHERE h.space_id = :space_id ORDER BY h.participant_id, h.rowid

-- name: history_new
SELECT h.id AS id, h.participant_id AS participant_id, h.message_id AS message_id,
       h.turn_id AS turn_id, h.kind AS kind, h.sender AS sender, h.body AS body,
       h.at_utc AS at_utc, h.rowid AS _rowid
FROM history h WHERE h.space_id = :space_id AND h.rowid > :after ORDER BY h.rowid

-- name: positions
-- Where follow picks up after a snapshot: the last row of each followed table.
SELECT (SELECT COALESCE(MAX(d.rowid), 0) FROM messages m JOIN deliveries d ON {of_message}
        WHERE m.space_no = {space_no}) AS deliveries,
       (SELECT COALESCE(MAX(rowid), 0) FROM turns WHERE space_id = :space_id) AS turns,
       (SELECT COALESCE(MAX(rowid), 0) FROM transcript WHERE space_id = :space_id) AS transcript,
       (SELECT COALESCE(MAX(rowid), 0) FROM history WHERE space_id = :space_id) AS history

-- name: row_count
-- Rows an export of the space writes (for the progress bar).
SELECT (SELECT COUNT(*) FROM participants WHERE space_id = :space_id)
     + (SELECT COUNT(*) FROM participant_events WHERE space_id = :space_id)
     + (SELECT COUNT(*) FROM messages WHERE space_no = {space_no})
     + (SELECT COUNT(*) FROM claim_journal WHERE space_id = :space_id)
     + (SELECT COUNT(*) FROM messages m JOIN deliveries d ON {of_message}
        WHERE m.space_no = {space_no})
     + (SELECT COUNT(*) FROM turns WHERE space_id = :space_id)
     + (SELECT COUNT(*) FROM transcript WHERE space_id = :space_id)
     + (SELECT COUNT(*) FROM history WHERE space_id = :space_id) AS total

-- name: mail_directory
-- The Mailbox Protocol directory: every participant, in join order.
SELECT address, status, role, agent, archetype, task
FROM participants WHERE space_id = :space_id ORDER BY joined_at_utc, id

-- fragment: reached_rows
-- The addresses a message reached (its JSON list) as rows r(value), joined to it.
JOIN json_each({reached_m}) r
-- postgresql:
CROSS JOIN LATERAL jsonb_array_elements_text({reached_m}::jsonb) r(value)

-- fragment: reached_operator
-- The message reached the operator (the LIKE skips the JSON for most rows).
{reached_m} LIKE '%"operator"%'
  AND EXISTS (SELECT 1 FROM json_each({reached_m}) r WHERE r.value = 'operator')
-- postgresql:
{reached_m}::jsonb ? 'operator'

-- name: mail_counts
-- How many mail files each (owner, folder) gets: fixes the width of NN.
SELECT owner, folder, COUNT(*) AS n FROM (
  SELECT p.address AS owner,
         CASE d.state WHEN 'done' THEN 'sent' WHEN 'quarantine' THEN 'quarantine'
              ELSE 'inbox' END AS folder
    FROM messages m JOIN deliveries d ON {of_message}
    JOIN participants p ON p.rowid = d.recipient_no
   WHERE m.space_no = {space_no}
  UNION ALL
  SELECT p.address, CASE WHEN m.bcast_no > p.bcast_seen THEN 'inbox' ELSE 'sent' END
    FROM messages m {reached_rows}
    JOIN participants p ON p.space_id = :space_id AND p.address = r.value
   WHERE m.space_no = {space_no} AND m.bcast_no IS NOT NULL
  UNION ALL
  SELECT 'operator', 'inbox'
    FROM messages m
   WHERE m.space_no = {space_no} AND m.kind <> 'seen' AND {reached_operator}
) c GROUP BY owner, folder

-- name: mail_rows
-- One row per mail file, in (owner, folder, FIFO) order: deliveries by state,
-- broadcasts by the reader's cursor, and what reached the operator.
SELECT p.address AS owner,
       CASE d.state WHEN 'done' THEN 'sent' WHEN 'quarantine' THEN 'quarantine'
            ELSE 'inbox' END AS folder,
       coalesce(d.created_at_utc, m.created_at_utc) AS at, {delivery_id} AS uid,
       m.sender AS sender,
       m.body AS body, m.urgent AS urgent
  FROM deliveries d JOIN messages m ON {of_message}
  JOIN participants p ON p.rowid = d.recipient_no
 WHERE m.space_no = {space_no}
UNION ALL
SELECT p.address, CASE WHEN m.bcast_no > p.bcast_seen THEN 'inbox' ELSE 'sent' END,
       m.created_at_utc, m.id || '/' || p.id, m.sender, m.body, m.urgent
  FROM messages m {reached_rows}
  JOIN participants p ON p.space_id = :space_id AND p.address = r.value
 WHERE m.space_no = {space_no} AND m.bcast_no IS NOT NULL
UNION ALL
SELECT 'operator', 'inbox', m.created_at_utc, m.id, m.sender, m.body, m.urgent
  FROM messages m
 WHERE m.space_no = {space_no} AND m.kind <> 'seen' AND {reached_operator}
ORDER BY 1, 2, 3, 4

-- name: message_count
SELECT COUNT(*) AS n FROM messages WHERE space_no = {space_no}
