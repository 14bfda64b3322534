"""mail: threads (S35), search (S36), importance and ack-required, contact policy (S38)

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 02:40:00.000000

Columns are added in place (``ALTER TABLE ... ADD COLUMN``: all nullable, so
SQLite needs no table rebuild and the views and triggers on ``messages`` stay).
The FTS5 index is external-content (the text is stored once, in ``messages``)
and kept by triggers; ``rebuild`` indexes the rows already logged. Frozen: the
DDL is written out here, never imported from live code.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SEARCH = [
    "CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(body, thread, "
    "content='messages', content_rowid='rowid', tokenize='unicode61 remove_diacritics 2')",
    "CREATE TRIGGER IF NOT EXISTS messages_fts_insert AFTER INSERT ON messages BEGIN "
    "INSERT INTO messages_fts (rowid, body, thread) VALUES (NEW.rowid, NEW.body, NEW.thread); END",
    "CREATE TRIGGER IF NOT EXISTS messages_fts_delete AFTER DELETE ON messages BEGIN "
    "INSERT INTO messages_fts (messages_fts, rowid, body, thread) "
    "VALUES ('delete', OLD.rowid, OLD.body, OLD.thread); END",
    "INSERT INTO messages_fts (messages_fts) VALUES ('rebuild')",
]
DROP_SEARCH = [
    "DROP TRIGGER IF EXISTS messages_fts_insert",
    "DROP TRIGGER IF EXISTS messages_fts_delete",
    "DROP TABLE IF EXISTS messages_fts",
]

THREADS_VIEW = {
    "sqlite": "json_group_array(w.sender)",
    "postgresql": "COALESCE(json_agg(w.sender ORDER BY w.first), '[]')::text",
}


def _v_threads(senders: str) -> str:
    return (
        "CREATE VIEW v_threads AS SELECT m.space_id, m.thread, COUNT(*) AS messages, "
        "(SELECT f.id FROM messages f WHERE f.space_id = m.space_id AND f.thread = m.thread "
        "ORDER BY f.seq LIMIT 1) AS first_id, MIN(m.created_at_utc) AS first_at, "
        "(SELECT l.id FROM messages l WHERE l.space_id = m.space_id AND l.thread = m.thread "
        "ORDER BY l.seq DESC LIMIT 1) AS last_id, MAX(m.created_at_utc) AS last_at, "
        "COUNT(DISTINCT m.sender) AS participants, "
        f"(SELECT {senders} FROM (SELECT s.sender, MIN(s.seq) AS first FROM messages s "
        "WHERE s.space_id = m.space_id AND s.thread = m.thread GROUP BY s.sender ORDER BY first) w) "
        "AS senders FROM messages m WHERE m.thread IS NOT NULL GROUP BY m.space_id, m.thread"
    )


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    for name, type_, comment in (
        ("thread", sa.String(length=64), "thread name (S35); a reply inherits its parent's"),
        ("reply_to", sa.String(length=26), "the message this one answers (S35)"),
        ("importance", sa.String(length=8), "low | high | urgent; NULL = normal"),
        ("ack_required", sa.Boolean(), "1: the sender asks who has seen it (msg status)"),
    ):
        op.add_column("messages", sa.Column(name, type_, nullable=True, comment=comment))
    op.add_column(
        "participants",
        sa.Column(
            "contact_policy",
            sa.String(length=16),
            nullable=True,
            comment="who may message it directly (S38): parent-and-lead | listed | closed; NULL = open",
        ),
    )
    op.add_column(
        "participants",
        sa.Column(
            "contact_allow",
            sa.Text(),
            nullable=True,
            comment="JSON list of addresses a `listed` policy lets in",
        ),
    )
    op.create_index(
        "ix_messages_space_id_thread_seq",
        "messages",
        ["space_id", "thread", "seq"],
        unique=False,
        sqlite_where=sa.text("thread IS NOT NULL"),
        postgresql_where=sa.text("thread IS NOT NULL"),
    )
    op.create_index(
        "ix_participants_space_id_contact_policy",
        "participants",
        ["space_id"],
        unique=False,
        sqlite_where=sa.text("contact_policy IS NOT NULL"),
        postgresql_where=sa.text("contact_policy IS NOT NULL"),
    )
    op.execute(_v_threads(THREADS_VIEW[dialect]))
    if dialect == "sqlite":
        for ddl in SEARCH:
            op.execute(ddl)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        for ddl in DROP_SEARCH:
            op.execute(ddl)
    op.execute("DROP VIEW IF EXISTS v_threads")
    op.drop_index("ix_participants_space_id_contact_policy", table_name="participants")
    op.drop_index("ix_messages_space_id_thread_seq", table_name="messages")
    for table, column in (
        ("participants", "contact_allow"),
        ("participants", "contact_policy"),
        ("messages", "ack_required"),
        ("messages", "importance"),
        ("messages", "reply_to"),
        ("messages", "thread"),
    ):
        op.drop_column(table, column)
