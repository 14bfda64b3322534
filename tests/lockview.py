"""Who holds the store's writer lock and who waits for it, read from the kernel.

The writer lock (broker.store.writelock) is the lock file's robust mutex where
the platform has one, else its ``flock``; ``holders(path)`` answers for both in
one shape, ``[(pid, waiting), ...]``, so a test states who holds and who queues
without knowing which it is, and never guesses from timing:

- the ``flock``: ``/proc/locks`` (a waiter's line is marked ``->``);
- the mutex: its holder is the thread whose id the futex word holds (libc and
  the kernel write it), and a waiter is a thread whose current system call
  (``/proc/PID/task/TID/syscall``) is a ``futex`` wait on the mutex's address in
  its process's map of the lock file (``/proc/PID/maps``).
"""

from __future__ import annotations

import os
import platform
import struct
from pathlib import Path

from broker.store import writelock

_FUTEX_SYSCALL = {"x86_64": 202, "aarch64": 98}.get(platform.machine())
_TID_MASK = 0x3FFFFFFF  # FUTEX_TID_MASK: the rest of the word is the waiters and owner-died bits


def holders(path: str | os.PathLike[str]) -> list[tuple[int, bool]]:
    """(pid, waiting) of every holder of and waiter for the writer lock at ``path``."""
    path = Path(path)
    try:
        inode = os.stat(path).st_ino
    except FileNotFoundError:
        return []
    return sorted(set(_flocks(inode)) | set(_mutex(path, inode)), key=lambda h: (h[1], h[0]))


def _flocks(inode: int) -> list[tuple[int, bool]]:
    out: list[tuple[int, bool]] = []
    with open("/proc/locks") as f:
        for line in f:
            parts = line.split()
            waiting = parts[1] == "->"
            if waiting:
                parts = parts[:1] + parts[2:]
            if parts[1] == "FLOCK" and int(parts[5].rsplit(":", 1)[1]) == inode:
                out.append((int(parts[4]), waiting))
    return out


def _mutex(path: Path, inode: int) -> list[tuple[int, bool]]:
    data = path.read_bytes()
    made_at, mutex_at = writelock._MADE_AT, writelock._MUTEX_AT
    if len(data) < mutex_at + 4 or data[made_at : made_at + 8] != b"broker-m":
        return []  # no mutex made in this file (the flock alone)
    out: list[tuple[int, bool]] = []
    tid = struct.unpack_from("<I", data, mutex_at)[0] & _TID_MASK
    if tid:
        out.append((_process_of(tid), False))
    for pid, tid in _threads():
        base = _mapped_at(pid, inode)
        if base is not None and _futex_wait_on(pid, tid) == base + mutex_at:
            out.append((pid, True))
    return out


def _process_of(tid: int) -> int:
    try:
        with open(f"/proc/{tid}/status") as f:
            for line in f:
                if line.startswith("Tgid:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return tid  # a thread that is gone: its id


def _threads() -> list[tuple[int, int]]:
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            out += [(int(pid), int(tid)) for tid in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            continue
    return out


def _mapped_at(pid: int, inode: int) -> int | None:
    """Where process ``pid`` maps the lock file (offset 0), if it does."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and int(parts[4]) == inode and int(parts[2], 16) == 0:
                    return int(parts[0].split("-")[0], 16)
    except (OSError, ValueError):
        pass
    return None


def _futex_wait_on(pid: int, tid: int) -> int | None:
    """The address a thread sleeps on in ``futex``, if that is its system call now."""
    try:
        with open(f"/proc/{pid}/task/{tid}/syscall") as f:
            parts = f.read().split()
    except OSError:
        return None
    if len(parts) < 2 or not parts[0].isdigit() or int(parts[0]) != _FUTEX_SYSCALL:
        return None
    return int(parts[1], 16)
