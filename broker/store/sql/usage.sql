-- Limits in use (broker.spaces.usage, S30): reads only. `sender_usage` is kept by
-- triggers on messages and spaces; no module writes it.

-- name: sender_log_bytes
-- One sender's bytes in a space's log: the per-sender share of log_max_mb,
-- read on a send only once the log is past that share (one primary-key read).
SELECT log_bytes FROM sender_usage WHERE space_id = :space_id AND sender = :sender

-- name: sender_waiting
-- Deliveries of one sender waiting in one inbox: the per-sender share of
-- inbox_cap, counted on a send only once the inbox holds that share, so it
-- reads at most inbox_cap rows of the inbox and their messages by key.
SELECT count(*) AS n FROM deliveries d JOIN messages m ON m.id = d.message_id
WHERE d.recipient_id = :recipient_id AND d.state IN ('ready', 'processing')
  AND m.sender = :sender

-- name: space_totals
-- A space's counters: what space show reports against the caps.
SELECT id, state, settings, log_bytes, last_seq, last_bcast FROM spaces WHERE id = :space_id

-- name: top_senders
-- The senders holding the most of a space's log, largest first.
SELECT sender, log_bytes, messages FROM sender_usage WHERE space_id = :space_id
ORDER BY log_bytes DESC, sender LIMIT :n

-- name: inboxes
-- Each participant's waiting deliveries (ready + processing) and unread
-- broadcasts, live ones first, fullest first.
SELECT address, status, waiting, bcast_seen FROM participants WHERE space_id = :space_id
ORDER BY CASE WHEN status IN ('running', 'idle') THEN 0 ELSE 1 END, waiting DESC, address
