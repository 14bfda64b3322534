"""Importing a Mailbox Protocol tree (spec §Mailbox layout), including a live
``mail/`` folder of a file-based swarm, as a new space.

``mail/dir/<id>.txt`` entries become running participants, other
``mail/<id>/`` folders participants that left; every ``inbox/`` file becomes a
``direct`` message with a ready delivery, ``sent/`` (processed mail) a done
one, ``quarantine/`` a quarantined one; ``drafts/`` are not delivered (counted);
``mail/operator/inbox/`` files become messages to the operator. Each file is
one message, logged in order of its ``Date:`` header (else the file's
modification time), then path.

Nothing read from a file carries the operator's authority (S29): a file whose
``From:`` header names the operator, in any spelling (``From:  OPERATOR``,
``from: operator``, full-width or with invisible characters), is refused with
its ``FILE:LINE``; no directory entry or folder may take the address
``operator``. The tree is read without following symlinks (``Tree``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

from broker.ids import fmt_ts, hash_token, message_id, new_id, new_token
from broker.interchange.export.lines import DIRECTORY
from broker.interchange.export.mailbox import (
    OPERATOR_FOLDER,
    MailFormatError,
    header_name,
    parse_mail,
)
from broker.interchange.importer.checks import (
    MAX_TO,
    check_mailbox_address,
    is_time,
    normal_address,
)
from broker.interchange.importer.lines import Inserter
from broker.interchange.importer.report import BadLine, ImportSummary, Run
from broker.interchange.importer.tree import Refused, Tree
from broker.interchange.importer.write import inbox, messages, participants, spaces
from broker.spaces.spaces import PREFIX
from broker.store.filenames import safe_name
from broker.store.groups import MAIL
from broker.store.sqlite import Store, Tx

_FOLDERS = {"inbox": "ready", "sent": "done", "quarantine": "quarantine"}
_BATCH = 200  # mail rows per batch: below Inserter's own flush size
_ARCHETYPES = DIRECTORY.by_name["archetype"].choices
OPERATOR_REFUSED = (
    "From: names the operator: a mail file cannot speak for the operator (S29); "
    "send it with `broker message send`, or pass --skip-bad to leave it out"
)


@dataclass
class _Mail:
    at: str
    parts: tuple[str, ...]
    owner: str
    state: str  # ready | done | quarantine | operator (a message to the operator)
    size: int = 0


def _read_text(tree: Tree, parts: tuple[str, ...]) -> tuple[str, float]:
    """A file's text and modification time; ``BadLine`` if it is a symlink, not
    UTF-8 or holds a NUL."""
    try:
        with tree.open(*parts) as fh:
            data = fh.read()
            mtime = os.fstat(fh.fileno()).st_mtime
    except Refused as exc:
        raise BadLine(str(exc), 1) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise BadLine("not UTF-8", 1) from None
    nul = data.find(b"\x00")
    if nul >= 0:  # S33: PostgreSQL's text cannot hold it; refused on both backends
        raise BadLine("holds a NUL (U+0000) character", data.count(b"\n", 0, nul) + 1)
    return text, mtime


def _dir_entry(tree: Tree, parts: tuple[str, ...]) -> dict[str, str]:
    """A directory file's ``key: value`` lines; ``BadLine`` on a malformed one."""
    text, _ = _read_text(tree, parts)
    entry: dict[str, str] = {}
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise BadLine("expected 'key: value' (id, role, archetype, task)", no)
        entry[key.strip().lower()] = value.strip()
    if not entry.get("id"):
        raise BadLine("no 'id:' line", 1)
    if len(entry["id"]) > 200:
        raise BadLine("id is longer than 200 characters", 1)
    check_mailbox_address(entry["id"])
    if entry.get("archetype") and entry["archetype"] not in _ARCHETYPES:
        raise BadLine(f"archetype must be one of {', '.join(_ARCHETYPES)}", 1)
    if len(entry.get("role", "")) > 200:
        raise BadLine("role is longer than 200 characters", 1)
    return entry


class MailImport:
    """One mail tree into a new space."""

    def __init__(self, store: Store, tree: Tree, kind: str, run: Run) -> None:
        self.store = store
        self.tree = tree
        self.kind = kind
        self.run = run
        self.mail: tuple[str, ...] = ("mail",) if tree.is_dir("mail") else ()
        self.summary = ImportSummary(layout="mailbox", source=str(tree.root.joinpath(*self.mail)))
        self.entries: dict[str, dict[str, str]] = {}
        self.owners: dict[str, str] = {}  # address -> status
        self.mails: list[_Mail] = []

    def bad(self, parts: tuple[str, ...], exc: BadLine) -> None:
        self.run.bad(self.tree.rel(parts), exc.line or 1, str(exc))

    def directory(self) -> dict[str, str]:
        """Read ``mail/dir``; returns folder name -> address."""
        by_folder: dict[str, str] = {}
        for name, kind in self.tree.listing(*self.mail, "dir"):
            parts = (*self.mail, "dir", name)
            if kind != "file" or not name.endswith(".txt"):
                continue
            try:
                entry = _dir_entry(self.tree, parts)
                if entry["id"] in self.entries:
                    raise BadLine(f"id {entry['id']!r} is registered twice", 1)
            except BadLine as exc:
                self.bad(parts, exc)
                continue
            self.entries[entry["id"]] = entry
            self.owners[entry["id"]] = "running"
            by_folder[entry["id"]] = by_folder[safe_name(entry["id"])] = entry["id"]
        return by_folder

    def scan(self) -> None:
        """One pass over the mailboxes: who owns them, and each file's time and
        checks (bodies are read again when they are written)."""
        by_folder = self.directory()
        for folder, kind in self.tree.listing(*self.mail):
            if kind != "dir" or folder == "dir":
                continue
            address = by_folder.get(folder) or (unquote(folder) if "%" in folder else folder)
            operator = folder == OPERATOR_FOLDER
            if not operator:
                try:
                    if not address or len(address) > 200:
                        raise BadLine(
                            "a mailbox folder must name an address of 1 to 200 characters", 1
                        )
                    check_mailbox_address(address)
                except BadLine as exc:
                    self.bad((*self.mail, folder), exc)
                    continue
                self.owners.setdefault(address, "left")
            subs = dict(self.tree.listing(*self.mail, folder))
            if subs.get("drafts") == "dir":
                self.summary.drafts_skipped += sum(
                    1
                    for n, k in self.tree.listing(*self.mail, folder, "drafts", report=False)
                    if k == "file" and n.endswith(".txt")
                )
            for sub, state in _FOLDERS.items():
                if subs.get(sub) != "dir" or (operator and sub != "inbox"):
                    continue
                for name, k in self.tree.listing(*self.mail, folder, sub):
                    if k == "file" and name.endswith(".txt"):
                        self._scan_file((*self.mail, folder, sub, name), address, operator, state)
        self.mails.sort(key=lambda m: (m.at, m.parts))

    def _scan_file(self, parts: tuple[str, ...], address: str, operator: bool, state: str) -> None:
        try:
            text, mtime = _read_text(self.tree, parts)
            headers, body = _checked_mail(text)
        except BadLine as exc:
            self.bad(parts, exc)
            return
        at = headers.get("Date") or fmt_ts(datetime.fromtimestamp(mtime, UTC))
        owner = "operator" if operator else address
        mail = _Mail(at, parts, owner, "operator" if operator else state)
        mail.size = _size(mail, headers, body)
        self.mails.append(mail)

    def write(self, t: Tx) -> None:
        """The space, its participants, then one message (and delivery) per file,
        each file read again (bodies are never all in memory)."""
        now = self.store.now_ts()
        space_id = PREFIX[self.kind] + new_id().lower()
        space = {
            "id": space_id,
            "kind": self.kind,
            "state": "running",
            "settings": "{}",
            "last_seq": len(self.mails),
            "last_bcast": 0,
            "log_bytes": sum(m.size for m in self.mails),
            "created_at_utc": now,
            "updated_at_utc": now,
        }
        spaces.insert_rows(t, [space])
        self.summary.spaces.append(space_id)
        pids = self._participants(t, space_id, now)
        ins_m = Inserter(t, self.run, messages.restore_rows, "")
        ins_d = Inserter(t, self.run, inbox.insert_rows, "")
        seq = 0
        for m in self.mails:
            self.run.progress.advance(1)
            try:
                text, _ = _read_text(self.tree, m.parts)
                headers, body = _checked_mail(text)
                row = _message_row(space_id, seq + 1, m, headers, body)
                if row["size_bytes"] != m.size:
                    raise BadLine("the file changed while it was being imported", 1)
            except BadLine as exc:
                self.bad(m.parts, exc)
                continue
            seq += 1
            rel = self.tree.rel(m.parts)
            ins_m.add(1, row, rel)
            if m.state != "operator":
                ins_d.add(1, _delivery_row(row, pids[m.owner], m), rel)
            if len(ins_m.pending) >= _BATCH:
                ins_m.flush()  # the deliveries refer to the messages: these first
                ins_d.flush()
        self.summary.messages = ins_m.flush()
        self.summary.deliveries = ins_d.flush()

    def _participants(self, t: Tx, space_id: str, now: str) -> dict[str, str]:
        people, events = [], []
        pids: dict[str, str] = {}
        for address, status in self.owners.items():
            entry = self.entries.get(address, {})
            pid = pids[address] = new_id()
            agent = address.split(">")[-1].split("#")[0] or address
            people.append(_participant_row(pid, space_id, address, agent, status, entry, now))
            for event in ("joined", "left") if status == "left" else ("joined",):
                events.append(
                    {
                        "id": new_id(),
                        "space_id": space_id,
                        "participant_id": pid,
                        "event": event,
                        **_identity(address, agent),
                        "reason": "imported: not in mail/dir" if event == "left" else None,
                        "at_utc": now,
                    }
                )
        participants.insert_rows(t, people)
        participants.insert_events(t, events)
        self.summary.participants = len(pids)
        return pids


def _checked_mail(text: str) -> tuple[dict[str, str], str]:
    """Headers and body of a message file, checked; ``BadLine`` with the line."""
    try:
        headers, body, _ = parse_mail(text)
    except MailFormatError as exc:
        raise BadLine(str(exc), exc.line) from None
    if normal_address(headers["From"]) == "operator":
        raise BadLine(OPERATOR_REFUSED, _header_line(text, "From"))
    if not headers["From"] or len(headers["From"]) > 200:
        raise BadLine(
            "From: must name an address of 1 to 200 characters", _header_line(text, "From")
        )
    if not headers["To"] or len(headers["To"]) > MAX_TO:
        raise BadLine(f"To: must hold 1 to {MAX_TO} characters", _header_line(text, "To"))
    date = headers.get("Date")
    if date is not None and not is_time(date):
        raise BadLine(
            "Date: must be a UTC time like 2026-01-31T12:00:00.000000Z", _header_line(text, "Date")
        )
    return headers, body


def _header_line(text: str, name: str) -> int:
    for no, line in enumerate(text.split("\n"), 1):
        if header_name(line.partition(":")[0]) == name:
            return no
    return 1


def _lists(m: _Mail, headers: dict[str, str]) -> tuple[str, str]:
    """The message's ``to`` forms and who it reached, as stored (JSON)."""
    return json.dumps([headers["To"]]), json.dumps(
        ["operator" if m.state == "operator" else m.owner]
    )


def _size(m: _Mail, headers: dict[str, str], body: str) -> int:
    """Bytes counted toward ``log_max_mb``, as a send counts them."""
    recipients, reached = _lists(m, headers)
    return len(body.encode("utf-8")) + len(recipients) + len(reached) + len("[]")


def _message_row(
    space_id: str, seq: int, m: _Mail, headers: dict[str, str], body: str
) -> dict[str, Any]:
    recipients, reached = _lists(m, headers)
    return {
        "id": message_id(seq),
        "space_id": space_id,
        "seq": seq,
        "kind": "direct",  # never "operator": a file does not carry that authority (S29)
        "sender": headers["From"],
        "recipients": recipients,
        "body": body,
        "urgent": 0,
        "via": None,
        "ref": None,
        "reached": reached,
        "not_reached": "[]",
        "reached_n": 1,
        "bcast_no": None,
        "idempotency_key": None,
        "size_bytes": _size(m, headers, body),
        "created_at_utc": m.at,
        **dict.fromkeys(MAIL),  # a mail file carries none of a message's mail attributes
    }


def _delivery_row(message: dict[str, Any], pid: str, m: _Mail) -> dict[str, Any]:
    return {
        "id": new_id(),
        "space_id": message["space_id"],
        "message_id": message["id"],
        "recipient_id": pid,
        "state": m.state,
        "created_at_utc": m.at,
        "attempts": 0 if m.state == "ready" else 1,
        "lease_token": None,
        "lease_owner": None,
        "lease_expires_at": None,
        "acked_at_utc": m.at if m.state == "done" else None,
        "last_error": None,
        "quarantine_reason": "imported from quarantine/" if m.state == "quarantine" else None,
    }


def _identity(address: str, agent: str) -> dict[str, Any]:
    """Who an imported address is, in a participant row and its events alike: its
    own codename and run id, no step, no parent."""
    return {
        "address": address,
        "codename": address,
        "agent": agent,
        "run_id": address,
        "step": None,
        "parent": None,
    }


def _participant_row(
    pid: str,
    space_id: str,
    address: str,
    agent: str,
    status: str,
    entry: dict[str, str],
    now: str,
) -> dict[str, Any]:
    return {
        "id": pid,
        "space_id": space_id,
        **_identity(address, agent),
        "role": entry.get("role") or None,
        "archetype": entry.get("archetype") or None,
        "task": entry.get("task") or None,
        "is_lead": int(address == "lead"),
        "messaging": 1,
        "tools": None,
        "token_hash": hash_token(new_token()),
        "status": status,
        "bcast_seen": 0,
        "waiting": 0,
        "pid": None,
        "joined_at_utc": now,
        "left_at_utc": now if status == "left" else None,
        # Never seen in this store: nobody holds its (fresh, unknown) token, so
        # the agent re-joins its address at once, as from a gone holder (S27).
        "last_seen_utc": NEVER_SEEN,
        "contact_policy": None,
        "contact_allow": None,
    }


NEVER_SEEN = "1970-01-01T00:00:00.000000Z"


def import_mailbox(
    store: Store, tree: Tree, kind: str, run: Run, tx: Tx | None = None
) -> ImportSummary:
    """Import the mail tree at ``tree`` as a new space of ``kind``, all or nothing."""
    job = MailImport(store, tree, kind, run)
    job.scan()
    run.progress.start(len(job.mails), "import mail")
    try:
        with store.write(tx) as t:
            job.write(t)
            run.finish(job.summary)
    finally:
        run.progress.finish()
    return job.summary
