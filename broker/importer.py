"""Import exported spaces back into a store: the JSONL space layout and the
Mailbox Protocol layout (including a live ``mail/`` tree from a file-based swarm).

Everything is imported in ONE write transaction. Each file is streamed line by
line (memory does not grow with the number of messages); every bad line is
reported with its file and line number, and if there is any, nothing is
imported, unless ``skip_bad`` is set, in which case the bad lines are skipped
and reported.

Space layout: rows are recreated exactly (ids, seq, timestamps, outcomes,
queue states, leases, cursors, journals), so export -> import -> export gives
the same bytes. Two things are not carried: token hashes (secrets are never
exported: each participant gets a fresh random token hash, so a run re-joins
to get a new token) and ``participants.waiting``, which the database's
triggers recompute from the imported deliveries. Files that only repeat the
log (``board/posts.jsonl``, ``board/directives.jsonl``,
``mailboxes/broadcast.jsonl``) and the live-claim files are derived and not
read. A space id that already exists in the store is refused.

Mailbox layout: a new space (kind ``kind``) is created; ``mail/dir/<id>.txt``
entries become running participants, other ``mail/<id>/`` folders participants
that left; every ``inbox/`` file becomes a message with a ready delivery,
``sent/`` (processed mail) a done one, ``quarantine/`` a quarantined one;
``drafts/`` are not delivered (counted as skipped); ``mail/operator/inbox/``
files become messages to the operator. Each file is one message, logged in
order of its ``Date:`` header (else the file's modification time), then path.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from broker import errors
from broker.db import Store, Tx
from broker.export import (
    CURSORS,
    DIRECTORY,
    EVENTS,
    HISTORY,
    INBOX,
    JOURNAL,
    KEYS,
    LOG,
    MAILBOX_FILES,
    SPACE,
    TRANSCRIPT,
    TURNS,
    Progress,
    Spec,
)
from broker.ids import fmt_ts, hash_token, new_id, new_token
from broker.paths import safe_name
from broker.spaces import PREFIX

TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")
SPACE_ID = re.compile(r"[a-z0-9_]{1,40}")
_LISTS = frozenset({"to", "reached", "not_reached", "tools"})
MAX_REPORTED = 1000  # problems kept in the error's fields; all are counted


class ImportFailed(errors.InvalidInput):
    """Some lines were bad: nothing was imported. ``problems`` lists them."""

    code = "import_failed"


@dataclass
class Problem:
    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


@dataclass
class ImportSummary:
    layout: str
    source: str
    spaces: list[str] = field(default_factory=list)
    participants: int = 0
    messages: int = 0
    deliveries: int = 0
    journal: int = 0
    lines: int = 0
    skipped: list[str] = field(default_factory=list)
    drafts_skipped: int = 0

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class _Bad(Exception):
    def __init__(self, message: str, line: int = 1) -> None:
        super().__init__(message)
        self.line = line


class _Run:
    """Problems and progress of one import."""

    def __init__(self, root: Path, skip_bad: bool, progress: Progress) -> None:
        self.root = root
        self.skip_bad = skip_bad
        self.progress = progress
        self.problems: list[Problem] = []
        self.count = 0

    def rel(self, path: Path) -> str:
        try:
            return str(path.relative_to(self.root))
        except ValueError:
            return str(path)

    def bad(self, path: Path, line: int, message: str) -> None:
        self.count += 1
        if len(self.problems) < MAX_REPORTED:
            self.problems.append(Problem(self.rel(path), line, message))

    def finish(self, summary: ImportSummary) -> None:
        if not self.count:
            return
        if not self.skip_bad:
            first = self.problems[0]
            raise ImportFailed(
                f"{self.count} bad line(s) in {self.root}, nothing was imported "
                f"(first: {first}); fix them or pass --skip-bad",
                problems=[str(p) for p in self.problems],
                count=self.count,
            )
        summary.skipped = [str(p) for p in self.problems]


def import_dir(
    store: Store,
    path: Path | str,
    *,
    layout: str = "auto",
    skip_bad: bool = False,
    kind: str = "run",
    progress: Progress | None = None,
) -> ImportSummary:
    """Import an exported space layout or a mailbox tree found at ``path``."""
    root = Path(path)
    if not root.is_dir():
        raise errors.InvalidInput(f"{root} is not a folder")
    if layout == "auto":
        layout = detect_layout(root)
    run = _Run(root, skip_bad, progress or Progress())
    if layout == "space":
        return _import_spaces(store, root, run)
    if layout == "mailbox":
        if kind not in PREFIX:
            raise errors.InvalidInput(
                f"unknown space kind {kind!r}: use one of {', '.join(PREFIX)}"
            )
        return _import_mailbox(store, root, kind, run)
    raise errors.InvalidInput(f"unknown layout {layout!r}: space or mailbox")


def detect_layout(root: Path) -> str:
    if (root / "space.json").is_file() or any(
        (root / d).is_dir() for d in ("agentiflows", "runs", "sessions")
    ):
        return "space"
    if (root / "mail").is_dir() or (root / "dir").is_dir():
        return "mailbox"
    raise errors.InvalidInput(
        f"{root} holds neither an exported space (space.json, agentiflows/, runs/, sessions/) "
        "nor a mailbox tree (mail/): pass --layout"
    )


# --- reading and checking lines -------------------------------------------------------
def _lines(run: _Run, path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """The JSON objects of a JSONL file with their line numbers; bad ones are reported."""
    with open(path, "rb") as fh:
        for no, raw in enumerate(fh, 1):
            run.progress.advance(len(raw))
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError:
                run.bad(path, no, "not UTF-8")
                continue
            except json.JSONDecodeError as exc:
                run.bad(path, no, f"not JSON: {exc.msg} (column {exc.colno})")
                continue
            if not isinstance(obj, dict):
                run.bad(path, no, "not a JSON object")
                continue
            yield no, obj


def check(spec: Spec, obj: dict[str, Any], *, sort_keys: bool = False) -> tuple[Any, ...]:
    """The column values of one line, in the spec's imported-field order; raises
    ``_Bad`` naming the first problem."""
    for key in obj:
        if key not in spec.name_set:
            raise _Bad(f"unknown field {key!r}")
    values: list[Any] = []
    for f in spec.fields:
        if f.name not in obj:
            raise _Bad(f"missing field {f.name!r}")
        if not f.imported:
            continue
        v = obj[f.name]
        if v is None:
            if not f.null:
                raise _Bad(f"{f.name} must not be null")
            values.append(None)
            continue
        if f.type in ("str", "ts"):
            if not isinstance(v, str):
                raise _Bad(f"{f.name} must be a string")
            if f.type == "ts" and not TS.fullmatch(v):
                raise _Bad(f"{f.name} must be a UTC time like 2026-01-31T12:00:00.000000Z")
            if f.choices and v not in f.choices:
                raise _Bad(f"{f.name} must be one of {', '.join(f.choices)}, not {v!r}")
        elif f.type == "int":
            if not isinstance(v, int) or isinstance(v, bool):
                raise _Bad(f"{f.name} must be an integer")
        elif f.type == "bool":
            if not isinstance(v, bool):
                raise _Bad(f"{f.name} must be true or false")
            v = int(v)
        elif f.type == "json":
            if f.name in _LISTS and not isinstance(v, list):
                raise _Bad(f"{f.name} must be a list")
            if f.name == "not_reached" and not all(
                isinstance(n, dict)
                and set(n) == {"address", "reason"}
                and all(isinstance(x, str) for x in n.values())
                for n in v
            ):
                raise _Bad("not_reached must hold {address, reason} objects")
            if f.name == "settings" and not isinstance(v, dict):
                raise _Bad("settings must be an object")
            v = json.dumps(v, sort_keys=sort_keys)
        values.append(v)
    return tuple(values)


def _friendly(exc: sqlite3.Error) -> str:
    text = str(exc)
    if "FOREIGN KEY" in text:
        return "refers to a participant, message or space that is not in the import"
    if "UNIQUE" in text:
        return f"duplicate: {text.split(':', 1)[-1].strip()} already exists"
    return f"refused by the database: {text}"


def _columns(spec: Spec) -> list[str]:
    return [f.column for f in spec.fields if f.imported]


def _insert_sql(spec: Spec, *, extra: Sequence[str] = (), upsert: str | None = None) -> str:
    cols = ["space_id", *_columns(spec), *extra]
    sql = f"INSERT INTO {spec.table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
    if upsert:
        target = {c.strip() for c in upsert.split(",")}
        sets = ", ".join(f"{c} = excluded.{c}" for c in _columns(spec) if c not in target)
        sql += f" ON CONFLICT({upsert}) DO UPDATE SET {sets}"
    return sql


_SQL_PARTICIPANT = _insert_sql(DIRECTORY, extra=("token_hash",), upsert="id")
_SQL_EVENT = _insert_sql(EVENTS)
_SQL_MESSAGE = _insert_sql(LOG)
_SQL_KEY = _insert_sql(KEYS, upsert="space_id, key")
_SQL_JOURNAL = _insert_sql(JOURNAL)
_SQL_DELIVERY = _insert_sql(INBOX, upsert="id")
_SQL_TURN = _insert_sql(TURNS, upsert="id")
_SQL_TRANSCRIPT = _insert_sql(TRANSCRIPT)
_SQL_HISTORY = _insert_sql(HISTORY)


# --- space layout ---------------------------------------------------------------------
def find_spaces(root: Path) -> list[Path]:
    """Space folders at ``root``: itself, or the layout's kind folders below it."""
    if (root / "space.json").is_file():
        return [root]
    found = [
        *sorted(root.glob("agentiflows/*/space.json")),
        *sorted(root.glob("runs/*/messages/space.json")),
        *sorted(root.glob("sessions/*/messages/space.json")),
    ]
    return [p.parent for p in found]


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _space_files(folder: Path) -> list[Path]:
    files = [
        folder / "space.json",
        folder / "directory.jsonl",
        folder / "mailboxes" / "cursors.jsonl",
        folder / "participants.jsonl",
        folder / "log.jsonl",
        folder / "board" / "keys.jsonl",
        folder / "board" / "claims.jsonl",
    ]
    for name in MAILBOX_FILES:
        files += sorted((folder / "mailboxes").glob(f"*/{name}"))
    return files


def _import_spaces(store: Store, root: Path, run: _Run) -> ImportSummary:
    folders = find_spaces(root)
    if not folders:
        raise errors.InvalidInput(f"no exported space under {root} (no space.json found)")
    summary = ImportSummary(layout="space", source=str(root))
    run.progress.start(
        sum(_file_size(p) for folder in folders for p in _space_files(folder)), "import"
    )
    try:
        with store.write() as t:
            for folder in folders:
                _import_space(t, folder, run, summary)
            run.finish(summary)
    finally:
        run.progress.finish()
    return summary


def _exec(t: Tx, run: _Run, path: Path, no: int, sql: str, params: Sequence[Any]) -> bool:
    try:
        t.execute(sql, params)
    except sqlite3.Error as exc:
        run.bad(path, no, _friendly(exc))
        return False
    return True


def _import_space(t: Tx, folder: Path, run: _Run, summary: ImportSummary) -> None:
    space_file = folder / "space.json"
    run.progress.advance(_file_size(space_file))
    try:
        obj = json.loads(space_file.read_text(encoding="utf-8"))
        if not isinstance(obj, dict):
            raise _Bad("not a JSON object")
        values = check(SPACE, obj, sort_keys=True)
        space_id = values[0]
        if not SPACE_ID.fullmatch(space_id):
            raise _Bad(f"bad space id {space_id!r}: lowercase letters, digits and '_' only")
        if obj["format"] != 1:
            raise _Bad(f"unknown format {obj['format']!r}: this broker reads format 1")
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        run.bad(space_file, 1, f"not a JSON document: {exc}")
        return
    except _Bad as exc:
        run.bad(space_file, 1, str(exc))
        return
    if t.one("SELECT 1 FROM spaces WHERE id = ?", (space_id,)):
        raise errors.Conflict(
            f"space {space_id} already exists in this store: import into another store "
            "(BROKER_HOME / --url), or leave it",
            space_id=space_id,
        )
    t.execute(
        f"INSERT INTO spaces ({', '.join(_columns(SPACE))}) VALUES "
        f"({', '.join('?' * len(values))})",
        values,
    )
    summary.spaces.append(space_id)
    sid = (space_id,)

    def rows(path: Path, spec: Spec, sql: str, extra: Sequence[Any] = ()) -> int:
        n = 0
        if not path.is_file():
            return 0
        for no, obj in _lines(run, path):
            summary.lines += 1
            try:
                vals = check(spec, obj)
            except _Bad as exc:
                run.bad(path, no, str(exc))
                continue
            if _exec(t, run, path, no, sql, (*sid, *vals, *extra)):
                n += 1
        return n

    # participants first (everything refers to them); a fresh token hash each
    path = folder / "directory.jsonl"
    if path.is_file():
        for no, obj in _lines(run, path):
            summary.lines += 1
            try:
                vals = check(DIRECTORY, obj)
            except _Bad as exc:
                run.bad(path, no, str(exc))
                continue
            fresh = hash_token(new_token())
            if _exec(t, run, path, no, _SQL_PARTICIPANT, (*sid, *vals, fresh)):
                summary.participants += 1
    path = folder / "mailboxes" / "cursors.jsonl"
    if path.is_file():
        for no, obj in _lines(run, path):
            summary.lines += 1
            try:
                pid, seen = check(CURSORS, obj)
            except _Bad as exc:
                run.bad(path, no, str(exc))
                continue
            cur = t.execute(
                "UPDATE participants SET bcast_seen = ? WHERE id = ? AND space_id = ?",
                (seen, pid, space_id),
            )
            if cur.rowcount != 1:
                run.bad(path, no, f"no participant {pid!r} in directory.jsonl")
    rows(folder / "participants.jsonl", EVENTS, _SQL_EVENT)
    summary.messages += rows(folder / "log.jsonl", LOG, _SQL_MESSAGE)
    rows(folder / "board" / "keys.jsonl", KEYS, _SQL_KEY)
    summary.journal += rows(folder / "board" / "claims.jsonl", JOURNAL, _SQL_JOURNAL)
    for path in sorted((folder / "mailboxes").glob("*/inbox.jsonl")):
        summary.deliveries += rows(path, INBOX, _SQL_DELIVERY)
    for path in sorted((folder / "mailboxes").glob("*/turns.jsonl")):
        rows(path, TURNS, _SQL_TURN)
    for path in sorted((folder / "mailboxes").glob("*/transcript.jsonl")):
        rows(path, TRANSCRIPT, _SQL_TRANSCRIPT)
    for path in sorted((folder / "mailboxes").glob("*/history.jsonl")):
        rows(path, HISTORY, _SQL_HISTORY)
    # The counters must be ahead of what the log holds, or the next send collides.
    last_seq, last_bcast = t.one(
        "SELECT last_seq, last_bcast FROM spaces WHERE id = ?", (space_id,)
    )
    top_seq, top_bcast = t.one(
        "SELECT COALESCE(MAX(seq), 0), COALESCE(MAX(bcast_no), 0) FROM messages WHERE space_id = ?",
        (space_id,),
    )
    if top_seq > last_seq:
        run.bad(space_file, 1, f"last_seq {last_seq} is below the log's highest seq {top_seq}")
    if top_bcast > last_bcast:
        run.bad(space_file, 1, f"last_bcast {last_bcast} is below the highest bcast_no {top_bcast}")


# --- mailbox layout -------------------------------------------------------------------
@dataclass
class _Mail:
    at: str
    path: Path
    owner: str
    state: str  # ready | done | quarantine | operator


_FOLDERS = {"inbox": "ready", "sent": "done", "quarantine": "quarantine"}


def parse_mail(text: str) -> tuple[dict[str, str], str, int]:
    """Headers, body and the body's first line number of a Mailbox Protocol
    message. Raises ``_Bad`` (with the line number) on malformed input."""
    headers: dict[str, str] = {}
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line.rstrip("\r") == "---":
            body = "\n".join(lines[i + 1 :])
            for need in ("To", "From"):
                if need not in headers:
                    raise _Bad(f"no {need}: header", 1)
            return headers, body, i + 2
        name, sep, value = line.partition(":")
        if not sep or not name.strip() or " " in name.strip():
            raise _Bad("expected a 'Name: value' header or the '---' line", i + 1)
        headers[name.strip()] = value.strip()
    raise _Bad("no '---' line between the headers and the body", len(lines))


def _mail_root(root: Path) -> Path:
    if (root / "mail").is_dir():
        return root / "mail"
    return root


def _dir_entry(run: _Run, path: Path) -> dict[str, str] | None:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        run.bad(path, 1, "not UTF-8")
        return None
    entry: dict[str, str] = {}
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        key, sep, value = line.partition(":")
        if not sep:
            run.bad(path, no, "expected 'key: value' (id, role, archetype, task)")
            return None
        entry[key.strip().lower()] = value.strip()
    if not entry.get("id"):
        run.bad(path, 1, "no 'id:' line")
        return None
    return entry


def _import_mailbox(store: Store, root: Path, kind: str, run: _Run) -> ImportSummary:
    mail = _mail_root(root)
    summary = ImportSummary(layout="mailbox", source=str(mail))
    now = store.now_ts()
    # the directory
    entries: dict[str, dict[str, str]] = {}
    by_folder: dict[str, str] = {}
    for path in sorted((mail / "dir").glob("*.txt")):
        entry = _dir_entry(run, path)
        if entry is None:
            continue
        if entry["id"] in entries:
            run.bad(path, 1, f"id {entry['id']!r} is registered twice")
            continue
        entries[entry["id"]] = entry
        by_folder[entry["id"]] = by_folder[safe_name(entry["id"])] = entry["id"]
    # the mailboxes: one pass over the headers to order the log (bodies are read later)
    owners: dict[str, str] = {}  # address -> status
    for address in entries:
        owners[address] = "running"
    mails: list[_Mail] = []
    for folder in sorted(p for p in mail.iterdir() if p.is_dir() and p.name != "dir"):
        address = by_folder.get(folder.name) or (
            unquote(folder.name) if "%" in folder.name else folder.name
        )
        operator = address == "operator" and "operator" not in entries
        if not operator:
            owners.setdefault(address, "left")
        summary.drafts_skipped += sum(1 for _ in (folder / "drafts").glob("*.txt"))
        for sub, state in _FOLDERS.items():
            if operator and sub != "inbox":
                continue
            for path in sorted((folder / sub).glob("*.txt")):
                at = _mail_date(run, path)
                if at is not None:
                    mails.append(_Mail(at, path, address, "operator" if operator else state))
    mails.sort(key=lambda m: (m.at, str(m.path)))
    run.progress.start(len(mails), "import mail")
    try:
        with store.write() as t:
            space_id = PREFIX[kind] + new_id().lower()
            t.execute(
                "INSERT INTO spaces (id, kind, state, settings, created_at_utc, updated_at_utc) "
                "VALUES (?, ?, 'running', '{}', ?, ?)",
                (space_id, kind, now, now),
            )
            summary.spaces.append(space_id)
            pids = _mail_participants(t, space_id, owners, entries, now)
            summary.participants = len(pids)
            seq = log_bytes = 0
            for m in mails:
                run.progress.advance(1)
                try:
                    headers, body, _ = parse_mail(m.path.read_text(encoding="utf-8"))
                except UnicodeDecodeError:
                    run.bad(m.path, 1, "not UTF-8")
                    continue
                except _Bad as exc:
                    run.bad(m.path, exc.line, str(exc))
                    continue
                seq += 1
                log_bytes += _mail_message(t, space_id, seq, m, headers, body, pids)
                summary.messages += 1
                summary.deliveries += m.state != "operator"
            t.execute(
                "UPDATE spaces SET last_seq = ?, log_bytes = ? WHERE id = ?",
                (seq, log_bytes, space_id),
            )
            run.finish(summary)
    finally:
        run.progress.finish()
    return summary


def _mail_date(run: _Run, path: Path) -> str | None:
    """The message's time: its Date: header, else the file's modification time."""
    try:
        with open(path, encoding="utf-8", newline="\n") as fh:
            for no, line in enumerate(fh, 1):
                line = line.rstrip("\n")
                if line.rstrip("\r") == "---":
                    break
                name, _, value = line.partition(":")
                if name.strip() == "Date":
                    if not TS.fullmatch(value.strip()):
                        run.bad(
                            path, no, "Date: must be a UTC time like 2026-01-31T12:00:00.000000Z"
                        )
                        return None
                    return value.strip()
    except UnicodeDecodeError:
        run.bad(path, 1, "not UTF-8")
        return None
    from datetime import UTC, datetime

    return fmt_ts(datetime.fromtimestamp(os.stat(path).st_mtime, UTC))


def _mail_participants(
    t: Tx, space_id: str, owners: dict[str, str], entries: dict[str, dict[str, str]], now: str
) -> dict[str, str]:
    pids: dict[str, str] = {}
    for address, status in owners.items():
        entry = entries.get(address, {})
        pid = new_id()
        pids[address] = pid
        agent = address.split(">")[-1].split("#")[0] or address
        t.execute(
            "INSERT INTO participants (id, space_id, address, codename, agent, run_id, role, "
            "archetype, task, is_lead, token_hash, status, joined_at_utc, left_at_utc, "
            "last_seen_utc) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                pid,
                space_id,
                address,
                address,
                agent,
                address,
                entry.get("role") or None,
                entry.get("archetype") or None,
                entry.get("task") or None,
                int(address == "lead"),
                hash_token(new_token()),
                status,
                now,
                now if status == "left" else None,
                now,
            ),
        )
        for event in ("joined", "left") if status == "left" else ("joined",):
            t.execute(
                "INSERT INTO participant_events (id, space_id, participant_id, event, address, "
                "codename, agent, run_id, reason, at_utc) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (
                    new_id(),
                    space_id,
                    pid,
                    event,
                    address,
                    address,
                    agent,
                    address,
                    "imported: not in mail/dir" if event == "left" else None,
                    now,
                ),
            )
    return pids


def _mail_message(
    t: Tx,
    space_id: str,
    seq: int,
    m: _Mail,
    headers: dict[str, str],
    body: str,
    pids: dict[str, str],
) -> int:
    sender = headers["From"]
    kind = "operator" if sender == "operator" else "direct"
    urgent = kind == "operator" and headers.get("Subject", "").startswith("URGENT:")
    recipients = json.dumps([headers["To"]])
    reached = json.dumps(["operator" if m.state == "operator" else m.owner])
    size = len(body.encode("utf-8")) + len(recipients) + len(reached) + len("[]")
    mid = new_id()
    t.execute(
        "INSERT INTO messages (id, space_id, seq, kind, sender, recipients, body, urgent, "
        "reached, not_reached, reached_n, size_bytes, created_at_utc) "
        "VALUES (?,?,?,?,?,?,?,?,?,'[]',1,?,?)",
        (mid, space_id, seq, kind, sender, recipients, body, int(urgent), reached, size, m.at),
    )
    if m.state != "operator":
        t.execute(
            "INSERT INTO deliveries (id, space_id, message_id, recipient_id, state, "
            "created_at_utc, attempts, acked_at_utc, quarantine_reason) VALUES (?,?,?,?,?,?,?,?,?)",
            (
                new_id(),
                space_id,
                mid,
                pids[m.owner],
                m.state,
                m.at,
                0 if m.state == "ready" else 1,
                m.at if m.state == "done" else None,
                "imported from quarantine/" if m.state == "quarantine" else None,
            ),
        )
    return size


__all__ = [
    "ImportFailed",
    "ImportSummary",
    "Problem",
    "check",
    "detect_layout",
    "find_spaces",
    "import_dir",
    "parse_mail",
]
