-- Spaces (broker.spaces.spaces, S1, S30): space rows made, read, resolved, stopped,
-- archived and re-set (the join key hash is broker.store.keys's; the counters
-- last_seq, last_bcast and log_bytes are broker.mail.messages').

-- name: set_settings
-- The operator's `space set` (S30): the new overrides, validated and bounded.
UPDATE spaces SET settings = :settings, updated_at_utc = :now WHERE id = :space_id

-- name: by_prefix
-- A run id given by a unique prefix, with or without its kind prefix (the
-- compact form is what follows the first '_'); '_' in :pattern is escaped.
SELECT id FROM spaces WHERE id LIKE :pattern ESCAPE '\'
  OR substr(id, instr(id, '_') + 1) LIKE :pattern ESCAPE '\' ORDER BY id LIMIT 11
-- postgresql:
SELECT id FROM spaces WHERE id LIKE :pattern ESCAPE '\'
  OR substr(id, strpos(id, '_') + 1) LIKE :pattern ESCAPE '\' ORDER BY id LIMIT 11

-- name: insert
-- The one INSERT of a space row, every column: spaces.create (a new running
-- space, counters at 0) and the importer both write through it.
INSERT INTO spaces (id, kind, state, settings, last_seq, last_bcast, log_bytes,
  created_at_utc, updated_at_utc)
VALUES (:id, :kind, :state, :settings, :last_seq, :last_bcast, :log_bytes,
  :created_at_utc, :updated_at_utc)

-- name: exact_id
-- A run id given in full (the common case, one index probe before any prefix search).
SELECT id FROM spaces WHERE id = :id

-- name: get
-- One space: the columns of records.Space (read by name in spaces.to_model),
-- and the end of its broadcast log (a newcomer's broadcasts count from there,
-- S6). The one read of a space row by id: show, stop/archive and `space set`
-- (its state and overrides), a join (kind: the address form; settings: the
-- lease that keeps a silent holder live, S27), a prune (the same lease).
SELECT id, kind, state, settings, {last_bcast} AS last_bcast, created_at_utc, updated_at_utc
FROM spaces WHERE id = :space_id

-- name: list_all
SELECT id, kind, state, settings, created_at_utc, updated_at_utc FROM spaces ORDER BY id

-- name: list_in_state
SELECT id, kind, state, settings, created_at_utc, updated_at_utc FROM spaces
WHERE state = :state ORDER BY id

-- name: set_state
-- stop / archive (S1): the state moves forward only (checked by spaces._set_state).
UPDATE spaces SET state = :state, updated_at_utc = :now WHERE id = :space_id
