"""the ready index in batches: a send writes no index page

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-03 11:00:00.000000

After revision 0018 a one-recipient send wrote four b-trees: the log, its
(space_id, seq) key, the delivery and the ready index, one leaf page each per
commit (4.75 WAL frames). The ready index now takes new rows in batches, as
the search index and the counters already do: a delivery carries ``queued``;
SQLite inserts it 0 (outside the partial index), and the waiting fold, which
already runs every 32 messages, sets it to 1 for every row past
``folds.upto`` ('waiting') before it moves ``upto``: one index page per inbox
per batch. A claim reads the index and the short tail past ``upto`` (a rowid
range). PostgreSQL inserts 1 (it pays round trips, not pages). Existing rows
are 1. Frozen: the DDL is written out here, never imported from live code.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

READY = (
    "CREATE INDEX ix_deliveries_ready ON deliveries (recipient_id) "
    "WHERE state = 'ready' AND queued = 1"
)
READY_0018 = "CREATE INDEX ix_deliveries_ready ON deliveries (recipient_id) WHERE state = 'ready'"
COMMENT = (
    "COMMENT ON COLUMN deliveries.queued IS '1: in the ready index. SQLite inserts 0 and "
    "the waiting fold sets it for every row up to folds.upto (''waiting''), 32 messages at "
    "a time: a claim reads the index and the short tail past upto (revision 0019). "
    "PostgreSQL inserts 1'"
)

UPTO = "coalesce((SELECT upto FROM folds WHERE name = 'waiting'), 0)"
STATES = "('ready', 'processing')"
FOLD_0018 = (
    "UPDATE participants SET waiting = waiting + (SELECT count(*) FROM deliveries w "
    f"WHERE w.rowid > {UPTO} AND w.recipient_id = participants.id AND w.state IN {STATES}) "
    f"WHERE id IN (SELECT recipient_id FROM deliveries WHERE rowid > {UPTO}); "
    "INSERT INTO folds (name, upto) "
    "SELECT 'waiting', coalesce(max(rowid), 0) FROM deliveries WHERE true "
    "ON CONFLICT (name) DO UPDATE SET upto = excluded.upto;"
)
FOLD = f"UPDATE deliveries SET queued = 1 WHERE rowid > {UPTO} AND queued = 0; " + FOLD_0018


def _triggers(fold: str) -> list[str]:
    return [
        "DROP TRIGGER deliveries_waiting_insert",
        "DROP TRIGGER spaces_waiting",
        "CREATE TRIGGER IF NOT EXISTS deliveries_waiting_insert AFTER INSERT ON deliveries "
        f"WHEN (NEW.rowid >> 20) - ({UPTO} >> 20) >= 32 BEGIN {fold} END",
        f"CREATE TRIGGER IF NOT EXISTS spaces_waiting AFTER DELETE ON spaces BEGIN {fold} END",
    ]


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    op.execute(
        "ALTER TABLE deliveries ADD COLUMN queued "
        + ("BOOLEAN DEFAULT 1 NOT NULL" if sqlite else "SMALLINT DEFAULT 1 NOT NULL")
    )
    op.execute("DROP INDEX ix_deliveries_ready")
    op.execute(READY)
    if sqlite:
        for ddl in _triggers(FOLD):
            op.execute(ddl)
    else:
        op.execute(COMMENT)


def downgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    op.execute("DROP INDEX ix_deliveries_ready")
    if sqlite:
        # Every row into the old index's reach: the column goes, the index takes all.
        for ddl in _triggers(FOLD_0018):
            op.execute(ddl)
    op.execute("ALTER TABLE deliveries DROP COLUMN queued")
    op.execute(READY_0018)
