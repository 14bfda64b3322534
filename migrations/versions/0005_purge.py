"""retention: the purge journal and the purge marker

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30 21:00:00.000000

``purges`` is the store-level journal of purged spaces (append-only);
``purging`` holds the space a purge is deleting, only inside the purge's own
transaction. The append-only DELETE triggers are re-created to let exactly that
space's rows go (their UPDATE triggers are unchanged). Frozen: the DDL is
written out here, never imported from live code.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

APPEND_ONLY = ("messages", "participant_events", "transcript", "claim_journal")


def _delete_trigger(table: str, purgeable: bool) -> str:
    when = (
        "WHEN NOT EXISTS (SELECT 1 FROM purging WHERE space_id = OLD.space_id) "
        if purgeable
        else ""
    )
    return (
        f"CREATE TRIGGER IF NOT EXISTS {table}_no_delete BEFORE DELETE ON {table} {when}"
        f"BEGIN SELECT RAISE(ABORT, 'append-only: {table} refuses DELETE'); END"
    )


TRIGGERS: dict[str, list[str]] = {
    "sqlite": [
        *(f"DROP TRIGGER IF EXISTS {t}_no_delete" for t in APPEND_ONLY),
        *(_delete_trigger(t, purgeable=True) for t in APPEND_ONLY),
        "CREATE TRIGGER IF NOT EXISTS purges_no_update BEFORE UPDATE ON purges "
        "BEGIN SELECT RAISE(ABORT, 'append-only: purges refuses UPDATE'); END",
        "CREATE TRIGGER IF NOT EXISTS purges_no_delete BEFORE DELETE ON purges "
        "BEGIN SELECT RAISE(ABORT, 'append-only: purges refuses DELETE'); END",
        "CREATE TRIGGER IF NOT EXISTS purging_archived_only BEFORE INSERT ON purging "
        "WHEN (SELECT state FROM spaces WHERE id = NEW.space_id) IS NOT 'archived' "
        "BEGIN SELECT RAISE(ABORT, 'purge: only an archived space can be purged'); END",
        "CREATE TRIGGER IF NOT EXISTS purging_no_update BEFORE UPDATE ON purging "
        "BEGIN SELECT RAISE(ABORT, 'purge: a purge marker cannot change'); END",
    ],
    "postgresql": [
        "CREATE OR REPLACE FUNCTION broker_append_only() RETURNS trigger AS $$ BEGIN "
        "IF TG_OP = 'DELETE' AND EXISTS (SELECT 1 FROM purging WHERE space_id = OLD.space_id) "
        "THEN RETURN OLD; END IF; "
        "RAISE EXCEPTION 'append-only: % refuses %', TG_TABLE_NAME, TG_OP; END $$ "
        "LANGUAGE plpgsql",
        "CREATE TRIGGER purges_append_only BEFORE UPDATE OR DELETE ON purges "
        "FOR EACH ROW EXECUTE FUNCTION broker_append_only()",
        "CREATE OR REPLACE FUNCTION broker_purging() RETURNS trigger AS $$ BEGIN "
        "IF TG_OP = 'UPDATE' OR (SELECT state FROM spaces WHERE id = NEW.space_id) "
        "IS DISTINCT FROM 'archived' THEN "
        "RAISE EXCEPTION 'purge: only an archived space can be purged'; END IF; "
        "RETURN NEW; END $$ LANGUAGE plpgsql",
        "CREATE TRIGGER purging_archived_only BEFORE INSERT OR UPDATE ON purging "
        "FOR EACH ROW EXECUTE FUNCTION broker_purging()",
    ],
}

DROP_TRIGGERS: dict[str, list[str]] = {
    "sqlite": [
        "DROP TRIGGER IF EXISTS purges_no_update",
        "DROP TRIGGER IF EXISTS purges_no_delete",
        "DROP TRIGGER IF EXISTS purging_archived_only",
        "DROP TRIGGER IF EXISTS purging_no_update",
        *(f"DROP TRIGGER IF EXISTS {t}_no_delete" for t in APPEND_ONLY),
        *(_delete_trigger(t, purgeable=False) for t in APPEND_ONLY),
    ],
    "postgresql": [
        "DROP TRIGGER IF EXISTS purges_append_only ON purges",
        "DROP TRIGGER IF EXISTS purging_archived_only ON purging",
        "DROP FUNCTION IF EXISTS broker_purging()",
        "CREATE OR REPLACE FUNCTION broker_append_only() RETURNS trigger AS $$ "
        "BEGIN RAISE EXCEPTION 'append-only: % refuses %', TG_TABLE_NAME, TG_OP; END $$ "
        "LANGUAGE plpgsql",
    ],
}


def upgrade() -> None:
    op.create_table(
        "purges",
        sa.Column("id", sa.String(length=26), nullable=False),
        sa.Column(
            "space_id",
            sa.String(length=40),
            nullable=False,
            comment="the space purged (its rows are gone, so no foreign key)",
        ),
        sa.Column(
            "space_kind",
            sa.String(length=16),
            nullable=False,
            comment="agentiflow | workflow | session | run",
        ),
        sa.Column(
            "via", sa.String(length=8), nullable=False, comment="operator surface: cli | cp | mcp"
        ),
        sa.Column(
            "os_user",
            sa.String(length=200),
            nullable=False,
            comment="the OS account that ran the purge",
        ),
        sa.Column("pid", sa.Integer(), nullable=False, comment="its process id"),
        sa.Column(
            "export_dir",
            sa.Text(),
            nullable=False,
            comment="the space's folder in the verified export",
        ),
        sa.Column(
            "digest",
            sa.String(length=64),
            nullable=False,
            comment="SHA-256 over each exported file's SHA-256 and line count",
        ),
        sa.Column("files", sa.Integer(), nullable=False, comment="files in the export"),
        sa.Column("counts", sa.Text(), nullable=False, comment="JSON: rows deleted per table"),
        sa.Column("at_utc", sa.String(length=27), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_purges")),
        comment="Store-level journal of purges (retention): who deleted which space when, "
        "and where its verified export is. Append-only.",
    )
    with op.batch_alter_table("purges", schema=None) as batch_op:
        batch_op.create_index("ix_purges_space_id", ["space_id"], unique=False)
    op.create_table(
        "purging",
        sa.Column("space_id", sa.String(length=40), nullable=False),
        sa.Column("purge_id", sa.String(length=26), nullable=False),
        sa.ForeignKeyConstraint(
            ["purge_id"], ["purges.id"], name=op.f("fk_purging_purge_id_purges")
        ),
        sa.ForeignKeyConstraint(
            ["space_id"], ["spaces.id"], name=op.f("fk_purging_space_id_spaces")
        ),
        sa.PrimaryKeyConstraint("space_id", name=op.f("pk_purging")),
        comment="The space a purge is deleting, only inside the purge's own transaction: "
        "the append-only triggers let that space's rows go, and no other.",
    )
    for ddl in TRIGGERS[op.get_bind().dialect.name]:
        op.execute(ddl)


def downgrade() -> None:
    for ddl in DROP_TRIGGERS[op.get_bind().dialect.name]:
        op.execute(ddl)
    op.drop_table("purging")
    with op.batch_alter_table("purges", schema=None) as batch_op:
        batch_op.drop_index("ix_purges_space_id")
    op.drop_table("purges")
