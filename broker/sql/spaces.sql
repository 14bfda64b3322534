-- Spaces (broker.spaces, S1, S30): statements moved here as they are touched.

-- name: settings
-- A space's state and stored overrides, read before the operator changes them.
SELECT state, settings FROM spaces WHERE id = :space_id

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
