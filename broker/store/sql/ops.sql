-- Operations: what `broker doctor` counts (broker.store.maintenance).

-- name: expired_leases
-- Deliveries whose lease ran out and that nobody has claimed since: they go
-- back to ready at their recipient's next claim (S15).
SELECT count(*) AS n, min(lease_expires_at) AS oldest
FROM deliveries WHERE state = 'processing' AND lease_expires_at < :now

-- name: quarantined_by_space
-- Quarantined deliveries per space, the fullest first.
SELECT space_id, count(*) AS n FROM deliveries WHERE state = 'quarantine'
GROUP BY space_id ORDER BY n DESC, space_id

-- name: spaces_count
SELECT count(*) AS n FROM spaces
