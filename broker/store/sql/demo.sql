-- The demo (broker.teammates.demo): a query it prints for the user to run by
-- hand in the store's own SQL client (sqlite3 or psql); the broker never runs it.

-- name: direct_by_sender
-- Who sent how many direct messages in the demo's space.
SELECT sender, count(*) FROM messages WHERE space_no = {space_no} AND kind = 'direct' GROUP BY sender
