-- Sending and the log (broker.mail.messages, broker.mail.sending, broker.mail.recipients): the
-- only writers of `messages` and `deliveries`. A send writes no space row: the
-- space's counters are derived from the log (revision 0017).

-- name: space
-- The space a send appends to: state, limits and counters (a send by an agent
-- gets these from its authorization read, auth.caller; the operator's and the
-- directives' sends, and the log's rows outside a send, read them here).
SELECT state, settings, {last_seq} AS last_seq, {log_bytes} AS log_bytes,
  {last_bcast} AS last_bcast
FROM spaces WHERE id = :space_id

-- name: space_kind
SELECT kind FROM spaces WHERE id = :space_id

-- name: insert_message
-- The one INSERT of a log row. `reached` is written only where it is not the
-- recipients as given (NULL, revision 0026: a direct message to addresses that
-- all took it, most of the log); readers take {reached_m} / {reached_row}.
INSERT INTO messages (id, space_no, seq, kind, sender, recipients, body, urgent, via, ref,
  reached, not_reached, reached_n, bcast_no, idempotency_key, size_bytes, created_at_utc,
  {mail})
VALUES (:id, {space_no}, :seq, :kind, :sender, :recipients, :body, :urgent, :via, :ref,
  CASE WHEN CAST(:reached AS text) = CAST(:recipients AS text) THEN NULL ELSE :reached END,
  :not_reached, :reached_n, :bcast_no, :idempotency_key, :size_bytes, :created_at_utc,
  {:mail})

-- name: insert_alias
-- An imported message whose id does not name its seq: where it is (revision
-- 0018; counters.sql, id_seq).
INSERT INTO message_aliases (space_id, id, seq) VALUES (:space_id, :id, :seq)

-- name: logged_key
-- The first send of an idempotency key by this sender in a space (S12, S45:
-- another sender's key is another key), with what a repeat must match (kind,
-- recipients, body, mail fields).
SELECT id, seq, kind, sender, {reached_row} AS reached, not_reached, recipients, body, urgent,
  {mail}
FROM messages
WHERE space_no = {space_no} AND sender = :sender AND idempotency_key = :key

-- name: at_address
-- A recipient by address, with its contact policy (S38): a direct send needs no
-- other read to know whether it may reach it.
SELECT id, address, status, {waiting} AS waiting, contact_policy, contact_allow, parent
FROM participants WHERE space_id = :space_id AND address = :address

-- name: live_by_agent
-- A `role:` form (S6): the live participants of that agent name, but the sender.
SELECT id, address, status, {waiting} AS waiting, contact_policy, contact_allow, parent
FROM participants WHERE space_id = :space_id AND agent = :value
  AND status IN ('running', 'idle') AND address != :sender
ORDER BY joined_at_utc, id

-- name: live_by_step
-- A `step:` form (S6): the live participants of that workflow step, but the sender.
SELECT id, address, status, {waiting} AS waiting, contact_policy, contact_allow, parent
FROM participants WHERE space_id = :space_id AND step = :value
  AND status IN ('running', 'idle') AND address != :sender
ORDER BY joined_at_utc, id

-- name: broadcast_readers
-- The live readers of a broadcast, with their cursors: the one furthest
-- behind is what broadcast_cap counts from (S7).
SELECT id, address, bcast_seen, {waiting} AS waiting FROM participants
WHERE space_id = :space_id AND status IN ('running', 'idle') AND address != :sender
ORDER BY joined_at_utc, id

-- name: seq_of
-- The log position of a message id of the space (a cursor: --after, the board).
SELECT seq FROM messages WHERE space_no = {space_no} AND seq = {id_seq} AND id = :id

-- name: log
-- The log after a seq, in order; `kinds` a JSON list (NULL: every kind), `lim`
-- NULL for no limit.
SELECT id, CAST(:space_id AS text) AS space_id, seq, kind, sender, recipients, body, urgent,
  via, ref, {reached_row} AS reached,
  not_reached, idempotency_key, created_at_utc, {mail}
FROM messages
WHERE space_no = {space_no} AND seq > :after
  AND (:kinds IS NULL OR kind IN (SELECT value FROM json_each(:kinds)))
ORDER BY seq
LIMIT coalesce(:lim, -1)
-- postgresql:
SELECT id, CAST(:space_id AS text) AS space_id, seq, kind, sender, recipients, body, urgent,
  via, ref, {reached_row} AS reached,
  not_reached, idempotency_key, created_at_utc, {mail}
FROM messages
WHERE space_no = {space_no} AND seq > :after
  AND (CAST(:kinds AS text) IS NULL
       OR kind IN (SELECT jsonb_array_elements_text(CAST(:kinds AS jsonb))))
ORDER BY seq
LIMIT :lim

-- name: recent_senders
-- How many rows each sender wrote at or after :since (receipts aside), among
-- the space's last :window rows: the rows of the last minute are the newest
-- seqs (up to the skew of the writers' clocks), so this reads a tail of the log
-- backwards on the (space_no, seq) index, never more than :window rows.
SELECT sender, count(*) AS n
FROM (SELECT sender, kind, created_at_utc FROM messages WHERE space_no = {space_no}
      ORDER BY seq DESC LIMIT :window) AS tail
WHERE created_at_utc >= :since AND kind != 'seen'
GROUP BY sender ORDER BY sender

-- name: last_at
-- The time of the space's last log row (S44): a send is never stamped
-- earlier, whatever the clock of the process that sends.
SELECT created_at_utc FROM messages WHERE space_no = {space_no} ORDER BY seq DESC LIMIT 1
