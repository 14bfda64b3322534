"""claim journal: why a hold ended when its holder did not end it (S4, S23, S37)

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01 18:00:00.000000

``claim_journal.reason`` says why a key claim or a path reservation was
released by someone other than its holder: ``left`` (the holder left, or was
recorded as left by a stop, an archive or the directory's clean-up) or
``operator: ...`` (the operator ended it). NULL for the holder's own lines and
for expiries, and for every line written before this revision. A plain ADD
COLUMN on both backends: a batch "move and copy" would drop the append-only
triggers on the table. Frozen: the DDL is written out here, never imported
from live code.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "claim_journal",
        sa.Column(
            "reason",
            sa.Text(),
            nullable=True,
            comment="why it was released by someone else: left | operator: ...; NULL otherwise",
        ),
    )


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("ALTER TABLE claim_journal DROP COLUMN reason")  # SQLite >= 3.35
    else:
        op.drop_column("claim_journal", "reason")
