-- Spaces (broker.spaces, S1, S30): statements moved here as they are touched.

-- name: settings
-- A space's state and stored overrides, read before the operator changes them.
SELECT state, settings FROM spaces WHERE id = :space_id

-- name: set_settings
-- The operator's `space set` (S30): the new overrides, validated and bounded.
UPDATE spaces SET settings = :settings, updated_at_utc = :now WHERE id = :space_id
