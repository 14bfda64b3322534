-- Search (broker.mail.search, S36) over the FTS5 index `messages_fts`, which
-- triggers keep in step with the log (broker.store.dialect.search_ddl).

-- name: query
-- The best matches of :query in ONE space, best first (bm25: lower is better).
-- :query is broker.mail.search_query.fts5's text: every word quoted, never raw input.
-- Ranking reads the newest :window matches that pass the filters (FTS5 hands
-- matches out in rowid order, newest first here), so a word found in most of
-- a huge log costs :window scores, not one per message. Receipts are left
-- out. :viewer (an agent) narrows to what it sent or what reached it; NULL
-- (the operator) sees the whole space. :kinds is a JSON list or NULL.
SELECT m.id, m.seq, m.kind, m.sender, m.recipients, m.thread, m.created_at_utc,
  c.rid, c.rank
FROM (SELECT f.rowid AS rid, bm25(messages_fts) AS rank
      FROM messages_fts f JOIN messages m ON m.rowid = f.rowid
      WHERE messages_fts MATCH :query AND m.space_no = {space_no} AND m.kind <> 'seen'
        AND (:sender IS NULL OR m.sender = :sender)
        AND (:since IS NULL OR m.created_at_utc >= :since)
        AND (:kinds IS NULL OR m.kind IN (SELECT value FROM json_each(:kinds)))
        AND (:to IS NULL OR EXISTS (SELECT 1 FROM json_each({reached_m}) r WHERE r.value = :to)
             OR EXISTS (SELECT 1 FROM json_each(m.recipients) r WHERE r.value = :to))
        AND (:viewer IS NULL OR m.sender = :viewer
             OR EXISTS (SELECT 1 FROM json_each({reached_m}) r WHERE r.value = :viewer))
      ORDER BY f.rowid DESC LIMIT :window) c
JOIN messages m ON m.rowid = c.rid
ORDER BY c.rank, m.seq LIMIT :n
-- postgresql:
-- The same window: the newest :window matches (by seq) are ranked, through the
-- GIN index on the matched tsvector (revision 0012: the words FTS5 would find,
-- thread words weighted A). :query is broker.mail.search_query.tsquery's text; every
-- weight counts alike in the rank (0.1, ts_rank's default for D).
SELECT c.id, c.seq, c.kind, c.sender, c.recipients, c.thread, c.created_at_utc,
  c.rowid AS rid, -ts_rank('{0.1, 0.1, 0.1, 0.1}', c.v, c.q) AS rank
FROM (SELECT m.rowid, m.id, m.seq, m.kind, m.sender, m.recipients, m.thread, m.created_at_utc,
        (to_tsvector('simple', broker_search_text(m.body))
         || setweight(to_tsvector('simple', broker_search_text(coalesce(m.thread, ''))), 'A')) AS v,
        q
      FROM messages m, to_tsquery('simple', :query) q
      WHERE (to_tsvector('simple', broker_search_text(m.body))
             || setweight(to_tsvector('simple', broker_search_text(coalesce(m.thread, ''))), 'A')) @@ q
        AND m.space_no = {space_no} AND m.kind <> 'seen'
        AND (:sender::text IS NULL OR m.sender = :sender)
        AND (:since::text IS NULL OR m.created_at_utc >= :since)
        AND (:kinds::text IS NULL OR m.kind IN (SELECT jsonb_array_elements_text(:kinds::jsonb)))
        AND (:to::text IS NULL OR {reached_m}::jsonb ? :to OR m.recipients::jsonb ? :to)
        AND (:viewer::text IS NULL OR m.sender = :viewer OR {reached_m}::jsonb ? :viewer)
      ORDER BY m.seq DESC LIMIT :window) c
ORDER BY rank, c.seq LIMIT :n

-- name: snippets
-- The snippets of the few rows a search returns, matched words in [brackets]:
-- computed for those rows only (a snippet re-reads the text).
SELECT rowid, snippet(messages_fts, -1, '[', ']', '…', 12) FROM messages_fts
WHERE messages_fts MATCH :query AND rowid IN (SELECT value FROM json_each(:rowids))
-- postgresql:
-- The rows come by rowid (a search's rid), highlighted by ts_headline
-- (on the body as written: a word PostgreSQL's parser keeps whole, `search.py`,
-- or writes with a diacritic, `café`, is found but may go unhighlighted).
SELECT m.rowid, ts_headline('simple', m.body, to_tsquery('simple', :query),
  'StartSel=[, StopSel=], MaxWords=12, MinWords=4, FragmentDelimiter=…, MaxFragments=1')
FROM messages m WHERE m.rowid IN (SELECT jsonb_array_elements_text(:rowids::jsonb)::bigint)

-- name: index_size
-- Bytes of the search index's own tables (the text is not copied: the index
-- reads it from `messages`), for `broker store stats`-like reports and bench.
SELECT coalesce(sum(pgsize), 0) FROM dbstat WHERE name LIKE 'messages_fts%'
-- postgresql:
-- The GIN index over the searched tsvector (revisions 0010, 0012); the text itself
-- stays in `messages`, as with FTS5.
SELECT coalesce(pg_relation_size(to_regclass('ix_messages_search')), 0)::bigint

-- name: integrity
-- FTS5's own check that the index matches the log (raises if not).
INSERT INTO messages_fts (messages_fts, rank) VALUES ('integrity-check', 1)
-- postgresql:
-- Nothing to check: PostgreSQL keeps the GIN index in step with the log inside
-- each transaction (amcheck's GIN checks are an extension, not installed here).
SELECT 1

-- name: pending
-- Whether log rows wait for the index (S36): the insert trigger indexes them
-- in batches (broker.store.dialect.FTS_BATCH), a search indexes the rest first.
-- The log's last rowid against the index's (folds.upto 'search', revision
-- 0025), no scan. PostgreSQL's index is never behind.
SELECT (SELECT coalesce(max(rowid), 0) FROM messages)
  > coalesce((SELECT upto FROM folds WHERE name = 'search'), 0) AS pending
-- postgresql:
SELECT 0 AS pending

-- name: index_pending
-- Index every log row past the index's last one (those the insert trigger has
-- not batched yet): a search runs it first, so it finds every sent message;
-- then mark_indexed.
INSERT INTO messages_fts (rowid, body, thread)
SELECT rowid, body, thread FROM messages
WHERE rowid > coalesce((SELECT upto FROM folds WHERE name = 'search'), 0)
-- postgresql:
SELECT 0 AS pending

-- name: mark_indexed
-- The index's last row is the log's (after index_pending).
INSERT INTO folds (name, upto) SELECT 'search', coalesce(max(rowid), 0) FROM messages
WHERE true ON CONFLICT (name) DO UPDATE SET upto = excluded.upto
-- postgresql:
SELECT 0 AS pending

-- name: tail_index
-- A search that cannot write (a read-only store, a caller's read transaction)
-- matches the rows waiting for the index on a private index of its own: a
-- TEMP table of this connection with the index's name, which the search
-- statements then read instead (temp names come first). Dropped right after.
CREATE VIRTUAL TABLE temp.messages_fts USING fts5(body, thread,
  tokenize='unicode61 remove_diacritics 2')

-- name: tail_fill
INSERT INTO temp.messages_fts (rowid, body, thread)
SELECT rowid, body, thread FROM main.messages
WHERE rowid > coalesce((SELECT upto FROM main.folds WHERE name = 'search'), 0)

-- name: tail_drop
DROP TABLE temp.messages_fts
