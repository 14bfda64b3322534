"""lease owner process (restart recovery, S32); a turn's broadcast range (S18)

Revision ID: 0004
Revises: 0002
Create Date: 2026-11-30 21:30:00.000000

A lease remembers the process that holds it (``host:pid:start``), so a
participant that restarts gets its dead process's deliveries and turns back at
once instead of after the lease (S32). NULL when the claimer was a transient
process (one CLI call): such leases end only by expiry, as before.

A turn also records where its broadcasts start (``bcast_from``), and open
turns get a partial index: a broadcast is shown in at most one open turn (S18),
so the next turn starts after the broadcasts of the live open ones.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op


revision: str = "0004"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen at this revision: written out, never imported from live code.
UPGRADE = [
    "ALTER TABLE deliveries ADD COLUMN lease_process VARCHAR(300)",
    "ALTER TABLE turns ADD COLUMN lease_process VARCHAR(300)",
    "ALTER TABLE turns ADD COLUMN bcast_from INTEGER",
    "CREATE INDEX ix_turns_open ON turns (participant_id, expires_at) WHERE state = 'open'",
]
DOWNGRADE = [
    "DROP INDEX ix_turns_open",
    "ALTER TABLE turns DROP COLUMN bcast_from",
    "ALTER TABLE turns DROP COLUMN lease_process",
    "ALTER TABLE deliveries DROP COLUMN lease_process",
]


def upgrade() -> None:
    for statement in UPGRADE:
        op.execute(statement)


def downgrade() -> None:
    for statement in DOWNGRADE:
        op.execute(statement)
