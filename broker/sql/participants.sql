-- Participants (broker.participants): joining (S2-S5, S27, S28).

-- name: space_for_join
-- The space a join goes to: its state, kind (the address form) and limits
-- (the lease that says how long a silent holder stays live, S27).
SELECT state, kind, settings FROM spaces WHERE id = :space_id

-- name: holder
-- Who holds an address now: liveness (status, pid, heartbeat), its token hash
-- (a retry presents it, S27) and its grant (a re-join never widens it, S28).
SELECT id, codename, status, pid, last_seen_utc, token_hash, messaging, tools, is_lead
FROM participants WHERE space_id = :space_id AND address = :address

-- name: by_token
-- The participant a parent token belongs to (S27: a child joins with it).
SELECT id, space_id, address, status, messaging, tools, is_lead
FROM participants WHERE token_hash = :token_hash

-- name: parent_messaging
-- Whether the named parent may message: off is inherited by its children (S24).
SELECT messaging FROM participants WHERE space_id = :space_id AND address = :address
