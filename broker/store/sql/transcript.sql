-- Transcripts (broker.delivery.transcript, S19): the only writer of `transcript`.

-- name: insert
-- Transcript rows, new or restored by the importer: every column as given.
INSERT INTO transcript (id, space_id, participant_id, turn_id, position, direction,
  message_id, kind, content, at_utc)
VALUES (:id, :space_id, :participant_id, :turn_id, :position, :direction,
  :message_id, :kind, :content, :at_utc)

-- name: participant
SELECT id FROM participants WHERE space_id = :space_id AND address = :address

-- name: turns
-- A participant's turns in the order they were taken.
SELECT id, created_at_utc, state, seen_at_utc FROM turns
WHERE participant_id = :participant_id ORDER BY created_at_utc, id

-- name: entries
SELECT id, turn_id, position, direction, message_id, kind, content, at_utc
FROM transcript WHERE participant_id = :participant_id ORDER BY at_utc, id

-- name: sent
-- What it sent is in the log, not copied into the transcript (receipts are not
-- messages).
SELECT id, kind, body, created_at_utc FROM messages
WHERE space_no = {space_no} AND sender = :address AND kind != 'seen' ORDER BY seq
