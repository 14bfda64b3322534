"""append-only against any connection (S43); idempotency keys per sender (S45)

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02 07:30:00.000000

S43. SQLite: ``INSERT OR REPLACE`` / ``REPLACE`` deletes the row whose key it
takes without firing the DELETE guard unless the connection turned
``recursive_triggers`` on; a plain ``sqlite3`` connection does not. A BEFORE
INSERT trigger on each append-only table refuses a row whose key (each UNIQUE
index of the table) is already taken, whatever the connection. PostgreSQL:
``TRUNCATE`` fires no row trigger; a BEFORE TRUNCATE statement trigger refuses
it on each append-only table (``ON CONFLICT DO UPDATE`` fires the UPDATE guard
already).

S45. An idempotency key is the sender's own: the unique index over
``(space_id, idempotency_key)`` becomes ``(space_id, sender, idempotency_key)``,
so another sender's key is another key. Here with S43 because the REPLACE
guard of ``messages`` names the same keys as its UNIQUE indexes.

Written beside revision 0015 on another branch, then put after it in the chain; it is
self-contained (renumbered into one chain at the merge). Frozen: the DDL is
written out here, never imported from live code.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KEYS: dict[str, tuple[tuple[str, ...], ...]] = {
    "messages": (("id",), ("space_id", "seq"), ("space_id", "sender", "idempotency_key")),
    "participant_events": (("id",),),
    "transcript": (("id",),),
    "claim_journal": (("id",),),
    "purges": (("id",),),
}

INDEX_UP = [
    "DROP INDEX ix_messages_space_id_idempotency_key",
    "CREATE UNIQUE INDEX ix_messages_space_id_sender_idempotency_key "
    "ON messages (space_id, sender, idempotency_key) WHERE idempotency_key IS NOT NULL",
]
INDEX_DOWN = [
    "DROP INDEX ix_messages_space_id_sender_idempotency_key",
    "CREATE UNIQUE INDEX ix_messages_space_id_idempotency_key "
    "ON messages (space_id, idempotency_key) WHERE idempotency_key IS NOT NULL",
]


def _sqlite_guard(table: str, keys: tuple[tuple[str, ...], ...]) -> str:
    taken = " OR ".join(
        f"EXISTS (SELECT 1 FROM {table} WHERE " + " AND ".join(f"{c} = NEW.{c}" for c in key) + ")"
        for key in keys
    )
    return (
        f"CREATE TRIGGER IF NOT EXISTS {table}_no_replace BEFORE INSERT ON {table} "
        f"WHEN {taken} "
        f"BEGIN SELECT RAISE(ABORT, 'append-only: {table} refuses REPLACE'); END"
    )


def upgrade() -> None:
    for statement in INDEX_UP:
        op.execute(statement)
    if op.get_bind().dialect.name == "sqlite":
        for table, keys in KEYS.items():
            op.execute(_sqlite_guard(table, keys))
        return
    op.execute(
        "CREATE OR REPLACE FUNCTION broker_no_truncate() RETURNS trigger AS $$ BEGIN "
        "RAISE EXCEPTION 'append-only: % refuses TRUNCATE', TG_TABLE_NAME; END $$ "
        "LANGUAGE plpgsql"
    )
    for table in KEYS:
        op.execute(
            f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
            "FOR EACH STATEMENT EXECUTE FUNCTION broker_no_truncate()"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for table in KEYS:
            op.execute(f"DROP TRIGGER IF EXISTS {table}_no_replace")
    else:
        for table in KEYS:
            op.execute(f"DROP TRIGGER IF EXISTS {table}_no_truncate ON {table}")
        op.execute("DROP FUNCTION IF EXISTS broker_no_truncate()")
    for statement in INDEX_DOWN:
        op.execute(statement)
