"""SQLite: the search index takes the log in batches (S36)

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01 10:20:00.000000

SQLite only; on PostgreSQL this revision does nothing (its GIN index is kept
by the server in every transaction). Frozen: the DDL is written out here,
never imported from live code.

FTS5 writes a new segment, and merges older ones, in every transaction that
indexes anything: ~5 pages and ~100 us per transaction, half the cost of a
one-message send (bench swarm, 2026-12-01). The insert trigger of revision
0008 indexed each row in its own send; this one indexes every row past the
index's last one once 32 of them wait (one segment per 32 sends), and a
search indexes the rest first (``broker.search``). The index's last row is
the largest id of ``messages_fts_docsize``: every log row up to it is
indexed and none after it, so the delete trigger of a purge now takes out
only rows the index holds. The index holds every row when this runs
(revision 0008 indexed each one), so nothing is re-indexed here.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEXED = "coalesce((SELECT max(id) FROM messages_fts_docsize), 0)"
DROP = ["DROP TRIGGER IF EXISTS messages_fts_insert", "DROP TRIGGER IF EXISTS messages_fts_delete"]
BATCHED = [
    "CREATE TRIGGER IF NOT EXISTS messages_fts_insert AFTER INSERT ON messages "
    f"WHEN NEW.rowid - {INDEXED} >= 32 BEGIN "
    "INSERT INTO messages_fts (rowid, body, thread) SELECT rowid, body, thread "
    f"FROM messages WHERE rowid > {INDEXED}; END",
    "CREATE TRIGGER IF NOT EXISTS messages_fts_delete AFTER DELETE ON messages "
    f"WHEN OLD.rowid <= {INDEXED} BEGIN "
    "INSERT INTO messages_fts (messages_fts, rowid, body, thread) "
    "VALUES ('delete', OLD.rowid, OLD.body, OLD.thread); END",
]
# Revision 0008's: one row indexed per insert, every row deleted from the index.
PER_ROW = [
    "CREATE TRIGGER IF NOT EXISTS messages_fts_insert AFTER INSERT ON messages BEGIN "
    "INSERT INTO messages_fts (rowid, body, thread) VALUES (NEW.rowid, NEW.body, NEW.thread); END",
    "CREATE TRIGGER IF NOT EXISTS messages_fts_delete AFTER DELETE ON messages BEGIN "
    "INSERT INTO messages_fts (messages_fts, rowid, body, thread) "
    "VALUES ('delete', OLD.rowid, OLD.body, OLD.thread); END",
]


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    for ddl in DROP + BATCHED:
        op.execute(ddl)


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    # Index the rows still waiting first: revision 0008's index holds every row.
    op.execute(
        "INSERT INTO messages_fts (rowid, body, thread) SELECT rowid, body, thread "
        f"FROM messages WHERE rowid > {INDEXED}"
    )
    for ddl in DROP + PER_ROW:
        op.execute(ddl)
