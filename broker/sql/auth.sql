-- Who is calling: one authorization path for every agent operation (broker.auth).

-- name: caller
-- Re-checks the caller's token inside the transaction (S10) and reads its grant,
-- status and its space's state and limits, in one statement.
SELECT p.status, p.messaging, p.tools, p.is_lead, p.agent, p.parent,
       s.state AS space_state, s.settings
FROM participants p JOIN spaces s ON s.id = p.space_id
WHERE p.id = :id AND p.token_hash = :token_hash

-- name: caller_heartbeat
-- The same, refreshing the caller's heartbeat (last_seen_utc) on the way; used
-- at most once a second per process, so a busy loop dirties no page per commit.
UPDATE participants SET last_seen_utc = :now
WHERE id = :id AND token_hash = :token_hash
RETURNING status, messaging, tools, is_lead, agent, parent,
  (SELECT state FROM spaces WHERE spaces.id = participants.space_id) AS space_state,
  (SELECT settings FROM spaces WHERE spaces.id = participants.space_id) AS settings

-- name: identify
-- The participant a token belongs to (served mode: a Bearer token alone names
-- its holder). token_hash is unique; the caller statement above re-checks it
-- inside every transaction, so a stale answer here cannot act.
SELECT p.id, p.space_id, p.address
FROM participants p
WHERE p.token_hash = :token_hash
