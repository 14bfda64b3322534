"""The writer lock's mutex tries again before it sleeps, while its waits are short.

``sharedmutex.Mutex.lock`` on a taken mutex: a taker whose recent waits were
short tries again for up to ``SPIN_S`` before it sleeps in the kernel (a few
writers on as many cores: the holder lets go within a transaction, and a
sleeper is woken only after its CPU has gone idle). One whose waits have been
long sleeps at once: where many wait, the kernel's queue orders them. The
real mutex's exclusivity, robustness and timeouts are
``tests/unit/store/test_writer_lock.py``'s; here libc is a stand-in that
counts what ``lock`` asks of it, on a clock of its own (each try takes a
microsecond, a sleep what the test says): no figure here depends on how
busy the machine is.
"""

from __future__ import annotations

import errno
from typing import Any

import pytest

from broker.store import sharedmutex
from broker.store.sharedmutex import Mutex


class Libc:
    """``trylock`` finds the mutex taken ``busy`` times (every time with None);
    ``clocklock`` takes it after ``sleep_s`` of the clock."""

    def __init__(self, busy: int | None, sleep_s: float = 0.0) -> None:
        self.busy, self.sleep_s = busy, sleep_s
        self.tries = self.sleeps = 0
        self.now = 1000.0

    def clock(self) -> float:
        return self.now

    def trylock(self, at: int) -> int:
        self.tries += 1
        self.now += 1e-6
        if self.busy is not None and self.tries > self.busy:
            return 0
        return errno.EBUSY

    def clocklock(self, at: int, clock: int, deadline: Any) -> int:
        self.sleeps += 1
        self.now += self.sleep_s
        return 0


@pytest.fixture
def libc(monkeypatch: pytest.MonkeyPatch) -> Libc:
    made = Libc(busy=None)
    monkeypatch.setattr(sharedmutex, "_clock", made.clock)
    return made


def test_a_taker_tries_again_before_it_sleeps(libc: Libc) -> None:
    libc.busy = 3
    assert Mutex(libc, 0).lock(timeout=1.0) == "got"  # type: ignore[arg-type]
    assert (libc.tries, libc.sleeps) == (4, 0)


def test_a_taker_whose_waits_have_been_long_sleeps_at_once(libc: Libc) -> None:
    """A wait that outlasted the spin and then slept 8x ``SPIN_WHILE_S``
    raises the mean past it: the next taken mutex is slept on at once (one
    try, the one that found it taken)."""
    libc.sleep_s = 8 * sharedmutex.SPIN_WHILE_S
    mutex = Mutex(libc, 0)  # type: ignore[arg-type]
    assert mutex.lock(timeout=1.0) == "got"
    assert libc.tries > 1 and libc.sleeps == 1  # it tried again, then slept
    libc.tries = 0
    assert mutex.lock(timeout=1.0) == "got"
    assert (libc.tries, libc.sleeps) == (1, 2)


def test_short_waits_bring_the_tries_back(libc: Libc) -> None:
    libc.sleep_s = 8 * sharedmutex.SPIN_WHILE_S
    mutex = Mutex(libc, 0)  # type: ignore[arg-type]
    mutex.lock(timeout=1.0)
    libc.sleep_s = 0.0
    for _ in range(8):  # each quick wait pulls the mean down
        mutex.lock(timeout=1.0)
    libc.busy, libc.tries = 2, 0
    assert mutex.lock(timeout=1.0) == "got"
    assert libc.tries == 3 and libc.sleeps == 9  # tried again; no sleep this time


def test_no_tries_past_a_timeout_of_zero(libc: Libc) -> None:
    assert Mutex(libc, 0).lock(timeout=0.0) == "taken"  # type: ignore[arg-type]
    assert libc.tries == 1  # the deadline had passed: no second try
