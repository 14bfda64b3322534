"""The broker's fixed vocabularies, importable without SQLAlchemy (the CLI's hot path)."""

from __future__ import annotations

from typing import Literal

SPACE_KINDS = ("agentiflow", "workflow", "session", "run")
SPACE_STATES = ("running", "stopped", "archived")
PARTICIPANT_STATUSES = ("running", "idle", "failed", "shutdown", "left")
PARTICIPANT_EVENTS = ("joined", "left")
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

# How many entries one read returns, by default and at most (S33): the library,
# the CLI's options, the HTTP queries and the MCP tools all take these.
BOARD_READ_DEFAULT, BOARD_READ_MAX = 100, 1000
SEARCH_DEFAULT, SEARCH_MAX = 20, 1000
# The search query language in one line (S36, broker/mail/search_query.py), for the
# CLI's help, the HTTP API's description and the MCP tool's.
SEARCH_SYNTAX = (
    'all words must match; "a phrase"; a OR b; NOT x or -x; prefix*; '
    'thread:WORD or thread:"a phrase"; (groups); case and accents never matter'
)


# The shortest lease, ttl or extension, in seconds (S22, S33): a millisecond.
# Anything shorter is granted already expired (times are kept to the
# microsecond, and the grant's own commit takes longer than that).
MIN_SECONDS = 0.001


# The documented bounds of every per-space setting (S33), ``(low, high)``, both
# inclusive. They are the field constraints below, the table in docs/spec.md and
# what ``broker.store.settings.Limits.lenient`` clamps a stored value to. The decimal
# settings have a smallest value above 0, not "more than 0": a log of 1e-300 MB
# rounds to 0 bytes (and a usage share divides by it), a lease of 1e-9 seconds
# ends before it is granted, a share of 1e-300 holds nothing.
SETTING_BOUNDS: dict[str, tuple[float, float]] = {
    "body_max_bytes": (1, 1024 * 1024),
    "inbox_cap": (1, 1_000_000_000),
    "broadcast_cap": (1, 1_000_000_000),
    "log_max_mb": (0.0001, 1_048_576),  # about 100 bytes
    "max_deliveries": (1, 10_000),
    "lease_seconds": (MIN_SECONDS, 7 * 86400),
    "live_seconds": (1, 7 * 86400),
    "sender_share": (0.001, 1),
    "join_key_share": (0.001, 1),
    "holds_cap": (1, 100_000),
    "space_holds_cap": (1, 1_000_000),
}


# The settings that are whole numbers (the others are decimals).
INT_SETTINGS = frozenset(
    {
        "body_max_bytes",
        "inbox_cap",
        "broadcast_cap",
        "max_deliveries",
        "holds_cap",
        "space_holds_cap",
    }
)


def describe_setting(name: str) -> str:
    """A setting's bounds in words, for error messages and ``space show``."""
    low, high = (number(x) for x in SETTING_BOUNDS[name])
    return f"{low} to {high}"


def number(x: float) -> str:
    """A setting's value as people write it: 1048576, 0.25 (not 1.04858e+06)."""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def human_size(n: float) -> str:
    """A byte count as people read it: ``6 bytes``, ``6.0 KB``, ``2.5 MB``
    (KB and MB of 1024). Never ``0.0`` of anything for a count above 0."""
    if n < 1024:
        return "1 byte" if n == 1 else f"{int(n)} bytes"
    if n < 100 * 1024:
        return f"{n / 1024:.1f} KB"
    return f"{n / (1024 * 1024):.1f} MB"


def ascii_digits(text: str) -> bool:
    """Only the digits 0-9: ``str.isdigit`` also takes '²' (which ``int``
    refuses) and '٣' (which ``int`` reads as 3), so a check with it alone
    either crashes or takes a number nobody typed."""
    return text.isascii() and text.isdigit()
