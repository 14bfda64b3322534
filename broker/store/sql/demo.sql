-- The demo (broker.teammates.demo): a query it prints for the user to run by
-- hand in the store's own SQL client (sqlite3 or psql); the broker never runs it.

-- name: direct_by_sender
-- Who sent how many direct messages in the demo's space, read from the log's
-- view (the tables name a space by number, revision 0023; the views by id).
SELECT sender, count(*) FROM v_log WHERE space_id = :space_id AND kind = 'direct' GROUP BY sender
