"""inspection views

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 12:00:00.000000

The views' SQL and documentation live in ``broker.views`` (one place); this
revision creates them. A later change to a view is a new revision that drops
and re-creates them.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from broker.views import create_ddl, drop_ddl

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    for statement in drop_ddl(dialect) + create_ddl(dialect):
        op.execute(statement)


def downgrade() -> None:
    for statement in drop_ddl(op.get_bind().dialect.name):
        op.execute(statement)
