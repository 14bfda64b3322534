"""path reservations (S37)

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01 02:30:00.000000

One row per grant of a path pattern, exclusive or shared, kept after it ends
(``ended_at_utc``) so the fencing token of the space only grows. Their journal
lines go to ``claim_journal`` (already append-only). Frozen: the DDL is written
out here, never imported from live code.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "reservations",
        sa.Column("space_id", sa.String(length=40), nullable=False),
        sa.Column(
            "token",
            sa.Integer(),
            nullable=False,
            comment="fencing token of the grant: larger than every earlier grant of the space",
        ),
        sa.Column(
            "pattern", sa.String(length=200), nullable=False, comment="the path pattern (broker.globs)"
        ),
        sa.Column("mode", sa.String(length=16), nullable=False, comment="exclusive | shared"),
        sa.Column(
            "holder",
            sa.String(length=200),
            nullable=False,
            comment="address holding the reservation",
        ),
        sa.Column("reason", sa.Text(), nullable=True, comment="why, as the holder said"),
        sa.Column("claimed_at_utc", sa.String(length=27), nullable=False),
        sa.Column("lease_expires_at", sa.String(length=27), nullable=False),
        sa.Column(
            "ended_at_utc",
            sa.String(length=27),
            nullable=True,
            comment="when it was released or expired; NULL while held",
        ),
        sa.CheckConstraint(
            "mode IN ('exclusive', 'shared')", name=op.f("ck_reservations_mode")
        ),
        sa.ForeignKeyConstraint(
            ["space_id"], ["spaces.id"], name=op.f("fk_reservations_space_id_spaces")
        ),
        sa.PrimaryKeyConstraint("space_id", "token", name=op.f("pk_reservations")),
        comment="Path reservations (S37): one row per grant, kept after it ends.",
    )
    with op.batch_alter_table("reservations", schema=None) as batch_op:
        batch_op.create_index(
            "ix_reservations_space_id_ended_at_utc", ["space_id", "ended_at_utc"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("reservations", schema=None) as batch_op:
        batch_op.drop_index("ix_reservations_space_id_ended_at_utc")
    op.drop_table("reservations")
