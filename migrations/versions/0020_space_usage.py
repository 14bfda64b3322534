"""space_usage: a space's log size in one row, not a sum over its senders

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-03 21:30:00.000000

A send checks the space's log cap (S11) against the bytes logged, which the
caller check derived as the sum of the space's ``sender_usage`` rows (revision
0017): one row read per sender, so a send cost more the more agents had ever
sent in the space (the caller check 18 -> 26 us at 65 senders). The total now
has a row of its own, ``space_usage``, kept by the triggers that keep
``sender_usage``: on SQLite the fold of every 32 log rows adds them to it too
(one more page per batch), on PostgreSQL the per-row trigger upserts it (the
send already holds its space's row lock). The row starts as the sum of the
space's ``sender_usage`` rows: on SQLite what was folded (``folds.upto`` is
unchanged, so the rows past it are still the readers' tail), on PostgreSQL
everything. Frozen: the DDL is written out here, never imported from live code.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UPTO = "coalesce((SELECT upto FROM folds WHERE name = 'sender_usage'), 0)"
SENDERS_FOLD = (
    "INSERT INTO sender_usage (space_id, sender, log_bytes, messages) "
    "SELECT space_id, sender, sum(size_bytes), count(*) FROM messages "
    f"WHERE rowid > {UPTO} GROUP BY space_id, sender "
    "ON CONFLICT (space_id, sender) DO UPDATE SET "
    "log_bytes = log_bytes + excluded.log_bytes, messages = messages + excluded.messages; "
    "INSERT INTO folds (name, upto) "
    "SELECT 'sender_usage', coalesce(max(rowid), 0) FROM messages WHERE true "
    "ON CONFLICT (name) DO UPDATE SET upto = excluded.upto;"
)
FOLD = (
    "INSERT INTO space_usage (space_id, log_bytes) "
    f"SELECT space_id, sum(size_bytes) FROM messages WHERE rowid > {UPTO} "
    "GROUP BY space_id "
    "ON CONFLICT (space_id) DO UPDATE SET log_bytes = log_bytes + excluded.log_bytes; "
    + SENDERS_FOLD
)
DROP_SQLITE = [
    "DROP TRIGGER IF EXISTS messages_sender_usage",
    "DROP TRIGGER IF EXISTS spaces_sender_usage",
]
SQLITE = [
    "CREATE TRIGGER IF NOT EXISTS messages_sender_usage AFTER INSERT ON messages "
    f"WHEN NEW.rowid - {UPTO} >= 32 BEGIN {FOLD} END",
    "CREATE TRIGGER IF NOT EXISTS spaces_sender_usage AFTER DELETE ON spaces "
    f"BEGIN {FOLD} DELETE FROM sender_usage WHERE space_id = OLD.id; "
    "DELETE FROM space_usage WHERE space_id = OLD.id; END",
]
# Revision 0015's.
SQLITE_0019 = [
    "CREATE TRIGGER IF NOT EXISTS messages_sender_usage AFTER INSERT ON messages "
    f"WHEN NEW.rowid - {UPTO} >= 32 BEGIN {SENDERS_FOLD} END",
    "CREATE TRIGGER IF NOT EXISTS spaces_sender_usage AFTER DELETE ON spaces "
    f"BEGIN {SENDERS_FOLD} DELETE FROM sender_usage WHERE space_id = OLD.id; END",
]
PG = (
    "CREATE OR REPLACE FUNCTION broker_sender_usage() RETURNS trigger AS $$ BEGIN "
    "IF TG_TABLE_NAME = 'spaces' THEN "
    "DELETE FROM sender_usage WHERE space_id = OLD.id; "
    "DELETE FROM space_usage WHERE space_id = OLD.id; RETURN NULL; END IF; "
    "INSERT INTO sender_usage (space_id, sender, log_bytes, messages) "
    "VALUES (NEW.space_id, NEW.sender, NEW.size_bytes, 1) "
    "ON CONFLICT (space_id, sender) DO UPDATE SET "
    "log_bytes = sender_usage.log_bytes + excluded.log_bytes, "
    "messages = sender_usage.messages + 1; "
    "INSERT INTO space_usage (space_id, log_bytes) "
    "VALUES (NEW.space_id, NEW.size_bytes) "
    "ON CONFLICT (space_id) DO UPDATE SET "
    "log_bytes = space_usage.log_bytes + excluded.log_bytes; "
    "RETURN NULL; END $$ LANGUAGE plpgsql"
)
# Revision 0007's.
PG_0019 = (
    "CREATE OR REPLACE FUNCTION broker_sender_usage() RETURNS trigger AS $$ BEGIN "
    "IF TG_TABLE_NAME = 'spaces' THEN "
    "DELETE FROM sender_usage WHERE space_id = OLD.id; RETURN NULL; END IF; "
    "INSERT INTO sender_usage (space_id, sender, log_bytes, messages) "
    "VALUES (NEW.space_id, NEW.sender, NEW.size_bytes, 1) "
    "ON CONFLICT (space_id, sender) DO UPDATE SET "
    "log_bytes = sender_usage.log_bytes + excluded.log_bytes, "
    "messages = sender_usage.messages + 1; RETURN NULL; END $$ LANGUAGE plpgsql"
)

# The table's comment on PostgreSQL, before (revision 0015's) and after: what takes the log.
FOLDS_COMMENT = (
    "Batched derived state (SQLite): %s the log and participants.waiting the deliveries in "
    "batches of 32 rows, as the search index takes the log (S7, S30, S36), so a send does not "
    "write their pages; readers add the rows past `upto`. Unused on PostgreSQL."
)


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    if sqlite:
        for ddl in DROP_SQLITE:  # no fold between the table's first sum and the new trigger
            op.execute(ddl)
    op.create_table(
        "space_usage",
        sa.Column(
            "space_id",
            sa.String(length=40),
            nullable=False,
            comment="the space (no foreign key: a trigger removes the row with the space)",
        ),
        sa.Column(
            "log_bytes",
            sa.Integer(),
            server_default="0",
            nullable=False,
            comment="sum of messages.size_bytes of the space's log rows",
        ),
        sa.PrimaryKeyConstraint("space_id", name=op.f("pk_space_usage")),
        comment="A space's log size (S11), kept by the same triggers as sender_usage (no "
        "module writes it), so a send's log cap check is one primary-key read whatever the "
        "number of senders, not a sum over their rows (revision 0020).",
    )
    op.execute(
        "INSERT INTO space_usage (space_id, log_bytes) "
        "SELECT space_id, sum(log_bytes) FROM sender_usage GROUP BY space_id"
    )
    if sqlite:
        for ddl in SQLITE:
            op.execute(ddl)
    else:
        op.execute(PG)
        op.execute(
            "COMMENT ON COLUMN folds.name IS "
            "'what is folded: sender_usage (and space_usage) | waiting'"
        )
        op.execute(
            f"COMMENT ON TABLE folds IS '{FOLDS_COMMENT % 'sender_usage and space_usage take'}'"
        )


def downgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    if sqlite:
        for ddl in DROP_SQLITE + SQLITE_0019:
            op.execute(ddl)
    else:
        op.execute(PG_0019)
        op.execute("COMMENT ON COLUMN folds.name IS NULL")  # revision 0015 set none
        op.execute(f"COMMENT ON TABLE folds IS '{FOLDS_COMMENT % 'sender_usage takes'}'")
    op.drop_table("space_usage")
