"""Where an export's bytes go: one space folder below the export root.

``SpaceFolder`` creates every path through ``broker.store.filenames`` (one safe
component per name, re-checked inside the root with symlinks resolved), writes
snapshot files atomically, appends lines while following, and, for a purge,
keeps the SHA-256 and line count of every file it wrote so the export can be
read back and compared (``verify``). ``Progress`` and ``ExportSummary`` are
shared by the space and the mailbox layouts.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from broker import errors
from broker.store.filenames import (
    atomic_writer,
    inside,
    make_dirs,
    read_nofollow,
    write_text_atomic,
)
from broker.store.runfiles import create_file, fsync_path

LOCK_FILE = "log.jsonl.lock"


class Progress(Protocol):
    """Receives progress of long work (the CLI draws a bar on stderr)."""

    def start(self, total: int, label: str) -> None: ...

    def advance(self, n: int) -> None: ...

    def finish(self) -> None: ...


class NoProgress:
    """A ``Progress`` that shows nothing."""

    def start(self, total: int, label: str) -> None:
        pass

    def advance(self, n: int) -> None:
        pass

    def finish(self) -> None:
        pass


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


@dataclass(frozen=True, slots=True)
class FileDigest:
    """What a snapshot wrote to one file: its SHA-256 and line count."""

    sha256: str
    lines: int


class LineFile(Protocol):
    """What snapshot lines are written to."""

    def write(self, text: str, /) -> int: ...


class _Hashing:
    """A text file handle that also hashes what goes through it."""

    __slots__ = ("fh", "hash", "lines")

    def __init__(self, fh: IO[str]) -> None:
        self.fh = fh
        self.hash = hashlib.sha256()
        self.lines = 0

    def write(self, text: str) -> int:
        self.hash.update(text.encode("utf-8", "surrogatepass"))
        self.lines += text.count("\n")
        return self.fh.write(text)


class SpaceFolder:
    """The space's folder of an export root: paths, snapshot files, appends."""

    def __init__(self, root: Path, parts: tuple[str, ...], *, digests: bool = False) -> None:
        self.root = root
        self.parts = parts
        self.dir = make_dirs(root, *parts)
        for sub in (("board", "claims"), ("mailboxes",)):
            make_dirs(root, *parts, *sub)
        self.files = 0
        # relative path -> digest, kept only when asked (a purge verifies them)
        self.digests: dict[str, FileDigest] | None = {} if digests else None
        self.live: dict[str, str] = {}  # live claim file name -> content

    def path(self, *parts: str) -> Path:
        return inside(self.root, *self.parts, *parts)

    def mkdir(self, *parts: str) -> Path:
        return make_dirs(self.root, *self.parts, *parts)

    @contextlib.contextmanager
    def snapshot_file(self, *parts: str) -> Iterator[LineFile]:
        """A file written whole: a temp file renamed into place at the end."""
        with atomic_writer(self.path(*parts)) as fh:
            if self.digests is None:
                yield fh
            else:
                hashing = _Hashing(fh)
                yield hashing
                self.digests["/".join(parts)] = FileDigest(hashing.hash.hexdigest(), hashing.lines)
        self.files += 1

    def document(self, text: str, *parts: str) -> None:
        """A single-document file (``space.json``, a claim file), replaced atomically."""
        write_text_atomic(self.path(*parts), text)
        if self.digests is not None:
            self.digests["/".join(parts)] = FileDigest(
                hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest(),
                text.count("\n"),
            )

    def lock_file(self) -> None:
        """``log.jsonl.lock``: empty; the lock file-based writers take."""
        lock = self.path(LOCK_FILE)
        if not lock.exists():
            os.close(create_file(lock, os.O_WRONLY))
            self.files += 1
        if self.digests is not None:
            self.digests[LOCK_FILE] = FileDigest(hashlib.sha256(b"").hexdigest(), 0)

    def claim_files(self, live: dict[str, str]) -> None:
        """Make ``board/claims/`` hold exactly the live claims' files."""
        folder = self.path("board", "claims")
        for name, text in live.items():
            if self.live.get(name) != text or self.digests is not None:
                self.document(text, "board", "claims", name)
        for name in {*self.live, *(p.name for p in folder.glob("*.json"))} - set(live):
            with contextlib.suppress(FileNotFoundError):
                self.path("board", "claims", name).unlink()
        self.live = live

    def append(self, lines: dict[tuple[str, ...], list[str]]) -> int:
        """Append lines to files (follow); returns how many."""
        n = 0
        for parts, items in lines.items():
            if not items:
                continue
            fd = create_file(self.path(*parts), os.O_WRONLY | os.O_APPEND)
            with open(fd, "a", encoding="utf-8", newline="\n") as fh:
                fh.write("".join(items))
                fh.flush()
            n += len(items)
        return n

    def verify(self) -> None:
        """Read every file this snapshot wrote back from disk and compare its
        SHA-256 with what was written; any other file in the folder is refused
        too, so the folder is exactly the database's picture."""
        if self.digests is None:
            raise RuntimeError("verify() needs a SpaceFolder made with digests=True")
        on_disk = {
            str(p.relative_to(self.dir)): p
            for p in sorted(self.dir.rglob("*"))
            if not p.is_dir() or p.is_symlink()
        }
        extra = sorted(set(on_disk) - set(self.digests))
        if extra:
            raise errors.Conflict(
                f"export check failed: {self.dir} holds files the export did not write "
                f"({', '.join(extra[:5])}); export into an empty folder"
            )
        for rel, want in self.digests.items():
            data = read_nofollow(self.dir / rel)
            got = hashlib.sha256(data).hexdigest()
            if got != want.sha256 or data.count(b"\n") != want.lines:
                raise errors.Conflict(
                    f"export check failed: {rel} in {self.dir} does not match the database "
                    "(changed or cut short after it was written)"
                )

    def sync(self) -> None:
        """Make what the snapshot wrote durable (S46): ``fsync`` every file it
        wrote, then every folder from the deepest up to the export root's
        parent (a file renamed into place, or a folder made, is durable only
        once the folder holding its name is synced)."""
        if self.digests is None:
            raise RuntimeError("sync() needs a SpaceFolder made with digests=True")
        root = self.root.resolve()  # self.dir is below it (``inside``)
        for rel in self.digests:
            fsync_path(self.dir / rel)
        # Every folder of the space's tree (an empty one too), then up to the root's parent.
        folders = [Path(here) for here, _, _ in os.walk(self.dir)]
        folders.sort(key=lambda f: len(f.parts), reverse=True)
        folders += [p for p in self.dir.parents if p.is_relative_to(root.parent)]
        for folder in folders:
            fsync_path(folder)

    def manifest(self) -> str:
        """One digest for the whole export: SHA-256 of the sorted per-file lines."""
        assert self.digests is not None
        text = "".join(f"{rel}\t{d.sha256}\t{d.lines}\n" for rel, d in sorted(self.digests.items()))
        return hashlib.sha256(text.encode()).hexdigest()
