"""a delivery remembers the lease that lost it (S14)

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01 18:00:00.000000

A claim that takes a delivery from an expired lease (to hand it out again, or
to quarantine it at ``max_deliveries``), and restart recovery returning it
(S32), write the token it was held under into ``lost_lease_token``. A late
settle of that whole lease can then name the messages it lost, which its
token alone no longer finds once another claim holds them. Only the latest
such lease is kept. Rows written before this revision have none: a late
settle of an older lease names what its token still finds, as before.
Frozen: written out here, never imported from live code.

Written beside revisions 0012 (PostgreSQL's search fold) and 0013 (the claim
journal's reason) on other branches: it revises 0013, so the history has one
head (tests/test_migrations.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UPGRADE = [
    "ALTER TABLE deliveries ADD COLUMN lost_lease_token VARCHAR(40)",
    "CREATE INDEX ix_deliveries_lost_lease_token ON deliveries (lost_lease_token) "
    "WHERE lost_lease_token IS NOT NULL",
]
DOWNGRADE = [
    "DROP INDEX ix_deliveries_lost_lease_token",
    "ALTER TABLE deliveries DROP COLUMN lost_lease_token",
]


def upgrade() -> None:
    for statement in UPGRADE:
        op.execute(statement)


def downgrade() -> None:
    for statement in DOWNGRADE:
        op.execute(statement)
