"""One cursor object per exported table: how its lines are read for a
snapshot, and what ``--follow`` appends afterwards.

Three kinds, by how the table's rows behave:

- ``AppendOnly`` (the log, the join/leave journal, the claim journal, the
  transcript, the history): rows never change, so a position (``seq`` or
  rowid) is all there is to remember; the snapshot is a poll from 0.
- ``Changing`` (deliveries, turns): rows move through states until a final
  one (``done``, ``seen``). New rows are found by rowid; the rows not yet final
  are re-read each poll, and a new line is appended when one changed (the last
  line per id wins).
- ``Keyed`` (participants, cursors, board keys): few rows that change in
  place; each poll re-reads them all and appends the lines that changed.

Each cursor sends its lines to an ``Out``: ``SnapshotOut`` writes whole files
atomically, ``AppendOut`` collects lines to append.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

from broker.interchange.export.files import LineFile, SpaceFolder
from broker.interchange.export.lines import BATCH, Spec, rows
from broker.store.sql import Stmt
from broker.store.sqlite import Tx

Parts = tuple[str, ...]
Route = Callable[[Any], list[Parts]]  # a row -> the files its line goes to


class Out:
    """Where a cursor's lines go."""

    def add(self, parts: Parts, line: str) -> None:
        raise NotImplementedError


class SnapshotOut(Out):
    """Writes snapshot files. ``grouped``: rows come grouped by file (one
    participant's mailbox after another), so only one file is open at a time."""

    def __init__(
        self,
        folder: SpaceFolder,
        *,
        grouped: bool = False,
        files: tuple[Parts, ...] = (),
        advance: Callable[[int], None] = lambda n: None,
    ) -> None:
        self.folder = folder
        self.grouped = grouped
        self.stack = contextlib.ExitStack()
        self.open: dict[Parts, LineFile] = {}
        self.advance = advance
        self.lines = 0
        self.written: set[Parts] = set()
        for parts in files:  # written even when empty
            self._file(parts)

    def _file(self, parts: Parts) -> LineFile:
        fh = self.open.get(parts)
        if fh is None:
            if self.grouped:
                self.stack.close()
                self.open.clear()
            fh = self.open[parts] = self.stack.enter_context(self.folder.snapshot_file(*parts))
            self.written.add(parts)
        return fh

    def touch(self, parts: Parts) -> None:
        """Write ``parts`` even if no line goes to it (an empty file)."""
        self._file(parts)

    def add(self, parts: Parts, line: str) -> None:
        self._file(parts).write(line)
        self.lines += 1
        if self.lines % BATCH == 0:
            self.advance(BATCH)

    def close(self) -> None:
        self.stack.close()
        self.open.clear()
        self.advance(self.lines % BATCH)

    def __enter__(self) -> SnapshotOut:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.close()
        else:
            self.stack.__exit__(*exc)  # type: ignore[arg-type]


class AppendOut(Out):
    """Collects lines to append (follow); ``flush`` writes them."""

    def __init__(self, folder: SpaceFolder) -> None:
        self.folder = folder
        self.pending: dict[Parts, list[str]] = {}
        self.count = 0
        self.written = 0

    def add(self, parts: Parts, line: str) -> None:
        self.pending.setdefault(parts, []).append(line)
        self.count += 1
        if self.count >= BATCH:
            self.flush()

    def flush(self) -> int:
        self.written += self.folder.append(self.pending)
        self.pending, self.count = {}, 0
        return self.written


class AppendOnly:
    """A table whose rows never change, followed by a position column.

    Its snapshot is a poll from 0, unless it has its own snapshot statement
    (the per-participant files want their rows grouped by participant)."""

    def __init__(
        self,
        spec: Spec,
        stmt: Stmt,
        route: Route,
        position: str = "_rowid",
        snapshot_stmt: Stmt | None = None,
    ) -> None:
        self.spec = spec
        self.stmt = stmt
        self.route = route
        self.position = position
        self.snapshot_stmt = snapshot_stmt
        self.after = 0
        self.count = 0  # lines written so far

    def _write(self, t: Tx, stmt: Stmt, params: dict[str, Any], out: Out) -> Any:
        line_of, route = self.spec.line, self.route
        row = None
        for row in rows(t, stmt, params, self.spec):
            line = line_of(row)
            for parts in route(row):
                out.add(parts, line)
            self.count += 1
        return row  # the last one

    def snapshot(self, t: Tx, space: str, out: Out, *, track: bool = False) -> None:
        """Every row (``after`` is then set by the caller, from the same snapshot);
        ``track`` is moot: these rows never change."""
        if self.snapshot_stmt is None:
            self.poll(t, space, out)
        else:
            self._write(t, self.snapshot_stmt, {"space_id": space}, out)

    def poll(self, t: Tx, space: str, out: Out) -> None:
        """Write every row after the position."""
        last = self._write(t, self.stmt, {"space_id": space, "after": self.after}, out)
        if last is not None:
            self.after = last[self.position]


class Changing:
    """A table whose rows change state until a final one (deliveries, turns)."""

    def __init__(
        self,
        spec: Spec,
        stmts: tuple[Stmt, Stmt, Stmt],  # snapshot, new after a rowid, re-read by rowids
        route: Route,
        final: str,
    ) -> None:
        self.spec = spec
        self.snapshot_stmt, self.new_stmt, self.reread_stmt = stmts
        self.route = route
        self.final = final
        self.after = 0
        self.open: dict[int, str] = {}  # rowid -> last line, for rows not yet final
        self.count = 0

    def snapshot(self, t: Tx, space: str, out: Out, *, track: bool) -> None:
        """Every row, grouped by owner; ``track``: remember the rows not final yet."""
        for row in rows(t, self.snapshot_stmt, {"space_id": space}, self.spec):
            line = self.spec.line(row)
            for parts in self.route(row):
                out.add(parts, line)
            if track and row["state"] != self.final:
                self.open[row["_rowid"]] = line
            self.count += 1

    def poll(self, t: Tx, space: str, out: Out) -> None:
        """New rows, then a line for each open row that changed since its last line."""
        fresh: set[int] = set()
        for row in rows(t, self.new_stmt, {"space_id": space, "after": self.after}, self.spec):
            self._emit(row, self.spec.line(row), out)
            fresh.add(row["_rowid"])
            self.after = row["_rowid"]
            self.count += 1
        stale = [r for r in self.open if r not in fresh]
        for i in range(0, len(stale), BATCH):
            params = {"rowids": json.dumps(stale[i : i + BATCH])}
            for row in rows(t, self.reread_stmt, params, self.spec):
                line = self.spec.line(row)
                if self.open.get(row["_rowid"]) != line:
                    self._emit(row, line, out)

    def _emit(self, row: Any, line: str, out: Out) -> None:
        for parts in self.route(row):
            out.add(parts, line)
        if row["state"] == self.final:
            self.open.pop(row["_rowid"], None)
        else:
            self.open[row["_rowid"]] = line


class Keyed:
    """A small table re-read whole: a line is appended when a key's line changed."""

    def __init__(self, spec: Spec, stmt: Stmt, key: str, parts: Parts) -> None:
        self.spec = spec
        self.stmt = stmt
        self.key = key
        self.parts = parts
        self.last: dict[str, str] = {}
        self.track = False  # remember lines (follow) or not (one snapshot)

    def poll(
        self,
        t: Tx,
        space: str,
        out: Out,
        *,
        snapshot: bool = False,
        each: Callable[[Any], None] | None = None,
    ) -> None:
        """Write the lines that changed (every line for a snapshot); ``each`` sees every row."""
        for row in rows(t, self.stmt, {"space_id": space}, self.spec):
            line = self.spec.line(row)
            key = row[self.key]
            if snapshot or self.last.get(key) != line:
                out.add(self.parts, line)
                if self.track:
                    self.last[key] = line
            if each is not None:
                each(row)
