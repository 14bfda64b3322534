"""A writer that finds the writer lock taken tries again before it sleeps,
while its waits are short (``broker.store.patience``).

``sharedmutex.Mutex.lock`` on a taken mutex, and ``writelock.WriterLock`` on a
taken ``flock``: a taker whose recent waits were short tries again for up to
``patience.SPIN_S`` before it sleeps (a few writers on as many cores: the
holder lets go within a transaction, and a sleeper is woken only after its
CPU has gone idle). One whose waits have been long sleeps at once: where many
wait, the kernel orders them. The real lock's exclusivity, robustness and
timeouts are ``tests/unit/store/test_writer_lock.py``'s. For the mutex, libc
is a stand-in that counts what ``lock`` asks of it, on a clock of its own
(each try takes a microsecond, a sleep what the test says); for the
``flock``, a real one, held by another open file description, let go by the
test at the try it chooses: no figure here depends on how busy the machine
is.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from broker.store import patience, sharedmutex, writelock
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
    libc.sleep_s = 8 * patience.SPIN_WHILE_S
    mutex = Mutex(libc, 0)  # type: ignore[arg-type]
    assert mutex.lock(timeout=1.0) == "got"
    assert libc.tries > 1 and libc.sleeps == 1  # it tried again, then slept
    libc.tries = 0
    assert mutex.lock(timeout=1.0) == "got"
    assert (libc.tries, libc.sleeps) == (1, 2)


def test_short_waits_bring_the_tries_back(libc: Libc) -> None:
    libc.sleep_s = 8 * patience.SPIN_WHILE_S
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


# --- the flock's tries (writelock.WriterLock with flock_only) ------------------------
@pytest.fixture
def held(tmp_path: Path) -> Any:
    """A lock file and a second open file description holding its ``flock``."""
    path = tmp_path / "broker.db.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    yield path, fd
    os.close(fd)


def test_a_flock_taker_tries_again_before_its_helper_waits(
    held: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, holder = held
    monkeypatch.setattr(patience, "SPIN_S", 60.0)  # the holder decides, not the clock
    yields = []

    def give_way() -> None:  # the third try finds it free
        yields.append(1)
        if len(yields) == 3:
            fcntl.flock(holder, fcntl.LOCK_UN)

    monkeypatch.setattr(os, "sched_yield", give_way)
    lock = writelock.WriterLock(str(path), flock_only=True)
    assert lock.acquire(5.0) is True
    assert len(yields) == 3 and lock._jobs is None  # no helper thread was needed
    with pytest.raises(BlockingIOError):  # it holds the lock now
        fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
    lock.release()
    lock.close()


def test_a_flock_taker_whose_waits_have_been_long_goes_to_its_helper_at_once(
    held: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, holder = held
    monkeypatch.setattr(os, "sched_yield", lambda: pytest.fail("it tried again"))
    lock = writelock.WriterLock(str(path), flock_only=True)
    lock._patience.waited(8 * patience.SPIN_WHILE_S)
    threading.Timer(0.05, fcntl.flock, (holder, fcntl.LOCK_UN)).start()
    assert lock.acquire(5.0) is True
    assert lock._jobs is not None  # its helper thread waited
    lock.release()
    lock.close()
