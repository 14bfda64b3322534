"""Which process holds a lease, and whether it still exists (S25, S32).

A lease taken by a long-lived process records that process as
``host:pid:start`` (``start`` is the kernel's start time of the process, in
clock ticks since boot, where ``/proc`` has it; ``0`` elsewhere). The start
time tells a dead process from a new one that got the same pid: a recycled
pid is not the holder. A process on another host is never judged gone from
here (its pid means nothing on this host).
"""

from __future__ import annotations

import os
from functools import cache

_mine = ""  # this_process, once worked out (forgotten in a forked child)


@cache
def host() -> str:
    """This host's name (a lease records it beside the pid)."""
    return os.uname().nodename or "localhost"  # gethostname(), without importing socket


def start_time(pid: int) -> int | None:
    """The start time of ``pid`` (clock ticks since boot), 0 where unknown, or
    None when no such process exists."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return None if os.path.isdir("/proc/self") else _probe(pid)
    except OSError:
        return _probe(pid)
    # Field 22; the command name (field 2) may hold spaces and parentheses.
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return 0


def _probe(pid: int) -> int | None:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return 0  # it exists, it is just not ours
    except OverflowError:
        return None
    return 0


def this_process() -> str:
    """``host:pid:start`` of the calling process (computed once per process;
    every claim of a process that holds leases asks, so not a ``getpid``
    each time: a forked child forgets its parent's)."""
    global _mine
    if not _mine:
        pid = os.getpid()
        _mine = f"{host()}:{pid}:{start_time(pid) or 0}"
    return _mine


def _forget_after_fork() -> None:
    global _mine
    _mine = ""


os.register_at_fork(after_in_child=_forget_after_fork)


def gone(process: str) -> bool:
    """True when the process named ``host:pid:start`` no longer exists on this
    host (or its pid now belongs to another process). Unknown or foreign: False."""
    if process == this_process():
        return False
    name, _, rest = process.rpartition(":")
    where, _, pid_text = name.rpartition(":")
    if where != host():
        return False
    try:
        pid, start = int(pid_text), int(rest)
    except ValueError:
        return False
    if pid <= 0:
        return False
    now = start_time(pid)
    if now is None:
        return True
    return bool(start and now and now != start)


def parent(pid: int) -> int | None:
    """The parent of ``pid`` (None: unknown, or no such process). From
    ``/proc`` where there is one; elsewhere ``getppid()`` for the calling
    process and ``ps`` for the others (POSIX, on macOS and the BSDs)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        if os.path.isdir("/proc/self"):
            return None  # Linux without that process (or not ours to read)
    else:
        try:
            return int(stat[stat.rfind(b")") + 2 :].split()[1])  # field 4
        except (IndexError, ValueError):
            return None
    if pid == os.getpid():
        return os.getppid()
    import subprocess

    try:
        out = subprocess.run(
            ["ps", "-o", "ppid=", "-p", str(pid)], capture_output=True, text=True, timeout=5
        ).stdout
        return int(out.strip())
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


def own(pid: int) -> bool:
    """True when ``pid`` is the calling process or one of its ancestors, the
    processes it can show are its own: a join may record only such a process
    as the one that keeps its address live (S27). Process 1 never counts: it
    is every process's ancestor and never exits, so naming it would hold an
    address for ever."""
    if pid <= 1:
        return False
    seen: set[int] = set()
    here: int | None = os.getpid()
    while here is not None and here > 1 and here not in seen:
        if here == pid:
            return True
        seen.add(here)
        here = parent(here)
    return False


def pid_gone(pid: int | None) -> bool:
    """True when ``pid`` names no process on this host (None: unknown, never gone)."""
    if pid is None or pid <= 0:
        return False
    return _probe(pid) is None
