"""What an import reports: every bad line as ``FILE:LINE: problem``, a summary,
and the all-or-nothing rule (``ImportFailed`` unless ``skip_bad``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from broker import errors
from broker.interchange.export.files import Progress

MAX_REPORTED = 1000  # problems kept in the error's fields; all are counted


class ImportFailed(errors.InvalidInput, code="import_failed"):
    """Some lines were bad: nothing was imported. ``problems`` lists them."""


class BadLine(ValueError):
    """One line (or file) is refused; ``line`` is where, when it is not the current one."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


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


class Run:
    """Problems and progress of one import."""

    def __init__(self, source: str, skip_bad: bool, progress: Progress) -> None:
        self.source = source
        self.skip_bad = skip_bad
        self.progress = progress
        self.problems: list[Problem] = []
        self.count = 0  # problems found (all counted, MAX_REPORTED kept)
        self.lines = 0  # lines read

    def bad(self, rel: str, line: int, message: str) -> None:
        """Report line ``line`` of the file ``rel`` (relative to the import root)."""
        self.count += 1
        if len(self.problems) < MAX_REPORTED:
            self.problems.append(Problem(rel, line, message))

    def mark(self) -> tuple[int, int, int]:
        return self.count, len(self.problems), self.lines

    def reset(self, mark: tuple[int, int, int]) -> None:
        """Forget what was reported and read since ``mark`` (a file read again)."""
        self.count, kept, self.lines = mark
        del self.problems[kept:]

    def finish(self, summary: ImportSummary) -> None:
        summary.lines = self.lines
        if not self.count:
            return
        if not self.skip_bad:
            first = "".join(
                c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
                for c in str(self.problems[0])
            )  # file names come from whoever wrote the tree: no control characters (S31)
            raise ImportFailed(
                f"{self.count} bad line(s) in {self.source}, nothing was imported "
                f"(first: {first}); fix them or pass --skip-bad",
                problems=[str(p) for p in self.problems],
                count=self.count,
            )
        summary.skipped = [str(p) for p in self.problems]
