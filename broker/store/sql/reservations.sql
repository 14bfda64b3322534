-- Path reservations (broker.board.reservations, S37). Every write of `reservations`
-- runs through broker.board.holds, its one writer, and so do their journal lines
-- (`claim_journal`, under the key 'path <pattern>').

-- name: next_token
-- The fencing token of the next grant: one more than any grant of the space
-- (rows are kept after they end, so it only grows). Read under the write lock.
SELECT COALESCE(MAX(token), 0) + 1 AS token FROM reservations WHERE space_id = :space_id

-- name: insert
-- One grant, new or restored by the importer: every column as given.
INSERT INTO reservations (space_id, token, pattern, mode, holder, reason, claimed_at_utc,
  lease_expires_at, ended_at_utc)
VALUES (:space_id, :token, :pattern, :mode, :holder, :reason, :claimed_at_utc,
  :lease_expires_at, :ended_at_utc)

-- name: live
-- The live reservations of the space (not ended, not expired at :at), by token.
SELECT token, pattern, mode, holder, reason, claimed_at_utc, lease_expires_at
FROM reservations
WHERE space_id = :space_id AND ended_at_utc IS NULL AND lease_expires_at > :at
ORDER BY token

-- name: expired
-- Grants past their lease and not yet ended: journaled 'expired', then ended.
SELECT token, pattern, holder, lease_expires_at FROM reservations
WHERE space_id = :space_id AND ended_at_utc IS NULL AND lease_expires_at <= :at
ORDER BY token

-- name: any_expired
SELECT 1 AS found FROM reservations
WHERE space_id = :space_id AND ended_at_utc IS NULL AND lease_expires_at <= :at LIMIT 1

-- name: end_expired
UPDATE reservations SET ended_at_utc = :at
WHERE space_id = :space_id AND ended_at_utc IS NULL AND lease_expires_at <= :at

-- name: row
SELECT token, pattern, mode, holder, reason, claimed_at_utc, lease_expires_at, ended_at_utc
FROM reservations WHERE space_id = :space_id AND token = :token

-- name: end
-- Released (or re-granted): the row stays, ended.
UPDATE reservations SET ended_at_utc = :at WHERE space_id = :space_id AND token = :token

-- name: renew
UPDATE reservations SET lease_expires_at = :lease_expires_at
WHERE space_id = :space_id AND token = :token

-- name: held_by
-- Every reservation a participant holds, live or expired but not yet ended
-- (its departure ends them).
SELECT token, pattern, lease_expires_at FROM reservations
WHERE space_id = :space_id AND holder = :holder AND ended_at_utc IS NULL ORDER BY token
