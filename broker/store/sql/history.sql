-- Teammates' canonical histories (broker.delivery.history, S16, S26): the only writer of `history`.

-- name: insert
-- History rows restored by the importer: every column as given.
INSERT INTO history (id, space_id, participant_id, message_id, turn_id, kind, sender, body, at_utc)
VALUES (:id, :space_id, :participant_id, :message_id, :turn_id, :kind, :sender, :body, :at_utc)

-- name: append
-- One handled message, once: a redelivered message is already there and is
-- skipped (S16); RETURNING says whether it was appended now.
INSERT INTO history (id, space_id, participant_id, message_id, turn_id, kind, sender, body, at_utc)
VALUES (:id, :space_id, :participant_id, :message_id, :turn_id, :kind, :sender, :body, :at_utc)
ON CONFLICT (participant_id, message_id) DO NOTHING
RETURNING message_id

-- name: undo
-- The turn's ack was lost: what this turn appended goes, so the redelivered
-- turn appends it again (S16).
DELETE FROM history
WHERE participant_id = :participant_id AND message_id IN (SELECT value FROM json_each(:ids))
RETURNING message_id
-- postgresql:
DELETE FROM history
WHERE participant_id = :participant_id
  AND message_id IN (SELECT json_array_elements_text(CAST(:ids AS json)))
RETURNING message_id

-- name: entries
SELECT message_id, turn_id, kind, sender, body, at_utc FROM history
WHERE participant_id = :participant_id ORDER BY at_utc, id
