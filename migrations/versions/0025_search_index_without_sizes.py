"""the search index keeps no column sizes: its mark is a fold's

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-04 05:10:00.000000

SQLite's FTS5 index kept a row of column sizes per log row (its ``docsize``
table, 12 bytes a message), read by bm25 to rank and by the broker as the
index's last row (``max(id)``, the mark past which rows wait for their batch).
The index is made again with ``columnsize=0``: bm25 reads a row's size from
its text instead, for the rows a search ranks (at most its window). The mark
is a fold's, ``folds.upto`` ('search'), as the usage and waiting folds keep
theirs: the insert trigger indexes the rows past it and moves it, a search
does the same first, and a space's delete (a purge) indexes the rest and sets
it to the log's last row (rowids freed at the top are used again). The index
is rebuilt from the log (every row, those waiting included). PostgreSQL's GIN
index has no such table: nothing to do there. Frozen: the DDL is written out
here, never imported from live code.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TOKENIZE = "tokenize='unicode61 remove_diacritics 2'"
TABLE = (
    "CREATE VIRTUAL TABLE messages_fts USING fts5(body, thread, content='messages', "
    "content_rowid='rowid', {sizes}" + TOKENIZE + ")"
)
INDEX = "INSERT INTO messages_fts (rowid, body, thread) SELECT rowid, body, thread FROM messages"
DELETE = (
    "INSERT INTO messages_fts (messages_fts, rowid, body, thread) "
    "VALUES ('delete', OLD.rowid, OLD.body, OLD.thread)"
)
MARK = "coalesce((SELECT upto FROM folds WHERE name = 'search'), 0)"
MARKED = (
    "INSERT INTO folds (name, upto) SELECT 'search', coalesce(max(rowid), 0) FROM messages "
    "WHERE true ON CONFLICT (name) DO UPDATE SET upto = excluded.upto"
)
FOLD = f"{INDEX} WHERE rowid > {MARK}; {MARKED};"
TRIGGERS = [
    "CREATE TRIGGER IF NOT EXISTS messages_fts_insert AFTER INSERT ON messages "
    f"WHEN NEW.rowid - {MARK} >= 32 BEGIN {FOLD} END",
    "CREATE TRIGGER IF NOT EXISTS messages_fts_delete AFTER DELETE ON messages "
    f"WHEN OLD.rowid <= {MARK} BEGIN {DELETE}; END",
    f"CREATE TRIGGER IF NOT EXISTS spaces_search AFTER DELETE ON spaces BEGIN {FOLD} END",
]
LAST = "coalesce((SELECT max(id) FROM messages_fts_docsize), 0)"
TRIGGERS_0024 = [
    "CREATE TRIGGER IF NOT EXISTS messages_fts_insert AFTER INSERT ON messages "
    f"WHEN NEW.rowid - {LAST} >= 32 BEGIN {INDEX} WHERE rowid > {LAST}; END",
    "CREATE TRIGGER IF NOT EXISTS messages_fts_delete AFTER DELETE ON messages "
    f"WHEN OLD.rowid <= {LAST} BEGIN {DELETE}; END",
]


def _remake(sizes: str, triggers: list[str]) -> None:
    """The index dropped (its shadow tables with it) and made again from the log."""
    for trigger in ("messages_fts_insert", "messages_fts_delete", "spaces_search"):
        op.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    op.execute("DROP TABLE IF EXISTS messages_fts")
    op.execute(TABLE.format(sizes=sizes))
    op.execute("INSERT INTO messages_fts (messages_fts) VALUES ('rebuild')")
    for ddl in triggers:
        op.execute(ddl)


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    _remake("columnsize=0, ", TRIGGERS)
    op.execute(MARKED)


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    _remake("", TRIGGERS_0024)
    op.execute("DELETE FROM folds WHERE name = 'search'")
