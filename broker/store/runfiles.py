"""Private files (S47): every folder the broker makes is 0700 and every file
0600, whatever the umask (``make_dirs``, ``create_file``); run-time files
(doorbells, lock files) are also this user's, checked, never via a symlink.

A folder made with ``mkdir(mode)`` gets the mode filtered by the umask, and
its missing parents (``parents=True``) get 0777 filtered by it: under umask
000 an export's root and ``runs/`` were 0777. So each folder made here is
made one level at a time and given its mode explicitly, and so is each file.

Doorbell folders and lock files are created by whichever process of the user
comes first and reused by the others, so a path that already exists is normal.
Another local user must not be able to pre-create such a path, or plant a
symlink there, and so make the broker resize, lock or write a file of the
victim's (spec §Storage). So every folder is created 0700 and every file 0600,
files are opened with ``O_NOFOLLOW``, and whatever is found is checked before
use: the right type (``lstat``: a symlink is refused, never followed), owned by
this user, not writable by group or others. A failed check is a ``StoreError``
that names the path, in one line.

Only the last component is checked: the folder holding it is trusted like the
database's own folder (whoever can rename entries there can replace the
database file itself); a shared folder such as ``/tmp`` is safe because its
sticky bit stops others from renaming our entries.
"""

from __future__ import annotations

import errno
import mmap
import os
import stat

from broker import errors

DIR_MODE = 0o700
FILE_MODE = 0o600


def make_dirs(path: str | os.PathLike[str]) -> None:
    """Make ``path`` and its missing parents, each 0700 whatever the umask
    (folders that exist are left as they are: they are not ours)."""
    missing: list[str] = []
    here = os.path.abspath(path)
    while not os.path.isdir(here):
        missing.append(here)
        parent = os.path.dirname(here)
        if parent == here:
            break
        here = parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, DIR_MODE)
        except FileExistsError:
            continue  # made meanwhile by another process: not ours to change
        os.chmod(folder, DIR_MODE)  # mkdir's mode is filtered by the umask


def create_file(path: str | os.PathLike[str], flags: int) -> int:
    """``os.open`` ``path`` (never through a symlink), creating it 0600
    whatever the umask; an existing file is opened as it is."""
    flags |= os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return os.open(path, flags & ~os.O_EXCL)
    os.fchmod(fd, FILE_MODE)  # os.open's mode is filtered by the umask
    return fd


def fsync_path(path: str | os.PathLike[str]) -> None:
    """``fsync`` a file or a folder by its path (never through a symlink): a
    folder's fsync makes the names in it (a rename into place) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def check(path: str, st: os.stat_result, *, folder: bool) -> None:
    """Refuse ``path`` (its ``lstat``/``fstat`` result ``st``) unless it is this
    user's own folder or regular file, not writable by group or others."""
    kind = "folder" if folder else "file"
    if stat.S_ISLNK(st.st_mode):
        raise errors.StoreError(f"refusing {path}: it is a symbolic link, expected a {kind}")
    if folder and not stat.S_ISDIR(st.st_mode) or not folder and not stat.S_ISREG(st.st_mode):
        raise errors.StoreError(f"refusing {path}: it is not a {kind}")
    uid = os.getuid()
    if st.st_uid != uid:
        raise errors.StoreError(
            f"refusing the {kind} {path}: it belongs to uid {st.st_uid}, not to this user (uid {uid})"
        )
    if st.st_mode & 0o022:
        raise errors.StoreError(
            f"refusing the {kind} {path}: it is writable by group or others "
            f"(mode {stat.S_IMODE(st.st_mode):o})"
        )


def private_dir(path: str, *, create: bool = True) -> bool:
    """Make sure ``path`` is a private folder of this user (creating it 0700 if
    ``create``). False when it does not exist and ``create`` is off; ``OSError``
    when it cannot be made (read-only, too long...); ``StoreError`` when it is
    someone else's, a symlink, or writable by others."""
    if not create and not os.access(path, os.F_OK, follow_symlinks=False):
        # Nothing there (every write asks, and most stores have no waiter's
        # folder): an answer, not a FileNotFoundError raised and caught.
        return False
    if create:
        try:
            os.mkdir(path, DIR_MODE)
        except FileExistsError:
            pass  # made by another process of ours (checked below) or planted (refused below)
        else:
            os.chmod(path, DIR_MODE)  # mkdir's mode is filtered by the umask
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if create:
            raise
        return False
    check(path, st, folder=True)
    return True


def open_private(path: str, flags: int, *, create: bool = True) -> int:
    """``os.open`` a private file of this user (0600, ``O_NOFOLLOW``), checked
    after opening (``fstat``: what was opened is what is checked)."""
    try:
        if create:
            fd = create_file(path, flags)  # 0600 whatever the umask (S47)
        else:
            fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise errors.StoreError(
                f"refusing {path}: it is a symbolic link, expected a file"
            ) from exc
        raise
    try:
        check(path, os.fstat(fd), folder=False)
    except BaseException:
        os.close(fd)
        raise
    return fd


def map_private(path: str, size: int, *, create: bool = True) -> mmap.mmap:
    """The first ``size`` bytes of a private file (``open_private``) mapped as
    shared memory, the file grown to ``size`` with zeros first if shorter (so
    racing processes may all grow it); the descriptor is closed once mapped.
    ``open_private``'s errors, and ``OSError`` / ``ValueError`` for a file
    system that cannot map it."""
    fd = open_private(path, os.O_RDWR, create=create)
    try:
        if os.fstat(fd).st_size < size:
            os.ftruncate(fd, size)
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)


def lock_file(path: str) -> int:
    """Open (creating) a private lock file; a one-line ``StoreError`` if it cannot
    be (a read-only folder, a file that is not this user's)."""
    try:
        return open_private(path, os.O_RDWR)
    except OSError as exc:
        raise errors.StoreError(f"cannot open the lock file {path}: {exc.strerror}") from exc
