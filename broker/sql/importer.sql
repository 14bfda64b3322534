-- The importer (broker.importer): the few reads it needs, and, until the
-- tables' owners land their insert_rows functions (API.md, one writer per table),
-- one INSERT per table with every column, used only by broker/importer/write.py.

-- name: space_exists
SELECT 1 AS found FROM spaces WHERE id = :space

-- name: log_top
-- The space's counters and the highest seq and bcast_no imported: the counters
-- must not be below them, or the next send collides with an imported row.
SELECT s.last_seq AS last_seq, s.last_bcast AS last_bcast,
       (SELECT COALESCE(MAX(seq), 0) FROM messages WHERE space_id = s.id) AS top_seq,
       (SELECT COALESCE(MAX(bcast_no), 0) FROM messages WHERE space_id = s.id) AS top_bcast
FROM spaces s WHERE s.id = :space

-- name: insert_messages
INSERT INTO messages (id, space_id, seq, kind, sender, recipients, body, urgent, via, ref, reached, not_reached, reached_n, bcast_no, idempotency_key, size_bytes, created_at_utc, thread, reply_to, importance, ack_required)
VALUES (:id, :space_id, :seq, :kind, :sender, :recipients, :body, :urgent, :via, :ref, :reached, :not_reached, :reached_n, :bcast_no, :idempotency_key, :size_bytes, :created_at_utc, :thread, :reply_to, :importance, :ack_required)
