"""Export a space as files: the JSONL space layout (with ``--follow``) and the
Mailbox Protocol layout. ``docs/export.md`` documents every file and line.

Space layout (spec §Export layout), below ``root``::

    agentiflows/<af_id>/              an agentiflow (the run dir is the space)
    runs/<run_id>/messages/           a workflow run or a standalone run
    sessions/<ses_id>/messages/       a session
      space.json  log.jsonl  log.jsonl.lock  participants.jsonl  directory.jsonl
      board/posts.jsonl  board/directives.jsonl  board/claims.jsonl  board/keys.jsonl
      board/claims/<key>.json
      mailboxes/broadcast.jsonl  mailboxes/cursors.jsonl
      mailboxes/<address>/inbox.jsonl  turns.jsonl  transcript.jsonl  history.jsonl

A snapshot is read in one read transaction (one consistent picture of the
space) and streamed row by row (``fetchmany``): memory does not grow with the
number of messages. Each file is written to a temp file and renamed into place.
``follow`` then keeps the files current as rows commit: it only appends
lines (a later line for the same id supersedes an earlier one in the files of
rows that change: directory, cursors, keys, inboxes, turns), and rewrites only
the single-document files (``space.json``, ``board/claims/*.json``).

Every name built from data (addresses, keys, subjects, ids) goes through
``broker.paths.safe_name`` and every path through ``broker.paths.inside``.

The line schemas are the ``Spec`` objects below: the exporter writes them, the
importer (``broker.importer``) reads them back, and tests check both against
the table metadata and the documentation.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import threading
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from broker import errors, wake
from broker.db import Store, Tx
from broker.paths import atomic_writer, inside, make_dirs, safe_name, write_text_atomic
from broker.spaces import resolve_id
from broker.views import outcome_sql
from broker.vocab import (
    DELIVERY_STATES,
    JOURNAL_EVENTS,
    MESSAGE_KINDS,
    PARTICIPANT_STATUSES,
    SPACE_KINDS,
    SPACE_STATES,
    TRANSCRIPT_DIRECTIONS,
)

FORMAT = 1
BATCH = 1000

# --- line schemas ---------------------------------------------------------------------


class Field:
    """One key of a JSON line: where it comes from in SQL and what it may hold."""

    __slots__ = ("name", "sql", "type", "null", "choices", "imported", "doc")

    def __init__(
        self,
        name: str,
        sql: str,
        type: str,
        *,
        null: bool = False,
        choices: tuple[str, ...] = (),
        imported: bool = True,
        doc: str = "",
    ) -> None:
        self.name = name
        self.sql = sql  # SELECT expression
        self.type = type  # str | int | bool | json | ts
        self.null = null
        self.choices = choices
        self.imported = imported  # False: derived on export, ignored on import
        self.doc = doc

    @property
    def column(self) -> str:
        """The table column an imported field is written to."""
        return self.sql.rsplit(".", 1)[-1]


class Spec:
    """The line schema of one JSONL file (or JSON document) of the layout."""

    def __init__(self, file: str, table: str, fields: Sequence[Field], doc: str) -> None:
        self.file = file
        self.table = table
        self.fields = tuple(fields)
        self.doc = doc
        self.names = tuple(f.name for f in self.fields)
        self.name_set = frozenset(self.names)
        self._json = tuple(i for i, f in enumerate(self.fields) if f.type == "json")
        self._bool = tuple(i for i, f in enumerate(self.fields) if f.type == "bool")

    def select(self) -> str:
        return ", ".join(f.sql for f in self.fields)

    def obj(self, row: Sequence[Any]) -> dict[str, Any]:
        out = dict(zip(self.names, row, strict=True))
        names = self.names
        for i in self._json:
            if row[i] is not None:
                out[names[i]] = json.loads(row[i])
        for i in self._bool:
            if row[i] is not None:
                out[names[i]] = bool(row[i])
        return out

    def line(self, row: Sequence[Any]) -> str:
        return dumps(self.obj(row)) + "\n"


def dumps(obj: Any) -> str:
    """The one JSON encoding of the layout: compact, UTF-8, keys in schema order."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


_S, _I, _B, _J, _T = "str", "int", "bool", "json", "ts"

SPACE = Spec(
    "space.json",
    "spaces",
    [
        Field("format", "1", _I, imported=False, doc="layout version (1)"),
        Field("id", "s.id", _S, doc="the space id (run id)"),
        Field("kind", "s.kind", _S, choices=SPACE_KINDS),
        Field("state", "s.state", _S, choices=SPACE_STATES),
        Field("settings", "s.settings", _J, doc="per-space limit overrides"),
        Field("last_seq", "s.last_seq", _I, doc="last log sequence number used"),
        Field("last_bcast", "s.last_bcast", _I, doc="last broadcast-log number used"),
        Field("log_bytes", "s.log_bytes", _I, doc="bytes logged (for log_max_mb)"),
        Field("created_at_utc", "s.created_at_utc", _T),
        Field("updated_at_utc", "s.updated_at_utc", _T),
    ],
    "The space itself (one JSON document, not JSONL).",
)

LOG = Spec(
    "log.jsonl",
    "messages",
    [
        Field("id", "m.id", _S, doc="message id (ULID); consumers de-duplicate by it"),
        Field("seq", "m.seq", _I, doc="gap-free sequence number in the space"),
        Field("created_at_utc", "m.created_at_utc", _T),
        Field("kind", "m.kind", _S, choices=MESSAGE_KINDS),
        Field("sender", "m.sender", _S, doc="sender address, or `operator`"),
        Field("to", "m.recipients", _J, doc="list of the `to` forms as given"),
        Field("body", "m.body", _S, doc="the text; a receipt: JSON list of the ids seen"),
        Field("urgent", "m.urgent", _B),
        Field("via", "m.via", _S, null=True, doc="operator surface: cli | cp | mcp"),
        Field("ref", "m.ref", _S, null=True, doc="retract: the directive; seen: the turn"),
        Field("reached", "m.reached", _J, doc="list of addresses reached"),
        Field("not_reached", "m.not_reached", _J, doc="list of {address, reason}"),
        Field("reached_n", "m.reached_n", _I),
        Field("bcast_no", "m.bcast_no", _I, null=True, doc="position in the broadcast log"),
        Field("idempotency_key", "m.idempotency_key", _S, null=True),
        Field("size_bytes", "m.size_bytes", _I, doc="bytes counted toward log_max_mb"),
        Field(
            "outcome",
            outcome_sql("m"),
            _S,
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
        Field("id", "e.id", _S),
        Field("participant_id", "e.participant_id", _S),
        Field("event", "e.event", _S, choices=("joined", "left")),
        Field("address", "e.address", _S),
        Field("codename", "e.codename", _S),
        Field("agent", "e.agent", _S),
        Field("run_id", "e.run_id", _S),
        Field("step", "e.step", _S, null=True),
        Field("parent", "e.parent", _S, null=True),
        Field("reason", "e.reason", _S, null=True, doc="why it left"),
        Field("at_utc", "e.at_utc", _T),
    ],
    "Every joined and left event, in the order they happened (S4).",
)

DIRECTORY = Spec(
    "directory.jsonl",
    "participants",
    [
        Field("id", "p.id", _S, doc="participant id"),
        Field("address", "p.address", _S),
        Field("codename", "p.codename", _S),
        Field("agent", "p.agent", _S),
        Field("run_id", "p.run_id", _S),
        Field("step", "p.step", _S, null=True),
        Field("parent", "p.parent", _S, null=True),
        Field("role", "p.role", _S, null=True),
        Field("archetype", "p.archetype", _S, null=True),
        Field("task", "p.task", _S, null=True),
        Field("is_lead", "p.is_lead", _B),
        Field("messaging", "p.messaging", _B, doc="false: receive-only"),
        Field("tools", "p.tools", _J, null=True, doc="tools named at join; null: the default set"),
        Field(
            "status",
            "p.status",
            _S,
            choices=PARTICIPANT_STATUSES,
        ),
        Field(
            "waiting",
            "p.waiting",
            _I,
            imported=False,
            doc="deliveries ready or processing; recomputed on import",
        ),
        Field("pid", "p.pid", _I, null=True),
        Field("joined_at_utc", "p.joined_at_utc", _T),
        Field("left_at_utc", "p.left_at_utc", _T, null=True),
        Field("last_seen_utc", "p.last_seen_utc", _T),
    ],
    "One line per participant: its current row and directory entry. Never the token.",
)

CURSORS = Spec(
    "mailboxes/cursors.jsonl",
    "participants",
    [
        Field("participant_id", "p.id", _S),
        Field("address", "p.address", _S, imported=False),
        Field("bcast_seen", "p.bcast_seen", _I, doc="broadcast-log number read up to"),
    ],
    "Each participant's broadcast cursor.",
)

KEYS = Spec(
    "board/keys.jsonl",
    "board_claims",
    [
        Field("key", "c.key", _S),
        Field("holder", "c.holder", _S, null=True, doc="null when free"),
        Field("token", "c.token", _I, doc="fencing token of the latest grant"),
        Field("claimed_at_utc", "c.claimed_at_utc", _T, null=True),
        Field("lease_expires_at", "c.lease_expires_at", _T, null=True),
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
        Field("id", "j.id", _S),
        Field("key", "j.key", _S),
        Field("event", "j.event", _S, choices=JOURNAL_EVENTS),
        Field("owner", "j.owner", _S),
        Field("token", "j.token", _I),
        Field("lease_expires_at", "j.lease_expires_at", _T, null=True),
        Field("at_utc", "j.at_utc", _T),
    ],
    "The claim journal (S23), in the order it was written.",
)

INBOX = Spec(
    "mailboxes/<address>/inbox.jsonl",
    "deliveries",
    [
        Field("id", "d.id", _S, doc="delivery id"),
        Field("message_id", "d.message_id", _S),
        Field("seq", "m.seq", _I, imported=False, doc="the message's seq in log.jsonl"),
        Field("recipient_id", "d.recipient_id", _S),
        Field("recipient", "p.address", _S, imported=False),
        Field("state", "d.state", _S, choices=DELIVERY_STATES),
        Field("created_at_utc", "d.created_at_utc", _T, doc="FIFO key, with id"),
        Field("attempts", "d.attempts", _I, doc="times claimed"),
        Field("lease_token", "d.lease_token", _S, null=True),
        Field("lease_owner", "d.lease_owner", _S, null=True),
        Field("lease_expires_at", "d.lease_expires_at", _T, null=True),
        Field("acked_at_utc", "d.acked_at_utc", _T, null=True),
        Field("last_error", "d.last_error", _S, null=True),
        Field("quarantine_reason", "d.quarantine_reason", _S, null=True),
        Field(
            "lease_process",
            "d.lease_process",
            _S,
            null=True,
            doc="process holding the lease (host:pid:start; S32)",
        ),
    ],
    "A participant's inbox: every delivery, FIFO order `(created_at_utc, id)`.",
)

TURNS = Spec(
    "mailboxes/<address>/turns.jsonl",
    "turns",
    [
        Field("id", "u.id", _S),
        Field("participant_id", "u.participant_id", _S),
        Field("lease_token", "u.lease_token", _S),
        Field("bcast_upto", "u.bcast_upto", _I),
        Field("state", "u.state", _S, choices=("open", "seen")),
        Field("created_at_utc", "u.created_at_utc", _T),
        Field("expires_at", "u.expires_at", _T),
        Field("seen_at_utc", "u.seen_at_utc", _T, null=True),
        Field(
            "lease_process",
            "u.lease_process",
            _S,
            null=True,
            doc="process holding the turn (host:pid:start; S32)",
        ),
        Field(
            "bcast_from",
            "u.bcast_from",
            _I,
            null=True,
            doc="broadcast-log number the turn's broadcasts start after (S18)",
        ),
    ],
    "A participant's turns (S17-S18), oldest first.",
)

TRANSCRIPT = Spec(
    "mailboxes/<address>/transcript.jsonl",
    "transcript",
    [
        Field("id", "x.id", _S),
        Field("participant_id", "x.participant_id", _S),
        Field("turn_id", "x.turn_id", _S, null=True),
        Field("position", "x.position", _I),
        Field("direction", "x.direction", _S, choices=TRANSCRIPT_DIRECTIONS),
        Field("message_id", "x.message_id", _S, null=True),
        Field("kind", "x.kind", _S),
        Field("content", "x.content", _S),
        Field("at_utc", "x.at_utc", _T),
    ],
    "A participant's transcript (S19), in the order it was written.",
)

HISTORY = Spec(
    "mailboxes/<address>/history.jsonl",
    "history",
    [
        Field("id", "h.id", _S),
        Field("participant_id", "h.participant_id", _S),
        Field("message_id", "h.message_id", _S, doc="each handled message once (S16)"),
        Field("turn_id", "h.turn_id", _S, null=True),
        Field("kind", "h.kind", _S),
        Field("sender", "h.sender", _S),
        Field("body", "h.body", _S),
        Field("at_utc", "h.at_utc", _T),
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

_Q_SPACE = f"SELECT {SPACE.select()} FROM spaces s WHERE s.id = ?"
_Q_LOG = f"SELECT {LOG.select()} FROM messages m WHERE m.space_id = ? AND m.seq > ? ORDER BY m.seq"
_Q_EVENTS = (
    f"SELECT e.rowid, {EVENTS.select()} FROM participant_events e "
    "WHERE e.space_id = ? AND e.rowid > ? ORDER BY e.rowid"
)
_Q_PARTICIPANTS = (
    f"SELECT {DIRECTORY.select()}, p.bcast_seen FROM participants p WHERE p.space_id = ? "
    "ORDER BY p.joined_at_utc, p.id"
)
_Q_KEYS = f"SELECT {KEYS.select()} FROM board_claims c WHERE c.space_id = ? ORDER BY c.key"
_Q_JOURNAL = (
    f"SELECT j.rowid, {JOURNAL.select()} FROM claim_journal j "
    "WHERE j.space_id = ? AND j.rowid > ? ORDER BY j.rowid"
)
_INBOX_FROM = (
    "FROM deliveries d JOIN messages m ON m.id = d.message_id "
    "JOIN participants p ON p.id = d.recipient_id"
)
_Q_INBOX = (
    f"SELECT d.rowid, {INBOX.select()} {_INBOX_FROM} WHERE d.space_id = ? "
    "ORDER BY d.recipient_id, d.created_at_utc, d.id"
)
_Q_INBOX_NEW = (
    f"SELECT d.rowid, {INBOX.select()} {_INBOX_FROM} WHERE d.space_id = ? AND d.rowid > ? "
    "ORDER BY d.rowid"
)
_Q_TURNS = (
    f"SELECT u.rowid, {TURNS.select()} FROM turns u WHERE u.space_id = ? "
    "ORDER BY u.participant_id, u.created_at_utc, u.id"
)
_Q_TURNS_NEW = (
    f"SELECT u.rowid, {TURNS.select()} FROM turns u WHERE u.space_id = ? AND u.rowid > ? "
    "ORDER BY u.rowid"
)
_Q_TRANSCRIPT = (
    f"SELECT x.rowid, {TRANSCRIPT.select()} FROM transcript x WHERE x.space_id = ? "
    "ORDER BY x.participant_id, x.rowid"
)
_Q_HISTORY = (
    f"SELECT h.rowid, {HISTORY.select()} FROM history h WHERE h.space_id = ? "
    "ORDER BY h.participant_id, h.rowid"
)
_Q_HISTORY_NEW = (
    f"SELECT h.rowid, {HISTORY.select()} FROM history h WHERE h.space_id = ? "
    "AND h.rowid > ? ORDER BY h.rowid"
)
_Q_TRANSCRIPT_NEW = (
    f"SELECT x.rowid, {TRANSCRIPT.select()} FROM transcript x WHERE x.space_id = ? "
    "AND x.rowid > ? ORDER BY x.rowid"
)


# --- progress -------------------------------------------------------------------------
class Progress:
    """Receives progress of long work; the CLI draws a bar on stderr. No-op here."""

    def start(self, total: int, label: str) -> None:
        pass

    def advance(self, n: int) -> None:
        pass

    def finish(self) -> None:
        pass


# --- layout ---------------------------------------------------------------------------
def space_parts(kind: str, space_id: str) -> tuple[str, ...]:
    """The space's folder below the export root, by kind (spec §Export layout)."""
    name = safe_name(space_id)
    if kind == "agentiflow":
        return ("agentiflows", name)
    if kind == "session":
        return ("sessions", name, "messages")
    return ("runs", name, "messages")


@dataclass
class ExportSummary:
    space: str
    kind: str
    layout: str
    root: str
    dir: str
    messages: int = 0
    participants: int = 0
    deliveries: int = 0
    journal: int = 0
    live_claims: int = 0
    files: int = 0
    appended_lines: int = 0

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _fetch(t: Tx, sql: str, params: Any) -> Iterator[Sequence[Any]]:
    cur = t.execute(sql, params)
    while True:
        rows = cur.fetchmany(BATCH)
        if not rows:
            return
        yield from rows


class _Writer:
    """Writes the space layout; shared by the snapshot and by ``follow``."""

    def __init__(self, root: Path, space_id: str, kind: str, now: str, follow: bool) -> None:
        self.root = root
        self.following = follow  # track changeable rows only when following
        self.space_id = space_id
        self.parts = space_parts(kind, space_id)
        self.dir = make_dirs(root, *self.parts)
        for sub in (("board", "claims"), ("mailboxes",)):
            make_dirs(root, *self.parts, *sub)
        self.now = now
        self.folders: dict[str, str] = {}  # participant id -> mailbox folder name
        self.addresses: dict[str, str] = {}  # participant id -> address
        self.summary = ExportSummary(
            space=space_id, kind=kind, layout="space", root=str(root), dir=str(self.dir)
        )
        # follow state
        self.space_line = ""
        self.last_seq = 0
        self.events_rowid = 0
        self.journal_rowid = 0
        self.inbox_rowid = 0
        self.turns_rowid = 0
        self.transcript_rowid = 0
        self.history_rowid = 0
        self.dir_lines: dict[str, str] = {}
        self.cursor_lines: dict[str, str] = {}
        self.key_lines: dict[str, str] = {}
        self.live: dict[str, str] = {}  # claim file name -> content
        self.open_deliveries: dict[int, str] = {}  # rowid -> line, state != done
        self.open_turns: dict[int, str] = {}  # rowid -> line, state open

    # paths
    def path(self, *parts: str) -> Path:
        return inside(self.root, *self.parts, *parts)

    def mkdir(self, *parts: str) -> Path:
        return make_dirs(self.root, *self.parts, *parts)

    def folder(self, pid: str, address: str) -> str:
        name = self.folders.get(pid)
        if name is None:
            self.addresses.setdefault(pid, address)
            name = self.folders[pid] = safe_name(address)
            self.mkdir("mailboxes", name)
        return name

    @contextlib.contextmanager
    def snapshot_file(self, *parts: str) -> Iterator[IO[str]]:
        path = self.path(*parts)
        with atomic_writer(path) as fh:
            yield fh
        self.summary.files += 1

    # --- snapshot parts ----------------------------------------------------------
    def write_space(self, t: Tx) -> bool:
        row = t.one(_Q_SPACE, (self.space_id,))
        text = json.dumps(SPACE.obj(row), ensure_ascii=False, indent=2) + "\n"
        if text == self.space_line:
            return False
        write_text_atomic(self.path("space.json"), text)
        self.space_line = text
        return True

    def participants(self, t: Tx, progress: Progress) -> None:
        with (
            self.snapshot_file("directory.jsonl") as dfh,
            self.snapshot_file("mailboxes", "cursors.jsonl") as cfh,
        ):
            for row in _fetch(t, _Q_PARTICIPANTS, (self.space_id,)):
                pid = row[0]
                self.folder(pid, row[1])
                dline = DIRECTORY.line(row[:-1])
                cline = CURSORS.line((pid, row[1], row[-1]))
                dfh.write(dline)
                cfh.write(cline)
                if self.following:
                    self.dir_lines[pid] = dline
                    self.cursor_lines[pid] = cline
                self.summary.participants += 1
        progress.advance(self.summary.participants)
        with self.snapshot_file("participants.jsonl") as fh:
            for row in _fetch(t, _Q_EVENTS, (self.space_id, 0)):
                fh.write(EVENTS.line(row[1:]))
                self.events_rowid = row[0]
                progress.advance(1)

    def log(self, t: Tx, progress: Progress) -> None:
        kind_i = LOG.names.index("kind")
        bcast_i = LOG.names.index("bcast_no")
        n = 0
        with (
            self.snapshot_file("log.jsonl") as log,
            self.snapshot_file("board", "posts.jsonl") as posts,
            self.snapshot_file("board", "directives.jsonl") as directives,
            self.snapshot_file("mailboxes", "broadcast.jsonl") as bcast,
        ):
            for row in _fetch(t, _Q_LOG, (self.space_id, 0)):
                line = LOG.line(row)
                log.write(line)
                kind = row[kind_i]
                if kind == "post":
                    posts.write(line)
                elif kind in ("directive", "retract"):
                    directives.write(line)
                if row[bcast_i] is not None:
                    bcast.write(line)
                self.last_seq = row[1]
                n += 1
                if n % BATCH == 0:
                    progress.advance(BATCH)
        progress.advance(n % BATCH)
        self.summary.messages = n
        lock = self.path("log.jsonl.lock")
        if not lock.exists():
            fd = os.open(lock, os.O_CREAT | os.O_WRONLY, 0o600)
            os.close(fd)
            self.summary.files += 1

    def board(self, t: Tx, progress: Progress) -> None:
        self.mkdir("board", "claims")
        live: dict[str, str] = {}
        with self.snapshot_file("board", "keys.jsonl") as fh:
            for row in _fetch(t, _Q_KEYS, (self.space_id,)):
                line = KEYS.line(row)
                fh.write(line)
                if self.following:
                    self.key_lines[row[0]] = line
                if row[1] is not None and row[4] is not None and row[4] > self.now:
                    live[safe_name(row[0]) + ".json"] = (
                        json.dumps(KEYS.obj(row), ensure_ascii=False, indent=2) + "\n"
                    )
        self._sync_claim_files(live)
        with self.snapshot_file("board", "claims.jsonl") as fh:
            for row in _fetch(t, _Q_JOURNAL, (self.space_id, 0)):
                fh.write(JOURNAL.line(row[1:]))
                self.journal_rowid = row[0]
                self.summary.journal += 1
                progress.advance(1)

    def _sync_claim_files(self, live: dict[str, str]) -> bool:
        changed = False
        folder = self.path("board", "claims")
        for name, text in live.items():
            if self.live.get(name) != text:
                write_text_atomic(self.path("board", "claims", name), text)
                changed = True
        for name in list(self.live) + [p.name for p in folder.glob("*.json")]:
            if name not in live:
                with contextlib.suppress(FileNotFoundError):
                    self.path("board", "claims", name).unlink()
                changed = True
        self.live = live
        self.summary.live_claims = len(live)
        return changed

    def per_participant(
        self,
        t: Tx,
        sql: str,
        spec: Spec,
        file: str,
        owner: Callable[[Sequence[Any]], tuple[str, str]],
        track: Callable[[int, Sequence[Any], str], None] | None,
        progress: Progress,
    ) -> int:
        """Stream rows ordered by owner into one file per participant's mailbox."""
        n = 0
        written: set[str] = set()
        current: str | None = None
        stack = contextlib.ExitStack()
        fh: IO[str] | None = None
        with stack:
            for row in _fetch(t, sql, (self.space_id,)):
                pid, address = owner(row)
                if pid != current:
                    stack.close()
                    current = pid
                    name = self.folder(pid, address)
                    fh = stack.enter_context(self.snapshot_file("mailboxes", name, file))
                    written.add(pid)
                line = spec.line(row[1:])
                assert fh is not None
                fh.write(line)
                if track is not None:
                    track(row[0], row, line)
                n += 1
                if n % BATCH == 0:
                    progress.advance(BATCH)
        progress.advance(n % BATCH)
        for pid, name in self.folders.items():
            if pid not in written:
                with self.snapshot_file("mailboxes", name, file):
                    pass
        return n

    def mailboxes(self, t: Tx, progress: Progress) -> None:
        rid = 1 + INBOX.names.index("recipient_id")
        raddr = 1 + INBOX.names.index("recipient")
        rstate = 1 + INBOX.names.index("state")

        def track_delivery(rowid: int, row: Sequence[Any], line: str) -> None:
            if self.following and row[rstate] != "done":
                self.open_deliveries[rowid] = line

        self.summary.deliveries = self.per_participant(
            t,
            _Q_INBOX,
            INBOX,
            "inbox.jsonl",
            lambda r: (r[rid], r[raddr]),
            track_delivery,
            progress,
        )
        self.inbox_rowid = self._max_rowid(t, "deliveries")
        tpid = 1 + TURNS.names.index("participant_id")
        tstate = 1 + TURNS.names.index("state")

        def track_turn(rowid: int, row: Sequence[Any], line: str) -> None:
            if self.following and row[tstate] != "seen":
                self.open_turns[rowid] = line

        self.per_participant(
            t,
            _Q_TURNS,
            TURNS,
            "turns.jsonl",
            lambda r: (r[tpid], self._address(r[tpid])),
            track_turn,
            progress,
        )
        self.turns_rowid = self._max_rowid(t, "turns")
        for query, schema, name in (
            (_Q_TRANSCRIPT, TRANSCRIPT, "transcript"),
            (_Q_HISTORY, HISTORY, "history"),
        ):
            col = 1 + schema.names.index("participant_id")
            self.per_participant(
                t,
                query,
                schema,
                f"{name}.jsonl",
                lambda r, c=col: (r[c], self._address(r[c])),  # type: ignore[misc]
                None,
                progress,
            )
        self.transcript_rowid = self._max_rowid(t, "transcript")
        self.history_rowid = self._max_rowid(t, "history")

    def _max_rowid(self, t: Tx, table: str) -> int:
        """Where ``--follow`` picks up: the last row of ``table`` in the snapshot."""
        return int(
            t.one(
                f"SELECT COALESCE(MAX(rowid), 0) FROM {table} WHERE space_id = ?", (self.space_id,)
            )[0]
        )

    def _address(self, pid: str) -> str:
        # A row whose participant is missing (cannot happen with foreign keys on):
        # its folder is named by the participant id.
        return self.addresses.get(pid, pid)

    # --- follow: append what changed -------------------------------------------------
    def poll(self, t: Tx) -> int:
        """Append every change committed since the last call; returns lines appended."""
        appended = 0
        self.write_space(t)
        appended += self._poll_participants(t)
        appended += self._poll_log(t)
        appended += self._poll_board(t)
        appended += self._poll_rows(t)
        self.summary.appended_lines += appended
        return appended

    def _append(self, lines: dict[tuple[str, ...], list[str]]) -> int:
        n = 0
        for parts, items in lines.items():
            if not items:
                continue
            with open(self.path(*parts), "a", encoding="utf-8", newline="\n") as fh:
                fh.write("".join(items))
                fh.flush()
            n += len(items)
        return n

    def _poll_participants(self, t: Tx) -> int:
        out: dict[tuple[str, ...], list[str]] = {
            ("directory.jsonl",): [],
            ("mailboxes", "cursors.jsonl"): [],
            ("participants.jsonl",): [],
        }
        for row in t.all(_Q_PARTICIPANTS, (self.space_id,)):
            pid = row[0]
            if pid not in self.folders:
                name = self.folder(pid, row[1])
                for file in MAILBOX_FILES:
                    self.path("mailboxes", name, file).touch(mode=0o600)
            dline = DIRECTORY.line(row[:-1])
            cline = CURSORS.line((pid, row[1], row[-1]))
            if self.dir_lines.get(pid) != dline:
                self.dir_lines[pid] = dline
                out[("directory.jsonl",)].append(dline)
            if self.cursor_lines.get(pid) != cline:
                self.cursor_lines[pid] = cline
                out[("mailboxes", "cursors.jsonl")].append(cline)
        for row in t.all(_Q_EVENTS, (self.space_id, self.events_rowid)):
            out[("participants.jsonl",)].append(EVENTS.line(row[1:]))
            self.events_rowid = row[0]
        self.summary.participants = len(self.dir_lines)
        return self._append(out)

    def _poll_log(self, t: Tx) -> int:
        kind_i = LOG.names.index("kind")
        bcast_i = LOG.names.index("bcast_no")
        out: dict[tuple[str, ...], list[str]] = {
            ("log.jsonl",): [],
            ("board", "posts.jsonl"): [],
            ("board", "directives.jsonl"): [],
            ("mailboxes", "broadcast.jsonl"): [],
        }
        appended = 0
        for row in _fetch(t, _Q_LOG, (self.space_id, self.last_seq)):
            line = LOG.line(row)
            out[("log.jsonl",)].append(line)
            if row[kind_i] == "post":
                out[("board", "posts.jsonl")].append(line)
            elif row[kind_i] in ("directive", "retract"):
                out[("board", "directives.jsonl")].append(line)
            if row[bcast_i] is not None:
                out[("mailboxes", "broadcast.jsonl")].append(line)
            self.last_seq = row[1]
            self.summary.messages += 1
            if len(out[("log.jsonl",)]) >= BATCH:
                appended += self._append(out)
                out = {k: [] for k in out}
        return appended + self._append(out)

    def _poll_board(self, t: Tx) -> int:
        out: dict[tuple[str, ...], list[str]] = {
            ("board", "keys.jsonl"): [],
            ("board", "claims.jsonl"): [],
        }
        live: dict[str, str] = {}
        for row in t.all(_Q_KEYS, (self.space_id,)):
            line = KEYS.line(row)
            if self.key_lines.get(row[0]) != line:
                self.key_lines[row[0]] = line
                out[("board", "keys.jsonl")].append(line)
            if row[1] is not None and row[4] is not None and row[4] > self.now:
                live[safe_name(row[0]) + ".json"] = (
                    json.dumps(KEYS.obj(row), ensure_ascii=False, indent=2) + "\n"
                )
        for row in t.all(_Q_JOURNAL, (self.space_id, self.journal_rowid)):
            out[("board", "claims.jsonl")].append(JOURNAL.line(row[1:]))
            self.journal_rowid = row[0]
            self.summary.journal += 1
        self._sync_claim_files(live)
        return self._append(out)

    def _poll_rows(self, t: Tx) -> int:
        out: dict[tuple[str, ...], list[str]] = {}

        def add(pid: str, file: str, line: str) -> None:
            name = self.folder(pid, self._address(pid))
            out.setdefault(("mailboxes", name, file), []).append(line)

        # deliveries and turns: new rows, then the ones that may still change
        new_inbox = self._follow_changing(
            t,
            add,
            INBOX,
            "inbox.jsonl",
            "recipient_id",
            "done",
            self.open_deliveries,
            _Q_INBOX_NEW,
            self.inbox_rowid,
            f"SELECT d.rowid, {INBOX.select()} {_INBOX_FROM} WHERE d.rowid IN ({{marks}}) "
            "ORDER BY d.recipient_id, d.created_at_utc, d.id",
        )
        if new_inbox:
            self.inbox_rowid = new_inbox[-1]
            self.summary.deliveries += len(new_inbox)
        new_turns = self._follow_changing(
            t,
            add,
            TURNS,
            "turns.jsonl",
            "participant_id",
            "seen",
            self.open_turns,
            _Q_TURNS_NEW,
            self.turns_rowid,
            f"SELECT u.rowid, {TURNS.select()} FROM turns u WHERE u.rowid IN ({{marks}}) ORDER BY u.rowid",
        )
        if new_turns:
            self.turns_rowid = new_turns[-1]
        # transcript: append-only
        xpid = 1 + TRANSCRIPT.names.index("participant_id")
        for row in t.all(_Q_TRANSCRIPT_NEW, (self.space_id, self.transcript_rowid)):
            add(row[xpid], "transcript.jsonl", TRANSCRIPT.line(row[1:]))
            self.transcript_rowid = row[0]
        # history: append-only
        hpid = 1 + HISTORY.names.index("participant_id")
        for row in t.all(_Q_HISTORY_NEW, (self.space_id, self.history_rowid)):
            add(row[hpid], "history.jsonl", HISTORY.line(row[1:]))
            self.history_rowid = row[0]
        return self._append(out)

    def _follow_changing(
        self,
        t: Tx,
        add: Callable[[str, str, str], None],
        schema: Any,
        file: str,
        owner: str,
        final: str,
        open_rows: dict[int, str],
        new_sql: str,
        after: int,
        reread_sql: str,
    ) -> list[int]:
        """Append the rows of a table whose rows change (deliveries, turns): the
        new ones after ``after``, then a line for each open row that changed
        since its last line (the last line per id wins). Returns the new rowids."""
        pid = 1 + schema.names.index(owner)
        state = 1 + schema.names.index("state")
        new: list[int] = []
        for row in t.all(new_sql, (self.space_id, after)):
            line = schema.line(row[1:])
            add(row[pid], file, line)
            new.append(row[0])
            if row[state] != final:
                open_rows[row[0]] = line
        fresh = set(new)
        for rowids in _chunks([r for r in open_rows if r not in fresh], 500):
            for row in t.all(reread_sql.format(marks=",".join("?" * len(rowids))), rowids):
                line = schema.line(row[1:])
                if open_rows.get(row[0]) != line:
                    add(row[pid], file, line)
                if row[state] == final:
                    open_rows.pop(row[0], None)
                else:
                    open_rows[row[0]] = line
        return new


def _chunks(items: list[int], size: int) -> Iterator[list[int]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _count(t: Tx, space_id: str) -> int:
    total = 0
    for table in (
        "participants",
        "participant_events",
        "messages",
        "claim_journal",
        "deliveries",
        "turns",
        "transcript",
        "history",
    ):
        total += t.one(f"SELECT COUNT(*) FROM {table} WHERE space_id = ?", (space_id,))[0]
    return int(total)


def _snapshot(
    store: Store,
    space_ref: str,
    root: Path,
    now: str | None,
    progress: Progress,
    follow: bool = False,
) -> _Writer:
    with store.read() as t:
        space_id = resolve_id(t, space_ref)
        kind = t.one("SELECT kind FROM spaces WHERE id = ?", (space_id,))[0]
        writer = _Writer(root, space_id, kind, now or store.now_ts(), follow)
        progress.start(_count(t, space_id), f"export {space_id}")
        try:
            writer.write_space(t)
            writer.summary.files += 1
            writer.participants(t, progress)
            writer.log(t, progress)
            writer.board(t, progress)
            writer.mailboxes(t, progress)
        finally:
            progress.finish()
    return writer


def export_space(
    store: Store,
    space_ref: str,
    root: Path | str,
    *,
    now: str | None = None,
    progress: Progress | None = None,
) -> ExportSummary:
    """Write a snapshot of the space in the JSONL layout under ``root``.

    ``now`` (default: the store's clock) decides which claims are live."""
    return _snapshot(store, space_ref, Path(root), now, progress or Progress()).summary


def follow_space(
    store: Store,
    space_ref: str,
    root: Path | str,
    *,
    stop: threading.Event | None = None,
    progress: Progress | None = None,
    on_ready: Callable[[ExportSummary], None] | None = None,
    idle_timeout: float | None = None,
) -> ExportSummary:
    """Snapshot, then append new rows as they commit until the space stops
    (or ``stop`` is set, or ``idle_timeout`` seconds pass without news)."""
    stop = stop or threading.Event()
    root = Path(root)
    with store.read() as t:
        space_id = resolve_id(t, space_ref)
    # The doorbell is bound before the snapshot, so no commit after it is missed.
    with wake.Waiter(store, [wake.space_key(space_id)]) as waiter:
        writer = _snapshot(store, space_id, root, None, progress or Progress(), follow=True)
        if on_ready is not None:
            on_ready(writer.summary)
        quiet = 0.0
        while not stop.is_set():
            with store.read() as t:
                writer.now = store.now_ts()
                appended = writer.poll(t)
                state = t.one("SELECT state FROM spaces WHERE id = ?", (space_id,))[0]
            if state != "running":
                break  # the poll above already read everything committed before the stop
            if appended:
                quiet = 0.0
            rung = waiter.wait(1.0)
            if not rung:
                quiet += 1.0
                if idle_timeout is not None and quiet >= idle_timeout:
                    break
    return writer.summary


# --- Mailbox Protocol layout ----------------------------------------------------------
_SLUG = re.compile(r"[^a-z0-9]+")
SUBJECT_MAX = 72
SLUG_MAX = 40


def subject_of(body: str, urgent: bool = False) -> str:
    """The Subject: the body's first non-blank line, whitespace collapsed, cut at
    72 characters; ``(no subject)`` for a blank body; ``URGENT: `` first if urgent."""
    first = next((ln for ln in body.splitlines() if ln.strip()), "")
    text = " ".join("".join(c if c.isprintable() else " " for c in first).split())
    text = text[:SUBJECT_MAX] or "(no subject)"
    return f"URGENT: {text}" if urgent else text


def slug_of(subject: str) -> str:
    """``subject-slug``: ASCII, lowercase, words joined by '-', at most 40 characters."""
    ascii_text = unicodedata.normalize("NFKD", subject).encode("ascii", "ignore").decode()
    slug = _SLUG.sub("-", ascii_text.lower()).strip("-")[:SLUG_MAX].strip("-")
    return slug or "message"


def header_value(value: str) -> str:
    """A header value on one line: control characters become spaces."""
    return "".join(c if c.isprintable() else " " for c in value)


def mail_text(to: str, sender: str, subject: str, date: str, body: str) -> str:
    return (
        f"To: {header_value(to)}\nFrom: {header_value(sender)}\n"
        f"Subject: {header_value(subject)}\nDate: {date}\n---\n{body}"
    )


def mail_file_name(n: int, width: int, subject: str, uid: str) -> str:
    digest = hashlib.sha256(uid.encode()).hexdigest()[:6]
    return f"{n:0{width}d}_{slug_of(subject)}_{digest}.txt"


_MAIL_ROWS = """
SELECT p.address AS owner,
       CASE d.state WHEN 'done' THEN 'sent' WHEN 'quarantine' THEN 'quarantine' ELSE 'inbox' END
         AS folder,
       d.created_at_utc AS at, d.id AS uid, m.sender, m.body, m.urgent
  FROM deliveries d JOIN messages m ON m.id = d.message_id
  JOIN participants p ON p.id = d.recipient_id
 WHERE d.space_id = :space
UNION ALL
SELECT p.address, CASE WHEN m.bcast_no > p.bcast_seen THEN 'inbox' ELSE 'sent' END,
       m.created_at_utc, m.id || '/' || p.id, m.sender, m.body, m.urgent
  FROM messages m JOIN json_each(m.reached) r
  JOIN participants p ON p.space_id = m.space_id AND p.address = r.value
 WHERE m.space_id = :space AND m.bcast_no IS NOT NULL
UNION ALL
SELECT 'operator', 'inbox', m.created_at_utc, m.id, m.sender, m.body, m.urgent
  FROM messages m
 WHERE m.space_id = :space AND m.kind <> 'seen' AND m.reached LIKE '%"operator"%'
   AND EXISTS (SELECT 1 FROM json_each(m.reached) r WHERE r.value = 'operator')
"""
OPERATOR_FOLDER = "operator"


def export_mailbox(
    store: Store,
    space_ref: str,
    root: Path | str,
    *,
    progress: Progress | None = None,
) -> ExportSummary:
    """Write the space as a Mailbox Protocol tree under ``root/mail/``.

    ``mail/dir/<id>.txt`` for every participant that has not left;
    ``mail/<id>/inbox/`` its waiting mail (ready or processing deliveries,
    unread broadcasts), ``mail/<id>/sent/`` the mail it has processed (done
    deliveries, broadcasts read: the protocol's "archive after reading"),
    ``mail/<id>/quarantine/`` quarantined deliveries, ``mail/<id>/drafts/``
    empty; ``mail/operator/inbox/`` what was sent to the operator."""
    progress = progress or Progress()
    root = Path(root)
    mail = inside(root, "mail")
    if mail.exists() and any(mail.iterdir()):
        raise errors.Conflict(
            f"{mail} already exists and is not empty: export the mailbox layout into an empty root"
        )
    make_dirs(root, "mail", "dir")
    with store.read() as t:
        space_id = resolve_id(t, space_ref)
        kind = t.one("SELECT kind FROM spaces WHERE id = ?", (space_id,))[0]
        summary = ExportSummary(
            space=space_id, kind=kind, layout="mailbox", root=str(root), dir=str(mail)
        )
        for address, status, role, agent, archetype, task in t.all(
            "SELECT address, status, role, agent, archetype, task FROM participants "
            "WHERE space_id = ? ORDER BY joined_at_utc, id",
            (space_id,),
        ):
            name = safe_name(address)
            for sub in ("inbox", "drafts", "sent"):
                make_dirs(root, "mail", name, sub)
            summary.participants += 1
            if status != "left":
                text = (
                    f"id: {header_value(address)}\nrole: {header_value(role or agent)}\n"
                    f"archetype: {header_value(archetype or '')}\n"
                    f"task: {header_value(task or '')}\n"
                )
                write_text_atomic(inside(root, "mail", "dir", name + ".txt"), text)
                summary.files += 1
        params = {"space": space_id}
        counts: dict[tuple[str, str], int] = {
            (r[0], r[1]): r[2]
            for r in t.all(
                f"SELECT owner, folder, COUNT(*) FROM ({_MAIL_ROWS}) GROUP BY owner, folder",
                params,
            )
        }
        progress.start(sum(counts.values()), f"export {space_id} (mailbox)")
        current: tuple[str, str] | None = None
        n = width = 0
        folder_path = mail
        for owner, folder, at, uid, sender, body, urgent in _fetch(
            t, f"{_MAIL_ROWS} ORDER BY 1, 2, 3, 4", params
        ):
            if (owner, folder) != current:
                current = (owner, folder)
                n, width = 0, max(2, len(str(counts.get(current, 0))))
                folder_path = make_dirs(root, "mail", safe_name(owner), folder)
            n += 1
            subject = subject_of(body, bool(urgent))
            name = mail_file_name(n, width, subject, f"{uid}:{owner}")
            write_text_atomic(
                inside(folder_path, name), mail_text(owner, sender, subject, at, body)
            )
            summary.files += 1
            summary.deliveries += 1
            progress.advance(1)
        progress.finish()
        summary.messages = t.one("SELECT COUNT(*) FROM messages WHERE space_id = ?", (space_id,))[0]
    return summary


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
        "mailboxes/broadcast.jsonl",
        "mailboxes/cursors.jsonl",
        "mailboxes/<address>/inbox.jsonl",
        "mailboxes/<address>/turns.jsonl",
        "mailboxes/<address>/transcript.jsonl",
        "mailboxes/<address>/history.jsonl",
    ]


__all__ = [
    "SPECS",
    "ExportSummary",
    "Field",
    "Progress",
    "Spec",
    "export_mailbox",
    "export_space",
    "follow_space",
    "space_parts",
    "subject_of",
]
