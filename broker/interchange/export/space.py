"""The space layout (spec §Export layout): a snapshot, and ``follow``.

A snapshot is read in one read transaction (one consistent picture of the
space) and streamed row by row, so memory does not grow with the number of
messages; each file is written to a temp file and renamed into place.
``follow`` keeps the files current as rows commit: it only appends lines (a
later line for the same id supersedes an earlier one in the files of rows that
change: directory, cursors, keys, inboxes, turns) and rewrites only the
single-document files (``space.json``, ``board/claims/*.json``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker.delivery import wake
from broker.interchange.export import lines
from broker.interchange.export.cursors import (
    AppendOnly,
    AppendOut,
    Changing,
    Keyed,
    Out,
    Parts,
    SnapshotOut,
)
from broker.interchange.export.files import ExportSummary, NoProgress, Progress, SpaceFolder
from broker.spaces.spaces import resolve_id
from broker.store.filenames import os_errors, safe_name
from broker.store.sql import stmts
from broker.store.sqlite import Store, Tx

_Q = stmts(
    "export",
    "space_kind",
    "space",
    "log",
    "events",
    "directory",
    "cursors",
    "keys",
    "reservations",
    "journal",
    "inbox",
    "inbox_new",
    "inbox_reread",
    "turns",
    "turns_new",
    "turns_reread",
    "transcript",
    "transcript_new",
    "history",
    "history_new",
    "positions",
    "row_count",
)
_LOG_FILES: tuple[Parts, ...] = (
    ("log.jsonl",),
    ("board", "posts.jsonl"),
    ("board", "directives.jsonl"),
    ("mailboxes", "broadcast.jsonl"),
)


class SpaceExport:
    """Writes one space's layout: the snapshot, then (``follow``) what changed."""

    def __init__(
        self, store: Store, folder: SpaceFolder, space: str, kind: str, follow: bool
    ) -> None:
        self.store = store
        self.folder = folder
        self.space = space
        self.now = store.now_ts()  # which claims are live
        self.following = follow
        self.folders: dict[str, str] = {}  # participant id -> mailbox folder name
        self.addresses: dict[str, str] = {}  # participant id -> address
        self.space_text = ""
        self.summary = ExportSummary(
            space=space, kind=kind, layout="space", root=str(folder.root), dir=str(folder.dir)
        )
        self.log = AppendOnly(lines.LOG, _Q["log"], _log_route, position="seq")
        self.events = AppendOnly(lines.EVENTS, _Q["events"], lambda r: [("participants.jsonl",)])
        self.journal = AppendOnly(
            lines.JOURNAL, _Q["journal"], lambda r: [("board", "claims.jsonl")]
        )
        self.transcript = AppendOnly(
            lines.TRANSCRIPT,
            _Q["transcript_new"],
            self._route("participant_id", "transcript.jsonl"),
            snapshot_stmt=_Q["transcript"],
        )
        self.history = AppendOnly(
            lines.HISTORY,
            _Q["history_new"],
            self._route("participant_id", "history.jsonl"),
            snapshot_stmt=_Q["history"],
        )
        self.inbox = Changing(
            lines.INBOX,
            (_Q["inbox"], _Q["inbox_new"], _Q["inbox_reread"]),
            self._route("recipient_id", "inbox.jsonl", address="recipient"),
            final="done",
        )
        self.turns = Changing(
            lines.TURNS,
            (_Q["turns"], _Q["turns_new"], _Q["turns_reread"]),
            self._route("participant_id", "turns.jsonl"),
            final="seen",
        )
        self.directory = Keyed(lines.DIRECTORY, _Q["directory"], "id", ("directory.jsonl",))
        self.cursors = Keyed(
            lines.CURSORS, _Q["cursors"], "participant_id", ("mailboxes", "cursors.jsonl")
        )
        self.keys = Keyed(lines.KEYS, _Q["keys"], "key", ("board", "keys.jsonl"))
        self.reservations = Keyed(
            lines.RESERVATIONS, _Q["reservations"], "token", ("board", "reservations.jsonl")
        )
        for keyed in (self.directory, self.cursors, self.keys, self.reservations):
            keyed.track = follow

    # --- mailbox folders --------------------------------------------------------------
    def mailbox(self, pid: str, address: str) -> str:
        """The mailbox folder name of a participant (created on first use)."""
        name = self.folders.get(pid)
        if name is None:
            self.addresses.setdefault(pid, address)
            name = self.folders[pid] = safe_name(address)
            self.folder.mkdir("mailboxes", name)
        return name

    def _route(
        self, owner: str, file: str, *, address: str | None = None
    ) -> Callable[[Any], list[Parts]]:
        def route(row: Any) -> list[Parts]:
            pid = row[owner]
            # A row whose participant is missing (foreign keys make it impossible):
            # its folder is named by the participant id.
            where = row[address] if address else self.addresses.get(pid, pid)
            return [("mailboxes", self.mailbox(pid, where), file)]

        return route

    # --- snapshot ---------------------------------------------------------------------
    def snapshot(self, t: Tx, progress: Progress) -> None:
        self.write_space(t)
        self._participants(t, progress)
        with SnapshotOut(self.folder, files=_LOG_FILES, advance=progress.advance) as out:
            self.log.poll(t, self.space, out)
        self.summary.messages = self.log.count
        self.folder.lock_file()
        self._board(t, progress)
        self._mailboxes(t, progress)
        self.summary.files = self.folder.files + 1

    def _participants(self, t: Tx, progress: Progress) -> None:
        def each(row: Any) -> None:
            self.mailbox(row["id"], row["address"])
            self.summary.participants += 1

        with SnapshotOut(self.folder, files=(("directory.jsonl",),)) as out:
            self.directory.poll(t, self.space, out, snapshot=True, each=each)
        with SnapshotOut(self.folder, files=(("mailboxes", "cursors.jsonl"),)) as out:
            self.cursors.poll(t, self.space, out, snapshot=True)
        progress.advance(self.summary.participants)
        with SnapshotOut(
            self.folder, files=(("participants.jsonl",),), advance=progress.advance
        ) as out:
            self.events.poll(t, self.space, out)

    def _board(self, t: Tx, progress: Progress) -> None:
        with SnapshotOut(self.folder, files=(("board", "keys.jsonl"),)) as out:
            self._keys(t, out, snapshot=True)
        with SnapshotOut(self.folder, files=(("board", "reservations.jsonl"),)) as out:
            self.reservations.poll(t, self.space, out, snapshot=True)
        with SnapshotOut(
            self.folder, files=(("board", "claims.jsonl"),), advance=progress.advance
        ) as out:
            self.journal.poll(t, self.space, out)
        self.summary.journal = self.journal.count

    def _keys(self, t: Tx, out: Out, *, snapshot: bool) -> None:
        live: dict[str, str] = {}

        def each(row: Any) -> None:
            expires = row["lease_expires_at"]
            if row["holder"] is not None and expires is not None and expires > self.now:
                live[safe_name(row["key"]) + ".json"] = lines.KEYS.document(row)

        self.keys.poll(t, self.space, out, snapshot=snapshot, each=each)
        self.folder.claim_files(live)
        self.summary.live_claims = len(live)

    def _mailboxes(self, t: Tx, progress: Progress) -> None:
        track = self.following
        cursors: tuple[tuple[Changing | AppendOnly, str], ...] = (
            (self.inbox, "inbox.jsonl"),
            (self.turns, "turns.jsonl"),
            (self.transcript, "transcript.jsonl"),
            (self.history, "history.jsonl"),
        )
        for cursor, file in cursors:
            with SnapshotOut(self.folder, grouped=True, advance=progress.advance) as out:
                cursor.snapshot(t, self.space, out, track=track)
                self._empty_mailbox_files(out, file)
        self.summary.deliveries = self.inbox.count
        # Follow picks up after the last row of each table in this snapshot.
        where = t.one(_Q["positions"], {"space_id": self.space})
        self.inbox.after, self.turns.after = where["deliveries"], where["turns"]
        self.transcript.after, self.history.after = where["transcript"], where["history"]

    def _empty_mailbox_files(self, out: SnapshotOut, file: str) -> None:
        """Every participant has each mailbox file, if only empty."""
        for name in self.folders.values():
            if ("mailboxes", name, file) not in out.written:
                out.touch(("mailboxes", name, file))

    def write_space(self, t: Tx) -> bool:
        text = lines.SPACE.document(t.one(_Q["space"], {"space_id": self.space}))
        if text == self.space_text:
            return False
        self.folder.document(text, "space.json")
        self.space_text = text
        return True

    # --- follow -----------------------------------------------------------------------
    def poll(self, t: Tx) -> int:
        """Append every change committed since the last call; returns lines appended."""
        self.now = self.store.now_ts()
        self.write_space(t)
        out = AppendOut(self.folder)
        before = len(self.folders)

        def each(row: Any) -> None:
            self.mailbox(row["id"], row["address"])

        self.directory.poll(t, self.space, out, each=each)
        for name in list(self.folders.values())[before:]:  # new participants' files
            for file in lines.MAILBOX_FILES:
                self.folder.path("mailboxes", name, file).touch(mode=0o600)
        self.cursors.poll(t, self.space, out)
        self.events.poll(t, self.space, out)
        self.log.poll(t, self.space, out)
        self._keys(t, out, snapshot=False)
        self.reservations.poll(t, self.space, out)
        self.journal.poll(t, self.space, out)
        for cursor in (self.inbox, self.turns, self.transcript, self.history):
            cursor.poll(t, self.space, out)
        appended = out.flush()
        self.summary.participants = len(self.folders)
        self.summary.messages = self.log.count
        self.summary.journal = self.journal.count
        self.summary.deliveries = self.inbox.count
        self.summary.appended_lines += appended
        return appended


def _log_route(row: Any) -> list[Parts]:
    parts: list[Parts] = [("log.jsonl",)]
    kind = row["kind"]
    if kind == "post":
        parts.append(("board", "posts.jsonl"))
    elif kind in ("directive", "retract"):
        parts.append(("board", "directives.jsonl"))
    if row["bcast_no"] is not None:
        parts.append(("mailboxes", "broadcast.jsonl"))
    return parts


def snapshot(
    store: Store,
    t: Tx,
    space_id: str,
    root: Path,
    *,
    now: str | None = None,
    progress: Progress | None = None,
    follow: bool = False,
    digests: bool = False,
) -> SpaceExport:
    """Write the space's snapshot under ``root`` from the read transaction ``t``."""
    progress = progress or NoProgress()
    kind = t.one(_Q["space_kind"], {"space_id": space_id})["kind"]
    folder = SpaceFolder(root, lines.space_parts(kind, space_id), digests=digests)
    writer = SpaceExport(store, folder, space_id, kind, follow)
    if now is not None:
        writer.now = now
    progress.start(t.one(_Q["row_count"], {"space_id": space_id})["total"], f"export {space_id}")
    try:
        writer.snapshot(t, progress)
    finally:
        progress.finish()
    return writer


def export_space(
    store: Store,
    space_ref: str,
    root: str | os.PathLike[str],
    *,
    now: str | None = None,
    progress: Progress | None = None,
) -> ExportSummary:
    """Write a snapshot of the space in the JSONL layout under ``root``.

    ``now`` (default: the store's clock) decides which claims are live."""
    with os_errors(root), store.read() as t:
        space_id = resolve_id(t, space_ref)
        return snapshot(store, t, space_id, Path(root), now=now, progress=progress).summary


def follow_space(
    store: Store,
    space_ref: str,
    root: str | os.PathLike[str],
    *,
    stop: threading.Event | None = None,
    progress: Progress | None = None,
    on_ready: Callable[[ExportSummary], None] | None = None,
    idle_timeout: float | None = None,
) -> ExportSummary:
    """Snapshot, then append new rows as they commit until the space stops
    (or ``stop`` is set, or ``idle_timeout`` seconds pass without news)."""
    stop = stop or threading.Event()
    with os_errors(root):
        with store.read() as t:
            space_id = resolve_id(t, space_ref)
        # The doorbell is bound before the snapshot, so no commit after it is missed.
        with wake.Waiter(store, [wake.space_key(space_id)]) as waiter:
            with store.read() as t:
                writer = snapshot(store, t, space_id, Path(root), progress=progress, follow=True)
            if on_ready is not None:
                on_ready(writer.summary)
            quiet = 0.0
            while not stop.is_set():
                with store.read() as t:
                    appended = writer.poll(t)
                    state = t.one(_Q["space_kind"], {"space_id": space_id})["state"]
                if state != "running":
                    break  # the poll above read everything committed before the stop
                if appended:
                    quiet = 0.0
                if not waiter.wait(1.0):
                    quiet += 1.0
                    if idle_timeout is not None and quiet >= idle_timeout:
                        break
    return writer.summary
