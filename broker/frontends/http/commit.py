"""Group commit: concurrent writes from many clients in one transaction.

Every write request becomes a job, ``fn(tx)``: a library call given ``tx=``.
One writer thread takes whatever jobs are queued (up to ``max_batch``), runs
them in ONE write transaction, commits once, and
hands each request its own outcome. So a burst of 32 sends costs one BEGIN
IMMEDIATE, one COMMIT and one wake-up pass instead of 32, and the writers of
this process never contend for SQLite's lock among themselves.

Semantics per job are those of the library's ``tx=`` path (spec §Storage):

- an error undoes that job's writes only and is that request's error; the
  others commit;
- the errors whose record must survive are kept with their writes: a message
  that reached nobody is logged and committed, then refused (S8), and a
  ``tool_unavailable`` / ``messaging_full`` refusal keeps its notice (S24, S11);
- if the commit itself fails, nothing of the batch was written, and each job
  is run again alone, so one bad job cannot fail its neighbours.

A batch first runs with no savepoint around its jobs: a SAVEPOINT and its
RELEASE were two of a served request's five statements, ~5 % of the server's
CPU. An error whose writes stay (``KEEP``) needs no undoing. Any other error
rolls that pass back, and the batch runs again with a savepoint around each
job, which undoes the failed job's writes alone (what it wrote is not known:
SQLite counts a statement's rows only once it has ended, and PostgreSQL
aborts the whole transaction at a refused statement). For ``CAREFUL_S``
after such an error every batch runs careful at once: a caller that keeps
failing costs its batches their savepoints, not a second run each.

Wake-ups (doorbells) ring at the commit: after it on SQLite (``Tx.after_commit``
hooks), by the COMMIT itself on PostgreSQL (a NOTIFY queued in the transaction).

The writes submitted in one turn of an event loop are one batch, run at the
end of that turn. Where it can, the loop runs the batch itself: when the
writer thread has nothing of this server's in hand and the store can begin a
write without waiting (``Store.write_now``: the writer lock and SQLite's
lock both free, else nothing ran). A thread's wake-up costs about as much as
a small write, and the GIL passing back and forth between the loop and the
writer about as much again: run on the loop, a served request costs about a
fifth less of the server's CPU. A batch that finds the lock taken (another
process is writing: another worker, an agent on the file) stays on the loop,
which tries it again at its next turns (the next turns' writes behind it),
for HOLD_S at most: another process's transaction is a millisecond or two,
and the thread's hand-off costs about as much as the write (``--workers 2``
ran most of its batches there). Everything else that may wait goes to the
writer thread, so the loop never blocks: a batch held past HOLD_S, every
batch on PostgreSQL (its COMMIT is a round trip), a checkpoint a commit made
due, and each batch after one the thread still holds (so one loop's writes
commit in the order they were made).

The hand-offs to and from the writer thread are batched too (the served
swarm's profile: the queue's ``put`` and the loop's ``call_soon_threadsafe``
were a quarter of the server's CPU). A turn's writes reach the writer in one
``put``, and the outcomes of one transaction go back to each event loop in one
``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from broker import errors

T = TypeVar("T")
log = logging.getLogger("broker.server")

# A batch that finds the lock taken waits on its loop this long at most (tried
# again at each turn, at least every RETRY_S), then goes to the writer thread.
HOLD_S = 0.005
RETRY_S = 0.001  # an idle event loop's timers run to the millisecond
CAREFUL_S = 1.0  # after a failed job, batches run with a savepoint a job this long

# Errors whose job's writes stay: the outcome is part of the record.
KEEP: tuple[type[errors.BrokerError], ...] = (
    errors.NotDelivered,
    errors.ToolUnavailable,
    errors.MessagingFull,
)


@dataclass(slots=True)
class _Job:
    fn: Callable[[Any], Any]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]


@dataclass(slots=True)
class _Alone:
    """Jobs whose batch failed to commit on a loop: each is run again alone,
    by the thread (alone, each may wait for the lock)."""

    jobs: list[_Job]


@dataclass
class Stats:
    """Counters for the bench and /healthz: how well batching works."""

    transactions: int = 0
    on_loop: int = 0  # of them, run by an event loop itself (``Store.write_now``)
    jobs: int = 0
    largest: int = 0
    retried_alone: int = 0
    careful: int = 0  # batches run again with a savepoint a job (a failed job's writes undone)
    busy_s: float = 0.0
    sizes: dict[int, int] = field(default_factory=dict)


class Committer:
    """The server's group committer: batches run by the event loop that made
    them, or by its one writer thread (see the module doc)."""

    def __init__(self, store: Any, *, max_batch: int = 64) -> None:
        self.store = store
        self.max_batch = max_batch
        self.stats = Stats()
        # Hand-overs to the writer thread: a turn's jobs (one batch with the
        # others queued), jobs to run alone, a checkpoint a commit on a loop
        # made due (its ``since``), or None: stop.
        self._queue: queue.SimpleQueue[list[_Job] | _Alone | int | None] = queue.SimpleQueue()
        # Jobs submitted in this turn of each event loop, handed over at its end.
        self._pending: dict[asyncio.AbstractEventLoop, list[_Job]] = {}
        # Batches handed to the thread and not yet settled: while any is, a
        # loop's next batch queues behind it rather than overtaking it.
        self._in_hand = 0
        # Jobs a loop holds because the lock was taken when it tried, and since
        # when: tried again at its next turns (first in its next batch), for
        # up to HOLD_S, then handed to the thread (SQLite only).
        self._held: dict[asyncio.AbstractEventLoop, tuple[float, list[_Job]]] = {}
        self._timed: set[asyncio.AbstractEventLoop] = set()  # loops with a retry due
        self._holding = store.dialect == "sqlite"
        self._careful_until = 0.0  # perf_counter: until then, a savepoint a job
        self._count = threading.Lock()  # guards _in_hand and stats
        self._thread = threading.Thread(target=self._run, name="broker-commit", daemon=True)
        self._thread.start()

    async def submit(self, fn: Callable[[Any], T]) -> T:
        """Run ``fn(tx)`` in the next group transaction; its result or its error."""
        return await self.job(fn)

    def job(self, fn: Callable[[Any], T]) -> asyncio.Future[T]:
        """``submit`` without its coroutine: the future of ``fn(tx)``'s outcome.
        A parked wait's step awaits it shielded (its give-back needs the outcome
        of a job its cancelled caller no longer waits for), and with no task of
        its own to start, it reaches this turn's hand-over one loop pass sooner."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        pending = self._pending.get(loop)
        if pending is None:
            pending = self._pending[loop] = []
            loop.call_soon(self._hand_over, loop)
        pending.append(_Job(fn, loop, future))
        return future

    def _hand_over(self, loop: asyncio.AbstractEventLoop) -> None:
        since, jobs = self._held.pop(loop, (0.0, []))
        jobs += self._pending.pop(loop, [])
        for at in range(0, len(jobs), self.max_batch):
            if self._in_hand:
                self._send(jobs[at:])  # the rest behind the thread's, in their order
                return
            if not self._commit(jobs[at : at + self.max_batch], here=True):
                self._hold(loop, since, jobs[at:])
                return

    def _hold(self, loop: asyncio.AbstractEventLoop, since: float, jobs: list[_Job]) -> None:
        """``jobs`` could not begin here: keep them on the loop for its next
        turn (see the module doc), or hand them to the thread once they have
        waited HOLD_S, or at once where every write waits (PostgreSQL)."""
        now = time.monotonic()
        if not self._holding or (since and now - since >= HOLD_S):
            self._send(jobs)
            return
        self._held[loop] = (since or now, jobs)
        if loop not in self._timed:  # a quiet loop has no next turn of its own
            self._timed.add(loop)
            loop.call_later(RETRY_S, self._retry, loop)

    def _retry(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timed.discard(loop)
        if loop in self._held and loop not in self._pending:  # else its turn is due
            self._hand_over(loop)

    def _send(self, jobs: list[_Job] | _Alone) -> None:
        with self._count:
            self._in_hand += 1
        self._queue.put(jobs)

    def close(self, timeout: float = 10.0) -> None:
        """Finish what is queued, then stop the thread."""
        for loop in list(self._held):  # to the thread: this may be no loop's thread
            self._send(self._held.pop(loop)[1])
        for loop in list(self._pending):
            jobs = self._pending.pop(loop, None)
            if jobs:
                self._send(jobs)
        self._queue.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        stop = False
        while not stop:
            item = self._queue.get()
            if item is None:
                return
            batch: list[_Job] = []
            taken = 0  # hand-overs of jobs this pass settles
            while True:
                if isinstance(item, list):
                    taken += 1
                    batch.extend(item)
                else:
                    self._commit_all(batch)  # what came before it, first
                    batch = []
                    if isinstance(item, int):
                        self.store.checkpoint_after(item)
                    else:
                        taken += 1
                        for job in item.jobs:
                            self._commit([job])
                if len(batch) >= self.max_batch:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                    break
            self._commit_all(batch)
            with self._count:
                self._in_hand -= taken

    def _commit_all(self, batch: list[_Job]) -> None:
        for at in range(0, len(batch), self.max_batch):  # a hand-over may pass the cap
            self._commit(batch[at : at + self.max_batch])

    def _commit(self, batch: list[_Job], *, here: bool = False, careful: bool = False) -> bool:
        """Run ``batch`` in one transaction and settle each job's future.
        ``here``: on the event loop's own thread, only if the write can begin
        at once; False then when it cannot (nothing ran). ``careful``: each job
        under a savepoint (see the module doc)."""
        started = time.perf_counter()
        writing = self.store.write_now() if here else self.store.transaction()
        if writing is None:  # PostgreSQL: every write waits
            return False
        checkpoint = 0
        careful = careful or started < self._careful_until
        run = _run_job if careful else _run_bare
        try:
            with writing as tx:
                outcomes = [run(tx, job) for job in batch]
            checkpoint = tx.checkpoint_due  # a write_now's, for the thread (0: none)
        except errors.WriterTaken:  # raised as it began (each job catches its own errors)
            return False
        except _Undo:  # rolled back: nothing was written
            self._careful_until = time.perf_counter() + CAREFUL_S
            with self._count:
                self.stats.careful += 1
            return self._commit(batch, here=here, careful=True)
        except Exception as exc:  # noqa: BLE001 - the commit failed: nothing was written
            if len(batch) > 1:
                with self._count:
                    self.stats.retried_alone += len(batch)
                if here:
                    self._send(_Alone(batch))
                else:
                    for job in batch:
                        self._commit([job])
                return True
            outcomes = [(False, exc)]
        with self._count:  # the thread and a loop may count at once
            s = self.stats
            s.transactions += 1
            s.on_loop += here
            s.jobs += len(batch)
            s.largest = max(s.largest, len(batch))
            s.sizes[len(batch)] = s.sizes.get(len(batch), 0) + 1
            s.busy_s += time.perf_counter() - started
        if checkpoint:
            self._queue.put(checkpoint)
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], bool, Any]]] = {}
        for job, (ok, value) in zip(batch, outcomes, strict=True):
            by_loop.setdefault(job.loop, []).append((job.future, ok, value))
        for loop, settled in by_loop.items():
            if here:
                _settle_all(settled)  # this loop's own jobs, on its own thread
                continue
            with contextlib.suppress(RuntimeError):  # its loop closed meanwhile: nobody waits
                loop.call_soon_threadsafe(_settle_all, settled)  # one wake-up a transaction
        return True


def _settle_all(settled: list[tuple[asyncio.Future[Any], bool, Any]]) -> None:
    for future, ok, value in settled:
        _settle(future, ok, value)


class _Undo(Exception):  # noqa: N818 - a signal, not an error
    """A job of a batch run bare failed with writes to undo: roll it all back."""


def _run_bare(tx: Any, job: _Job) -> tuple[bool, Any]:
    """``_run_job`` with no savepoint: an error whose writes stay (``KEEP``) is
    the job's outcome; any other raises ``_Undo`` (the batch runs again, careful)."""
    if job.future.cancelled():
        return (False, None)
    try:
        result = job.fn(tx)
        tx.flush()
    except KEEP as exc:
        tx.let_go(exc)
        return (False, exc)
    except Exception as exc:
        tx.let_go(exc)  # the careful pass must not meet its statements running
        raise _Undo from None
    return (True, result)


def _run_job(tx: Any, job: _Job) -> tuple[bool, Any]:
    if job.future.cancelled():
        return (False, None)
    tx.savepoint()
    try:
        result = job.fn(tx)
        tx.flush()  # a deferred write's refusal is this job's (PostgreSQL: Tx.defer)
    except KEEP as exc:
        tx.release_savepoint(exc)
        return (False, exc)
    except Exception as exc:  # noqa: BLE001 - this job's error, not the batch's
        if not isinstance(exc, errors.BrokerError):
            log.exception("write job failed")
        tx.rollback_to_savepoint(exc)
        return (False, exc)
    tx.release_savepoint()
    return (True, result)


def _settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if future.cancelled():
        return
    with contextlib.suppress(asyncio.InvalidStateError):
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)
