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

-- fragment: spelled_seq
-- The seq a transcript row's message id spells (characters 11 to 18 in
-- Crockford base32, broker.ids.seq_in_id); PostgreSQL counts in bigint.
(instr('0123456789ABCDEFGHJKMNPQRSTVWXYZ', substr(tr.message_id, 11, 1)) - 1) * 34359738368 + (instr('0123456789ABCDEFGHJKMNPQRSTVWXYZ', substr(tr.message_id, 12, 1)) - 1) * 1073741824 + (instr('0123456789ABCDEFGHJKMNPQRSTVWXYZ', substr(tr.message_id, 13, 1)) - 1) * 33554432 + (instr('0123456789ABCDEFGHJKMNPQRSTVWXYZ', substr(tr.message_id, 14, 1)) - 1) * 1048576 + (instr('0123456789ABCDEFGHJKMNPQRSTVWXYZ', substr(tr.message_id, 15, 1)) - 1) * 32768 + (instr('0123456789ABCDEFGHJKMNPQRSTVWXYZ', substr(tr.message_id, 16, 1)) - 1) * 1024 + (instr('0123456789ABCDEFGHJKMNPQRSTVWXYZ', substr(tr.message_id, 17, 1)) - 1) * 32 + (instr('0123456789ABCDEFGHJKMNPQRSTVWXYZ', substr(tr.message_id, 18, 1)) - 1)
-- postgresql:
(CAST(strpos('0123456789ABCDEFGHJKMNPQRSTVWXYZ', substr(tr.message_id, 11, 1)) AS bigint) - 1) * 34359738368 + (CAST(strpos('0123456789ABCDEFGHJKMNPQRSTVWXYZ', substr(tr.message_id, 12, 1)) AS bigint) - 1) * 1073741824 + (CAST(strpos('0123456789ABCDEFGHJKMNPQRSTVWXYZ', substr(tr.message_id, 13, 1)) AS bigint) - 1) * 33554432 + (CAST(strpos('0123456789ABCDEFGHJKMNPQRSTVWXYZ', substr(tr.message_id, 14, 1)) AS bigint) - 1) * 1048576 + (CAST(strpos('0123456789ABCDEFGHJKMNPQRSTVWXYZ', substr(tr.message_id, 15, 1)) AS bigint) - 1) * 32768 + (CAST(strpos('0123456789ABCDEFGHJKMNPQRSTVWXYZ', substr(tr.message_id, 16, 1)) AS bigint) - 1) * 1024 + (CAST(strpos('0123456789ABCDEFGHJKMNPQRSTVWXYZ', substr(tr.message_id, 17, 1)) AS bigint) - 1) * 32 + (CAST(strpos('0123456789ABCDEFGHJKMNPQRSTVWXYZ', substr(tr.message_id, 18, 1)) AS bigint) - 1)

-- name: append_turn
-- A served teammate's turn, appended by its id (S16): the turn's messages as
-- its transcript recorded them (directives excepted), each once; the sender
-- from the log. Nothing the client says about the turn is taken. Each message
-- is found at the seq its id spells (characters 11 to 18 in Crockford base32,
-- broker.ids.seq_in_id) unless it has an alias (counters.sql, id_seq).
INSERT INTO history (id, space_id, participant_id, message_id, turn_id, kind, sender, body, at_utc)
SELECT tr.id, tr.space_id, tr.participant_id, tr.message_id, tr.turn_id, tr.kind, m.sender,
  tr.content, :at_utc
FROM transcript tr JOIN messages m
  ON m.space_no = (SELECT s.rowid FROM spaces s WHERE s.id = tr.space_id) AND m.id = tr.message_id
  AND m.seq = coalesce((SELECT a.seq FROM message_aliases a
    WHERE a.space_id = tr.space_id AND a.id = tr.message_id),
    {spelled_seq})
WHERE tr.participant_id = :participant_id AND tr.turn_id = :turn_id
  AND tr.direction = 'received' AND tr.kind != 'directive'
ORDER BY tr.position
ON CONFLICT (participant_id, message_id) DO NOTHING
RETURNING message_id

-- name: undo_turn
-- The turn's ack was lost: the rows this turn appended go (S16); rows an
-- earlier turn appended for a redelivered message carry that turn's id and stay.
DELETE FROM history WHERE participant_id = :participant_id AND turn_id = :turn_id
RETURNING message_id

-- name: turn
-- Whether the turn is the caller's own.
SELECT id FROM turns WHERE id = :turn_id AND participant_id = :participant_id
