"""How long a writer that finds the writer lock taken tries again before it sleeps.

A writer that sleeps on the lock (the mutex's futex, the ``flock``'s helper
thread) is woken when the holder lets go, but runs only once its CPU has come
out of idle; on a VM that is ~0.3 ms, and the lock is idle meanwhile. With a
few writers on as many cores the holder lets go within a transaction (~100
µs), so each handoff to a sleeper cost the store a wake-up: two processes
claiming one inbox ran at 0.6x the rate of one (``bench sweep`` at P = 2),
0.96-1.02x once each taker first tried again for ``SPIN_S``. Where many
writers wait, each wait is long and spinning would only take CPU from the
holder and let spinners overtake sleepers (always spinning cost 16 processes
7 % of their rate, their p50 ~2 ms instead of 150 µs): so a taker tries again
only while the moving mean of its waits is under ``SPIN_WHILE_S``
(``sharedmutex.Mutex``, ``writelock.WriterLock``; spec §Writer lock).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Final, TypeVar

T = TypeVar("T")

SPIN_S: Final = 0.00015  # about a transaction's hold of the lock
SPIN_WHILE_S: Final = 0.001


class Patience:
    """One lock handle's waits, and so whether its next one tries again first."""

    __slots__ = ("_waited",)

    def __init__(self) -> None:
        self._waited = 0.0  # the moving mean of its waits, seconds

    def tries(
        self,
        began: float,
        end: float,
        attempt: Callable[[], T | None],
        now: Callable[[], float] = time.monotonic,
    ) -> T | None:
        """For a wait that began at ``began`` (its deadline ``end``): ``attempt``
        again, the CPU given away before each (a holder waiting for this CPU
        gets it), until it answers (not None) or this taker's time to try is
        up (at once when its waits have been long). None: sleep now."""
        until = min(end, began + SPIN_S) if self._waited < SPIN_WHILE_S else began
        while now() < until:
            os.sched_yield()
            got = attempt()
            if got is not None:
                return got
        return None

    def waited(self, seconds: float) -> None:
        """Count a wait that took ``seconds``, however it ended."""
        self._waited += (seconds - self._waited) / 4
