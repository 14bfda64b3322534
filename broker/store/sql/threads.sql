-- Threads (broker.mail.threads, S35): reading the thread column of the log; the
-- log's writer is broker.mail.messages.

-- name: parent
-- The message a reply answers, in the replying space only (never another's),
-- and one the replier can see (S45): :viewer (an agent) sent it, it reached
-- :viewer, or it is on the board (posts, directives, retractions); NULL (the
-- operator) sees every message of the space. Any other is "no message".
SELECT thread FROM messages WHERE space_no = {space_no} AND seq = {id_seq} AND id = :id
  AND (:viewer IS NULL OR sender = :viewer OR kind IN ('post', 'directive', 'retract')
       OR EXISTS (SELECT 1 FROM json_each({reached_row}) r WHERE r.value = :viewer))
-- postgresql:
SELECT thread FROM messages WHERE space_no = {space_no} AND seq = {id_seq} AND id = :id
  AND (:viewer::text IS NULL OR sender = :viewer OR kind IN ('post', 'directive', 'retract')
       OR {reached_row}::jsonb ? :viewer)

-- name: log
-- A thread's messages in log order: those named into it, and the message it
-- grew from when it is named after one (a reply to an unthreaded message).
SELECT id, CAST(:space_id AS text) AS space_id, seq, kind, sender, recipients, body, urgent,
  via, ref, {reached_row} AS reached,
  not_reached, idempotency_key, created_at_utc, {mail}
FROM messages WHERE space_no = {space_no} AND thread = :thread
UNION ALL
SELECT id, CAST(:space_id AS text) AS space_id, seq, kind, sender, recipients, body, urgent,
  via, ref, {reached_row} AS reached,
  not_reached, idempotency_key, created_at_utc, {mail}
FROM messages WHERE space_no = {space_no} AND id = :thread AND thread IS NULL
ORDER BY seq

-- name: list
-- The threads of a space, most recently active first (the v_threads view).
SELECT thread, messages, first_id, first_at, last_id, last_at, participants, senders
FROM v_threads WHERE space_id = :space_id ORDER BY last_at DESC, thread
