-- Who is calling: one authorization path for every agent operation (broker.spaces.auth).

-- name: caller
-- Re-checks the caller's token inside the transaction (S10) and reads its grant,
-- status and its space's state and limits, in one statement: two key seeks.
-- Every operation but a send runs this one (a claim, an ack, a board call): the
-- space's counters are a send's alone, and reading them seeks the log three
-- times more (each page read again when another process has committed).
SELECT p.status, p.messaging, p.tools, p.is_lead, p.agent, p.parent,
       spaces.state AS space_state, spaces.settings
FROM participants p JOIN spaces ON spaces.id = p.space_id
WHERE p.id = :id AND p.token_hash = :token_hash

-- name: caller_counted
-- The same with the space's counters: a send to several targets (msg.send) reads
-- them here, so it needs no read of its space of its own (the write lock is
-- already held).
SELECT p.status, p.messaging, p.tools, p.is_lead, p.agent, p.parent,
       spaces.state AS space_state, spaces.settings, {last_seq} AS last_seq,
       {log_bytes} AS log_bytes, {last_bcast} AS last_bcast
FROM participants p JOIN spaces ON spaces.id = p.space_id
WHERE p.id = :id AND p.token_hash = :token_hash

-- name: caller_heartbeat
-- The same, refreshing the caller's heartbeat (last_seen_utc) on the way; used
-- at most once a second per process, so a busy loop dirties no page per commit.
-- Never on a participant that left: its call is refused and writes nothing,
-- even inside a caller's transaction that goes on (S4).
UPDATE participants SET last_seen_utc = :now
WHERE id = :id AND token_hash = :token_hash AND status <> 'left'
RETURNING status, messaging, tools, is_lead, agent, parent,
  (SELECT state FROM spaces WHERE spaces.id = participants.space_id) AS space_state,
  (SELECT settings FROM spaces WHERE spaces.id = participants.space_id) AS settings,
  (SELECT {last_seq} FROM spaces WHERE spaces.id = participants.space_id) AS last_seq,
  (SELECT {log_bytes} FROM spaces WHERE spaces.id = participants.space_id) AS log_bytes,
  (SELECT {last_bcast} FROM spaces WHERE spaces.id = participants.space_id) AS last_bcast

-- name: heartbeats
-- A round of parked callers' heartbeats (broker.delivery.waits.Keeper) in one
-- statement: :who is a JSON object of participant id -> token hash. Each that
-- still holds its token and has not left gets last_seen_utc = :now, and its row
-- as `caller` reads it (its grant, status, space state and limits; no
-- counters: a beat sends nothing). One missing from the answer is refused: its
-- wait's own re-check says why (S4, S10).
UPDATE participants SET last_seen_utc = :now
WHERE (id, token_hash) IN (SELECT key, value FROM json_each(:who)) AND status <> 'left'
RETURNING id, status, messaging, tools, is_lead, agent, parent,
  (SELECT state FROM spaces WHERE spaces.id = participants.space_id) AS space_state,
  (SELECT settings FROM spaces WHERE spaces.id = participants.space_id) AS settings
-- postgresql:
UPDATE participants SET last_seen_utc = :now
WHERE (id, token_hash) IN (SELECT key, value FROM json_each_text(CAST(:who AS json)))
  AND status <> 'left'
RETURNING id, status, messaging, tools, is_lead, agent, parent,
  (SELECT state FROM spaces WHERE spaces.id = participants.space_id) AS space_state,
  (SELECT settings FROM spaces WHERE spaces.id = participants.space_id) AS settings

-- name: identify
-- The participant a token belongs to (served mode: a Bearer token alone names
-- its holder). token_hash is unique; the caller statement above re-checks it
-- inside every transaction, so a stale answer here cannot act.
SELECT p.id, p.space_id, p.address
FROM participants p
WHERE p.token_hash = :token_hash

-- name: caller_send
-- A send to one participant by address, in one statement: the space's state,
-- limits and counters, the caller re-checked with its grant (S10, S24), and the
-- recipient with its contact policy (S38). Nothing is written: the counters are
-- derived from the log (revision 0017). NULL status: bad token; NULL to_id: no
-- such address. Each a column of its own, read by name: no row packed into JSON
-- to be unpacked again on the send's hot path.
-- last_at: the space's last log time (S44, messages.last_at), '' for an empty
-- log: read here so the send's stamp needs no statement of its own.
SELECT spaces.state AS space_state, spaces.settings, {last_seq} AS last_seq,
  {log_bytes} AS log_bytes, {last_bcast} AS last_bcast,
  coalesce((SELECT created_at_utc FROM messages WHERE space_no = spaces.rowid
            ORDER BY seq DESC LIMIT 1), '') AS last_at,
  c.status, c.messaging, c.tools, c.is_lead, c.agent, c.parent,
  participants.id AS to_id, participants.address AS to_address,
  participants.status AS to_status, {waiting} AS to_waiting,
  participants.contact_policy AS to_policy, participants.contact_allow AS to_allow,
  participants.parent AS to_parent
FROM spaces
LEFT JOIN participants c
  ON c.id = :id AND c.token_hash = :token_hash AND c.space_id = spaces.id
LEFT JOIN participants ON participants.space_id = spaces.id AND participants.address = :to
WHERE spaces.id = :space_id
