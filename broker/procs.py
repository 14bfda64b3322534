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

_mine: tuple[int, str] = (0, "")


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
    """``host:pid:start`` of the calling process (computed once per process)."""
    global _mine
    pid = os.getpid()
    if _mine[0] != pid:  # first call, or a forked child
        _mine = (pid, f"{host()}:{pid}:{start_time(pid) or 0}")
    return _mine[1]


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


def pid_gone(pid: int | None) -> bool:
    """True when ``pid`` names no process on this host (None: unknown, never gone)."""
    if pid is None or pid <= 0:
        return False
    return _probe(pid) is None
