-- Fragments every area may use: the space's counters, derived from the log
-- (revision 0017: {last_seq}, {log_bytes}, {last_bcast}), the space as the
-- log names it ({space_no}, revision 0023), the seq a message
-- id names ({id_seq}, revision 0018), a delivery's message ({of_message},
-- {message_of_row}, revision 0021) and id ({delivery_id}, revision 0024), a
-- delivery's recipient ({recipient_no}, revision 0022), the addresses a
-- message reached ({reached_m}, {reached_row}, revision 0026) and an inbox's
-- waiting deliveries ({waiting}, {waiting_rows}). This file
-- holds no statement; a fragment of the same name in another area is refused
-- (defined twice), so each expression is written once.

-- fragment: space_no
-- The space :space_id as the log names it: its spaces row's rowid (revision
-- 0023: a number in every log row and in the log's (space_no, seq) key where
-- its 30-byte id was). One seek of the spaces key, run once per statement.
(SELECT rowid FROM spaces WHERE id = :space_id)

-- fragment: id_seq
-- The seq of the message :id of the space :space_id: a message id names its
-- seq (broker.ids.message_id), which the caller reads out of it as :id_seq
-- (broker.ids.seq_in_id), unless the message has an alias (an id logged before
-- revision 0018, or an imported one naming another seq). The log has no index
-- of ids: a lookup reads `space_no = {space_no} AND seq = {id_seq} AND id = :id`,
-- one seek on (space_no, seq), and the id check refuses whatever else is there.
coalesce((SELECT a.seq FROM message_aliases a WHERE a.space_id = :space_id AND a.id = :id), :id_seq)
-- postgresql:
coalesce((SELECT a.seq FROM message_aliases a WHERE a.space_id = :space_id AND a.id = :id), CAST(:id_seq AS bigint))

-- fragment: last_seq
-- The space's counters are derived (revision 0017), each one expression over
-- the row `spaces`. The last seq and broadcast number: one seek each on
-- the log's indexes; the bytes logged: the space's space_usage row plus (SQLite)
-- the log rows past folds.upto that the batched trigger has not folded in yet
-- (fewer than 32). Each is at least the space row's own column: the floor the
-- importer writes (the exported counters), frozen at revision 0017, never
-- written by a send. Read under the space's write lock (BEGIN IMMEDIATE; on
-- PostgreSQL the row lock, taken by an earlier statement, so this one's
-- snapshot holds every row committed before it).
max(spaces.last_seq, coalesce((SELECT max(seq) FROM messages WHERE space_no = spaces.rowid), 0))
-- postgresql:
greatest(spaces.last_seq, coalesce((SELECT max(seq) FROM messages WHERE space_no = spaces.rowid), 0))

-- fragment: log_bytes
max(spaces.log_bytes, coalesce((SELECT log_bytes FROM space_usage WHERE space_id = spaces.id), 0) + coalesce((SELECT sum(size_bytes) FROM messages WHERE rowid > coalesce((SELECT upto FROM folds WHERE name = 'sender_usage'), 0) AND +space_no = spaces.rowid), 0))
-- postgresql:
greatest(spaces.log_bytes, coalesce((SELECT log_bytes FROM space_usage WHERE space_id = spaces.id), 0))

-- fragment: last_bcast
max(spaces.last_bcast, coalesce((SELECT max(bcast_no) FROM messages WHERE space_no = spaces.rowid AND bcast_no IS NOT NULL), 0))
-- postgresql:
greatest(spaces.last_bcast, coalesce((SELECT max(bcast_no) FROM messages WHERE space_no = spaces.rowid AND bcast_no IS NOT NULL), 0))

-- fragment: of_message
-- A delivery `d` and its message `m` (revision 0021): the delivery's rowid is
-- the message's times 2^20 plus its place among the message's deliveries
-- (revision 0017), so the message is the rowid's, and a message's deliveries
-- are one rowid range. Both forms are given, so the join is one seek whichever
-- table the planner reads first (a claim's rows, or a space's log).
m.rowid = d.rowid >> 20 AND d.rowid BETWEEN m.rowid * 1048576 AND m.rowid * 1048576 + 1048575

-- fragment: delivery_id
-- The id of a delivery `d` of the message `m`: the id it was given where it
-- keeps one (an imported row, and every row from before revision 0024), else
-- the one a send gives it without writing it: its message's id, its first 22
-- characters (the time, the seq and 20 random bits: a space's message ids
-- differ there), then its place among the message's deliveries (the low 20
-- bits of its rowid, revision 0017) in 4 Crockford base32 characters.
coalesce(d.id, substr(m.id, 1, 22)
  || substr('0123456789ABCDEFGHJKMNPQRSTVWXYZ', CAST(((d.rowid >> 15) & 31) + 1 AS int), 1)
  || substr('0123456789ABCDEFGHJKMNPQRSTVWXYZ', CAST(((d.rowid >> 10) & 31) + 1 AS int), 1)
  || substr('0123456789ABCDEFGHJKMNPQRSTVWXYZ', CAST(((d.rowid >> 5) & 31) + 1 AS int), 1)
  || substr('0123456789ABCDEFGHJKMNPQRSTVWXYZ', CAST((d.rowid & 31) + 1 AS int), 1))

-- fragment: message_of_row
-- The message id of the `deliveries` row an UPDATE is at (its RETURNING, or a
-- filter by message ids): one seek of the log by rowid (revision 0021).
(SELECT m.id FROM messages m WHERE m.rowid = deliveries.rowid >> 20)

-- fragment: reached_m
-- The addresses the message `m` reached: its reached list, or where that is
-- NULL (revision 0026: a send writes none when it equals the recipients) the
-- recipients as given, every form an address and each reached.
coalesce(m.reached, m.recipients)

-- fragment: reached_row
-- The same of the `messages` row a statement reads without an alias.
coalesce(reached, recipients)

-- fragment: recipient_no
-- The participant :recipient_id as a delivery names it: its participants row's
-- rowid (revision 0022: a number in the row and the inbox indexes where its
-- 26-byte id was). One seek of the participants key, run once per statement.
(SELECT rowid FROM participants WHERE id = :recipient_id)

-- fragment: waiting
-- A participant's waiting deliveries (of the `participants` row a statement
-- reads). SQLite: `waiting` plus the inbox's deliveries past folds.upto
-- ('waiting'), fewer than 32, that the batched insert trigger has not counted
-- yet (revision 0015).
participants.waiting + (SELECT count(*) FROM deliveries w WHERE w.rowid > coalesce((SELECT upto FROM folds WHERE name = 'waiting'), 0) AND w.recipient_no = participants.rowid AND w.state IN ('ready', 'processing'))
-- postgresql:
participants.waiting

-- fragment: waiting_rows
-- The rowids (r) of an inbox's waiting deliveries, ready or processing, each
-- state read on its own partial index: the ready index, the tail past the
-- waiting fold not in it yet (SQLite, revision 0019), the leases. No index
-- holds both states: `state IN ('ready', 'processing')` would scan the table.
SELECT rowid AS r FROM deliveries
  WHERE recipient_no = {recipient_no} AND state = 'ready' AND queued = 1
UNION ALL SELECT w.rowid FROM deliveries w
  WHERE w.rowid > coalesce((SELECT upto FROM folds WHERE name = 'waiting'), 0)
    AND +w.recipient_no = {recipient_no} AND w.state = 'ready' AND w.queued = 0
UNION ALL SELECT rowid FROM deliveries WHERE recipient_no = {recipient_no} AND state = 'processing'
-- postgresql:
SELECT rowid AS r FROM deliveries WHERE recipient_no = {recipient_no} AND state = 'ready'
UNION ALL SELECT rowid FROM deliveries WHERE recipient_no = {recipient_no} AND state = 'processing'
