"""Reading JSONL files of an import tree, and writing their rows in batches
with every refusal reported as ``FILE:LINE``."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

from broker import errors
from broker.interchange.importer.checks import parse_line
from broker.interchange.importer.report import BadLine, Run
from broker.interchange.importer.tree import Refused, Tree
from broker.store.sqlite import Rows, Tx

FLUSH = 500  # rows per batch insert
Insert = Callable[[Tx, Rows], None]


def read_lines(
    tree: Tree, parts: tuple[str, ...], run: Run, *, again: bool = False
) -> Iterator[tuple[int, dict[str, Any]]]:
    """The JSON objects of a JSONL file with their line numbers; bad lines (and
    a symlinked file) are reported, not returned. A missing file has no lines.
    ``again``: a second read of the file, which neither reports nor counts."""
    rel = tree.rel(parts)
    try:
        fh = tree.open(*parts)
    except FileNotFoundError:
        return
    except Refused as exc:
        if not again:
            run.bad(rel, 1, str(exc))
        return
    with fh:
        for no, raw in enumerate(fh, 1):
            if not again:
                run.progress.advance(len(raw))
            if not raw.strip():
                continue
            try:
                obj = parse_line(raw)
            except BadLine as exc:
                if not again:
                    run.bad(rel, no, str(exc))
                continue
            finally:
                run.lines += not again
            yield no, obj


def friendly(exc: Exception) -> str:
    """A database refusal of one row, in words."""
    text = str(exc)
    if "FOREIGN KEY" in text.upper():  # SQLite says FOREIGN KEY, PostgreSQL foreign key
        return "refers to a participant, message or space that is not in the import"
    if "UNIQUE" in text.upper():
        return f"duplicate: {text.split(':', 1)[-1].strip()} already exists"
    return f"refused by the database: {text}"


class Inserter:
    """Rows for one table, written in batches through the table owner's insert
    function. A batch the database refuses is undone and written again row by
    row, so each refused row is reported with its own line."""

    def __init__(self, t: Tx, run: Run, insert: Insert, rel: str) -> None:
        self.t = t
        self.run = run
        self.insert = insert
        self.rel = rel
        self.pending: list[tuple[int, dict[str, Any], str]] = []
        self.count = 0

    def add(self, no: int, row: dict[str, Any], rel: str | None = None) -> None:
        """Queue ``row`` from line ``no`` (of ``rel``, default the inserter's file)."""
        self.pending.append((no, row, rel or self.rel))
        if len(self.pending) >= FLUSH:
            self.flush()

    def flush(self) -> int:
        if not self.pending:
            return self.count
        t = self.t
        t.savepoint()
        try:
            self.insert(t, [row for _, row, _ in self.pending])
        except (sqlite3.Error, errors.StoreError) as exc:
            t.rollback_to_savepoint(exc)
            for no, row, rel in self.pending:
                # A savepoint per row: PostgreSQL aborts the whole transaction
                # on a refused statement unless it is rolled back to one.
                t.savepoint()
                try:
                    self.insert(t, [row])
                except (sqlite3.Error, errors.StoreError) as exc:
                    t.rollback_to_savepoint(exc)
                    self.run.bad(rel, no, friendly(exc))
                else:
                    t.release_savepoint()
                    self.count += 1
        else:
            t.release_savepoint()
            self.count += len(self.pending)
        self.pending.clear()
        return self.count
