-- Participants (broker.spaces.participants, and broker.spaces.roster: the writers of the
-- participants and participant_events tables): joining, re-joining, leaving,
-- the roster and the joined/left journal (S2-S5, S27, S28).

-- name: holder
-- Who holds an address now: liveness (status, pid, heartbeat), its last token's
-- hash (continuing the address presents it, S40; authenticate compares it,
-- S10), its grant (a re-join never widens it, S28), its recorded parent and
-- first join (whose token may continue it, S40) and the directory fields a
-- re-join keeps unless it names them (S40).
SELECT id, codename, status, pid, last_seen_utc, token_hash, messaging, tools, is_lead,
  parent, joined_at_utc, step, role, archetype, task
FROM participants WHERE space_id = :space_id AND address = :address

-- name: by_token
-- The participant a parent token belongs to (S27: a child joins with it; S40:
-- a parent continues its child, if it was there when the child first joined).
SELECT id, space_id, address, status, messaging, tools, is_lead, joined_at_utc
FROM participants WHERE token_hash = :token_hash

-- name: parent_messaging
-- Whether the named parent may message: off is inherited by its children (S24).
SELECT messaging FROM participants WHERE space_id = :space_id AND address = :address

-- name: insert
-- The one INSERT of a participant row, every column: a first join (from
-- participants.join) and an import (broker.interchange.importer) both write through it.
INSERT INTO participants (id, space_id, address, codename, agent, run_id, step, parent, role,
  archetype, task, is_lead, messaging, tools, token_hash, status, bcast_seen, waiting, pid,
  joined_at_utc, left_at_utc, last_seen_utc, contact_policy, contact_allow)
VALUES (:id, :space_id, :address, :codename, :agent, :run_id, :step, :parent, :role,
  :archetype, :task, :is_lead, :messaging, :tools, :token_hash, :status, :bcast_seen, :waiting,
  :pid, :joined_at_utc, :left_at_utc, :last_seen_utc, :contact_policy, :contact_allow)

-- name: rejoin
-- A re-join (S3): the same row takes the new join's identity, grant and token,
-- so its inbox, cursors and directives stay; it is running again.
UPDATE participants SET codename = :codename, agent = :agent, run_id = :run_id, step = :step,
  parent = :parent, role = :role, archetype = :archetype, task = :task, is_lead = :is_lead,
  messaging = :messaging, tools = :tools, token_hash = :token_hash, pid = :pid,
  status = 'running', left_at_utc = NULL, last_seen_utc = :last_seen_utc
WHERE id = :id

-- name: insert_event
-- The one INSERT of the joined/left journal (S4), every column: joins, leaves
-- and imports write through it.
INSERT INTO participant_events (id, space_id, participant_id, event, address, codename, agent,
  run_id, step, parent, reason, at_utc)
VALUES (:id, :space_id, :participant_id, :event, :address, :codename, :agent,
  :run_id, :step, :parent, :reason, :at_utc)

-- name: journal_fields
-- What a leave journals about the participant (its identity at the time).
SELECT space_id, address, codename, agent, run_id, step, parent
FROM participants WHERE id = :id

-- name: mark_left
UPDATE participants SET status = 'left', left_at_utc = :now WHERE id = :id

-- name: present_ids
-- Everyone still in a space (a stop or an archive makes them leave).
SELECT id FROM participants WHERE space_id = :space_id AND status != 'left'

-- name: set_status
-- A participant's own status report; one that has left stays left. Its space
-- comes back, for the doorbell of the space's watchers.
UPDATE participants SET status = :status, last_seen_utc = :now
WHERE id = :id AND status != 'left'
RETURNING space_id

-- name: list_all
-- The roster of a space, departed ones included, in join order (the columns
-- of records.Participant, read by name in participants.to_model).
SELECT id, space_id, address, codename, agent, run_id, step, parent, role, archetype, task,
  is_lead, messaging, tools, status, pid, joined_at_utc, left_at_utc, last_seen_utc, {waiting} AS waiting
FROM participants WHERE space_id = :space_id ORDER BY joined_at_utc, id

-- name: list_present
-- The same roster without the participants that have left.
SELECT id, space_id, address, codename, agent, run_id, step, parent, role, archetype, task,
  is_lead, messaging, tools, status, pid, joined_at_utc, left_at_utc, last_seen_utc, {waiting} AS waiting
FROM participants WHERE space_id = :space_id AND status != 'left' ORDER BY joined_at_utc, id

-- name: by_address
-- One participant of a space by address (the columns of records.Participant).
SELECT id, space_id, address, codename, agent, run_id, step, parent, role, archetype, task,
  is_lead, messaging, tools, status, pid, joined_at_utc, left_at_utc, last_seen_utc, {waiting} AS waiting
FROM participants WHERE space_id = :space_id AND address = :address

-- name: events
-- The joined/left journal of a space in order (records.ParticipantEvent).
SELECT event, address, codename, agent, run_id, step, parent, reason, at_utc
FROM participant_events WHERE space_id = :space_id ORDER BY at_utc, id

-- name: addresses
-- Every address a space has ever given (S45: a new one must not read like
-- any of them).
SELECT address FROM participants WHERE space_id = :space_id
