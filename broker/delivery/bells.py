"""A waiter's wake-up inside its process, and the process's waiters by key (S20, S41).

A process has ONE doorbell per store (a Unix datagram socket on SQLite,
``broker.delivery.wake``; one LISTEN connection on PostgreSQL,
``broker.delivery.pgwake``), however many participants wait in it: a server
holding a thousand long-polls or MCP identities must not hold a socket (a
file descriptor) for each. That doorbell is read by one thread, which finds
the waiters of the keys it was rung for here and rings their ``Bell``: a flag
and, for a waiter parked in an event loop, a callback. A ``Bell`` holds no
file descriptor, so a parked wait costs memory only.

A ``Bell`` stays rung until its waiter clears it: a ring that lands between
a waiter's check and its sleep is not lost, as a byte left in a socket was
not.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable


class Bell:
    """One waiter's wake-up: rung from any thread, waited on by its waiter."""

    __slots__ = ("_event", "_waker")

    def __init__(self) -> None:
        self._event = threading.Event()
        self._waker: Callable[[], object] | None = None

    def ring(self) -> None:
        self._event.set()
        waker = self._waker  # read after the set: a waker installed later sees ``rung``
        if waker is not None:
            with contextlib.suppress(RuntimeError):  # its event loop closed meanwhile
                waker()

    @property
    def rung(self) -> bool:
        return self._event.is_set()

    def clear(self) -> None:
        self._event.clear()

    def wait(self, timeout: float) -> bool:
        """Block this thread until rung or ``timeout``; True if rung."""
        return self._event.wait(timeout)

    def wake_with(self, waker: Callable[[], object] | None) -> None:
        """Also call ``waker`` (from the ringing thread) on each ring; None stops it.
        An event loop's waiter installs ``loop.call_soon_threadsafe(...)``, then
        looks at ``rung``: a ring before the install is seen there."""
        self._waker = waker


class Bells:
    """The bells of one process on one doorbell, by key. Thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._by_key: dict[str, set[Bell]] = {}

    def add(self, keys: Iterable[str], bell: Bell) -> list[str]:
        """Register ``bell`` on ``keys`` (the caller holds ``lock``); the keys
        nobody in this process waited on before."""
        first = []
        for key in keys:
            found = self._by_key.get(key)
            if found is None:
                found = self._by_key[key] = set()
                first.append(key)
            found.add(bell)
        return first

    def remove(self, keys: Iterable[str], bell: Bell) -> list[str]:
        """Take ``bell`` off ``keys`` (the caller holds ``lock``); the keys
        nobody in this process waits on any more."""
        last = []
        for key in keys:
            found = self._by_key.get(key)
            if found is None:
                continue
            found.discard(bell)
            if not found:
                del self._by_key[key]
                last.append(key)
        return last

    def __len__(self) -> int:
        return len(self._by_key)

    def keys(self) -> list[str]:
        """The keys somebody waits on (the caller holds ``lock``)."""
        return list(self._by_key)

    def on(self, key: str) -> int:
        """How many bells wait on ``key`` (the caller holds ``lock``)."""
        return len(self._by_key.get(key, ()))

    def ring(self, keys: Iterable[str]) -> int:
        """Ring every bell on ``keys``; how many were rung."""
        with self.lock:
            targets = {b for k in keys for b in self._by_key.get(k, ())}
        for bell in targets:
            bell.ring()
        return len(targets)

    def ring_all(self) -> int:
        """Ring every bell (a ring may have been missed: everyone re-checks)."""
        with self.lock:
            targets = {b for found in self._by_key.values() for b in found}
        for bell in targets:
            bell.ring()
        return len(targets)

    def waiting(self, key: str) -> int:
        """How many bells wait on ``key`` now."""
        with self.lock:
            return self.on(key)
