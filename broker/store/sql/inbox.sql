-- Inboxes as queues (broker.delivery.inbox, S13-S16, S32): the only writer of `deliveries`.

-- fragment: unqueued
-- A new row's `queued` (revision 0019): SQLite leaves it out of the ready
-- index until the waiting fold (every 32 messages) puts it in; until then a
-- claim finds it in the tail past folds.upto ('waiting'). PostgreSQL pays
-- round trips, not pages: in at once.
0
-- postgresql:
1

-- fragment: ready_tail
-- The inbox's ready rows past folds.upto ('waiting'): not in the ready index
-- yet (`queued` 0), a rowid range of at most 32 messages' deliveries.
FROM deliveries w WHERE w.rowid > coalesce((SELECT upto FROM folds WHERE name = 'waiting'), 0)
  AND +w.recipient_no = {recipient_no} AND w.state = 'ready' AND w.queued = 0

-- fragment: new_row
-- A new delivery's columns and its rowid: its message's rowid times 2^20 plus
-- the deliveries of the message already in (revision 0017).
INSERT INTO deliveries (rowid, id, recipient_no, state, created_at_utc, attempts,
  lease_token, lease_owner, lease_expires_at, acked_at_utc, last_error,
  quarantine_reason, lease_process, lost_lease_token, queued)
SELECT m.rowid * 1048576 + (SELECT count(*) FROM deliveries k
    WHERE k.rowid BETWEEN m.rowid * 1048576 AND m.rowid * 1048576 + 1048575),

-- name: insert
-- New deliveries of a send: its message is found by its seq (:message_seq).
-- The rowid is the message's rowid times 2^20 plus the deliveries of the
-- message already in (revision 0017): a message's deliveries are one rowid
-- range (no message_id column), and rowids grow with the log, so an inbox
-- in rowid order is in log order (S13). A new row is ready, never claimed,
-- with its message's time (NULL: the message, its space and its time are the
-- rowid's, revision 0021) and its message's id and place for an id (NULL:
-- counters.sql, delivery_id, revision 0024): those values are written here, not
-- bound (three parameters, not twelve: binding is a third of the statement's time).
{new_row} NULL, {recipient_no}, 'ready', NULL, 0,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, {unqueued}
FROM messages m WHERE m.space_no = {space_no} AND m.seq = :message_seq

-- name: restore
-- Rows restored by the importer, every column as given, the message found by
-- its id (counters.sql, id_seq: :id is the message's here, :delivery_id the
-- row's). No message, no row (the writer counts them). The row's time is kept
-- only where it is not its message's (revision 0021).
{new_row} :delivery_id, {recipient_no}, :state,
  CASE WHEN :created_at_utc = m.created_at_utc THEN NULL ELSE :created_at_utc END, :attempts,
  :lease_token, :lease_owner, :lease_expires_at, :acked_at_utc, :last_error, :quarantine_reason,
  :lease_process, :lost_lease_token, {unqueued}
FROM messages m WHERE m.space_no = {space_no} AND m.seq = {id_seq} AND m.id = :id

-- fragment: candidates
-- The rowids of the first :n claimable rows of an inbox, in log order (S13,
-- S15: within an inbox rowid order is the log's, revision 0017): the first
-- ready rows (the ready index holds them in rowid order, and the tail past
-- the waiting fold those not in it yet, revision 0019) and the oldest expired
-- leases, each cut to :n before the merge.
SELECT r FROM (
    SELECT * FROM (SELECT rowid AS r FROM deliveries
      WHERE recipient_no = {recipient_no} AND state = 'ready' AND queued = 1
      ORDER BY rowid LIMIT :n)
    UNION ALL
    SELECT * FROM (SELECT w.rowid AS r {ready_tail} ORDER BY w.rowid LIMIT :n)
    UNION ALL
    SELECT * FROM (SELECT rowid AS r FROM deliveries
      WHERE recipient_no = {recipient_no} AND state = 'processing' AND lease_expires_at < :now
      ORDER BY rowid LIMIT :n)
  ) ORDER BY r LIMIT :n

-- fragment: locked_candidates
-- The same on PostgreSQL, locked as they are chosen (SKIP LOCKED: a row another
-- claim holds is passed over, never waited for, never taken twice): a bare
-- LIMIT subquery could over-claim at READ COMMITTED.
SELECT rowid FROM deliveries
  WHERE recipient_no = {recipient_no}
    AND (state = 'ready' OR (state = 'processing' AND lease_expires_at < :now))
  ORDER BY rowid LIMIT :n
  FOR UPDATE SKIP LOCKED

-- name: claim
-- The claim (S13, S15), one statement: the oldest ready rows and the oldest
-- expired leases of one inbox, each cut to :n on its own partial index before
-- the merge, move to processing under the new lease. Rows are found by the
-- rowid each partial index holds (deliveries has no index on its ULID, revision
-- 0015; on PostgreSQL the rowid identity column and its unique index). A
-- candidate already handed out :max_deliveries times goes to quarantine instead (every CASE reads the old
-- row). The message each row carries is returned with it (no second statement),
-- as one JSON array [delivery id, id, time, kind, sender, body, urgent, {mail}]: one
-- lookup of the message per row, not one per column (half the statement's
-- time for the few rows a busy inbox hands out at once). The row's time is
-- its message's unless an import kept another (revision 0021); its id is
-- derived from the message's unless it keeps one (revision 0024). SQLite's
-- RETURNING cannot alias the row, so the lookup reads it again by its rowid
-- as `d`, the alias counters.sql's delivery_id names.
UPDATE deliveries SET
  state = CASE WHEN attempts >= :max_deliveries THEN 'quarantine' ELSE 'processing' END,
  attempts = CASE WHEN attempts >= :max_deliveries THEN attempts ELSE attempts + 1 END,
  lease_token = CASE WHEN attempts >= :max_deliveries THEN lease_token ELSE :token END,
  lease_owner = CASE WHEN attempts >= :max_deliveries THEN lease_owner ELSE :owner END,
  lease_expires_at = CASE WHEN attempts >= :max_deliveries THEN lease_expires_at ELSE :expires END,
  lease_process = CASE WHEN attempts >= :max_deliveries THEN lease_process ELSE :process END,
  quarantine_reason = CASE WHEN attempts >= :max_deliveries THEN 'max_deliveries'
    ELSE quarantine_reason END,
  -- The evidence of a lease that ran out: whose it was and when it ended; and
  -- which lease lost the row, so a late settle of it is told (S14).
  last_error = CASE WHEN state = 'processing'
    THEN 'lease of ' || coalesce(lease_owner, '?') || ' expired at ' || lease_expires_at
    ELSE last_error END,
  lost_lease_token = CASE WHEN state = 'processing' THEN lease_token ELSE lost_lease_token END
WHERE rowid IN ({candidates})
RETURNING rowid AS r, state, attempts,
  (SELECT json_array({delivery_id}, m.id, coalesce(d.created_at_utc, m.created_at_utc), kind,
     sender, body, urgent, {mail})
   FROM deliveries d JOIN messages m ON m.rowid = d.rowid >> 20
   WHERE d.rowid = deliveries.rowid) AS message
-- postgresql:
WITH candidates AS ({locked_candidates}), claimed AS (
UPDATE deliveries d SET
  state = CASE WHEN d.attempts >= :max_deliveries THEN 'quarantine' ELSE 'processing' END,
  attempts = CASE WHEN d.attempts >= :max_deliveries THEN d.attempts ELSE d.attempts + 1 END,
  lease_token = CASE WHEN d.attempts >= :max_deliveries THEN d.lease_token ELSE :token END,
  lease_owner = CASE WHEN d.attempts >= :max_deliveries THEN d.lease_owner ELSE :owner END,
  lease_expires_at = CASE WHEN d.attempts >= :max_deliveries THEN d.lease_expires_at ELSE :expires END,
  lease_process = CASE WHEN d.attempts >= :max_deliveries THEN d.lease_process ELSE :process END,
  quarantine_reason = CASE WHEN d.attempts >= :max_deliveries THEN 'max_deliveries'
    ELSE d.quarantine_reason END,
  last_error = CASE WHEN d.state = 'processing'
    THEN 'lease of ' || coalesce(d.lease_owner, '?') || ' expired at ' || d.lease_expires_at
    ELSE d.last_error END,
  lost_lease_token = CASE WHEN d.state = 'processing' THEN d.lease_token
    ELSE d.lost_lease_token END
FROM candidates c WHERE d.rowid = c.rowid
RETURNING d.rowid AS r, d.state, d.attempts,
  (SELECT json_build_array({delivery_id}, m.id, coalesce(d.created_at_utc, m.created_at_utc),
     m.kind, m.sender, m.body, m.urgent, {m.mail})::text
   FROM messages m WHERE m.rowid = d.rowid >> 20) AS message
)
SELECT * FROM claimed ORDER BY r

-- name: quarantine_head
-- Poison at the head of an inbox (S15): quarantine the candidates among the
-- first :n that were handed out :max_deliveries times, leaving the others.
-- A claim that met poison runs this with growing :n, so however much poison
-- precedes a good message, the claim reaches it.
UPDATE deliveries SET
  state = 'quarantine',
  quarantine_reason = 'max_deliveries',
  last_error = CASE WHEN state = 'processing'
    THEN 'lease of ' || coalesce(lease_owner, '?') || ' expired at ' || lease_expires_at
    ELSE last_error END,
  lost_lease_token = CASE WHEN state = 'processing' THEN lease_token ELSE lost_lease_token END
WHERE attempts >= :max_deliveries AND rowid IN ({candidates})
RETURNING rowid
-- postgresql:
WITH candidates AS ({locked_candidates})
UPDATE deliveries d SET
  state = 'quarantine',
  quarantine_reason = 'max_deliveries',
  last_error = CASE WHEN d.state = 'processing'
    THEN 'lease of ' || coalesce(d.lease_owner, '?') || ' expired at ' || d.lease_expires_at
    ELSE d.last_error END,
  lost_lease_token = CASE WHEN d.state = 'processing' THEN d.lease_token
    ELSE d.lost_lease_token END
FROM candidates c WHERE d.rowid = c.rowid AND d.attempts >= :max_deliveries
RETURNING d.rowid

-- name: claimable
-- Whether a claim would find anything (S13, S15): a ready row or an expired
-- lease in the inbox, each one probe of its partial index. Read in a snapshot
-- before the claim, so a claim of an empty inbox (most claims of a busy
-- swarm) takes no write lock and writes nothing.
SELECT EXISTS (SELECT 1 FROM deliveries WHERE recipient_no = {recipient_no}
    AND state = 'ready' AND queued = 1)
  OR EXISTS (SELECT 1 {ready_tail})
  OR EXISTS (SELECT 1 FROM deliveries WHERE recipient_no = {recipient_no}
    AND state = 'processing' AND lease_expires_at < :now) AS claimable
-- postgresql:
SELECT EXISTS (SELECT 1 FROM deliveries WHERE recipient_no = {recipient_no} AND state = 'ready')
  OR EXISTS (SELECT 1 FROM deliveries WHERE recipient_no = {recipient_no}
    AND state = 'processing' AND lease_expires_at < :now) AS claimable

-- name: claimable_among
-- Which of the inboxes :ids (a JSON array of participant ids) a claim would
-- find anything in, as `claimable` reads one: the keeper's safety tick probes
-- every parked claim's inbox in one statement (broker.delivery.waits.Keeper),
-- not a statement each (a thousand parked long-polls: ~20 ms of the server's
-- event loop waited out).
SELECT p.id FROM participants p
WHERE p.id IN (SELECT value FROM json_each(:ids))
  AND (EXISTS (SELECT 1 FROM deliveries WHERE recipient_no = p.rowid
      AND state = 'ready' AND queued = 1)
    OR EXISTS (SELECT 1 FROM deliveries w
      WHERE w.rowid > coalesce((SELECT upto FROM folds WHERE name = 'waiting'), 0)
      AND +w.recipient_no = p.rowid AND w.state = 'ready' AND w.queued = 0)
    OR EXISTS (SELECT 1 FROM deliveries WHERE recipient_no = p.rowid
      AND state = 'processing' AND lease_expires_at < :now))
-- postgresql:
SELECT p.id FROM participants p
WHERE p.id IN (SELECT json_array_elements_text(CAST(:ids AS json)))
  AND (EXISTS (SELECT 1 FROM deliveries WHERE recipient_no = p.rowid AND state = 'ready')
    OR EXISTS (SELECT 1 FROM deliveries WHERE recipient_no = p.rowid
      AND state = 'processing' AND lease_expires_at < :now))

-- name: next_expiry
-- When the inbox's next lease runs out (a waiter sleeps until then: expiry rings
-- no doorbell).
SELECT min(lease_expires_at) AS expiry FROM deliveries
WHERE recipient_no = {recipient_no} AND state = 'processing'

-- name: ack
-- processing -> done for the rows still held under the lease (S14); :ids is a
-- JSON array of message ids, or NULL for the whole lease. `+recipient_no`:
-- find the rows by token, not by scanning the inbox's leases.
UPDATE deliveries SET state = 'done', acked_at_utc = :now
WHERE lease_token = :token AND +recipient_no = {recipient_no} AND state = 'processing'
  AND (:ids IS NULL OR {message_of_row} IN (SELECT value FROM json_each(:ids)))
RETURNING {message_of_row} AS message_id
-- postgresql:
UPDATE deliveries SET state = 'done', acked_at_utc = :now
WHERE lease_token = :token AND recipient_no = {recipient_no} AND state = 'processing'
  AND (CAST(:ids AS json) IS NULL
    OR {message_of_row} IN (SELECT json_array_elements_text(CAST(:ids AS json))))
RETURNING {message_of_row} AS message_id

-- name: release
-- processing -> ready, for replay (S14); the delivery count stays. The owner
-- stays too, as evidence (S15: a quarantine names the last lease owner however
-- its last lease ended); nobody holds a ready row (no expiry, no process).
UPDATE deliveries SET state = 'ready', lease_expires_at = NULL,
  lease_process = NULL, last_error = coalesce(:error, last_error)
WHERE lease_token = :token AND +recipient_no = {recipient_no} AND state = 'processing'
  AND (:ids IS NULL OR {message_of_row} IN (SELECT value FROM json_each(:ids)))
RETURNING {message_of_row} AS message_id
-- postgresql:
UPDATE deliveries SET state = 'ready', lease_expires_at = NULL,
  lease_process = NULL, last_error = coalesce(:error, last_error)
WHERE lease_token = :token AND recipient_no = {recipient_no} AND state = 'processing'
  AND (CAST(:ids AS json) IS NULL
    OR {message_of_row} IN (SELECT json_array_elements_text(CAST(:ids AS json))))
RETURNING {message_of_row} AS message_id

-- name: extend
-- A new expiry for the rows still held under the lease.
UPDATE deliveries SET lease_expires_at = :expires
WHERE lease_token = :token AND +recipient_no = {recipient_no} AND state = 'processing'
  AND (:ids IS NULL OR {message_of_row} IN (SELECT value FROM json_each(:ids)))
RETURNING {message_of_row} AS message_id
-- postgresql:
UPDATE deliveries SET lease_expires_at = :expires
WHERE lease_token = :token AND recipient_no = {recipient_no} AND state = 'processing'
  AND (CAST(:ids AS json) IS NULL
    OR {message_of_row} IN (SELECT json_array_elements_text(CAST(:ids AS json))))
RETURNING {message_of_row} AS message_id

-- name: quarantine
-- Set a held message aside with its evidence (S15).
UPDATE deliveries SET state = 'quarantine', quarantine_reason = :reason,
  last_error = coalesce(:error, last_error)
WHERE lease_token = :token AND +recipient_no = {recipient_no} AND state = 'processing'
  AND (:ids IS NULL OR {message_of_row} IN (SELECT value FROM json_each(:ids)))
RETURNING {message_of_row} AS message_id
-- postgresql:
UPDATE deliveries SET state = 'quarantine', quarantine_reason = :reason,
  last_error = coalesce(:error, last_error)
WHERE lease_token = :token AND recipient_no = {recipient_no} AND state = 'processing'
  AND (CAST(:ids AS json) IS NULL
    OR {message_of_row} IN (SELECT json_array_elements_text(CAST(:ids AS json))))
RETURNING {message_of_row} AS message_id

-- name: by_message_ids
-- Why a settle missed some ids: where each of them is now. :ids is a JSON
-- array of [id, the seq it spells] (broker.ids.seq_in_id; an alias wins, as
-- in counters.sql's id_seq). A message's deliveries are the rowid range of its
-- rowid (revision 0017).
SELECT m.id AS message_id, d.state, d.lease_token, d.lost_lease_token
FROM json_each(:ids) i JOIN messages m ON m.space_no = {space_no}
  AND m.seq = coalesce((SELECT a.seq FROM message_aliases a
    WHERE a.space_id = :space_id AND a.id = i.value ->> 0), i.value ->> 1)
  AND m.id = i.value ->> 0
JOIN deliveries d
  ON d.rowid BETWEEN m.rowid * 1048576 AND m.rowid * 1048576 + 1048575
WHERE d.recipient_no = {recipient_no}
-- postgresql:
SELECT m.id AS message_id, d.state, d.lease_token, d.lost_lease_token
FROM json_array_elements(CAST(:ids AS json)) i JOIN messages m ON m.space_no = {space_no}
  AND m.seq = coalesce((SELECT a.seq FROM message_aliases a
    WHERE a.space_id = :space_id AND a.id = i ->> 0), CAST(i ->> 1 AS bigint))
  AND m.id = i ->> 0
JOIN deliveries d
  ON d.rowid BETWEEN m.rowid * 1048576 AND m.rowid * 1048576 + 1048575
WHERE d.recipient_no = {recipient_no}

-- name: by_token
-- Why a settle of a whole lease found nothing held: where its rows are now,
-- those it still names and those it lost to a later claim or to restart
-- recovery (S14), in inbox order. Each branch is one probe of its token index.
SELECT {message_of_row} AS message_id, state, lease_token, lost_lease_token
FROM deliveries WHERE rowid IN (
  SELECT rowid FROM deliveries WHERE lease_token = :token AND recipient_no = {recipient_no}
  UNION
  SELECT rowid FROM deliveries WHERE lost_lease_token = :token AND recipient_no = {recipient_no}
) ORDER BY rowid

-- name: lease_processes
-- The processes holding an inbox's leases (restart recovery, S32).
SELECT DISTINCT lease_process FROM deliveries
WHERE recipient_no = {recipient_no} AND state = 'processing' AND lease_process IS NOT NULL

-- name: recover
-- Restart recovery (S32): the leases of processes that are gone (:processes, a
-- JSON array) go back to ready at once; the claim that took them counted the
-- attempt. The token stays, and is recorded as the lease that lost the row,
-- so a late settle under it is told what happened (S14); the owner stays as
-- evidence, as on a release (S15).
UPDATE deliveries SET state = 'ready',
  last_error = 'lease of ' || coalesce(lease_owner, '?') || ' returned at ' || :now
    || ': its process ' || lease_process || ' is gone',
  lease_expires_at = NULL, lease_process = NULL, lost_lease_token = lease_token
WHERE recipient_no = {recipient_no} AND state = 'processing'
  AND lease_process IN (SELECT value FROM json_each(:processes))
RETURNING {message_of_row} AS message_id
-- postgresql:
UPDATE deliveries SET state = 'ready',
  last_error = 'lease of ' || coalesce(lease_owner, '?') || ' returned at ' || :now
    || ': its process ' || lease_process || ' is gone',
  lease_expires_at = NULL, lease_process = NULL, lost_lease_token = lease_token
WHERE recipient_no = {recipient_no} AND state = 'processing'
  AND lease_process IN (SELECT json_array_elements_text(CAST(:processes AS json)))
RETURNING {message_of_row} AS message_id

-- name: quarantined
-- The operator's view of quarantine (S15), oldest first, with the evidence.
-- The quarantine index is the recipient's (revision 0021): the space's rows
-- are its participants'.
SELECT {delivery_id} AS delivery_id, m.id AS message_id, p.address AS recipient, m.kind, m.sender,
  m.body, coalesce(d.created_at_utc, m.created_at_utc) AS created_at_utc, d.attempts,
  d.quarantine_reason, d.last_error, d.lease_owner
FROM participants p
JOIN deliveries d ON d.recipient_no = p.rowid AND d.state = 'quarantine'
JOIN messages m ON {of_message}
WHERE p.space_id = :space_id
ORDER BY 7, 1

-- fragment: returned_ids
-- What a requeue returns of each row it updated (the `deliveries` row its
-- RETURNING is at): its id, its message's and its recipient's.
(SELECT {delivery_id} FROM deliveries d JOIN messages m ON m.rowid = d.rowid >> 20
   WHERE d.rowid = deliveries.rowid) AS id,
  {message_of_row} AS message_id,
  (SELECT p.id FROM participants p WHERE p.rowid = deliveries.recipient_no) AS recipient_id

-- name: requeue
-- Quarantined deliveries (by delivery id or message id, :ids a JSON array) back
-- to ready with a fresh delivery count. The space's rows are its participants'
-- on the quarantine index; a row's id is derived from its message where it
-- keeps none (counters.sql, delivery_id, revision 0024).
UPDATE deliveries SET state = 'ready', attempts = 0, quarantine_reason = NULL,
  lease_owner = NULL, lease_expires_at = NULL, lease_process = NULL
WHERE rowid IN (SELECT d.rowid FROM participants p
    JOIN deliveries d ON d.recipient_no = p.rowid AND d.state = 'quarantine'
    JOIN messages m ON {of_message}
  WHERE p.space_id = :space_id
    AND ({delivery_id} IN (SELECT value FROM json_each(:ids))
      OR m.id IN (SELECT value FROM json_each(:ids))))
RETURNING {returned_ids}
-- postgresql:
UPDATE deliveries SET state = 'ready', attempts = 0, quarantine_reason = NULL,
  lease_owner = NULL, lease_expires_at = NULL, lease_process = NULL
WHERE rowid IN (SELECT d.rowid FROM participants p
    JOIN deliveries d ON d.recipient_no = p.rowid AND d.state = 'quarantine'
    JOIN messages m ON {of_message}
  WHERE p.space_id = :space_id
    AND ({delivery_id} IN (SELECT json_array_elements_text(CAST(:ids AS json)))
      OR m.id IN (SELECT json_array_elements_text(CAST(:ids AS json)))))
RETURNING {returned_ids}

-- name: stats
-- A space's deliveries by state, and how many extra deliveries redelivery cost:
-- the rowid ranges of the space's log (revision 0021).
SELECT count(*) FILTER (WHERE d.state = 'ready') AS ready,
  count(*) FILTER (WHERE d.state = 'processing') AS processing,
  count(*) FILTER (WHERE d.state = 'done') AS done,
  count(*) FILTER (WHERE d.state = 'quarantine') AS quarantine,
  coalesce(sum(d.attempts - 1) FILTER (WHERE d.attempts > 1), 0) AS redeliveries
FROM messages m JOIN deliveries d ON {of_message} WHERE m.space_no = {space_no}

-- name: by_inbox
-- Each participant's inbox as a queue, for the operator's console, read on the
-- partial indexes (never the finished rows): waiting (ready, and leases that
-- ran out: the next claim takes them), in flight (leased and not expired),
-- retried (of those, the ones handed out before: a lease expired or was
-- released) and quarantined. In join order.
-- SQLite: the ready rows of the index and of the tail past the waiting fold
-- (revision 0019).
SELECT p.address, p.status,
  (SELECT count(*) FROM deliveries d WHERE d.recipient_no = p.rowid AND d.state = 'ready'
     AND d.queued = 1)
  + (SELECT count(*) FROM deliveries w WHERE w.rowid > coalesce((SELECT upto FROM folds WHERE name = 'waiting'), 0) AND +w.recipient_no = p.rowid AND w.state = 'ready' AND w.queued = 0)
  + (SELECT count(*) FROM deliveries d WHERE d.recipient_no = p.rowid AND d.state = 'processing'
     AND d.lease_expires_at <= :at) AS waiting,
  (SELECT count(*) FROM deliveries d WHERE d.recipient_no = p.rowid AND d.state = 'processing'
     AND d.lease_expires_at > :at) AS in_flight,
  (SELECT count(*) FROM deliveries d WHERE d.recipient_no = p.rowid AND d.state = 'ready'
     AND d.queued = 1 AND d.attempts > 0)
  + (SELECT count(*) FROM deliveries w WHERE w.rowid > coalesce((SELECT upto FROM folds WHERE name = 'waiting'), 0) AND +w.recipient_no = p.rowid AND w.state = 'ready' AND w.queued = 0 AND w.attempts > 0)
  + (SELECT count(*) FROM deliveries d WHERE d.recipient_no = p.rowid AND d.state = 'processing'
     AND (d.attempts > 1 OR d.lease_expires_at <= :at)) AS retried,
  (SELECT count(*) FROM deliveries d WHERE d.recipient_no = p.rowid
     AND d.state = 'quarantine') AS quarantined
FROM participants p WHERE p.space_id = :space_id ORDER BY p.joined_at_utc, p.id
-- postgresql:
SELECT p.address, p.status,
  (SELECT count(*) FROM deliveries d WHERE d.recipient_no = p.rowid AND d.state = 'ready')
  + (SELECT count(*) FROM deliveries d WHERE d.recipient_no = p.rowid AND d.state = 'processing'
     AND d.lease_expires_at <= :at) AS waiting,
  (SELECT count(*) FROM deliveries d WHERE d.recipient_no = p.rowid AND d.state = 'processing'
     AND d.lease_expires_at > :at) AS in_flight,
  (SELECT count(*) FROM deliveries d WHERE d.recipient_no = p.rowid AND d.state = 'ready'
     AND d.attempts > 0)
  + (SELECT count(*) FROM deliveries d WHERE d.recipient_no = p.rowid AND d.state = 'processing'
     AND (d.attempts > 1 OR d.lease_expires_at <= :at)) AS retried,
  (SELECT count(*) FROM deliveries d WHERE d.recipient_no = p.rowid
     AND d.state = 'quarantine') AS quarantined
FROM participants p WHERE p.space_id = :space_id ORDER BY p.joined_at_utc, p.id
