-- Contact policies (broker.spaces.contact, S38). The policy columns of `participants`
-- are written by broker.spaces.participants (its one writer): `set_policy` below.

-- name: set_policy
-- A participant's own policy (NULL policy = open, NULL list = none).
UPDATE participants SET contact_policy = :policy, contact_allow = :allow
WHERE id = :participant_id

-- name: get_policy
SELECT contact_policy, contact_allow FROM participants WHERE id = :participant_id
