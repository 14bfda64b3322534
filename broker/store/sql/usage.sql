-- Limits in use (broker.spaces.usage, S30): reads only. `sender_usage` is kept by
-- triggers on messages and spaces; no module writes it (on SQLite in batches of
-- 32 log rows past folds.upto, which its readers add: broker.store.dialect).

-- name: sender_log_bytes
-- One sender's bytes in a space's log: the per-sender share of log_max_mb,
-- read on a send only once the log is past that share (one primary-key read,
-- and on SQLite the log rows past folds.upto, fewer than 32: the batch the
-- insert trigger has not folded in yet, revision 0015).
SELECT coalesce((SELECT log_bytes FROM sender_usage
    WHERE space_id = :space_id AND sender = :sender), 0)
  + coalesce((SELECT sum(size_bytes) FROM messages
    WHERE rowid > coalesce((SELECT upto FROM folds WHERE name = 'sender_usage'), 0)
      AND +space_no = {space_no} AND sender = :sender), 0) AS log_bytes
-- postgresql:
SELECT log_bytes FROM sender_usage WHERE space_id = :space_id AND sender = :sender

-- name: sender_waiting
-- Deliveries of one sender waiting in one inbox: the per-sender share of
-- inbox_cap, counted on a send only once the inbox holds that share, so it
-- reads at most inbox_cap rows of the inbox and their messages by key.
SELECT count(*) AS n FROM ({waiting_rows}) AS waiting JOIN messages m ON m.rowid = waiting.r >> 20
WHERE m.sender = :sender

-- name: space_totals
-- A space's counters: what space show reports against the caps.
SELECT id, state, settings, {log_bytes} AS log_bytes, {last_seq} AS last_seq,
  {last_bcast} AS last_bcast
FROM spaces WHERE id = :space_id

-- name: top_senders
-- The senders holding the most of a space's log, largest first (on SQLite with
-- the log rows past folds.upto, as sender_log_bytes).
SELECT sender, sum(log_bytes) AS log_bytes, sum(messages) AS messages FROM (
  SELECT sender, log_bytes, messages FROM sender_usage WHERE space_id = :space_id
  UNION ALL
  SELECT sender, size_bytes, 1 FROM messages
  WHERE rowid > coalesce((SELECT upto FROM folds WHERE name = 'sender_usage'), 0)
    AND +space_no = {space_no}
) AS u GROUP BY sender
ORDER BY log_bytes DESC, sender LIMIT :n
-- postgresql:
SELECT sender, log_bytes, messages FROM sender_usage WHERE space_id = :space_id
ORDER BY log_bytes DESC, sender LIMIT :n

-- name: inboxes
-- Each participant's waiting deliveries (ready + processing), unread
-- broadcasts and live holds (S41), live ones first, fullest first. The view
-- v_participants counts `waiting` the way each engine keeps it (on SQLite the
-- counter plus the inbox's deliveries past folds.upto, fewer than 32, that the
-- batched insert trigger has not counted yet: revision 0015).
SELECT address, status, waiting, bcast_seen,
  (SELECT count(*) FROM board_claims c WHERE c.space_id = p.space_id AND c.holder = p.address
    AND c.lease_expires_at > :at)
  + (SELECT count(*) FROM reservations r WHERE r.space_id = p.space_id AND r.holder = p.address
    AND r.ended_at_utc IS NULL AND r.lease_expires_at > :at) AS holds
FROM v_participants p WHERE space_id = :space_id
ORDER BY live DESC, waiting DESC, address

-- name: board
-- A space's live holds (S41) and what its board keeps, in bytes of the text
-- and numbers of its rows (8 per number, 27 per time, 26 per id): key claim
-- rows, reservation rows (ended ones are kept, so fences only grow) and the
-- claim journal. For space show, not a send: it reads every board row.
SELECT
  (SELECT count(*) FROM board_claims
    WHERE space_id = :space_id AND holder IS NOT NULL AND lease_expires_at > :at)
  + (SELECT count(*) FROM reservations
    WHERE space_id = :space_id AND ended_at_utc IS NULL AND lease_expires_at > :at) AS holds,
  COALESCE((SELECT sum(length(CAST(key AS BLOB)) + length(CAST(COALESCE(holder, '') AS BLOB))
    + 8 + 2 * 27) FROM board_claims WHERE space_id = :space_id), 0)
  + COALESCE((SELECT sum(length(CAST(pattern AS BLOB)) + length(CAST(holder AS BLOB))
    + length(CAST(COALESCE(reason, '') AS BLOB)) + length(CAST(mode AS BLOB)) + 8 + 3 * 27)
    FROM reservations WHERE space_id = :space_id), 0)
  + COALESCE((SELECT sum(26 + length(CAST(key AS BLOB)) + length(CAST(event AS BLOB))
    + length(CAST(owner AS BLOB)) + length(CAST(COALESCE(reason, '') AS BLOB)) + 8 + 2 * 27)
    FROM claim_journal WHERE space_id = :space_id), 0) AS board_bytes
-- postgresql:
SELECT
  (SELECT count(*) FROM board_claims
    WHERE space_id = :space_id AND holder IS NOT NULL AND lease_expires_at > :at)
  + (SELECT count(*) FROM reservations
    WHERE space_id = :space_id AND ended_at_utc IS NULL AND lease_expires_at > :at) AS holds,
  COALESCE((SELECT sum(octet_length(key) + octet_length(COALESCE(holder, ''))
    + 8 + 2 * 27) FROM board_claims WHERE space_id = :space_id), 0)
  + COALESCE((SELECT sum(octet_length(pattern) + octet_length(holder)
    + octet_length(COALESCE(reason, '')) + octet_length(mode) + 8 + 3 * 27)
    FROM reservations WHERE space_id = :space_id), 0)
  + COALESCE((SELECT sum(26 + octet_length(key) + octet_length(event)
    + octet_length(owner) + octet_length(COALESCE(reason, '')) + 8 + 2 * 27)
    FROM claim_journal WHERE space_id = :space_id), 0) AS board_bytes
