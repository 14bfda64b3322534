"""Reading an import tree without following symlinks (spec §Export layout).

Every path below the import root is opened one component at a time, relative
to its parent folder's descriptor, with ``O_NOFOLLOW``: a symlink, to a file
or to a folder, is never followed, so nothing outside the tree is read, and a
symlinked file is not read at all (not even one that points inside the tree).
Listing a folder reports its symlinks instead of returning them. The root
itself is what the caller named and may be a symlink.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from broker import errors
from broker.interchange.importer.report import Run

SYMLINK = "a symbolic link: not followed (an import reads only real files inside its folder)"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_NONBLOCK", 0)


class Refused(Exception):
    """A path that is a symlink (or not a regular file) was not opened."""


class Tree:
    """An import folder, read without following symlinks."""

    def __init__(self, root: Path, run: Run) -> None:
        self.root = root
        self.run = run
        try:
            self.fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except NotADirectoryError:
            raise errors.InvalidInput(f"{root} is not a folder") from None

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> Tree:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def rel(parts: tuple[str, ...]) -> str:
        return "/".join(parts)

    @contextlib.contextmanager
    def _dir(self, parts: tuple[str, ...]) -> Iterator[int]:
        """A descriptor of the folder ``parts`` (ELOOP/ENOTDIR if a part is a symlink)."""
        fds: list[int] = []
        fd = self.fd
        try:
            for part in parts:
                fd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                fds.append(fd)
            yield fd
        finally:
            for f in fds:
                os.close(f)

    def kind(self, *parts: str) -> str | None:
        """``file``, ``dir``, ``symlink``, ``other``, or None when it does not
        exist (or a folder on the way is a symlink or missing)."""
        try:
            with self._dir(parts[:-1]) as fd:
                st = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # a folder on the way is a symlink
                return "symlink"
            raise
        if stat.S_ISLNK(st.st_mode):
            return "symlink"
        if stat.S_ISDIR(st.st_mode):
            return "dir"
        return "file" if stat.S_ISREG(st.st_mode) else "other"

    def is_file(self, *parts: str) -> bool:
        return self.kind(*parts) == "file"

    def is_dir(self, *parts: str) -> bool:
        return self.kind(*parts) == "dir"

    def listing(self, *parts: str, report: bool = True) -> list[tuple[str, str]]:
        """``(name, kind)`` of a folder's entries, sorted by name, symlinks left
        out and (``report``) reported; [] if the folder is missing."""
        try:
            with self._dir(parts) as fd, os.scandir(fd) as entries:
                found = []
                for e in entries:
                    if e.is_symlink():
                        kind = "symlink"
                    elif e.is_dir(follow_symlinks=False):
                        kind = "dir"
                    else:
                        kind = "file" if e.is_file(follow_symlinks=False) else "other"
                    found.append((e.name, kind))
        except (FileNotFoundError, NotADirectoryError):
            return []
        out = []
        for name, kind in sorted(found):
            if kind == "symlink":
                if report:
                    self.run.bad(self.rel((*parts, name)), 1, SYMLINK)
            else:
                out.append((name, kind))
        return out

    def open(self, *parts: str) -> BinaryIO:
        """A regular file for reading; ``Refused`` if it (or a folder on the way)
        is a symlink or it is not a regular file."""
        try:
            with self._dir(parts[:-1]) as fd:
                fno = os.open(parts[-1], _FILE_FLAGS, dir_fd=fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # a symlink on the way
                raise Refused(SYMLINK) from None
            raise
        if not stat.S_ISREG(os.fstat(fno).st_mode):
            os.close(fno)
            raise Refused("not a regular file: not read")
        os.set_blocking(fno, True)
        return os.fdopen(fno, "rb")

    def size(self, *parts: str) -> int:
        try:
            with self._dir(parts[:-1]) as fd:
                return os.stat(parts[-1], dir_fd=fd, follow_symlinks=False).st_size
        except OSError:
            return 0
