"""Safe file names for exports: any address, key or subject -> one path component.

Exported file and folder names are built from data that other people chose: a
participant's address, a board key, a message subject, an imported file's
header. None of it may steer where a file lands. ``safe_name`` maps *any*
string to a single, harmless path component, and ``inside`` re-checks the
resolved path against the export root before anything is opened, so a name
bug or a symlink planted inside the root cannot write elsewhere either.

The mapping (documented in docs/export.md):

- ASCII letters, digits and ``_ - + = , # @`` are kept; ``.`` is kept except
  at the start (no ``.``/``..``, no hidden files); ``-`` is escaped at the
  start (a name never looks like a command-line option).
- Every other character (``/``, ``\\``, NUL, ``%``, spaces, ``>``, control
  characters, non-ASCII...) becomes ``%XX`` per UTF-8 byte, so the mapping is
  injective and ``urllib.parse.unquote`` gives the original back.
- The empty string is ``%`` (which no non-empty name maps to).
- A result longer than ``MAX_NAME`` bytes is cut (never inside a ``%XX``) and
  ends with ``~`` and 16 hex digits of the SHA-256 of the original, so long
  names stay unique and the file system's 255-byte limit leaves room for
  suffixes (``.json``, ``.tmp-…``). ``~`` is never kept otherwise, so a cut
  name cannot equal an uncut one.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from broker import errors

MAX_NAME = 120  # bytes; NAME_MAX is 255, leave room for suffixes and temp names
_KEEP = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-+=,#@.")
DIR_MODE = 0o700
FILE_MODE = 0o600


def safe_name(name: str, *, max_bytes: int = MAX_NAME) -> str:
    """One safe path component for ``name`` (see the module doc); injective."""
    if name == "":
        return "%"
    out: list[str] = []
    for i, ch in enumerate(name):
        if ch in _KEEP and not (i == 0 and ch in ".-"):
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))
    encoded = "".join(out)
    if len(encoded) <= max_bytes:
        return encoded
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    cut = max_bytes - len(digest) - 1
    head = encoded[:cut]
    pct = head.rfind("%", max(0, cut - 2))
    if pct != -1:
        head = head[:pct]  # never split a %XX escape
    return f"{head}~{digest}"


def inside(root: Path, *parts: str) -> Path:
    """``root / parts...``, refused unless the resolved path stays below ``root``.

    Each part must already be a single component (``safe_name`` output or a
    fixed name of the layout); symlinks are resolved before the check."""
    base = root.resolve()
    for part in parts:
        if part in ("", ".", "..") or "/" in part or "\\" in part or "\0" in part:
            raise errors.InvalidInput(f"refusing unsafe path component {part!r}")
    path = base.joinpath(*parts)
    resolved = path.resolve()
    if resolved != base and not resolved.is_relative_to(base):
        raise errors.InvalidInput(f"refusing to write outside the export root: {path}")
    return path


def make_dirs(root: Path, *parts: str) -> Path:
    """Create ``root/parts...`` (mode 0700) after the ``inside`` check."""
    path = inside(root, *parts)
    path.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    # mkdir(exist_ok) follows a symlink that was planted meanwhile: check again.
    inside(root, *parts)
    return path


@contextlib.contextmanager
def atomic_writer(path: Path, *, fsync: bool = False) -> Iterator[IO[str]]:
    """Write ``path`` through a temp file in the same folder, then rename it into
    place: readers see the old file or the whole new one, never a torn one."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:40]}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            yield fh
            fh.flush()
            if fsync:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


_KINDS = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def not_regular(path: str | os.PathLike[str]) -> str | None:
    """What ``path`` is when it exists and is not a regular file ("a FIFO
    (named pipe)", "a symbolic link", ...), else None. Not followed: a
    symlink is one, whatever it points at."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISREG(mode):
        return None
    return next((kind for test, kind in _KINDS if test(mode)), "not a regular file")


def check_writable_target(path: str | os.PathLike[str], field: str) -> None:
    """Refuse to write (or replace) ``path`` when something other than a
    regular file is there: a device, a FIFO, a socket or a symlink is never
    overwritten, with or without --force (replacing /dev/null, or writing a
    database into a FIFO, is never what the caller meant)."""
    kind = not_regular(path)
    if kind is not None:
        raise errors.InvalidInput(
            f"{path} is {kind}: broker writes only regular files; "
            "give the path of a regular file or of a new one",
            field=field,
        )


def write_text_atomic(path: Path, text: str) -> None:
    with atomic_writer(path, fsync=False) as fh:
        fh.write(text)


def read_nofollow(path: Path) -> bytes:
    """The bytes of ``path``, refusing a symlink as the last component."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


# A path that cannot be one (exit 2), as opposed to a file system that refuses
# the work (permission, read-only, full, I/O error: exit 10).
_BAD_PATH = frozenset(
    {errno.ENOENT, errno.ENOTDIR, errno.EEXIST, errno.EISDIR, errno.ENAMETOOLONG, errno.ELOOP}
)


def os_error(exc: OSError, what: str, path: str | os.PathLike[str]) -> errors.BrokerError:
    """One line for an ``OSError`` met while ``what`` (e.g. "export to") ``path``."""
    where = exc.filename if exc.filename is not None else path
    reason = exc.strerror or str(exc)
    if exc.errno in _BAD_PATH:
        return errors.InvalidInput(f"cannot {what} {where}: {reason}", path=str(where))
    return errors.FileError(f"cannot {what} {where}: {reason}", path=str(where))


@contextlib.contextmanager
def os_errors(path: str | os.PathLike[str], what: str = "export to") -> Iterator[None]:
    """Turn any ``OSError`` inside into a one-line broker error (exit 2 or 10);
    a path with a NUL in it (``ValueError`` from the os module) is bad input."""
    try:
        yield
    except OSError as exc:
        raise os_error(exc, what, path) from exc
    except ValueError as exc:
        if "null" not in str(exc):
            raise
        raise errors.InvalidInput(
            f"cannot {what} {path!r}: a path cannot contain NUL", path=str(path)
        ) from exc
