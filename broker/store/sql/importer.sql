-- The importer (broker.interchange.importer): the few reads it needs. Its rows go in
-- through each table's owner (one writer per table: broker/interchange/importer/write.py).

-- name: space_exists
SELECT 1 AS found FROM spaces WHERE id = :space_id

-- name: log_top
-- The space's counters and the highest seq and bcast_no imported: the counters
-- must not be below them, or the next send collides with an imported row.
SELECT s.last_seq AS last_seq, s.last_bcast AS last_bcast,
       (SELECT COALESCE(MAX(seq), 0) FROM messages WHERE space_no = s.rowid) AS top_seq,
       (SELECT COALESCE(MAX(bcast_no), 0) FROM messages WHERE space_no = s.rowid) AS top_bcast
FROM spaces s WHERE s.id = :space_id
