"""limits: per-sender log usage (S30)

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 02:40:00.000000

``sender_usage`` holds, per space and sender, the bytes and rows of the log it
wrote, kept by triggers on ``messages`` (insert) and ``spaces`` (delete), so the
per-sender share of ``log_max_mb`` is one primary-key read on a send. Filled
from the existing log here. Frozen: the DDL is written out here, never imported
from live code.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TRIGGERS: dict[str, list[str]] = {
    "sqlite": [
        "CREATE TRIGGER IF NOT EXISTS messages_sender_usage AFTER INSERT ON messages "
        "BEGIN INSERT INTO sender_usage (space_id, sender, log_bytes, messages) "
        "VALUES (NEW.space_id, NEW.sender, NEW.size_bytes, 1) "
        "ON CONFLICT (space_id, sender) DO UPDATE SET "
        "log_bytes = log_bytes + excluded.log_bytes, messages = messages + 1; END",
        "CREATE TRIGGER IF NOT EXISTS spaces_sender_usage AFTER DELETE ON spaces "
        "BEGIN DELETE FROM sender_usage WHERE space_id = OLD.id; END",
    ],
    "postgresql": [
        "CREATE OR REPLACE FUNCTION broker_sender_usage() RETURNS trigger AS $$ BEGIN "
        "IF TG_TABLE_NAME = 'spaces' THEN "
        "DELETE FROM sender_usage WHERE space_id = OLD.id; RETURN NULL; END IF; "
        "INSERT INTO sender_usage (space_id, sender, log_bytes, messages) "
        "VALUES (NEW.space_id, NEW.sender, NEW.size_bytes, 1) "
        "ON CONFLICT (space_id, sender) DO UPDATE SET "
        "log_bytes = sender_usage.log_bytes + excluded.log_bytes, "
        "messages = sender_usage.messages + 1; RETURN NULL; END $$ LANGUAGE plpgsql",
        "CREATE TRIGGER messages_sender_usage AFTER INSERT ON messages "
        "FOR EACH ROW EXECUTE FUNCTION broker_sender_usage()",
        "CREATE TRIGGER spaces_sender_usage AFTER DELETE ON spaces "
        "FOR EACH ROW EXECUTE FUNCTION broker_sender_usage()",
    ],
}

DROP_TRIGGERS: dict[str, list[str]] = {
    "sqlite": [
        "DROP TRIGGER IF EXISTS messages_sender_usage",
        "DROP TRIGGER IF EXISTS spaces_sender_usage",
    ],
    "postgresql": [
        "DROP TRIGGER IF EXISTS messages_sender_usage ON messages",
        "DROP TRIGGER IF EXISTS spaces_sender_usage ON spaces",
        "DROP FUNCTION IF EXISTS broker_sender_usage()",
    ],
}


def upgrade() -> None:
    op.create_table(
        "sender_usage",
        sa.Column(
            "space_id",
            sa.String(length=40),
            nullable=False,
            comment="the space (no foreign key: a trigger removes the rows with the space)",
        ),
        sa.Column(
            "sender",
            sa.String(length=200),
            nullable=False,
            comment="a sender address, or operator",
        ),
        sa.Column(
            "log_bytes",
            sa.Integer(),
            server_default="0",
            nullable=False,
            comment="sum of messages.size_bytes of this sender's log rows",
        ),
        sa.Column(
            "messages", sa.Integer(), server_default="0", nullable=False, comment="its log rows"
        ),
        sa.PrimaryKeyConstraint("space_id", "sender", name=op.f("pk_sender_usage")),
        comment="Per-sender share of a space's log (S30), kept by triggers on messages "
        "and spaces (no module writes it), so the share check is one primary-key read.",
    )
    op.execute(
        "INSERT INTO sender_usage (space_id, sender, log_bytes, messages) "
        "SELECT space_id, sender, coalesce(sum(size_bytes), 0), count(*) FROM messages "
        "GROUP BY space_id, sender"
    )
    for ddl in TRIGGERS[op.get_bind().dialect.name]:
        op.execute(ddl)


def downgrade() -> None:
    for ddl in DROP_TRIGGERS[op.get_bind().dialect.name]:
        op.execute(ddl)
    op.drop_table("sender_usage")
