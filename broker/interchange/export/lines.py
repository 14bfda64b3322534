"""The line schemas of the space layout: one ``Spec`` per kind of line.

The exporter writes these lines and the importer (``broker.interchange.importer``) reads
them back through the same objects, so a line kind is defined once. Each
``Field`` says what a key may hold (its type, nullability, choices, bounds)
and which table column it is; ``docs/export.md`` documents every one, and
tests check both against the table metadata and that page.

The statements that read the lines are in ``broker/store/sql/export.sql``: each
selects a spec's fields under their names, in order (extra columns follow and
start with ``_``). ``rows`` checks a cursor's column names against the spec
once when it opens, so a line is built by name without a per-row lookup.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from broker.spaces import grants
from broker.store.filenames import safe_name
from broker.store.sqlite import Tx
from broker.vocab import (
    DELIVERY_STATES,
    JOURNAL_EVENTS,
    MESSAGE_KINDS,
    PARTICIPANT_STATUSES,
    RESERVATION_MODES,
    SPACE_KINDS,
    SPACE_STATES,
    TRANSCRIPT_DIRECTIONS,
)

FORMAT = 2
# The layout's versions. 2 writes the source's field names where the broker's
# differ: the claim journal's ``at`` (1: ``at_utc``), and the directory's
# ``tool_grant`` (derived). The importer reads both (``journal_spec``).
FORMATS = (1, 2)
BATCH = 1000
INT64 = (-(2**63), 2**63 - 1)  # SQLite's INTEGER range

# Field types. JSON-valued ones (``LIST``, ``REASONS``, ``SETTINGS``) are stored
# as JSON text and written as JSON values.
TEXT, ID, ADDRESS, INT, BOOL, TIME = "text", "id", "address", "int", "bool", "time"
LIST, REASONS, SETTINGS = "list", "reasons", "settings"
JSON_TYPES = frozenset({LIST, REASONS, SETTINGS})


class Field:
    """One key of a JSON line: its column, what it may hold, and its doc."""

    __slots__ = (
        "name",
        "column",
        "type",
        "null",
        "choices",
        "imported",
        "doc",
        "low",
        "max_len",
        "added",
        "derive",
    )

    def __init__(
        self,
        name: str,
        type: str,
        *,
        column: str | None = None,
        null: bool = False,
        choices: tuple[str, ...] = (),
        imported: bool = True,
        doc: str = "",
        low: int = 0,
        max_len: int | None = None,
        added: bool = False,
        derive: Callable[[dict[str, Any]], Any] | None = None,
    ) -> None:
        self.name = name
        self.column = column or name  # the table column an imported field is written to
        self.type = type
        self.null = null
        self.choices = choices
        self.imported = imported  # False: derived on export, ignored on import
        self.doc = doc
        self.low = low  # smallest integer allowed (the top is SQLite's INT64 limit)
        self.max_len = max_len  # longest text allowed (characters)
        # Added to the layout after its first version: a line written before may
        # lack it (read as null), so older exports still import.
        self.added = added
        # Derived in Python from the line's other fields (not selected by the
        # statement); such fields come last. Never imported.
        self.derive = derive
        if derive is not None:
            self.imported = False


class Spec:
    """The line schema of one JSONL file (or JSON document) of the layout."""

    def __init__(self, file: str, table: str, fields: Sequence[Field], doc: str) -> None:
        self.file = file
        self.table = table
        self.fields = tuple(fields)
        self.doc = doc
        self.names = tuple(f.name for f in self.fields)
        self._derived = {f.name: f.derive for f in self.fields if f.derive is not None}
        # What its statement selects, in order: every field but the derived ones.
        self.selected = tuple(f.name for f in self.fields if f.derive is None)
        self.name_set = frozenset(self.names)
        self.by_name = {f.name: f for f in self.fields}
        self.imported = tuple(f for f in self.fields if f.imported)
        self._json = tuple(f.name for f in self.fields if f.type in JSON_TYPES)
        self._bool = tuple(f.name for f in self.fields if f.type == BOOL)

    def obj(self, row: Sequence[Any]) -> dict[str, Any]:
        """The line's object from a row of a statement checked by ``rows``."""
        out = dict(zip(self.selected, row, strict=False))  # extra ``_`` columns follow
        for name in self._json:
            if out[name] is not None:
                out[name] = json.loads(out[name])
        for name in self._bool:
            if out[name] is not None:
                out[name] = bool(out[name])
        if self._derived:
            out = {n: out[n] if n in out else self._derived[n](out) for n in self.names}
        return out

    def line(self, row: Sequence[Any]) -> str:
        return dumps(self.obj(row)) + "\n"

    def document(self, row: Sequence[Any]) -> str:
        """A single-document file (``space.json``, a live claim): indented."""
        return json.dumps(self.obj(row), ensure_ascii=False, indent=2) + "\n"


def dumps(obj: Any) -> str:
    """The one JSON encoding of the layout: compact, UTF-8, keys in schema order."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


class ColumnMismatch(Exception):
    """A catalogue statement does not select a spec's fields in order (a bug)."""


def check_columns(description: Sequence[Sequence[Any]], spec: Spec) -> None:
    names = [d[0] for d in description]
    head, extra = names[: len(spec.selected)], names[len(spec.selected) :]
    if tuple(head) != spec.selected or not all(n.startswith("_") for n in extra):
        raise ColumnMismatch(f"{spec.file}: statement selects {names}, spec has {spec.selected}")


def rows(t: Tx, stmt: str, params: dict[str, Any], spec: Spec) -> Iterator[sqlite3.Row]:
    """Stream a statement's rows (``fetchmany``: memory does not grow with the
    table) after checking its columns are the spec's fields, by name."""
    cur = t.execute(stmt, params)
    check_columns(cur.description, spec)
    while True:
        batch = cur.fetchmany(BATCH)
        if not batch:
            return
        yield from batch


# --- the specs ------------------------------------------------------------------------
# Fields several line kinds share, each defined once.
ROW_ID = Field("id", ID, doc="row id (ULID)")
PARTICIPANT_ID = Field("participant_id", ID, doc="the participant (directory.jsonl `id`)")
AT = Field("at_utc", TIME, doc="when it happened")
LEASE_EXPIRES = Field("lease_expires_at", TIME, null=True, doc="when the lease runs out")
PARENT = Field("parent", ADDRESS, null=True, doc="address of the run that launched it", max_len=200)
NOTICE_KIND = Field("kind", TEXT, doc="message kind, or the notice's name", max_len=32)


def lease_process(holding: str) -> Field:
    """The process holding a lease (``holding``: what it holds), added in S32."""
    return Field(
        "lease_process",
        TEXT,
        null=True,
        added=True,
        max_len=300,
        doc=f"process holding {holding} (host:pid:start; S32)",
    )


SPACE = Spec(
    "space.json",
    "spaces",
    [
        Field(
            "format",
            INT,
            derive=lambda _line: FORMAT,
            doc="layout version: 2; 1 wrote the claim journal's `at` as `at_utc`",
        ),
        Field("id", TEXT, doc="the space id (run id)", max_len=40),
        Field("kind", TEXT, choices=SPACE_KINDS),
        Field("state", TEXT, choices=SPACE_STATES),
        Field("settings", SETTINGS, doc="per-space limit overrides"),
        Field("last_seq", INT, doc="last log sequence number used"),
        Field("last_bcast", INT, doc="last broadcast-log number used"),
        Field("log_bytes", INT, doc="bytes logged (for log_max_mb)"),
        Field("created_at_utc", TIME),
        Field("updated_at_utc", TIME),
    ],
    "The space itself (one JSON document, not JSONL).",
)

LOG = Spec(
    "log.jsonl",
    "messages",
    [
        Field("id", ID, doc="message id (ULID); consumers de-duplicate by it"),
        Field("seq", INT, low=1, doc="gap-free sequence number in the space"),
        Field("created_at_utc", TIME),
        Field("kind", TEXT, choices=MESSAGE_KINDS),
        Field("sender", ADDRESS, doc="sender address, or `operator`", max_len=200),
        Field("to", LIST, column="recipients", doc="list of the `to` forms as given"),
        Field("body", TEXT, doc="the text; a receipt: JSON list of the ids seen"),
        Field("urgent", BOOL),
        Field("via", TEXT, null=True, choices=("cli", "cp", "mcp"), doc="operator surface"),
        Field("ref", ID, null=True, doc="retract: the directive; seen: the turn"),
        Field("reached", LIST, doc="list of addresses reached"),
        Field("not_reached", REASONS, doc="list of {address, reason}"),
        Field("reached_n", INT, doc="how many addresses it reached"),
        Field("bcast_no", INT, null=True, low=1, doc="position in the broadcast log"),
        Field("idempotency_key", TEXT, null=True, max_len=200, doc="the sender's key (S12)"),
        Field("size_bytes", INT, doc="bytes counted toward log_max_mb"),
        Field("thread", TEXT, null=True, added=True, max_len=64, doc="its thread (S35)"),
        Field("reply_to", ID, null=True, added=True, doc="the message it answers (S35)"),
        Field(
            "importance",
            TEXT,
            null=True,
            added=True,
            choices=("low", "high"),
            doc="low | high; null = normal",
        ),
        Field("ack_required", BOOL, null=True, added=True, doc="its sender asks who saw it"),
        Field(
            "outcome",
            TEXT,
            imported=False,
            doc="delivered | partial | reached_nobody | logged | receipt",
        ),
    ],
    "Every message and receipt, in log order (`seq`), with its outcome.",
)

EVENTS = Spec(
    "participants.jsonl",
    "participant_events",
    [
        ROW_ID,
        PARTICIPANT_ID,
        Field("event", TEXT, choices=("joined", "left")),
        Field("address", ADDRESS, doc="the participant's address", max_len=200),
        Field("codename", TEXT, doc="full codename", max_len=400),
        Field("agent", TEXT, doc="agent name", max_len=200),
        Field("run_id", TEXT, doc="the participant's run id", max_len=200),
        Field("step", TEXT, null=True, doc="workflow step", max_len=200),
        PARENT,
        Field(
            "reason",
            TEXT,
            null=True,
            doc="why it left; joined: how it was admitted (S42)",
            max_len=200,
        ),
        AT,
    ],
    "Every joined and left event, in the order they happened (S4).",
)

DIRECTORY = Spec(
    "directory.jsonl",
    "participants",
    [
        Field("id", ID, doc="participant id"),
        Field(
            "address",
            ADDRESS,
            doc="codename below the root, retry attempt dropped (S3)",
            max_len=200,
        ),
        Field("codename", TEXT, doc="full codename of the latest join", max_len=400),
        Field("agent", TEXT, doc="agent name; `role:NAME` addresses match it", max_len=200),
        Field("run_id", TEXT, doc="the participant's own run id", max_len=200),
        Field(
            "step",
            TEXT,
            null=True,
            doc="workflow step; `step:NAME` addresses match it",
            max_len=200,
        ),
        PARENT,
        Field("role", TEXT, null=True, doc="directory: short role description (S25)", max_len=200),
        Field(
            "archetype",
            TEXT,
            null=True,
            choices=("specialist", "surveyor", "researcher", "planner", "interfacer"),
            doc="directory: specialist | surveyor | researcher | planner | interfacer",
        ),
        Field("task", TEXT, null=True, doc="directory: one-line task"),
        Field("is_lead", BOOL, doc="an agentiflow's lead"),
        Field("messaging", BOOL, doc="false: receive-only"),
        Field("tools", LIST, null=True, doc="tools named at join; null: the default set"),
        Field(
            "tool_grant",
            TEXT,
            null=True,
            added=True,
            derive=lambda line: grants.source(line["messaging"], line["tools"]),
            doc="how its tools were granted (S24): ambient:messaging_default | "
            "ambient:workflow_messaging; null: messaging off",
        ),
        Field("status", TEXT, choices=PARTICIPANT_STATUSES),
        Field(
            "waiting",
            INT,
            imported=False,
            doc="deliveries ready or processing; recomputed on import",
        ),
        Field("pid", INT, null=True, doc="OS process id of the latest join, for prune"),
        Field("joined_at_utc", TIME, doc="latest join"),
        Field("left_at_utc", TIME, null=True, doc="when it left"),
        Field("last_seen_utc", TIME, doc="heartbeat: refreshed by turns and claims"),
        Field(
            "contact_policy",
            TEXT,
            null=True,
            added=True,
            choices=("parent-and-lead", "listed", "closed"),
            doc="who may message it directly (S38); null = open",
        ),
        Field(
            "contact_allow",
            LIST,
            null=True,
            added=True,
            doc="addresses a `listed` policy lets in",
        ),
    ],
    "One line per participant: its current row and directory entry. Never the token.",
)

CURSORS = Spec(
    "mailboxes/cursors.jsonl",
    "participants",
    [
        Field("participant_id", ID, column="id", doc="the participant (directory.jsonl `id`)"),
        Field("address", ADDRESS, imported=False, doc="the participant's address", max_len=200),
        Field("bcast_seen", INT, doc="broadcast-log number read up to"),
    ],
    "Each participant's broadcast cursor.",
)

KEYS = Spec(
    "board/keys.jsonl",
    "board_claims",
    [
        Field("key", TEXT, doc="the board key", max_len=200),
        Field("holder", ADDRESS, null=True, doc="null when free", max_len=200),
        Field("token", INT, doc="fencing token of the latest grant"),
        Field("claimed_at_utc", TIME, null=True, doc="when the current grant was made"),
        LEASE_EXPIRES,
    ],
    "Every board key ever claimed, held or free, with its fencing token.",
)

LIVE_CLAIM = Spec(
    "board/claims/<key>.json",
    "board_claims",
    KEYS.fields,
    "One file per live claim (holder set, lease not expired at export time).",
)

JOURNAL = Spec(
    "board/claims.jsonl",
    "claim_journal",
    [
        ROW_ID,
        Field("key", TEXT, doc="the board key", max_len=200),
        Field("event", TEXT, choices=JOURNAL_EVENTS),
        Field("owner", ADDRESS, doc="the address holding, or that held, the key", max_len=200),
        Field("token", INT, doc="fencing token of the grant"),
        LEASE_EXPIRES,
        Field("at", TIME, column="at_utc", doc="when it happened (format 1: `at_utc`)"),
        Field(
            "reason",
            TEXT,
            null=True,
            added=True,
            max_len=600,
            doc="why someone other than the holder ended it: `left`, `operator: ...`",
        ),
    ],
    "The claim journal (S23), in the order it was written.",
)
# The claim journal as format 1 wrote it (``at_utc``): read by the importer only.
JOURNAL_V1 = Spec(
    JOURNAL.file,
    JOURNAL.table,
    [Field("at_utc", TIME) if f.name == "at" else f for f in JOURNAL.fields],
    JOURNAL.doc,
)


def journal_spec(format: int) -> Spec:
    """The claim journal's line schema in an export of layout ``format``."""
    return JOURNAL_V1 if format == 1 else JOURNAL


RESERVATIONS = Spec(
    "board/reservations.jsonl",
    "reservations",
    [
        Field("token", INT, low=1, doc="fencing token of the grant (per space, only grows)"),
        Field("pattern", TEXT, doc="the path pattern (S37)", max_len=200),
        Field("mode", TEXT, choices=RESERVATION_MODES),
        Field("holder", ADDRESS, doc="the address holding, or that held, it", max_len=200),
        Field("reason", TEXT, null=True, doc="why, as the holder said"),
        Field("claimed_at_utc", TIME, doc="when it was granted"),
        Field("lease_expires_at", TIME, doc="when the lease runs (or ran) out"),
        Field("ended_at_utc", TIME, null=True, doc="when it was released or expired"),
    ],
    "Every path reservation ever granted (S37), live or ended, by fencing token; "
    "its journal lines are in board/claims.jsonl under the key `path <pattern>`.",
)

INBOX = Spec(
    "mailboxes/<address>/inbox.jsonl",
    "deliveries",
    [
        Field("id", ID, doc="delivery id"),
        Field("message_id", ID, doc="the message (log.jsonl `id`)"),
        Field("seq", INT, imported=False, doc="the message's seq in log.jsonl"),
        Field("recipient_id", ID, doc="the inbox owner (directory.jsonl `id`)"),
        Field("recipient", ADDRESS, imported=False, doc="the inbox owner's address", max_len=200),
        Field("state", TEXT, choices=DELIVERY_STATES),
        Field("created_at_utc", TIME, doc="FIFO key, with id"),
        Field("attempts", INT, doc="times claimed"),
        Field("lease_token", TEXT, null=True, max_len=40, doc="token of the lease (S14)"),
        Field(
            "lease_owner",
            TEXT,
            null=True,
            max_len=200,
            doc="who holds the lease (processing); else the last lease's owner (S15), null if never claimed or requeued",
        ),
        LEASE_EXPIRES,
        Field("acked_at_utc", TIME, null=True, doc="when it was acked"),
        Field("last_error", TEXT, null=True, doc="last failure reported"),
        Field("quarantine_reason", TEXT, null=True, doc="why it was quarantined"),
        lease_process("the lease"),
        Field(
            "lost_lease_token",
            TEXT,
            null=True,
            added=True,
            max_len=40,
            doc="the latest lease that lost it without settling it (S14)",
        ),
    ],
    "A participant's inbox: every delivery, FIFO order `(created_at_utc, id)`.",
)

TURNS = Spec(
    "mailboxes/<address>/turns.jsonl",
    "turns",
    [
        ROW_ID,
        PARTICIPANT_ID,
        Field("lease_token", TEXT, max_len=40, doc="lease over the turn's deliveries"),
        Field("bcast_upto", INT, doc="broadcast-log number the turn showed up to"),
        Field("state", TEXT, choices=("open", "seen")),
        Field("created_at_utc", TIME, doc="when it was created"),
        Field("expires_at", TIME, doc="when the turn's lease runs out"),
        Field("seen_at_utc", TIME, null=True, doc="when it was confirmed seen"),
        lease_process("the turn"),
        Field(
            "bcast_from",
            INT,
            null=True,
            added=True,
            doc="broadcast-log number the turn's broadcasts start after (S18)",
        ),
    ],
    "A participant's turns (S17-S18), oldest first.",
)

TRANSCRIPT = Spec(
    "mailboxes/<address>/transcript.jsonl",
    "transcript",
    [
        ROW_ID,
        PARTICIPANT_ID,
        Field("turn_id", ID, null=True, doc="the turn that showed it (received / injected)"),
        Field("position", INT, doc="order inside the turn"),
        Field("direction", TEXT, choices=TRANSCRIPT_DIRECTIONS),
        Field("message_id", ID, null=True, doc="the message (log.jsonl `id`)"),
        NOTICE_KIND,
        Field("content", TEXT, doc="text as rendered for the model"),
        AT,
    ],
    "A participant's transcript (S19), in the order it was written.",
)

HISTORY = Spec(
    "mailboxes/<address>/history.jsonl",
    "history",
    [
        ROW_ID,
        PARTICIPANT_ID,
        Field("message_id", ID, doc="each handled message once (S16)"),
        Field("turn_id", ID, null=True, doc="the turn that delivered it"),
        NOTICE_KIND,
        Field("sender", ADDRESS, doc="sender address", max_len=200),
        Field("body", TEXT, doc="the text"),
        AT,
    ],
    "A teammate's canonical history (S26), in the order it was written.",
)

SPECS: tuple[Spec, ...] = (
    SPACE,
    LOG,
    EVENTS,
    DIRECTORY,
    CURSORS,
    KEYS,
    LIVE_CLAIM,
    JOURNAL,
    RESERVATIONS,
    INBOX,
    TURNS,
    TRANSCRIPT,
    HISTORY,
)
MAILBOX_FILES = ("inbox.jsonl", "turns.jsonl", "transcript.jsonl", "history.jsonl")
# Files that repeat log.jsonl lines (same schema), filtered by kind.
LOG_SUBSETS = {
    "board/posts.jsonl": ("post",),
    "board/directives.jsonl": ("directive", "retract"),
    "mailboxes/broadcast.jsonl": None,  # rows with a bcast_no
}


def space_parts(kind: str, space_id: str) -> tuple[str, ...]:
    """The space's folder below the export root, by kind (spec §Export layout)."""
    name = safe_name(space_id)
    if kind == "agentiflow":
        return ("agentiflows", name)
    if kind == "session":
        return ("sessions", name, "messages")
    return ("runs", name, "messages")


def layout_files() -> list[str]:
    """Every file and folder of the space layout (for docs and tests)."""
    return [
        "space.json",
        "log.jsonl",
        "log.jsonl.lock",
        "participants.jsonl",
        "directory.jsonl",
        "board/posts.jsonl",
        "board/directives.jsonl",
        "board/claims.jsonl",
        "board/keys.jsonl",
        "board/claims/",
        "board/reservations.jsonl",
        "mailboxes/broadcast.jsonl",
        "mailboxes/cursors.jsonl",
        "mailboxes/<address>/inbox.jsonl",
        "mailboxes/<address>/turns.jsonl",
        "mailboxes/<address>/transcript.jsonl",
        "mailboxes/<address>/history.jsonl",
    ]
