"""A robust process-shared mutex in a shared map (the writer lock's, ``writelock``).

libc's ``pthread_mutex_*`` through ``ctypes``, on a ``pthread_mutex_t`` that lives
in a ``MAP_SHARED`` file mapping, so every process that maps the file takes the
same mutex:

- **process-shared**: its futex is keyed by the file's page, not an address;
- **robust**: when a holder's thread ends without letting it go (the process
  killed with SIGKILL), the kernel marks it, and the next taker gets
  ``EOWNERDEAD`` with the mutex; ``lock`` makes it consistent then (what the
  holder guarded, SQLite's transaction, was rolled back by SQLite);
- **error-checking**: a thread that takes it a second time is told
  (``EDEADLK``), not deadlocked, and one that did not take it cannot let it go.

A contended ``lock`` sleeps in the kernel (``pthread_mutex_clocklock`` on
``CLOCK_MONOTONIC``) with the GIL let go (``ctypes`` drops it around a foreign
call), in slices of ``SLICE_S`` so that a signal handler (Ctrl-C) runs within a
slice. A release wakes one sleeper; a taker that comes meanwhile may take it
first, which keeps the lock busy rather than handing it to a sleeper that has
yet to run.

Before it sleeps, a taker whose recent waits were short tries again for a
while, giving its CPU away between tries (``sched_yield``: a holder waiting
for this CPU gets it). ``broker.store.patience`` says how long and why, for
the mutex and the ``flock`` alike.

Linux only (``load()`` is None elsewhere): the ``pthread_mutex_t`` is made by
libc in place and never read here, so its layout does not matter, only that it
fits in ``SIZE`` bytes.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
import time
from typing import Final, Literal

from broker.store.patience import Patience

SIZE: Final = 64  # bytes kept for a pthread_mutex_t (40 on x86-64, 48 on arm64)
SLICE_S: Final = 0.25
_clock = time.monotonic  # every wait's deadline and length (a test's stand-in)
_PROCESS_SHARED: Final = 1
_ROBUST: Final = 1
_ERRORCHECK: Final = 2
_CLOCK_MONOTONIC: Final = 1
_TAKEN: Final = frozenset({errno.EBUSY, errno.EDEADLK})


Taken = Literal["got", "owner died", "taken", "mine"]
"""What ``Mutex.lock`` did: took it; took it from a holder that died (it is
consistent again); found it taken until the deadline; found this thread
holding it already."""


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Libc:
    """The libc functions, their types declared once (a call converts nothing else)."""

    def __init__(self, libc: ctypes.CDLL) -> None:
        ptr, c_int = ctypes.c_void_p, ctypes.c_int
        self.attr_init = libc.pthread_mutexattr_init
        self.attr_init.argtypes, self.attr_init.restype = [ptr], c_int
        self.attr_settings = [
            (libc.pthread_mutexattr_setpshared, _PROCESS_SHARED),
            (libc.pthread_mutexattr_setrobust, _ROBUST),
            (libc.pthread_mutexattr_settype, _ERRORCHECK),
        ]
        for fn, _ in self.attr_settings:
            fn.argtypes, fn.restype = [ptr, c_int], c_int
        self.init = libc.pthread_mutex_init
        self.init.argtypes, self.init.restype = [ptr, ptr], c_int
        self.clocklock = libc.pthread_mutex_clocklock
        self.clocklock.argtypes, self.clocklock.restype = [ptr, c_int, ptr], c_int
        self.trylock = libc.pthread_mutex_trylock
        self.unlock = libc.pthread_mutex_unlock
        self.consistent = libc.pthread_mutex_consistent
        for fn in (self.trylock, self.unlock, self.consistent):
            fn.argtypes, fn.restype = [ptr], c_int


_loaded: list[_Libc | None] = []


def load() -> _Libc | None:
    """libc's mutex functions (Linux), looked up once; None where they are not."""
    if not _loaded:
        found = None
        if sys.platform.startswith("linux"):
            try:
                found = _Libc(ctypes.CDLL(None))
            except (OSError, AttributeError):  # no such libc, or too old (clocklock: glibc 2.30)
                found = None
        _loaded.append(found)
    return _loaded[0]


def address(buffer: object, offset: int) -> int:
    """The address of ``buffer[offset]`` (an ``mmap``): where the mutex lives.
    The caller keeps the map open while it uses the address."""
    return ctypes.addressof(ctypes.c_char.from_buffer(buffer, offset))  # type: ignore[arg-type]


def make(libc: _Libc, at: int) -> int:
    """Make the mutex at address ``at`` (process-shared, robust, error-checking):
    0, or libc's error number. Only where nobody uses it yet."""
    attr = ctypes.create_string_buffer(16)  # pthread_mutexattr_t: 4 bytes on Linux
    rc = libc.attr_init(attr)
    for set_attr, value in libc.attr_settings:
        rc = rc or set_attr(attr, value)
    return int(rc or libc.init(at, attr))


class Mutex:
    """The mutex at ``at``, taken and let go by one thread at a time."""

    __slots__ = ("libc", "at", "_deadline", "_patience")

    def __init__(self, libc: _Libc, at: int) -> None:
        self.libc = libc
        self.at = at
        self._deadline = _Timespec()
        self._patience = Patience()

    def lock(self, timeout: float | None) -> Taken:
        """Take it, waiting at most ``timeout`` seconds (None: only if it is free
        now); ``OSError`` for anything else libc says."""
        libc, at = self.libc, self.at
        rc = libc.trylock(at)
        if rc in _TAKEN:
            if rc == errno.EDEADLK:
                return "mine"
            if timeout is None:
                return "taken"
            began = _clock()
            end = began + max(0.0, timeout)
            got = self._patience.tries(began, end, self._try, _clock)
            rc = self._wait(end) if got is None else got
            self._patience.waited(_clock() - began)
            if rc == errno.ETIMEDOUT:
                return "taken"
            if rc == errno.EDEADLK:
                return "mine"
        if rc == errno.EOWNERDEAD:
            rc = libc.consistent(at)
            if rc:
                raise OSError(rc, os.strerror(rc))
            return "owner died"
        if rc:
            raise OSError(rc, os.strerror(rc))
        return "got"

    def _try(self) -> int | None:
        """libc's answer to one more try, None while it is taken."""
        rc = int(self.libc.trylock(self.at))
        return None if rc in _TAKEN else rc

    def _wait(self, end: float) -> int:
        """libc's answer once it is not a slice's ``ETIMEDOUT`` (or the deadline's)."""
        deadline, lock, at = self._deadline, self.libc.clocklock, self.at
        ref = ctypes.byref(deadline)
        while True:
            now = _clock()
            if now >= end:
                return errno.ETIMEDOUT
            until = min(end, now + SLICE_S)
            deadline.tv_sec = int(until)
            deadline.tv_nsec = int((until - deadline.tv_sec) * 1e9)
            rc = int(lock(at, _CLOCK_MONOTONIC, ref))  # the GIL let go while it sleeps
            if rc != errno.ETIMEDOUT:
                return rc

    def drop(self) -> None:
        """Let it go if this thread holds it: after an exception (a signal
        handler's) that came between libc taking it and ``lock`` returning."""
        libc, at = self.libc, self.at
        rc = libc.trylock(at)  # EDEADLK: held by this thread already
        if rc == errno.EOWNERDEAD:
            rc = libc.consistent(at)
        if rc in (0, errno.EDEADLK):
            libc.unlock(at)

    def unlock(self) -> None:
        rc = self.libc.unlock(self.at)
        if rc:
            raise OSError(rc, os.strerror(rc))
