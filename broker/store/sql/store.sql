-- The connection and transaction statements of the store (broker.store.sqlite).

-- name: begin_write
-- A write transaction takes SQLite's write lock up front, so it never fails
-- half-way on a lock upgrade (a read that later writes gets SQLITE_BUSY at once).
BEGIN IMMEDIATE
-- postgresql:
BEGIN ISOLATION LEVEL READ COMMITTED

-- name: begin_read
-- A read snapshot.
BEGIN
-- postgresql:
BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY

-- name: lock_space
-- The writers of one space queue here (broker.store.sqlite Store.lock_space). Only the
-- PostgreSQL store runs it: on SQLite BEGIN IMMEDIATE already serialises every
-- writer of the file. FOR NO KEY UPDATE, not FOR UPDATE: it queues the space's
-- writers behind each other all the same, but lets a foreign-key check take
-- its KEY SHARE lock on the row. An ack updating its inbox's participant row
-- twice in one statement re-checks that row's key to its space; under FOR
-- UPDATE that check waited for a sender holding the space while the sender
-- waited for the participant row: a deadlock.
SELECT id FROM spaces WHERE id = :space_id
-- postgresql:
SELECT id FROM spaces WHERE id = :space_id FOR NO KEY UPDATE

-- name: migrate_lock
-- PostgreSQL only (broker.store.postgres): concurrent first opens of one database
-- migrate it once, queued on this session-level advisory lock (SQLite queues
-- on the writer lock file instead; this text is never run there).
SELECT :key AS migrate_lock
-- postgresql:
SELECT pg_advisory_lock(:key)

-- name: commit
COMMIT

-- name: rollback
ROLLBACK

-- name: savepoint
-- A tool call inside a caller's transaction runs under a savepoint: its error
-- undoes what it wrote and the caller's transaction goes on.
SAVEPOINT broker_tool

-- name: rollback_to_savepoint
ROLLBACK TO SAVEPOINT broker_tool

-- name: release_savepoint
RELEASE SAVEPOINT broker_tool

-- name: wal
PRAGMA journal_mode = WAL

-- name: synchronous_normal
-- A process crash never loses a commit; power loss may lose the last ones.
PRAGMA synchronous = NORMAL

-- name: synchronous_full
-- The only mode in which an acked message survives power loss.
PRAGMA synchronous = FULL

-- name: foreign_keys
PRAGMA foreign_keys = ON

-- name: recursive_triggers
-- S34: INSERT OR REPLACE deletes the row it replaces without firing DELETE
-- triggers unless this is on, which would let REPLACE rewrite the append-only log.
PRAGMA recursive_triggers = ON

-- name: wal_autocheckpoint
-- SQLite's automatic checkpoint (its default, said out loud), inside a COMMIT
-- so under the writer lock: a backstop for writers without the lock file. The
-- broker's writers checkpoint every ~900 pages after letting the lock go
-- (broker.store.sqlite), before the WAL holds this many.
PRAGMA wal_autocheckpoint = 1000

-- name: journal_size_limit
-- Bound the WAL on disk after checkpoints (64 MiB).
PRAGMA journal_size_limit = 67108864

-- name: data_version
-- Changes when another connection commits: a few microseconds, no lock.
PRAGMA data_version
-- postgresql:
-- No commit counter on PostgreSQL: wake-ups come by NOTIFY (broker.delivery.pgwake).
SELECT 0

-- name: notify
-- PostgreSQL only (broker.delivery.pgwake): ring the waiters of the keys in :payload.
-- SQLite rings its doorbell sockets instead; this text is never run there.
SELECT :channel AS channel, :payload AS payload
-- postgresql:
SELECT pg_notify(:channel, :payload)

-- name: checkpoint_passive
-- Fold the WAL back without waiting for anyone.
PRAGMA wal_checkpoint(PASSIVE)

-- name: schema_version
SELECT version_num FROM alembic_version

-- name: checkpoint_truncate
-- Fold the whole WAL back and cut the file to nothing (waits for readers up to
-- the busy timeout; `broker vacuum`).
PRAGMA wal_checkpoint(TRUNCATE)

-- name: vacuum
-- Rewrite the database without its free pages (`broker vacuum`); it runs
-- outside any transaction, under the writer lock.
VACUUM

-- name: journal_mode
PRAGMA journal_mode

-- name: quick_check
-- The database's structure, without the slower index cross-checks.
PRAGMA quick_check

-- name: integrity_check
PRAGMA integrity_check

-- name: compile_options
PRAGMA compile_options

-- name: page_size
PRAGMA page_size

-- name: page_count
PRAGMA page_count

-- name: freelist_count
PRAGMA freelist_count

-- name: journal_size_limit_value
PRAGMA journal_size_limit

-- name: json_probe
-- The JSON functions the statements rely on (json_each): built in since 3.38.
SELECT json_valid('[]') AS ok


-- name: clock
-- The database's own clock, in seconds since the epoch (S44): a PostgreSQL
-- store reads it once per process and judges time and leases by it, not by
-- the process's clock. SQLite has no clock of its own (the writer's is used).
SELECT (julianday('now') - 2440587.5) * 86400.0
-- postgresql:
SELECT extract(epoch FROM clock_timestamp())::float8

-- name: newest_at
-- The time of the store's newest log row (the last one written, by rowid):
-- a SQLite store's clock starts no earlier (S44). SQLite only: a PostgreSQL
-- store reads the database's clock (store.clock).
SELECT created_at_utc FROM messages ORDER BY rowid DESC LIMIT 1
-- postgresql:
SELECT created_at_utc FROM messages ORDER BY created_at_utc DESC LIMIT 1
