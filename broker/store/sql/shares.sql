-- Share groups (broker.spaces.shares, S42): who answers together for a share
-- of a space's limits. Reads only; read on a send only once the log or an
-- inbox holds a group's share (below it nobody can be over it).

-- name: members
-- Every participant of a space with what decides its group: the lead flag and
-- its parent (a child admitted with its parent's token answers with it).
SELECT id, address, parent, is_lead FROM participants WHERE space_id = :space_id

-- name: admissions
-- The joins of a space, oldest first, with how each was admitted (the
-- journal's reason of a `joined` line): a participant's latest join decides.
-- Through the journal's (space_id, at_utc) index.
SELECT participant_id, reason FROM participant_events
WHERE space_id = :space_id AND event = 'joined'
ORDER BY at_utc, id

-- name: log_bytes
-- Every sender's bytes in a space's log (its part of log_max_mb): a group's
-- part is the sum over its members. On SQLite with the log rows past
-- folds.upto (the batch sender_usage has not folded in yet).
SELECT sender, sum(log_bytes) AS log_bytes FROM (
  SELECT sender, log_bytes FROM sender_usage WHERE space_id = :space_id
  UNION ALL
  SELECT sender, size_bytes FROM messages
  WHERE rowid > coalesce((SELECT upto FROM folds WHERE name = 'sender_usage'), 0)
    AND +space_no = {space_no}
) AS u GROUP BY sender
-- postgresql:
SELECT sender, log_bytes FROM sender_usage WHERE space_id = :space_id

-- name: waiting_by_sender
-- Deliveries waiting in one inbox, by sender: a group's part of inbox_cap is
-- the sum over its members. Reads at most inbox_cap rows of the inbox.
SELECT m.sender, count(*) AS n FROM ({waiting_rows}) AS waiting JOIN messages m ON m.rowid = waiting.r >> 20
GROUP BY m.sender
