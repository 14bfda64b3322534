"""The broker's fixed vocabularies, importable without SQLAlchemy (the CLI's hot path)."""

from __future__ import annotations

from typing import Literal

SPACE_KINDS = ("agentiflow", "workflow", "session", "run")
SPACE_STATES = ("running", "stopped", "archived")
PARTICIPANT_STATUSES = ("running", "idle", "failed", "shutdown", "left")
MESSAGE_KINDS = ("direct", "broadcast", "post", "directive", "retract", "operator", "seen")
DELIVERY_STATES = ("ready", "processing", "done", "quarantine")
JOURNAL_EVENTS = ("claimed", "released", "expired", "renewed")
RESERVATION_MODES = ("exclusive", "shared")
TRANSCRIPT_DIRECTIONS = ("sent", "received", "injected", "notice")
ARCHETYPES = ("specialist", "surveyor", "researcher", "planner", "interfacer")

# Tables whose rows may never change or disappear once written (S11, S23).
APPEND_ONLY = ("messages", "participant_events", "transcript", "claim_journal")

# The same vocabularies as types, for the records and the input models (no pydantic here).
SpaceKind = Literal["agentiflow", "workflow", "session", "run"]
SpaceState = Literal["running", "stopped", "archived"]
Status = Literal["running", "idle", "failed", "shutdown", "left"]
Archetype = Literal["specialist", "surveyor", "researcher", "planner", "interfacer"]
Via = Literal["cli", "cp", "mcp"]
Reason = Literal[
    "unknown_participant",
    "no_live_participant",
    "no_parent",
    "no_lead",
    "participant_left",
    "inbox_full",
    "broadcast_full",
    "sender_share",
    "contact_policy",
]
TurnGroup = Literal["urgent", "directive", "message", "broadcast"]
