-- Spaces (broker.spaces, S1).

-- name: by_prefix
-- A run id given by a unique prefix, with or without its kind prefix (the
-- compact form is what follows the first '_'); '_' in :pattern is escaped.
SELECT id FROM spaces WHERE id LIKE :pattern ESCAPE '\'
  OR substr(id, instr(id, '_') + 1) LIKE :pattern ESCAPE '\' ORDER BY id LIMIT 11
-- postgresql:
SELECT id FROM spaces WHERE id LIKE :pattern ESCAPE '\'
  OR substr(id, strpos(id, '_') + 1) LIKE :pattern ESCAPE '\' ORDER BY id LIMIT 11
