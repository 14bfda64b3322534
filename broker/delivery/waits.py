"""A call that blocks until there is something for its caller (S20), and keeps
the caller live while it blocks (S27).

``claim`` and ``next_turn`` with ``wait`` > 0 (and their asyncio twins, which
the server's long-polls and MCP's waiting tools run), and a board claim that
waits for its key, share this loop: the doorbell is bound before the first
check, each check that found nothing sleeps until rung, until ``wait`` runs
out or just past the next expiry (the inbox's leases, the key's claim), and
at most until the caller's next heartbeat is due
(``auth.Pulse``). Without that beat a CLI or served participant blocked in a
wait longer than ``live_seconds`` would look gone, and its address, the
lead's included, could be continued without its token (by the operator or
its parent, S40) while it still waits.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TypeVar

from broker import errors
from broker.delivery import wake
from broker.delivery.bells import Bell
from broker.ids import parse_ts
from broker.spaces import auth
from broker.spaces.auth import Identity
from broker.store.sqlite import Store, Tx

T = TypeVar("T")


def until(store: Store, expiry: str | None, left: float) -> float:
    """How long to sleep: until ``left`` runs out, or just past the next lease
    expiry of the inbox (expiry rings no doorbell: nobody commits)."""
    if expiry is None:
        return left
    delta = (parse_ts(expiry) - store.now()).total_seconds()
    return max(0.001, min(left, delta + 0.001))


def block(
    store: Store,
    ident: Identity,
    wait: float,
    once: Callable[[], tuple[T, str | None]],
    done: Callable[[T], bool],
    keys: list[str] | None = None,
    *,
    tx: Tx | None = None,
) -> T:
    """Call ``once()`` (a result and the time something changes with no commit
    to ring: the inbox's next lease expiry, a claim's end) until ``done(result)``
    or ``wait`` seconds have passed; the last result. It sleeps on ``keys``'
    doorbells (default: the caller's inbox). Refused inside the caller's
    transaction ``tx``: it would hold the write lock all the while."""
    if tx is not None:
        raise errors.InvalidInput(
            "cannot wait inside a transaction: it would hold the write lock", field="wait"
        )
    deadline = time.monotonic() + wait
    pulse = auth.Pulse(store, ident)
    keys = keys if keys is not None else [wake.participant_key(ident.participant_id)]
    with wake.Waiter(store, keys) as waiter:
        while True:
            got, expiry = once()
            left = deadline - time.monotonic()
            if done(got) or left <= 0:
                return got
            pulse.beat()
            waiter.wait(until(store, expiry, min(left, pulse.due_in())))


# --- parked waits of an event loop ---------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Probe:
    """How the safety tick tells whether a parked wait may have something now:
    ``many(t, [of, ...])`` answers for every parked wait it probes at once
    (which of their ``of`` may: a claim's inbox, by participant id, that holds
    a ready row or an expired lease), read in one snapshot. A wait without a
    probe: any commit may concern it."""

    many: Callable[[Tx, list[str]], Collection[str]]
    of: str


BEAT_WINDOW_S = 0.5  # beats due this soon are written in the batch at hand
# At most this many beats per write transaction. A thousand long-polls parked
# together come due together: their beats in one round held the writer lock
# (and the GIL) for ~20 ms, and the server's writes behind it (a send, the
# claim it wakes) waited that long. Rounds of 64 hold them ~2 ms each, with a
# pause between rounds for the writes that queued meanwhile; each round is one
# statement (``auth.beat_many``: a statement a beat held a round 3.6 ms at the
# median, 8 ms at p90, on a cold 2-core VM; one holds it 2 and 5).
BEAT_ROUND = 64
BEAT_PAUSE_S = 0.002


class Watch:
    """One wait parked with its store's ``Keeper``: its bell, the pulse of the
    caller it keeps live (None: nobody's, e.g. a log follower) and its probe."""

    __slots__ = ("bell", "probe", "pulse", "ticked")

    def __init__(self, bell: Bell, pulse: auth.Pulse | None, probe: Probe | None) -> None:
        self.bell = bell
        self.pulse = pulse
        self.probe = probe
        self.ticked = False  # rung by the safety tick (not by a doorbell)


class Keeper:
    """What a wait parked in an event loop (``broker.api.aio``) needs besides
    its doorbell, done once for all of them in one thread per store:

    - the heartbeats (S27): the beats that are due, of every parked caller, in
      ONE write transaction (a thousand parked agents beating every 10 s are
      a hundred rows a second in one or two commits, not a hundred commits);
      a caller refused there (it left, its token was replaced, its space
      stopped) is rung, and its re-check says why;
    - the safety tick (S20): every ``SAFETY_S`` the store's change marker is
      read once, on this thread's own connection, so the beats written here
      never count as a change. If another connection committed, the waits
      that may have been missed are rung: those whose probe finds something
      (read in one snapshot) and those without a probe; nobody else re-checks;
    - a checkpoint after a quiet tick that follows writes (the WAL folded back).

    No timer per waiter and no polling: an idle server with a thousand parked
    long-polls wakes this thread about twice a second at most (to write the
    beats due) and reads one marker per tick."""

    LINGER_S = 2.0  # the thread outlives the last parked wait this long

    def __init__(self, store: Store) -> None:
        import threading

        self.store = store
        self._cond = threading.Condition()
        self._watches: set[Watch] = set()
        self._thread: threading.Thread | None = None
        self._marker: tuple[int, int] | None = None
        self._next_tick = 0.0
        self._dirty = False  # a tick saw writes: checkpoint at the next quiet one
        self._earliest_hint = 0.0  # when the thread wakes next (monotonic)
        self.rounds = 0  # transactions of beats written (tests)
        self.largest_round = 0  # the most beats one of them wrote

    def add(self, bell: Bell, pulse: auth.Pulse | None, probe: Probe | None) -> Watch:
        import threading

        watch = Watch(bell, pulse, probe)
        with self._cond:
            self._watches.add(watch)
            if self._thread is None:
                self._marker = None  # read afresh by the new thread before its first tick
                self._next_tick = time.monotonic() + wake.SAFETY_S
                self._thread = threading.Thread(target=self._run, name="broker-keeper", daemon=True)
                self._thread.start()
            elif pulse is not None and pulse.next < self._earliest_hint:
                self._cond.notify()  # a beat due sooner than the thread sleeps
        return watch

    def remove(self, watch: Watch) -> None:
        with self._cond:
            self._watches.discard(watch)

    def parked(self) -> int:
        with self._cond:
            return len(self._watches)

    # --- the thread ----------------------------------------------------------------
    def _run(self) -> None:
        idle_since: float | None = None
        self._marker = self._read_marker()
        while True:
            with self._cond:
                now = time.monotonic()
                if not self._watches:
                    idle_since = idle_since or now
                    if now - idle_since >= self.LINGER_S:
                        self._thread = None
                        return
                else:
                    idle_since = None
                watches = list(self._watches)
                beats = [w.pulse.next for w in watches if w.pulse is not None]
                wake_at = min([self._next_tick, *beats]) if watches else now + self.LINGER_S
                self._earliest_hint = wake_at
                if wake_at > now:
                    self._cond.wait(wake_at - now)
                    continue
            now = time.monotonic()
            due = [
                w for w in watches if w.pulse is not None and w.pulse.next <= now + BEAT_WINDOW_S
            ]
            if due:
                self._beat(due[:BEAT_ROUND])  # the rest come due again at once
                self.rounds += 1
                self.largest_round = max(self.largest_round, min(len(due), BEAT_ROUND))
                if len(due) > BEAT_ROUND:
                    time.sleep(BEAT_PAUSE_S)
            if now >= self._next_tick:
                self._next_tick = now + wake.SAFETY_S
                self._tick(watches)

    def _beat(self, due: list[Watch]) -> None:
        """The due heartbeats, in one statement of one write transaction;
        refused callers rung."""
        refused: list[Watch] = []
        try:
            now = self.store.now_ts()
            with self.store.write() as t:
                # one beat per caller, however many waits (beat_many's own)
                found = auth.beat_many(t, [w.pulse.ident for w in due if w.pulse], now)
        except Exception:  # noqa: BLE001 - the store is busy or gone: try again in a second
            for w in due:
                if w.pulse is not None:
                    w.pulse.next = time.monotonic() + auth.HEARTBEAT_S
            return
        for w in due:
            assert w.pulse is not None
            beaten = found.get(w.pulse.ident.participant_id)
            if beaten is None:
                refused.append(w)
                w.pulse.next = float("inf")  # its re-check ends the wait
            else:
                w.pulse.next = time.monotonic() + auth.beat_every(beaten.limits)
        for w in refused:
            w.bell.ring()

    def _read_marker(self) -> tuple[int, int] | None:
        if self.store.dialect != "sqlite":
            return (0, 0)  # PostgreSQL's NOTIFY is part of the commit: nothing to tick for
        try:
            return (0, self.store.data_version())
        except Exception:  # noqa: BLE001 - read again at the next tick
            return None

    def _tick(self, watches: list[Watch]) -> None:
        marker = self._read_marker()
        changed = marker is None or marker != self._marker
        self._marker = marker
        if not changed:
            if self._dirty:
                self._dirty = False
                # Quiet after writes: fold the WAL back (a busy one is retried by the next writes).
                with contextlib.suppress(Exception):
                    self.store.checkpoint()
            return
        self._dirty = True
        ring = [w for w in watches if w.probe is None]
        probed: dict[Callable[[Tx, list[str]], Collection[str]], list[tuple[Watch, str]]] = {}
        for w in watches:
            if w.probe is not None:
                probed.setdefault(w.probe.many, []).append((w, w.probe.of))
        if probed:
            try:
                with self.store.read() as t:
                    # One statement for every wait of a kind (a thousand parked
                    # claims), not one each: ~20 ms of Python and statements on
                    # this thread that the event loop's requests waited behind.
                    for many, kind in probed.items():
                        hit = many(t, [of for _, of in kind])
                        ring += [w for w, of in kind if of in hit]
            except Exception:  # noqa: BLE001 - cannot tell: everyone re-checks
                ring += [w for kind in probed.values() for w, _ in kind]
        for w in ring:
            w.ticked = True
            w.bell.ring()


_keepers: dict[int, Keeper] = {}


def keeper(store: Store) -> Keeper:
    """The ``Keeper`` of ``store`` in this process (made on first use)."""
    found = _keepers.get(id(store))
    if found is None or found.store is not store:
        found = _keepers[id(store)] = Keeper(store)
    return found


def _reset_after_fork() -> None:
    _keepers.clear()  # the parent's threads are not here


os.register_at_fork(after_in_child=_reset_after_fork)
