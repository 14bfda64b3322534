"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-30 02:56:57.342515
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen at this revision: the DDL is written out here, never imported from
# live code, so replaying the history always runs the SQL of its time.
TRIGGERS: dict[str, list[str]] = {
    "postgresql": [
        "CREATE OR REPLACE FUNCTION broker_append_only() RETURNS trigger AS $$ "
        "BEGIN RAISE EXCEPTION 'append-only: % refuses %', TG_TABLE_NAME, TG_OP; "
        "END $$ LANGUAGE plpgsql",
        "CREATE TRIGGER messages_append_only BEFORE UPDATE OR DELETE ON messages "
        "FOR EACH ROW EXECUTE FUNCTION broker_append_only()",
        "CREATE TRIGGER participant_events_append_only BEFORE UPDATE OR DELETE "
        "ON participant_events FOR EACH ROW EXECUTE FUNCTION "
        "broker_append_only()",
        "CREATE TRIGGER transcript_append_only BEFORE UPDATE OR DELETE ON "
        "transcript FOR EACH ROW EXECUTE FUNCTION broker_append_only()",
        "CREATE TRIGGER claim_journal_append_only BEFORE UPDATE OR DELETE ON "
        "claim_journal FOR EACH ROW EXECUTE FUNCTION broker_append_only()",
        "CREATE OR REPLACE FUNCTION broker_waiting() RETURNS trigger AS $$ BEGIN "
        "IF TG_OP = 'INSERT' AND NEW.state IN ('ready', 'processing') THEN "
        "UPDATE participants SET waiting = waiting + 1 WHERE id = "
        "NEW.recipient_id; ELSIF TG_OP = 'UPDATE' AND (OLD.state IN ('ready', "
        "'processing')) <> (NEW.state IN ('ready', 'processing')) THEN UPDATE "
        "participants SET waiting = waiting + (CASE WHEN NEW.state IN ('ready', "
        "'processing') THEN 1 ELSE -1 END) WHERE id = NEW.recipient_id; END IF; "
        "RETURN NULL; END $$ LANGUAGE plpgsql",
        "CREATE TRIGGER deliveries_waiting AFTER INSERT OR UPDATE OF state ON "
        "deliveries FOR EACH ROW EXECUTE FUNCTION broker_waiting()",
    ],
    "sqlite": [
        "CREATE TRIGGER IF NOT EXISTS messages_no_update BEFORE UPDATE ON messages "
        "BEGIN SELECT RAISE(ABORT, 'append-only: messages refuses UPDATE'); END",
        "CREATE TRIGGER IF NOT EXISTS messages_no_delete BEFORE DELETE ON messages "
        "BEGIN SELECT RAISE(ABORT, 'append-only: messages refuses DELETE'); END",
        "CREATE TRIGGER IF NOT EXISTS participant_events_no_update BEFORE UPDATE ON "
        "participant_events BEGIN SELECT RAISE(ABORT, 'append-only: "
        "participant_events refuses UPDATE'); END",
        "CREATE TRIGGER IF NOT EXISTS participant_events_no_delete BEFORE DELETE ON "
        "participant_events BEGIN SELECT RAISE(ABORT, 'append-only: "
        "participant_events refuses DELETE'); END",
        "CREATE TRIGGER IF NOT EXISTS transcript_no_update BEFORE UPDATE ON "
        "transcript BEGIN SELECT RAISE(ABORT, 'append-only: transcript refuses "
        "UPDATE'); END",
        "CREATE TRIGGER IF NOT EXISTS transcript_no_delete BEFORE DELETE ON "
        "transcript BEGIN SELECT RAISE(ABORT, 'append-only: transcript refuses "
        "DELETE'); END",
        "CREATE TRIGGER IF NOT EXISTS claim_journal_no_update BEFORE UPDATE ON "
        "claim_journal BEGIN SELECT RAISE(ABORT, 'append-only: claim_journal refuses "
        "UPDATE'); END",
        "CREATE TRIGGER IF NOT EXISTS claim_journal_no_delete BEFORE DELETE ON "
        "claim_journal BEGIN SELECT RAISE(ABORT, 'append-only: claim_journal refuses "
        "DELETE'); END",
        "CREATE TRIGGER IF NOT EXISTS deliveries_waiting_insert AFTER INSERT ON "
        "deliveries WHEN NEW.state IN ('ready', 'processing') BEGIN UPDATE "
        "participants SET waiting = waiting + 1 WHERE id = NEW.recipient_id; END",
        "CREATE TRIGGER IF NOT EXISTS deliveries_waiting_update AFTER UPDATE OF "
        "state ON deliveries WHEN (OLD.state IN ('ready', 'processing')) != "
        "(NEW.state IN ('ready', 'processing')) BEGIN UPDATE participants SET "
        "waiting = waiting + (CASE WHEN NEW.state IN ('ready', 'processing') THEN 1 "
        "ELSE -1 END) WHERE id = NEW.recipient_id; END",
    ],
}

DROP_TRIGGERS: dict[str, list[str]] = {
    "postgresql": [
        "DROP TRIGGER IF EXISTS messages_append_only ON messages",
        "DROP TRIGGER IF EXISTS participant_events_append_only ON participant_events",
        "DROP TRIGGER IF EXISTS transcript_append_only ON transcript",
        "DROP TRIGGER IF EXISTS claim_journal_append_only ON claim_journal",
        "DROP FUNCTION IF EXISTS broker_append_only()",
        "DROP TRIGGER IF EXISTS deliveries_waiting ON deliveries",
        "DROP FUNCTION IF EXISTS broker_waiting()",
    ],
    "sqlite": [
        "DROP TRIGGER IF EXISTS messages_no_update",
        "DROP TRIGGER IF EXISTS messages_no_delete",
        "DROP TRIGGER IF EXISTS participant_events_no_update",
        "DROP TRIGGER IF EXISTS participant_events_no_delete",
        "DROP TRIGGER IF EXISTS transcript_no_update",
        "DROP TRIGGER IF EXISTS transcript_no_delete",
        "DROP TRIGGER IF EXISTS claim_journal_no_update",
        "DROP TRIGGER IF EXISTS claim_journal_no_delete",
        "DROP TRIGGER IF EXISTS deliveries_waiting_insert",
        "DROP TRIGGER IF EXISTS deliveries_waiting_update",
    ],
}


def upgrade() -> None:
    # ### commands auto generated by Alembic - please adjust! ###
    op.create_table(
        "spaces",
        sa.Column(
            "id",
            sa.String(length=40),
            nullable=False,
            comment="kind prefix + ULID: af_…, wf_…, ses_…, run_…",
        ),
        sa.Column(
            "kind",
            sa.String(length=16),
            nullable=False,
            comment="agentiflow | workflow | session | run",
        ),
        sa.Column(
            "state",
            sa.String(length=16),
            server_default="running",
            nullable=False,
            comment="running | stopped | archived",
        ),
        sa.Column(
            "settings",
            sa.Text(),
            server_default="{}",
            nullable=False,
            comment="JSON: per-space limit overrides",
        ),
        sa.Column(
            "last_seq",
            sa.Integer(),
            server_default="0",
            nullable=False,
            comment="last log sequence number used",
        ),
        sa.Column(
            "last_bcast",
            sa.Integer(),
            server_default="0",
            nullable=False,
            comment="last broadcast-log number used",
        ),
        sa.Column(
            "log_bytes",
            sa.Integer(),
            server_default="0",
            nullable=False,
            comment="bytes of message bodies logged",
        ),
        sa.Column("created_at_utc", sa.String(length=27), nullable=False),
        sa.Column("updated_at_utc", sa.String(length=27), nullable=False),
        sa.CheckConstraint(
            "kind IN ('agentiflow', 'workflow', 'session', 'run')", name=op.f("ck_spaces_kind")
        ),
        sa.CheckConstraint(
            "state IN ('running', 'stopped', 'archived')", name=op.f("ck_spaces_state")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_spaces")),
        comment="One message space per root run (S1).",
    )
    op.create_table(
        "board_claims",
        sa.Column("space_id", sa.String(length=40), nullable=False),
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column(
            "holder",
            sa.String(length=200),
            nullable=True,
            comment="address holding the key; NULL when free",
        ),
        sa.Column(
            "token",
            sa.Integer(),
            nullable=False,
            comment="fencing token of the latest grant; only grows",
        ),
        sa.Column("claimed_at_utc", sa.String(length=27), nullable=True),
        sa.Column("lease_expires_at", sa.String(length=27), nullable=True),
        sa.ForeignKeyConstraint(
            ["space_id"], ["spaces.id"], name=op.f("fk_board_claims_space_id_spaces")
        ),
        sa.PrimaryKeyConstraint("space_id", "key", name=op.f("pk_board_claims")),
        comment="Board key claims and their fencing tokens (S22).",
    )
    op.create_table(
        "claim_journal",
        sa.Column("id", sa.String(length=26), nullable=False),
        sa.Column("space_id", sa.String(length=40), nullable=False),
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column(
            "event",
            sa.String(length=16),
            nullable=False,
            comment="claimed | released | expired | renewed",
        ),
        sa.Column("owner", sa.String(length=200), nullable=False),
        sa.Column("token", sa.Integer(), nullable=False),
        sa.Column("lease_expires_at", sa.String(length=27), nullable=True),
        sa.Column("at_utc", sa.String(length=27), nullable=False),
        sa.CheckConstraint(
            "event IN ('claimed', 'released', 'expired', 'renewed')",
            name=op.f("ck_claim_journal_event"),
        ),
        sa.ForeignKeyConstraint(
            ["space_id"], ["spaces.id"], name=op.f("fk_claim_journal_space_id_spaces")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_claim_journal")),
        comment="Append-only claim journal (S23).",
    )
    with op.batch_alter_table("claim_journal", schema=None) as batch_op:
        batch_op.create_index("ix_claim_journal_space_id_key", ["space_id", "key"], unique=False)

    op.create_table(
        "messages",
        sa.Column(
            "id",
            sa.String(length=26),
            nullable=False,
            comment="ULID; the stable id consumers de-duplicate by",
        ),
        sa.Column("space_id", sa.String(length=40), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False, comment="gap-free per-space sequence"),
        sa.Column(
            "kind",
            sa.String(length=16),
            nullable=False,
            comment="direct | broadcast | post | directive | retract | operator | seen",
        ),
        sa.Column(
            "sender", sa.String(length=200), nullable=False, comment="sender address, or `operator`"
        ),
        sa.Column(
            "recipients",
            sa.Text(),
            server_default="[]",
            nullable=False,
            comment="JSON list: the `to` forms as given",
        ),
        sa.Column("body", sa.Text(), server_default="", nullable=False),
        sa.Column("urgent", sa.Boolean(), server_default=sa.text("0"), nullable=False),
        sa.Column(
            "via", sa.String(length=8), nullable=True, comment="operator surface: cli | cp | mcp"
        ),
        sa.Column(
            "ref",
            sa.String(length=26),
            nullable=True,
            comment="retract: the directive; seen: the turn",
        ),
        sa.Column(
            "reached",
            sa.Text(),
            server_default="[]",
            nullable=False,
            comment="JSON list of addresses reached",
        ),
        sa.Column(
            "not_reached",
            sa.Text(),
            server_default="[]",
            nullable=False,
            comment="JSON list of {address, reason}",
        ),
        sa.Column("reached_n", sa.Integer(), server_default="0", nullable=False),
        sa.Column(
            "bcast_no",
            sa.Integer(),
            nullable=True,
            comment="position in the broadcast log, if it was added",
        ),
        sa.Column("idempotency_key", sa.String(length=200), nullable=True),
        sa.Column("size_bytes", sa.Integer(), server_default="0", nullable=False),
        sa.Column("created_at_utc", sa.String(length=27), nullable=False),
        sa.CheckConstraint(
            "kind IN ('direct', 'broadcast', 'post', 'directive', 'retract', 'operator', 'seen')",
            name=op.f("ck_messages_kind"),
        ),
        sa.ForeignKeyConstraint(
            ["space_id"], ["spaces.id"], name=op.f("fk_messages_space_id_spaces")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_messages")),
        sa.UniqueConstraint("space_id", "seq", name=op.f("uq_messages_space_id_seq")),
        comment="The append-only log (S7, S11).",
    )
    with op.batch_alter_table("messages", schema=None) as batch_op:
        batch_op.create_index(
            "ix_messages_ref",
            ["ref"],
            unique=False,
            sqlite_where=sa.text("ref IS NOT NULL"),
            postgresql_where=sa.text("ref IS NOT NULL"),
        )
        batch_op.create_index(
            "ix_messages_space_id_bcast_no",
            ["space_id", "bcast_no"],
            unique=False,
            sqlite_where=sa.text("bcast_no IS NOT NULL"),
            postgresql_where=sa.text("bcast_no IS NOT NULL"),
        )
        batch_op.create_index(
            "ix_messages_space_id_idempotency_key",
            ["space_id", "idempotency_key"],
            unique=True,
            sqlite_where=sa.text("idempotency_key IS NOT NULL"),
            postgresql_where=sa.text("idempotency_key IS NOT NULL"),
        )
        batch_op.create_index(
            "ix_messages_space_id_kind_seq",
            ["space_id", "kind", "seq"],
            unique=False,
            sqlite_where=sa.text("kind IN ('post', 'directive', 'retract')"),
            postgresql_where=sa.text("kind IN ('post', 'directive', 'retract')"),
        )

    op.create_table(
        "participants",
        sa.Column("id", sa.String(length=26), nullable=False),
        sa.Column("space_id", sa.String(length=40), nullable=False),
        sa.Column(
            "address",
            sa.String(length=200),
            nullable=False,
            comment="codename below the root, retry attempt dropped (S3)",
        ),
        sa.Column(
            "codename",
            sa.String(length=400),
            nullable=False,
            comment="full codename of the latest join",
        ),
        sa.Column(
            "agent",
            sa.String(length=200),
            nullable=False,
            comment="agent name; `role:NAME` addresses match it",
        ),
        sa.Column(
            "run_id", sa.String(length=200), nullable=False, comment="the participant's own run id"
        ),
        sa.Column(
            "step",
            sa.String(length=200),
            nullable=True,
            comment="workflow step; `step:NAME` addresses match it",
        ),
        sa.Column(
            "parent",
            sa.String(length=200),
            nullable=True,
            comment="address of the run that launched it",
        ),
        sa.Column(
            "role",
            sa.String(length=200),
            nullable=True,
            comment="directory: short role description (S25)",
        ),
        sa.Column(
            "archetype",
            sa.String(length=32),
            nullable=True,
            comment="directory: specialist | surveyor | researcher | planner | interfacer",
        ),
        sa.Column("task", sa.Text(), nullable=True, comment="directory: one-line task"),
        sa.Column("is_lead", sa.Boolean(), server_default=sa.text("0"), nullable=False),
        sa.Column(
            "messaging",
            sa.Boolean(),
            server_default=sa.text("1"),
            nullable=False,
            comment="off = receive-only (S24)",
        ),
        sa.Column(
            "tools",
            sa.Text(),
            nullable=True,
            comment="JSON list of tools named at join; NULL = the default set",
        ),
        sa.Column(
            "token_hash",
            sa.String(length=64),
            nullable=False,
            comment="sha256 of the secret token; the token is never stored",
        ),
        sa.Column(
            "status",
            sa.String(length=16),
            server_default="running",
            nullable=False,
            comment="running | idle | failed | shutdown | left",
        ),
        sa.Column(
            "bcast_seen",
            sa.Integer(),
            server_default="0",
            nullable=False,
            comment="broadcast-log number seen up to (cursor)",
        ),
        sa.Column(
            "waiting",
            sa.Integer(),
            server_default="0",
            nullable=False,
            comment="deliveries ready or processing; kept by triggers on deliveries (inbox cap, S7)",
        ),
        sa.Column(
            "pid",
            sa.Integer(),
            nullable=True,
            comment="OS process id of the latest join, for prune",
        ),
        sa.Column("joined_at_utc", sa.String(length=27), nullable=False),
        sa.Column("left_at_utc", sa.String(length=27), nullable=True),
        sa.Column(
            "last_seen_utc",
            sa.String(length=27),
            nullable=False,
            comment="heartbeat: refreshed by turns and claims",
        ),
        sa.CheckConstraint(
            "status IN ('running', 'idle', 'failed', 'shutdown', 'left')",
            name=op.f("ck_participants_status"),
        ),
        sa.ForeignKeyConstraint(
            ["space_id"], ["spaces.id"], name=op.f("fk_participants_space_id_spaces")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_participants")),
        sa.UniqueConstraint("space_id", "address", name=op.f("uq_participants_space_id_address")),
        comment="Participants of a space; also the directory (S2-S5, S25).",
    )
    with op.batch_alter_table("participants", schema=None) as batch_op:
        batch_op.create_index("ix_participants_token_hash", ["token_hash"], unique=True)

    op.create_table(
        "deliveries",
        sa.Column("id", sa.String(length=26), nullable=False),
        sa.Column("space_id", sa.String(length=40), nullable=False),
        sa.Column("message_id", sa.String(length=26), nullable=False),
        sa.Column("recipient_id", sa.String(length=26), nullable=False),
        sa.Column(
            "state",
            sa.String(length=16),
            server_default="ready",
            nullable=False,
            comment="ready | processing | done | quarantine",
        ),
        sa.Column(
            "created_at_utc",
            sa.String(length=27),
            nullable=False,
            comment="the message's time: FIFO key with id",
        ),
        sa.Column(
            "attempts",
            sa.Integer(),
            server_default="0",
            nullable=False,
            comment="times claimed (delivery count)",
        ),
        sa.Column("lease_token", sa.String(length=40), nullable=True),
        sa.Column("lease_owner", sa.String(length=200), nullable=True),
        sa.Column("lease_expires_at", sa.String(length=27), nullable=True),
        sa.Column("acked_at_utc", sa.String(length=27), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("quarantine_reason", sa.Text(), nullable=True),
        sa.CheckConstraint(
            "state IN ('ready', 'processing', 'done', 'quarantine')",
            name=op.f("ck_deliveries_state"),
        ),
        sa.ForeignKeyConstraint(
            ["message_id"], ["messages.id"], name=op.f("fk_deliveries_message_id_messages")
        ),
        sa.ForeignKeyConstraint(
            ["recipient_id"],
            ["participants.id"],
            name=op.f("fk_deliveries_recipient_id_participants"),
        ),
        sa.ForeignKeyConstraint(
            ["space_id"], ["spaces.id"], name=op.f("fk_deliveries_space_id_spaces")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_deliveries")),
        comment="Inbox queues: one row per message per recipient (S13-S16).",
    )
    with op.batch_alter_table("deliveries", schema=None) as batch_op:
        batch_op.create_index(
            "ix_deliveries_lease_token",
            ["lease_token"],
            unique=False,
            sqlite_where=sa.text("lease_token IS NOT NULL"),
            postgresql_where=sa.text("lease_token IS NOT NULL"),
        )
        batch_op.create_index(
            "ix_deliveries_leased",
            ["recipient_id", "lease_expires_at"],
            unique=False,
            sqlite_where=sa.text("state = 'processing'"),
            postgresql_where=sa.text("state = 'processing'"),
        )
        batch_op.create_index("ix_deliveries_message_id", ["message_id"], unique=False)
        batch_op.create_index(
            "ix_deliveries_quarantine",
            ["space_id"],
            unique=False,
            sqlite_where=sa.text("state = 'quarantine'"),
            postgresql_where=sa.text("state = 'quarantine'"),
        )
        batch_op.create_index(
            "ix_deliveries_ready",
            ["recipient_id", "created_at_utc", "id"],
            unique=False,
            sqlite_where=sa.text("state = 'ready'"),
            postgresql_where=sa.text("state = 'ready'"),
        )

    op.create_table(
        "participant_events",
        sa.Column("id", sa.String(length=26), nullable=False),
        sa.Column("space_id", sa.String(length=40), nullable=False),
        sa.Column("participant_id", sa.String(length=26), nullable=False),
        sa.Column("event", sa.String(length=16), nullable=False, comment="joined | left"),
        sa.Column("address", sa.String(length=200), nullable=False),
        sa.Column("codename", sa.String(length=400), nullable=False),
        sa.Column("agent", sa.String(length=200), nullable=False),
        sa.Column("run_id", sa.String(length=200), nullable=False),
        sa.Column("step", sa.String(length=200), nullable=True),
        sa.Column("parent", sa.String(length=200), nullable=True),
        sa.Column(
            "reason",
            sa.String(length=200),
            nullable=True,
            comment="why it left (leave, prune, shutdown)",
        ),
        sa.Column("at_utc", sa.String(length=27), nullable=False),
        sa.CheckConstraint("event IN ('joined', 'left')", name=op.f("ck_participant_events_event")),
        sa.ForeignKeyConstraint(
            ["participant_id"],
            ["participants.id"],
            name=op.f("fk_participant_events_participant_id_participants"),
        ),
        sa.ForeignKeyConstraint(
            ["space_id"], ["spaces.id"], name=op.f("fk_participant_events_space_id_spaces")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_participant_events")),
        comment="Append-only journal of joins and leaves (S4).",
    )
    with op.batch_alter_table("participant_events", schema=None) as batch_op:
        batch_op.create_index(
            "ix_participant_events_space_id_at_utc", ["space_id", "at_utc"], unique=False
        )

    op.create_table(
        "transcript",
        sa.Column("id", sa.String(length=26), nullable=False),
        sa.Column("space_id", sa.String(length=40), nullable=False),
        sa.Column("participant_id", sa.String(length=26), nullable=False),
        sa.Column(
            "turn_id",
            sa.String(length=26),
            nullable=True,
            comment="the turn that showed it (received / injected)",
        ),
        sa.Column(
            "position",
            sa.Integer(),
            server_default="0",
            nullable=False,
            comment="order inside the turn",
        ),
        sa.Column(
            "direction",
            sa.String(length=16),
            nullable=False,
            comment="sent | received | injected | notice",
        ),
        sa.Column("message_id", sa.String(length=26), nullable=True),
        sa.Column(
            "kind",
            sa.String(length=32),
            nullable=False,
            comment="message kind, or the notice's name",
        ),
        sa.Column("content", sa.Text(), nullable=False, comment="text as rendered for the model"),
        sa.Column("at_utc", sa.String(length=27), nullable=False),
        sa.CheckConstraint(
            "direction IN ('sent', 'received', 'injected', 'notice')",
            name=op.f("ck_transcript_direction"),
        ),
        sa.ForeignKeyConstraint(
            ["participant_id"],
            ["participants.id"],
            name=op.f("fk_transcript_participant_id_participants"),
        ),
        sa.ForeignKeyConstraint(
            ["space_id"], ["spaces.id"], name=op.f("fk_transcript_space_id_spaces")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_transcript")),
        comment="Per-participant transcript, turn by turn (S19). Append-only.",
    )
    with op.batch_alter_table("transcript", schema=None) as batch_op:
        batch_op.create_index(
            "ix_transcript_participant_id_at_utc", ["participant_id", "at_utc"], unique=False
        )
        batch_op.create_index(
            "ix_transcript_participant_id_message_id",
            ["participant_id", "message_id"],
            unique=False,
            sqlite_where=sa.text("message_id IS NOT NULL"),
            postgresql_where=sa.text("message_id IS NOT NULL"),
        )

    op.create_table(
        "turns",
        sa.Column("id", sa.String(length=26), nullable=False),
        sa.Column("space_id", sa.String(length=40), nullable=False),
        sa.Column("participant_id", sa.String(length=26), nullable=False),
        sa.Column(
            "lease_token",
            sa.String(length=40),
            nullable=False,
            comment="lease over the turn's deliveries",
        ),
        sa.Column(
            "bcast_upto",
            sa.Integer(),
            nullable=False,
            comment="broadcast-log number the turn showed up to",
        ),
        sa.Column(
            "state",
            sa.String(length=16),
            server_default="open",
            nullable=False,
            comment="open | seen",
        ),
        sa.Column("created_at_utc", sa.String(length=27), nullable=False),
        sa.Column("expires_at", sa.String(length=27), nullable=False),
        sa.Column("seen_at_utc", sa.String(length=27), nullable=True),
        sa.ForeignKeyConstraint(
            ["participant_id"],
            ["participants.id"],
            name=op.f("fk_turns_participant_id_participants"),
        ),
        sa.ForeignKeyConstraint(["space_id"], ["spaces.id"], name=op.f("fk_turns_space_id_spaces")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_turns")),
        comment="Turns: what a participant was shown before one model call (S17-S18).",
    )
    with op.batch_alter_table("turns", schema=None) as batch_op:
        batch_op.create_index(
            "ix_turns_participant_id_created_at_utc",
            ["participant_id", "created_at_utc"],
            unique=False,
        )

    # ### end Alembic commands ###

    op.create_table(
        "history",
        sa.Column("id", sa.String(length=26), nullable=False),
        sa.Column("space_id", sa.String(length=40), nullable=False),
        sa.Column("participant_id", sa.String(length=26), nullable=False),
        sa.Column(
            "message_id",
            sa.String(length=26),
            nullable=False,
            comment="dedupe key: a redelivery is not appended twice (S16)",
        ),
        sa.Column(
            "turn_id", sa.String(length=26), nullable=True, comment="the turn that delivered it"
        ),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("sender", sa.String(length=200), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("at_utc", sa.String(length=27), nullable=False),
        sa.ForeignKeyConstraint(
            ["participant_id"],
            ["participants.id"],
            name=op.f("fk_history_participant_id_participants"),
        ),
        sa.ForeignKeyConstraint(
            ["space_id"], ["spaces.id"], name=op.f("fk_history_space_id_spaces")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_history")),
        sa.UniqueConstraint(
            "participant_id", "message_id", name=op.f("uq_history_participant_id_message_id")
        ),
        comment="Teammates' canonical histories (S26): each handled message once, appended before the ack.",
    )

    # The log and the journals refuse UPDATE and DELETE in the database itself (S11, S23);
    # participants.waiting follows deliveries.
    for ddl in TRIGGERS[op.get_bind().dialect.name]:
        op.execute(ddl)


def downgrade() -> None:
    for ddl in DROP_TRIGGERS[op.get_bind().dialect.name]:
        op.execute(ddl)
    op.drop_table("history")
    with op.batch_alter_table("turns", schema=None) as batch_op:
        batch_op.drop_index("ix_turns_participant_id_created_at_utc")

    op.drop_table("turns")
    with op.batch_alter_table("transcript", schema=None) as batch_op:
        batch_op.drop_index(
            "ix_transcript_participant_id_message_id",
            sqlite_where=sa.text("message_id IS NOT NULL"),
            postgresql_where=sa.text("message_id IS NOT NULL"),
        )
        batch_op.drop_index("ix_transcript_participant_id_at_utc")

    op.drop_table("transcript")
    with op.batch_alter_table("participant_events", schema=None) as batch_op:
        batch_op.drop_index("ix_participant_events_space_id_at_utc")

    op.drop_table("participant_events")
    with op.batch_alter_table("deliveries", schema=None) as batch_op:
        batch_op.drop_index(
            "ix_deliveries_ready",
            sqlite_where=sa.text("state = 'ready'"),
            postgresql_where=sa.text("state = 'ready'"),
        )
        batch_op.drop_index(
            "ix_deliveries_quarantine",
            sqlite_where=sa.text("state = 'quarantine'"),
            postgresql_where=sa.text("state = 'quarantine'"),
        )
        batch_op.drop_index("ix_deliveries_message_id")
        batch_op.drop_index(
            "ix_deliveries_leased",
            sqlite_where=sa.text("state = 'processing'"),
            postgresql_where=sa.text("state = 'processing'"),
        )
        batch_op.drop_index(
            "ix_deliveries_lease_token",
            sqlite_where=sa.text("lease_token IS NOT NULL"),
            postgresql_where=sa.text("lease_token IS NOT NULL"),
        )

    op.drop_table("deliveries")
    with op.batch_alter_table("participants", schema=None) as batch_op:
        batch_op.drop_index("ix_participants_token_hash")

    op.drop_table("participants")
    with op.batch_alter_table("messages", schema=None) as batch_op:
        batch_op.drop_index(
            "ix_messages_space_id_kind_seq",
            sqlite_where=sa.text("kind IN ('post', 'directive', 'retract')"),
            postgresql_where=sa.text("kind IN ('post', 'directive', 'retract')"),
        )
        batch_op.drop_index(
            "ix_messages_space_id_idempotency_key",
            sqlite_where=sa.text("idempotency_key IS NOT NULL"),
            postgresql_where=sa.text("idempotency_key IS NOT NULL"),
        )
        batch_op.drop_index(
            "ix_messages_space_id_bcast_no",
            sqlite_where=sa.text("bcast_no IS NOT NULL"),
            postgresql_where=sa.text("bcast_no IS NOT NULL"),
        )
        batch_op.drop_index(
            "ix_messages_ref",
            sqlite_where=sa.text("ref IS NOT NULL"),
            postgresql_where=sa.text("ref IS NOT NULL"),
        )

    op.drop_table("messages")
    with op.batch_alter_table("claim_journal", schema=None) as batch_op:
        batch_op.drop_index("ix_claim_journal_space_id_key")

    op.drop_table("claim_journal")
    op.drop_table("board_claims")
    op.drop_table("spaces")
    # ### end Alembic commands ###
