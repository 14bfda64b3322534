"""trust: the join key of a space and the store's operator key (S27, S29)

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 02:30:00.000000

``spaces.join_key_hash`` holds the SHA-256 of a space's join key; it is NULL
for the spaces made before join keys existed (their operator rotates one).
``operator_key`` is a one-row table with the SHA-256 of the store's operator
key: the secret lives in the 0600 file beside the database (or
BROKER_OPERATOR_KEY), so a store without a file (PostgreSQL) checks the same
hash. The row is written by ``broker.trust`` when the store is first opened for
writing at this revision, never here: a migration does not create secrets.
Frozen: the DDL is written out here, never imported from live code.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A plain ADD COLUMN: a batch "move and copy" of spaces would break the
    # triggers that name it (purging_archived_only).
    op.add_column(
        "spaces",
        sa.Column(
            "join_key_hash",
            sa.String(length=64),
            nullable=True,
            comment="SHA-256 of the space's join key (S27); NULL for a space made before "
            "join keys (rotate one with `broker space join-key RUN_ID --rotate`)",
        ),
    )
    op.create_table(
        "operator_key",
        sa.Column(
            "id", sa.Integer(), autoincrement=False, nullable=False, comment="always 1: one row"
        ),
        sa.Column(
            "key_hash",
            sa.String(length=64),
            nullable=False,
            comment="SHA-256 of the operator key (S29)",
        ),
        sa.Column("created_at_utc", sa.String(length=27), nullable=False),
        sa.CheckConstraint("id = 1", name=op.f("ck_operator_key_one_row")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_operator_key")),
        comment="The store's operator key, hashed (S29). The secret itself is in the 0600 file "
        "<database>.operator-key or BROKER_OPERATOR_KEY; a server without a file (PostgreSQL) "
        "checks the same hash.",
    )


def downgrade() -> None:
    op.drop_table("operator_key")
    if op.get_bind().dialect.name == "sqlite":
        op.execute("ALTER TABLE spaces DROP COLUMN join_key_hash")  # SQLite >= 3.35
    else:
        op.drop_column("spaces", "join_key_hash")
