-- Ack-required messages (broker.mail.acks): who has seen a message, from the
-- `seen` receipts turns write (S18). Reads only.

-- name: message
SELECT id, sender, seq, {reached_row} AS reached, ack_required FROM messages
WHERE space_no = {space_no} AND seq = {id_seq} AND id = :id AND kind <> 'seen'

-- name: seen_by
-- The senders of receipts after the message that list its id.
SELECT DISTINCT r.sender FROM messages r
WHERE r.space_no = {space_no} AND r.kind = 'seen' AND r.seq > :seq
  AND EXISTS (SELECT 1 FROM json_each(r.body) j WHERE j.value = :id)
-- postgresql:
SELECT DISTINCT r.sender FROM messages r
WHERE r.space_no = {space_no} AND r.kind = 'seen' AND r.seq > :seq
  AND jsonb_exists(r.body::jsonb, :id)
