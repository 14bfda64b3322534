-- Operations: what `broker doctor` counts (broker.store.maintenance).

-- name: expired_leases
-- Deliveries whose lease ran out and that nobody has claimed since: they go
-- back to ready at their recipient's next claim (S15).
SELECT count(*) AS n, min(lease_expires_at) AS oldest
FROM deliveries WHERE state = 'processing' AND lease_expires_at < :now

-- name: quarantined_by_space
-- Quarantined deliveries per space, the fullest first.
SELECT p.space_id, count(*) AS n FROM deliveries d JOIN participants p ON p.rowid = d.recipient_no
WHERE d.state = 'quarantine' GROUP BY p.space_id ORDER BY n DESC, p.space_id

-- name: spaces_count
SELECT count(*) AS n FROM spaces

-- name: orphans
-- Rows that name what no row is: a log row's space, a delivery's recipient
-- (numbers, revisions 0022-0023: no declared key) or its message (its rowid's,
-- revision 0021). The broker writes none (it takes each from the row it
-- names); a file another program wrote could hold them, and every view and
-- export would leave them out. Doctor's own read of every row, as its
-- quick_check is: no call on the everyday path runs it.
SELECT (SELECT count(*) FROM messages m
          WHERE NOT EXISTS (SELECT 1 FROM spaces s WHERE s.rowid = m.space_no)) AS log_rows,
  (SELECT count(*) FROM deliveries d
     WHERE NOT EXISTS (SELECT 1 FROM participants p WHERE p.rowid = d.recipient_no)
       OR NOT EXISTS (SELECT 1 FROM messages m WHERE m.rowid = d.rowid >> 20)) AS deliveries

-- The checks of a store on PostgreSQL (doctor). PostgreSQL only: the SQLite
-- text of each is a stand-in of the same columns, never run.

-- name: pg_server
-- The server's version.
SELECT '' AS server_version, 0 AS server_version_num
-- postgresql:
SELECT current_setting('server_version') AS server_version,
  current_setting('server_version_num')::int AS server_version_num

-- name: pg_text
-- The database's encoding and collation, and whether text sorts in byte order
-- (as on SQLite, whose default is BINARY): 'B' before 'a', 'z' before 'é'.
-- Asked of the sort itself, so an ICU default collation is judged too.
SELECT 'UTF8' AS encoding, 'C' AS lc_collate, 'C' AS lc_ctype, 1 AS byte_order
-- postgresql:
SELECT pg_encoding_to_char(encoding) AS encoding, datcollate AS lc_collate,
  datctype AS lc_ctype, ('B' < 'a' AND 'z' < 'é')::int AS byte_order
FROM pg_database WHERE datname = current_database()

-- name: pg_connections
-- The server's connection budget: its maximum, the slots kept for superusers,
-- and the client connections open now (every database, every user).
SELECT 0 AS max_connections, 0 AS superuser_reserved, 0 AS in_use
-- postgresql:
SELECT current_setting('max_connections')::int AS max_connections,
  current_setting('superuser_reserved_connections')::int AS superuser_reserved,
  (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend') AS in_use

-- name: pg_size
-- The database's size on the server's disk.
SELECT 0 AS database_bytes
-- postgresql:
SELECT pg_database_size(current_database()) AS database_bytes
