-- The board (broker.board.posts, broker.board.claims, S21-S24). Every write of
-- `board_claims` and `claim_journal` runs through broker.board.holds, their one
-- writer. Posts, directives and retractions are log rows (written by
-- broker.mail.messages); the board reads them.

-- name: read_kind
-- One kind of board entry after :after, in log order: one range of the
-- partial index per kind (its predicate is repeated verbatim so SQLite uses
-- it), merged in Python; never a scan of the log. A directive says whether it
-- is still in force (not retracted).
SELECT id, seq, kind, sender, recipients, body, ref, {reached_row} AS reached, created_at_utc,
  CASE WHEN kind = 'directive' THEN NOT EXISTS (SELECT 1 FROM messages r
    WHERE r.ref = m.id AND r.kind = 'retract') END AS in_force
FROM messages m
WHERE space_no = {space_no} AND kind IN ('post', 'directive', 'retract') AND kind = :kind
  AND seq > :after
ORDER BY seq LIMIT :n

-- name: message_head
-- Kind and sender of one message of the space (what a retract checks).
SELECT kind, sender FROM messages WHERE space_no = {space_no} AND seq = {id_seq} AND id = :id

-- name: retracted_by
-- The retraction of a directive, if any.
SELECT id FROM messages WHERE ref = :directive_id AND kind = 'retract' AND space_no = {space_no}

-- name: directives_in_force
-- Every directive of the space not retracted, oldest first, with its author's
-- parent (a `parent` form) and whether this participant's transcript already
-- has it (S19: recorded once). `seq > 0` (always true) steers the planner onto
-- the partial index.
SELECT m.id, m.seq, m.sender, m.recipients, m.body, m.created_at_utc, p.parent AS sender_parent,
  EXISTS (SELECT 1 FROM transcript x WHERE x.participant_id = :participant_id
    AND x.message_id = m.id AND x.direction = 'injected') AS known
FROM messages m
LEFT JOIN participants p ON p.space_id = :space_id AND p.address = m.sender
WHERE m.space_no = {space_no} AND m.kind IN ('post', 'directive', 'retract')
  AND m.kind = 'directive' AND m.seq > 0
  AND NOT EXISTS (SELECT 1 FROM messages r WHERE r.ref = m.id AND r.kind = 'retract')
ORDER BY m.seq

-- name: is_address
-- Whether a bare name is some participant's address (S6).
SELECT 1 AS found FROM participants WHERE space_id = :space_id AND address = :address

-- name: insert_claim
-- A key's claim row, new or restored by the importer: every column as given.
INSERT INTO board_claims (space_id, key, holder, token, claimed_at_utc, lease_expires_at)
VALUES (:space_id, :key, :holder, :token, :claimed_at_utc, :lease_expires_at)

-- name: insert_journal
-- One journal line (S23), new or restored by the importer: every column as given.
-- `reason` is set only when someone other than the holder ended the hold (left, operator).
INSERT INTO claim_journal (id, space_id, key, event, owner, token, lease_expires_at, at_utc,
  reason)
VALUES (:id, :space_id, :key, :event, :owner, :token, :lease_expires_at, :at_utc, :reason)

-- name: claim_row
SELECT holder, token, claimed_at_utc, lease_expires_at FROM board_claims
WHERE space_id = :space_id AND key = :key

-- name: grant
-- A new grant of a key that has a row: the holder, a larger token, the expiry.
UPDATE board_claims SET holder = :holder, token = :token, claimed_at_utc = :claimed_at_utc,
  lease_expires_at = :lease_expires_at
WHERE space_id = :space_id AND key = :key

-- name: renew
UPDATE board_claims SET lease_expires_at = :lease_expires_at
WHERE space_id = :space_id AND key = :key

-- name: free
-- Released: the row stays (its token only grows), nobody holds it.
UPDATE board_claims SET holder = NULL, claimed_at_utc = NULL, lease_expires_at = NULL
WHERE space_id = :space_id AND key = :key

-- name: any_expired
SELECT 1 AS found FROM board_claims
WHERE space_id = :space_id AND holder IS NOT NULL AND lease_expires_at <= :at LIMIT 1

-- name: expired
SELECT key, holder, token, lease_expires_at FROM board_claims
WHERE space_id = :space_id AND holder IS NOT NULL AND lease_expires_at <= :at ORDER BY key

-- name: free_expired
UPDATE board_claims SET holder = NULL, claimed_at_utc = NULL, lease_expires_at = NULL
WHERE space_id = :space_id AND holder IS NOT NULL AND lease_expires_at <= :at

-- name: held_by
-- Every key a participant holds, live or expired but not yet freed (its departure ends them).
SELECT key, token, lease_expires_at FROM board_claims
WHERE space_id = :space_id AND holder = :holder ORDER BY key

-- name: live_claims
SELECT key, token, holder, claimed_at_utc, lease_expires_at FROM board_claims
WHERE space_id = :space_id AND holder IS NOT NULL AND lease_expires_at > :at ORDER BY key

-- name: journal
-- The claim journal of a space, oldest first; :key NULL for every key.
SELECT id, key, event, owner, token, lease_expires_at, at_utc, reason FROM claim_journal
WHERE space_id = :space_id AND (:key IS NULL OR key = :key)
ORDER BY at_utc, id
-- postgresql:
SELECT id, key, event, owner, token, lease_expires_at, at_utc, reason FROM claim_journal
WHERE space_id = :space_id AND (CAST(:key AS text) IS NULL OR key = :key)
ORDER BY at_utc, id

-- name: live_holds
-- Live holds (key claims and path reservations, not expired at :at) of the
-- space and of one holder, counted against space_holds_cap and holds_cap
-- (S41) before a grant. Reservations are read through their partial index
-- on live rows; key claims through the space's rows of board_claims.
SELECT
  (SELECT count(*) FROM board_claims
    WHERE space_id = :space_id AND holder IS NOT NULL AND lease_expires_at > :at)
  + (SELECT count(*) FROM reservations
    WHERE space_id = :space_id AND ended_at_utc IS NULL AND lease_expires_at > :at)
    AS space_holds,
  (SELECT count(*) FROM board_claims
    WHERE space_id = :space_id AND holder = :holder AND lease_expires_at > :at)
  + (SELECT count(*) FROM reservations
    WHERE space_id = :space_id AND holder = :holder AND ended_at_utc IS NULL
      AND lease_expires_at > :at)
    AS holder_holds

-- name: journal_last_at
-- The time of a key's last journal line (S44): a line is never stamped earlier,
-- whichever process (and clock) writes it.
SELECT max(at_utc) AS at_utc FROM claim_journal WHERE space_id = :space_id AND key = :key
