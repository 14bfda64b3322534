-- The directory (broker.directory, S25): its entries are participant rows.

-- name: lease_seconds_of
-- A space's settings: prune keeps anyone whose heartbeat is fresher than the
-- space's lease_seconds (live, S27).
SELECT settings FROM spaces WHERE id = :space_id
