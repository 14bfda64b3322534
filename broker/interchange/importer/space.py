"""Importing the JSONL space layout (spec §Export layout) back into a store.

Rows are recreated exactly (ids, seq, timestamps, outcomes, queue states,
leases, cursors, journals), so export -> import -> export gives the same bytes.
Token hashes are never exported: each participant gets a fresh random one (a
run re-joins to get a new token); ``participants.waiting`` is recomputed by the
database's triggers from the imported deliveries. Files that repeat the log and
the live-claim files are derived and not read.

Files written by ``--follow`` may hold several lines for one id, the last
winning. Directory, cursors and keys are small and kept in memory by id.
Inboxes and turns can be large: a snapshot's lines come in FIFO order, one per
id, and go straight in; a file whose order breaks (appended lines) is undone
and read again keeping only the last good line per id.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from broker import errors
from broker.board import globs
from broker.ids import hash_token, new_token
from broker.interchange.export.lines import (
    CURSORS,
    DIRECTORY,
    EVENTS,
    FORMATS,
    HISTORY,
    INBOX,
    KEYS,
    LOG,
    MAILBOX_FILES,
    RESERVATIONS,
    SPACE,
    TRANSCRIPT,
    TURNS,
    Spec,
    journal_spec,
)
from broker.interchange.importer.checks import (
    SPACE_ID,
    check,
    check_message,
    check_participant_address,
    parse_line,
)
from broker.interchange.importer.lines import Insert, Inserter, read_lines
from broker.interchange.importer.report import BadLine, ImportSummary, Run
from broker.interchange.importer.tree import SYMLINK, Refused, Tree
from broker.interchange.importer.write import (
    claims,
    history,
    inbox,
    messages,
    participants,
    reservations,
    spaces,
)
from broker.interchange.importer.write import transcript as transcript_rows
from broker.interchange.importer.write import turns as turn_rows
from broker.store.sql import stmt
from broker.store.sqlite import Tx

_EXISTS = stmt("importer.space_exists")
_LOG_TOP = stmt("importer.log_top")
Parts = tuple[str, ...]
Extra = Callable[[dict[str, Any]], None]
_KINDS = (("agentiflows", ()), ("runs", ("messages",)), ("sessions", ("messages",)))


class _Unordered(Exception):
    """A file's lines are not in snapshot order: it was appended to (follow)."""


def find_spaces(tree: Tree) -> list[Parts]:
    """Space folders in the tree: its root, or the layout's kind folders below it."""
    top = tree.kind("space.json")
    if top == "file":
        return [()]
    if top == "symlink":
        tree.run.bad("space.json", 1, SYMLINK)
    found: list[Parts] = []
    for top, tail in _KINDS:
        for name, kind in tree.listing(top):
            parts = (top, name, *tail)
            where = tree.kind(*parts, "space.json") if kind == "dir" else None
            if where == "file":
                found.append(parts)
            elif where == "symlink":
                tree.run.bad(tree.rel((*parts, "space.json")), 1, SYMLINK)
    return found


def space_files(tree: Tree, folder: Parts) -> list[Parts]:
    """The files an import of ``folder`` reads (for the progress bar)."""
    files = [
        (*folder, name)
        for name in ("space.json", "directory.jsonl", "participants.jsonl", "log.jsonl")
    ]
    files += [(*folder, "mailboxes", "cursors.jsonl"), (*folder, "board", "keys.jsonl")]
    files.append((*folder, "board", "claims.jsonl"))
    files.append((*folder, "board", "reservations.jsonl"))
    for name, kind in tree.listing(*folder, "mailboxes", report=False):
        if kind == "dir":
            files += [(*folder, "mailboxes", name, file) for file in MAILBOX_FILES]
    return files


class SpaceImport:
    """One space folder into the write transaction ``t``."""

    def __init__(self, t: Tx, tree: Tree, folder: Parts, run: Run, summary: ImportSummary) -> None:
        self.t = t
        self.tree = tree
        self.folder = folder
        self.run = run
        self.summary = summary
        self.space_id = ""
        self.format = FORMATS[-1]  # space.json's, once read

    def rel(self, *parts: str) -> str:
        return self.tree.rel((*self.folder, *parts))

    def lines(self, *parts: str, again: bool = False) -> Iterator[tuple[int, dict[str, Any]]]:
        return read_lines(self.tree, (*self.folder, *parts), self.run, again=again)

    def run_import(self) -> None:
        if not self.space():
            return
        cursors = self.cursors()
        self.directory(cursors)
        self.append_only(EVENTS, participants.insert_events, "participants.jsonl")
        self.summary.messages += self.append_only(
            LOG, messages.restore_rows, "log.jsonl", extra=check_message
        )
        self.keys()
        self.reservations()
        self.summary.journal += self.append_only(
            journal_spec(self.format), claims.insert_journal, "board", "claims.jsonl"
        )
        boxes = [n for n, k in self.tree.listing(*self.folder, "mailboxes") if k == "dir"]
        for name in boxes:
            self.summary.deliveries += self.changing(INBOX, inbox.insert_rows, name, "inbox.jsonl")
        for name in boxes:
            self.changing(TURNS, turn_rows.insert_rows, name, "turns.jsonl")
        for spec, insert, file in (
            (TRANSCRIPT, transcript_rows.insert_rows, "transcript.jsonl"),
            (HISTORY, history.insert_rows, "history.jsonl"),
        ):
            for name in boxes:
                self.append_only(spec, insert, "mailboxes", name, file)
        self.counters()

    # --- the space and the small tables (kept by id in memory) ------------------------
    def space(self) -> bool:
        rel = self.rel("space.json")
        try:
            with self.tree.open(*self.folder, "space.json") as fh:
                raw = fh.read()
        except Refused as exc:
            self.run.bad(rel, 1, str(exc))
            return False
        self.run.progress.advance(len(raw))
        try:
            obj = parse_line(raw)
            values = check(SPACE, obj)
            if not SPACE_ID.fullmatch(values["id"]):
                raise BadLine(
                    f"bad space id {values['id']!r}: lowercase letters, digits and '_' only"
                )
            if type(obj["format"]) is not int or obj["format"] not in FORMATS:
                known = " and ".join(map(str, FORMATS))
                raise BadLine(
                    f"unknown format {obj['format']!r}: this broker reads formats {known}"
                )
        except BadLine as exc:
            self.run.bad(rel, 1, str(exc))
            return False
        self.space_id = values["id"]
        self.format = obj["format"]
        if self.t.one(_EXISTS, {"space_id": self.space_id}):
            raise errors.Conflict(
                f"space {self.space_id} already exists in this store: import into another "
                "store (BROKER_HOME / --url), or leave it",
                space_id=self.space_id,
            )
        ins = Inserter(self.t, self.run, spaces.insert_rows, rel)
        ins.add(1, values)
        if not ins.flush():
            return False
        self.summary.spaces.append(self.space_id)
        return True

    def cursors(self) -> dict[str, tuple[int, int]]:
        """participant id -> (line, bcast_seen); a later line wins."""
        out: dict[str, tuple[int, int]] = {}
        for no, obj in self.lines("mailboxes", "cursors.jsonl"):
            try:
                values = check(CURSORS, obj)
            except BadLine as exc:
                self.run.bad(self.rel("mailboxes", "cursors.jsonl"), no, str(exc))
                continue
            out[values["id"]] = (no, values["bcast_seen"])
        return out

    def directory(self, cursors: dict[str, tuple[int, int]]) -> None:
        rel = self.rel("directory.jsonl")
        latest: dict[str, tuple[int, dict[str, Any]]] = {}
        for no, obj in self.lines("directory.jsonl"):
            try:
                values = check(DIRECTORY, obj)
                check_participant_address(values["address"])
            except BadLine as exc:
                self.run.bad(rel, no, str(exc))
                continue
            latest[values["id"]] = (no, values)  # a later line supersedes (follow)
        ins = Inserter(self.t, self.run, participants.insert_rows, rel)
        for pid, (no, values) in latest.items():
            values.update(
                space_id=self.space_id,
                token_hash=hash_token(new_token()),  # secrets are never exported
                bcast_seen=cursors.pop(pid, (0, 0))[1],
                waiting=0,  # the triggers count the imported deliveries
            )
            ins.add(no, values)
        self.summary.participants += ins.flush()
        for pid, (no, _) in cursors.items():
            self.run.bad(
                self.rel("mailboxes", "cursors.jsonl"),
                no,
                f"no participant {pid!r} in directory.jsonl",
            )

    def keys(self) -> None:
        rel = self.rel("board", "keys.jsonl")
        latest: dict[str, tuple[int, dict[str, Any]]] = {}
        for no, obj in self.lines("board", "keys.jsonl"):
            try:
                values = check(KEYS, obj)
            except BadLine as exc:
                self.run.bad(rel, no, str(exc))
                continue
            latest[values["key"]] = (no, {**values, "space_id": self.space_id})
        ins = Inserter(self.t, self.run, claims.insert_claims, rel)
        for no, values in latest.values():
            ins.add(no, values)
        ins.flush()

    def reservations(self) -> None:
        """board/reservations.jsonl: the last line of each token wins (a follow
        export appends a grant's line again when it is renewed or ends)."""
        rel = self.rel("board", "reservations.jsonl")
        latest: dict[int, tuple[int, dict[str, Any]]] = {}
        for no, obj in self.lines("board", "reservations.jsonl"):
            try:
                values = check(RESERVATIONS, obj)
                globs.check_pattern(values["pattern"])
            except BadLine as exc:
                self.run.bad(rel, no, str(exc))
                continue
            except errors.InvalidInput as exc:
                self.run.bad(rel, no, exc.message)
                continue
            latest[values["token"]] = (no, {**values, "space_id": self.space_id})
        ins = Inserter(self.t, self.run, reservations.insert_rows, rel)
        for no, values in latest.values():
            ins.add(no, values)
        ins.flush()

    # --- the large tables, streamed ----------------------------------------------------
    def append_only(
        self, spec: Spec, insert: Insert, *parts: str, extra: Extra | None = None
    ) -> int:
        """A file of rows that never change: every good line is one row."""
        rel = self.rel(*parts)
        ins = Inserter(self.t, self.run, insert, rel)
        for no, obj in self.lines(*parts):
            try:
                values = check(spec, obj)
                if extra is not None:
                    extra(values)
            except BadLine as exc:
                self.run.bad(rel, no, str(exc))
                continue
            values["space_id"] = self.space_id
            ins.add(no, values)
        return ins.flush()

    def changing(self, spec: Spec, insert: Insert, box: str, file: str) -> int:
        """An inbox or turns file: straight in when in snapshot order; else undone
        and read again keeping the last good line per id."""
        parts = ("mailboxes", box, file)
        mark = self.run.mark()
        self.t.savepoint()
        try:
            n = self._in_order(spec, insert, parts)
        except _Unordered as exc:
            self.t.rollback_to_savepoint(exc)
            self.run.reset(mark)
            return self._last_line_wins(spec, insert, parts)
        self.t.release_savepoint()
        return n

    def _in_order(self, spec: Spec, insert: Insert, parts: Parts) -> int:
        rel = self.rel(*parts)
        ins = Inserter(self.t, self.run, insert, rel)
        last: tuple[str, str] = ("", "")
        for no, obj in self.lines(*parts):
            try:
                values = check(spec, obj)
            except BadLine as exc:
                self.run.bad(rel, no, str(exc))
                continue
            key = (values["created_at_utc"], values["id"])
            if key <= last:
                raise _Unordered
            last = key
            values["space_id"] = self.space_id
            ins.add(no, values)
        return ins.flush()

    def _last_line_wins(self, spec: Spec, insert: Insert, parts: Parts) -> int:
        # Two passes: the first checks every line and notes the last good one per
        # id (memory: one entry per id of this file); the second writes those.
        rel = self.rel(*parts)
        last: dict[str, int] = {}
        for no, obj in self.lines(*parts):
            try:
                last[check(spec, obj)["id"]] = no
            except BadLine as exc:
                self.run.bad(rel, no, str(exc))
        ins = Inserter(self.t, self.run, insert, rel)
        for no, obj in self.lines(*parts, again=True):
            values = _checked(spec, obj)
            if values is not None and last.get(values["id"]) == no:
                values["space_id"] = self.space_id
                ins.add(no, values)
        return ins.flush()

    def counters(self) -> None:
        """The space's counters must be ahead of what the log holds, or the next
        send collides with an imported row."""
        row = self.t.one(_LOG_TOP, {"space_id": self.space_id})
        rel = self.rel("space.json")
        if row["top_seq"] > row["last_seq"]:
            self.run.bad(
                rel,
                1,
                f"last_seq {row['last_seq']} is below the log's highest seq {row['top_seq']}",
            )
        if row["top_bcast"] > row["last_bcast"]:
            self.run.bad(
                rel,
                1,
                f"last_bcast {row['last_bcast']} is below the highest bcast_no {row['top_bcast']}",
            )


def _checked(spec: Spec, obj: dict[str, Any]) -> dict[str, Any] | None:
    try:
        return check(spec, obj)
    except BadLine:
        return None  # reported in the first pass


def import_spaces(t: Tx, tree: Tree, run: Run, summary: ImportSummary) -> None:
    """Every space folder of the tree, in the write transaction ``t``."""
    folders = find_spaces(tree)
    if not folders and not run.count:
        raise errors.InvalidInput(f"no exported space under {tree.root} (no space.json found)")
    run.progress.start(
        sum(tree.size(*p) for folder in folders for p in space_files(tree, folder)), "import"
    )
    for folder in folders:
        SpaceImport(t, tree, folder, run, summary).run_import()
