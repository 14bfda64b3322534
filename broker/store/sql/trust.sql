-- Keys (broker.store.keys): the store's operator key (S29) and the spaces' join keys (S27).
-- Only hashes are stored; the secrets are shown once or kept in the 0600 key file.

-- name: operator_key
-- The hash of the store's operator key (one row, id 1), or no row before it is made.
SELECT key_hash FROM operator_key WHERE id = 1

-- name: insert_operator_key
-- Made once, when the store is first opened for writing at this schema; a
-- second process racing for it finds the row and keeps the first key.
INSERT INTO operator_key (id, key_hash, created_at_utc) VALUES (1, :key_hash, :now)
ON CONFLICT (id) DO NOTHING

-- name: join_key
-- The space's join key hash (NULL for a space made before join keys) and its state.
SELECT join_key_hash FROM spaces WHERE id = :space_id

-- name: set_join_key
-- A new join key for the space (create and rotate): the old one stops working at once.
UPDATE spaces SET join_key_hash = :key_hash, updated_at_utc = :now WHERE id = :space_id

-- The hashes a store-to-store copy (broker.interchange.migrate_store) carries
-- across: an export never holds them, so they are read and written here.

-- name: join_key_hashes
-- Every space's join key hash (spaces made before join keys have none).
SELECT id, join_key_hash FROM spaces WHERE join_key_hash IS NOT NULL

-- name: token_hashes
-- Every participant's token hash.
SELECT id, space_id, token_hash FROM participants

-- name: carry_join_key
-- A copied space keeps its join key: the source's hash, its row otherwise as copied.
UPDATE spaces SET join_key_hash = :key_hash WHERE id = :space_id

-- name: carry_token
-- A copied participant keeps its token: the source's hash in place of the
-- random one the import gave it.
UPDATE participants SET token_hash = :token_hash WHERE id = :id

-- name: replace_operator_key
-- A store that takes another's operator key (a copy into a store holding no space).
UPDATE operator_key SET key_hash = :key_hash, created_at_utc = :now WHERE id = 1
