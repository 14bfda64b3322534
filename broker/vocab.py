"""The broker's fixed vocabularies, importable without SQLAlchemy (the CLI's hot path)."""

from __future__ import annotations

SPACE_KINDS = ("agentiflow", "workflow", "session", "run")
SPACE_STATES = ("running", "stopped", "archived")
PARTICIPANT_STATUSES = ("running", "idle", "failed", "shutdown", "left")
MESSAGE_KINDS = ("direct", "broadcast", "post", "directive", "retract", "operator", "seen")
DELIVERY_STATES = ("ready", "processing", "done", "quarantine")
JOURNAL_EVENTS = ("claimed", "released", "expired", "renewed")
TRANSCRIPT_DIRECTIONS = ("sent", "received", "injected", "notice")

# Tables whose rows may never change or disappear once written (S11, S23).
APPEND_ONLY = ("messages", "participant_events", "transcript", "claim_journal")
