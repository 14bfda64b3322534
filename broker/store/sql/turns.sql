-- Turns (broker.delivery.turns, S17-S19): the only writer of `turns`.

-- name: insert
-- A turn, new or restored by the importer: every column as given.
INSERT INTO turns (id, space_id, participant_id, lease_token, bcast_upto, state,
  created_at_utc, expires_at, seen_at_utc, lease_process, bcast_from)
VALUES (:id, :space_id, :participant_id, :lease_token, :bcast_upto, :state,
  :created_at_utc, :expires_at, :seen_at_utc, :lease_process, :bcast_from)

-- name: cursor
-- What a turn needs to know of its participant, in one read: who it is (for
-- the directives), its broadcast cursor and the end of the space's broadcast
-- log, and the broadcast ranges of its open turns whose lease runs (S18: a
-- broadcast is shown in at most one open turn), with the process holding each.
SELECT p.address, p.agent, p.step, p.bcast_seen, {last_bcast} AS last_bcast,
  (SELECT json_group_array(json_array(o.bcast_upto, o.lease_process)) FROM turns o
    WHERE o.participant_id = p.id AND o.state = 'open' AND o.expires_at > :now) AS open_turns
FROM participants p JOIN spaces ON spaces.id = p.space_id
WHERE p.id = :participant_id
-- postgresql:
SELECT p.address, p.agent, p.step, p.bcast_seen, {last_bcast} AS last_bcast,
  (SELECT coalesce(json_agg(json_build_array(o.bcast_upto, o.lease_process))::text, '[]')
    FROM turns o
    WHERE o.participant_id = p.id AND o.state = 'open' AND o.expires_at > :now) AS open_turns
FROM participants p JOIN spaces ON spaces.id = p.space_id
WHERE p.id = :participant_id

-- name: broadcasts
-- The broadcasts after the cursor, in log order, at most :n, with what their
-- framing shows (its mail attributes, S35).
SELECT id, sender, body, created_at_utc, bcast_no, {mail} FROM messages
WHERE space_no = {space_no} AND bcast_no > :after AND bcast_no <= :last
ORDER BY bcast_no LIMIT :n

-- name: advance_cursor
-- The broadcast cursor moves forward only (a turn confirmed, or only the
-- participant's own broadcasts were new).
UPDATE participants SET bcast_seen = :upto WHERE id = :participant_id AND bcast_seen < :upto

-- fragment: shown
-- The ids turn `t` showed, in order: one JSON list.
(SELECT json_group_array(message_id) FROM (SELECT x.message_id FROM transcript x
    WHERE x.participant_id = t.participant_id AND x.at_utc = t.created_at_utc
      AND x.turn_id = t.id AND x.direction = 'received' ORDER BY x.position))
-- postgresql:
(SELECT coalesce(json_agg(x.message_id ORDER BY x.position)::text, '[]') FROM transcript x
    WHERE x.participant_id = t.participant_id AND x.at_utc = t.created_at_utc
      AND x.turn_id = t.id AND x.direction = 'received')

-- name: for_seen
-- The turn being confirmed, with the ids it showed (in order) and where the
-- participant's broadcast cursor stands, then the other open turns of the
-- participant whose lease runs: the cursor may not pass the broadcasts one of
-- those still holds (S18).
SELECT id, lease_token, bcast_from, bcast_upto, state, lease_process, {shown} AS shown,
  (SELECT p.bcast_seen FROM participants p WHERE p.id = t.participant_id) AS bcast_seen
FROM turns t WHERE t.id = :turn_id AND t.participant_id = :participant_id
UNION ALL
SELECT id, lease_token, bcast_from, bcast_upto, state, lease_process, NULL AS shown,
  NULL AS bcast_seen
FROM turns WHERE participant_id = :participant_id AND state = 'open' AND expires_at > :now
  AND id != :turn_id

-- name: mark_seen
UPDATE turns SET state = 'seen', seen_at_utc = :now WHERE id = :turn_id

-- name: receipt
-- The receipt a confirmed turn wrote (confirming twice returns it).
SELECT id FROM messages WHERE ref = :turn_id AND kind = 'seen' AND space_no = {space_no}

-- name: lease_token
SELECT lease_token FROM turns WHERE id = :turn_id AND participant_id = :participant_id

-- name: waiting
-- How many deliveries wait in the inbox: a turn takes the whole inbox by
-- default, which the operator's messages can grow past inbox_cap (S30).
SELECT {waiting} AS waiting FROM participants WHERE id = :participant_id

-- name: received
-- The messages a turn showed (its transcript's received rows), in order.
SELECT message_id FROM transcript
WHERE participant_id = :participant_id AND turn_id = :turn_id AND direction = 'received'
ORDER BY position
