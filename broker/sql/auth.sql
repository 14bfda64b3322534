-- Who is calling: one authorization path for every agent operation (broker.auth).

-- name: caller
-- Re-checks the caller's token inside the transaction (S10) and reads its grant,
-- status and its space's state, limits and counters, in one statement (a send
-- needs no read of its space of its own: the write lock is already held).
SELECT p.status, p.messaging, p.tools, p.is_lead, p.agent, p.parent,
       s.state AS space_state, s.settings, s.last_seq, s.log_bytes, s.last_bcast
FROM participants p JOIN spaces s ON s.id = p.space_id
WHERE p.id = :id AND p.token_hash = :token_hash

-- name: caller_heartbeat
-- The same, refreshing the caller's heartbeat (last_seen_utc) on the way; used
-- at most once a second per process, so a busy loop dirties no page per commit.
UPDATE participants SET last_seen_utc = :now
WHERE id = :id AND token_hash = :token_hash
RETURNING status, messaging, tools, is_lead, agent, parent,
  (SELECT state FROM spaces WHERE spaces.id = participants.space_id) AS space_state,
  (SELECT settings FROM spaces WHERE spaces.id = participants.space_id) AS settings,
  (SELECT last_seq FROM spaces WHERE spaces.id = participants.space_id) AS last_seq,
  (SELECT log_bytes FROM spaces WHERE spaces.id = participants.space_id) AS log_bytes,
  (SELECT last_bcast FROM spaces WHERE spaces.id = participants.space_id) AS last_bcast

-- name: identify
-- The participant a token belongs to (served mode: a Bearer token alone names
-- its holder). token_hash is unique; the caller statement above re-checks it
-- inside every transaction, so a stale answer here cannot act.
SELECT p.id, p.space_id, p.address
FROM participants p
WHERE p.token_hash = :token_hash

-- name: caller_to
-- `caller`, with the one recipient a direct send names by address (and its
-- contact policy, S38) read in the same statement: a send to one participant
-- makes no read of its own before its writes. NULL r_id: no such address here.
SELECT p.status, p.messaging, p.tools, p.is_lead, p.agent, p.parent,
       s.state AS space_state, s.settings, s.last_seq, s.log_bytes, s.last_bcast,
       r.id AS r_id, r.address AS r_address, r.status AS r_status, r.waiting AS r_waiting,
       r.contact_policy AS r_policy, r.contact_allow AS r_allow, r.parent AS r_parent
FROM participants p JOIN spaces s ON s.id = p.space_id
LEFT JOIN participants r ON r.space_id = p.space_id AND r.address = :to
WHERE p.id = :id AND p.token_hash = :token_hash
