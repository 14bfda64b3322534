"""The server's group committer (broker/frontends/http/commit.py) acknowledges a
write only after its COMMIT (S46), on both backends, and never blocks the
event loop: a loop runs its turn's writes itself only when the store can
begin them without waiting (SQLite, the writer lock free); a turn that finds
the lock taken keeps its writes and tries again at the loop's next turns, for
``HOLD_S`` at most, then its writer thread runs them.

A real store and real library writes run through the real ``Committer``; the
batch's COMMIT is made to fail by a job that leaves a deferred constraint
broken (checked only at COMMIT, as a real conflict would be). The writer
lock is held by a ``WriterLock`` of its own: the loop's no-wait writes find it
taken (its mutex held by the loop's own thread, or its ``flock`` by another
open file description), and the writer thread waits for it."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from broker import Agent, Operator, Store, errors
from broker.frontends.http import commit
from broker.frontends.http.commit import Committer
from broker.store.writelock import WriterLock

# A constraint checked at COMMIT only: the job's own statements succeed, its
# savepoint is released, and the batch's COMMIT fails (the same SQL on both).
BREAK_AT_COMMIT = (
    "CREATE TEMP TABLE commit_fails_parent (id INTEGER PRIMARY KEY)",
    "CREATE TEMP TABLE commit_fails_child (p INTEGER REFERENCES commit_fails_parent (id) "
    "DEFERRABLE INITIALLY DEFERRED)",
    "INSERT INTO commit_fails_child (p) VALUES (1)",
)


def committed_ids(store: Store, space: str) -> list[str]:
    """The direct messages committed so far, read on another connection."""
    return [e.id for e in Operator(store).log(space, kinds=["direct"])]


def sending(
    agent: Agent, text: str, ran: list[tuple[str, int]] | None = None
) -> Callable[[Any], Any]:
    """A write job: ``agent`` sends ``text`` to otter in the batch's transaction
    (noting in ``ran`` which thread ran it)."""

    def job(tx: Any) -> Any:
        if ran is not None:
            ran.append((text, threading.get_ident()))
        return agent.send("otter", text, tx=tx)

    return job


async def until(cond: Callable[[], bool]) -> None:
    """Let the loop turn until ``cond()`` (a bounded wait, no fixed sleep)."""
    deadline = time.monotonic() + 30
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.001)


@contextlib.contextmanager
def writer_lock_taken(store: Store) -> Iterator[Callable[[], None]]:
    """The store's writer lock held by someone else (SQLite; a no-op on
    PostgreSQL, whose writes always go to the thread); yields its release."""
    if store.dialect != "sqlite":
        yield lambda: None
        return
    lock = WriterLock(store.lock_path)
    assert lock.acquire(5.0)
    try:
        yield lock.release
    finally:
        lock.close()


def test_S46_a_failed_commit_acknowledges_no_job_and_each_job_is_then_retried_alone(
    store: Store, space: str, join: Callable[..., Agent]
) -> None:
    lynx, _ = join("flow/lynx"), join("flow/otter")
    committer = Committer(store)
    runs: list[tuple[str, Any]] = []  # (job, its transaction): the tx objects stay alive
    gate = threading.Event()

    def hold(tx: Any) -> str:
        runs.append(("hold", tx))
        gate.wait(30)  # the next jobs queue meanwhile: they form one batch
        return "held"

    def send(text: str) -> Callable[[Any], Any]:
        def job(tx: Any) -> Any:
            runs.append((text, tx))
            return lynx.send("otter", text, tx=tx)

        return job

    def poison(tx: Any) -> str:
        runs.append(("poison", tx))
        for sql in BREAK_AT_COMMIT:
            tx.execute(sql)
        return "poisoned"  # never acknowledged: its COMMIT fails, alone too

    settled: list[tuple[str, str, bool]] = []  # (job, outcome, durable when it was settled)

    def watch(name: str, future: asyncio.Future[Any]) -> None:
        def done(f: asyncio.Future[Any]) -> None:
            if f.exception() is not None:
                settled.append((name, "error", False))
                return
            value = f.result()
            durable = getattr(value, "id", None) in committed_ids(store, space)
            settled.append((name, "ok", durable))

        future.add_done_callback(done)

    async def main() -> list[Any]:
        loop = asyncio.get_running_loop()
        with writer_lock_taken(store) as let_go:  # so the thread, not the loop, holds ``hold``
            first = asyncio.ensure_future(committer.submit(hold))
            await until(lambda: committer._in_hand == 1)
            let_go()
        while not runs:
            await asyncio.sleep(0.005)
        futures = {}
        for name, job in (("one", send("one")), ("poison", poison), ("two", send("two"))):
            futures[name] = asyncio.ensure_future(committer.submit(job))
            watch(name, futures[name])
        await asyncio.sleep(0.05)  # every submit has queued its job
        await loop.run_in_executor(None, gate.set)
        await first
        return await asyncio.gather(*futures.values(), return_exceptions=True)

    try:
        one, poisoned, two = asyncio.run(main())
    finally:
        committer.close()
    # The batch [one, poison, two] ran in one transaction whose COMMIT failed;
    # then each job ran again alone, each in a transaction of its own.
    names = [name for name, _ in runs]
    assert names == ["hold", "one", "poison", "two", "one", "poison", "two"]
    batch = {id(tx) for _, tx in runs[1:4]}
    alone = [id(tx) for _, tx in runs[4:]]
    assert len(batch) == 1 and len(set(alone)) == 3 and not batch & set(alone)
    assert committer.stats.retried_alone == 3
    # No job was acknowledged with the failed batch's outcome: every success
    # was settled after its own COMMIT, and names a message that is there.
    assert isinstance(poisoned, errors.StoreError)  # its COMMIT failed alone too
    assert sorted(settled) == [("one", "ok", True), ("poison", "error", False), ("two", "ok", True)]
    assert committed_ids(store, space) == [one.id, two.id]


def test_S46_a_job_that_fails_holding_a_writes_unread_rows_fails_alone(
    store: Store, space: str, join: Callable[..., Agent]
) -> None:
    """A job's error is its answer, kept until the batch has committed, and with
    it the frames it came up through. A frame that held a write's RETURNING
    rows, not all read, kept that statement running: SQLite then refused the
    job's savepoint, every later job's and the COMMIT ("SQL statements in
    progress"), and the whole batch failed as a store error. Now the failed
    job is refused with its own error, whether it was kept (its writes with
    it) or undone, and its neighbours commit in the same transaction."""
    lynx, _ = join("flow/lynx"), join("flow/otter")
    committer = Committer(store)
    with store.write() as t:
        t.execute("CREATE TABLE scratch_rows (n INTEGER)")
        t.execute("INSERT INTO scratch_rows (n) VALUES (1), (2), (3)")

    def failing(error: errors.BrokerError) -> Callable[[Any], Any]:
        def job(tx: Any) -> Any:
            rows = tx.execute("UPDATE scratch_rows SET n = n + 10 RETURNING n")
            rows.fetchone()  # one of three: the statement is still running here
            raise error

        return job

    async def main() -> list[Any]:
        jobs = [
            sending(lynx, "before"),
            failing(errors.InvalidInput("undone", field="x")),  # rolled back
            failing(errors.NotDelivered("kept")),  # its writes kept (S8)
            sending(lynx, "after"),
        ]
        return await asyncio.gather(*(committer.job(j) for j in jobs), return_exceptions=True)

    try:
        before, undone, kept, after = asyncio.run(main())
    finally:
        committer.close()
    assert isinstance(undone, errors.InvalidInput) and str(undone) == "undone"
    assert isinstance(kept, errors.NotDelivered)
    assert committed_ids(store, space) == [before.id, after.id]
    s = committer.stats  # one transaction committed: the careful pass (the bare one rolled back)
    assert (s.transactions, s.careful, s.retried_alone) == (1, 1, 0)
    with store.read() as t:  # the undone job's +10 is gone, the kept one's is there
        assert sorted(r[0] for r in t.all("SELECT n FROM scratch_rows")) == [11, 12, 13]


@pytest.mark.parametrize("window", [commit.CAREFUL_S, 0.0], ids=["within", "past"])
def test_S46_a_batch_runs_bare_until_a_job_fails_then_careful_for_a_while(
    store: Store, monkeypatch: pytest.MonkeyPatch, window: float
) -> None:
    """A batch's jobs run with no savepoint around each. A job that fails (an
    error that keeps no writes) rolls that pass back; the batch runs again
    with a savepoint a job, and so does every batch for ``CAREFUL_S`` after
    (then bare again). Each pass is read off the connection's statements;
    the jobs write rows of their own (no library call takes a savepoint)."""
    if store.dialect != "sqlite":
        pytest.skip("reads SQLite's statements; the passes are the same on PostgreSQL")
    from broker.store import sqlite

    monkeypatch.setattr(commit, "CAREFUL_S", window)
    committer = Committer(store)
    with store.write() as t:
        t.execute("CREATE TABLE scratch_rows (n INTEGER)")
    ran: list[str] = []
    execute = sqlite.Connection.execute

    def noting(self: Any, sql: Any, params: Any = ()) -> Any:
        ran.append(" ".join(str(sql).split()[:2]).upper())
        return execute(self, sql, params)

    monkeypatch.setattr(sqlite.Connection, "execute", noting)

    def writing(n: int, fails: bool = False) -> Callable[[Any], Any]:
        def job(tx: Any) -> Any:
            tx.execute("INSERT INTO scratch_rows (n) VALUES (?)", (n,))
            if fails:
                raise errors.InvalidInput("refused", field="n")
            return n

        return job

    async def batch(*jobs: Callable[[Any], Any]) -> list[Any]:
        return await asyncio.gather(*(committer.job(j) for j in jobs), return_exceptions=True)

    def passes() -> list[str]:  # each BEGIN .. COMMIT / ROLLBACK, bare or careful
        out, state = [], ""
        for words in ran:  # ROLLBACK TO a savepoint is not the pass's end
            first = words.split()[0]
            if first == "BEGIN":
                state = "bare"
            elif first == "SAVEPOINT":
                state = "careful"
            elif words in ("COMMIT", "ROLLBACK"):
                out.append(f"{state} {words.lower()}")
        ran.clear()
        return out

    try:
        assert asyncio.run(batch(writing(1), writing(2))) == [1, 2]
        assert passes() == ["bare commit"]
        three, refused, four = asyncio.run(batch(writing(3), writing(99, fails=True), writing(4)))
        assert passes() == ["bare rollback", "careful commit"]
        assert asyncio.run(batch(writing(5))) == [5]
        assert passes() == (["careful commit"] if window else ["bare commit"])
    finally:
        committer.close()
    assert (three, four) == (3, 4) and isinstance(refused, errors.InvalidInput)
    with store.read() as t:  # the refused job's row is not there, nor twice anyone's
        assert [r[0] for r in t.all("SELECT n FROM scratch_rows ORDER BY rowid")] == [1, 2, 3, 4, 5]
    assert committer.stats.careful == 1


def test_a_loops_writes_run_on_the_loop_itself_when_they_need_not_wait(
    store: Store, space: str, join: Callable[..., Agent]
) -> None:
    """SQLite, the writer lock free: a turn's writes run on the event loop's
    own thread, in one transaction, and are committed before they are
    answered. PostgreSQL (a COMMIT is a round trip): on the writer thread."""
    lynx, _ = join("flow/lynx"), join("flow/otter")
    committer = Committer(store)
    threads: list[int] = []

    def send(text: str) -> Callable[[Any], Any]:
        def job(tx: Any) -> Any:
            threads.append(threading.get_ident())
            return lynx.send("otter", text, tx=tx)

        return job

    async def main() -> tuple[int, list[Any], list[str]]:
        sent = await asyncio.gather(*(committer.submit(send(str(n))) for n in range(3)))
        return threading.get_ident(), sent, committed_ids(store, space)

    try:
        loop_thread, sent, durable = asyncio.run(main())
    finally:
        committer.close()
    assert durable == [m.id for m in sent]  # committed when answered
    assert committer.stats.transactions == 1 and committer.stats.jobs == 3
    if store.dialect == "sqlite":
        assert threads == [loop_thread] * 3 and committer.stats.on_loop == 1
    else:
        assert loop_thread not in threads and committer.stats.on_loop == 0


@pytest.mark.parametrize("hold", [60.0, 0.0], ids=["for_a_moment", "past_the_hold"])
def test_a_taken_writer_lock_keeps_the_writes_in_order_and_the_loop_awake(
    store: Store,
    space: str,
    join: Callable[..., Agent],
    monkeypatch: pytest.MonkeyPatch,
    hold: float,
) -> None:
    """While someone else holds the writer lock, the loop goes on (its other
    coroutines run). Taken for less than ``HOLD_S``, the loop keeps its writes
    and runs them itself once the lock is free: no thread hand-off, which
    costs as much as the write. Taken past it, they wait in the writer thread.
    Either way a later turn's writes queue behind, not past them, and all
    commit once it is free."""
    if store.dialect != "sqlite":
        pytest.skip("PostgreSQL's writes always run on the writer thread")
    monkeypatch.setattr(commit, "HOLD_S", hold)  # 60 s: the moment lasts as long as the test
    on_loop = hold > 0
    lynx, _ = join("flow/lynx"), join("flow/otter")
    committer = Committer(store)
    threads: list[tuple[str, int]] = []

    async def main() -> tuple[int, list[Any], list[str]]:
        with writer_lock_taken(store) as let_go:
            first = asyncio.ensure_future(committer.submit(sending(lynx, "first", threads)))
            await until(lambda: bool(committer._held) if on_loop else committer._in_hand == 1)
            second = asyncio.ensure_future(committer.submit(sending(lynx, "second", threads)))
            for _ in range(20):  # the loop turns (and tries again) meanwhile
                await asyncio.sleep(0.001)
            assert not first.done() and not second.done()
            assert committed_ids(store, space) == []
            assert committer._in_hand == (0 if on_loop else 2)
            let_go()
        sent = list(await asyncio.gather(first, second))
        return threading.get_ident(), sent, committed_ids(store, space)

    try:
        loop_thread, sent, durable = asyncio.run(main())
    finally:
        committer.close()
    assert [text for text, _ in threads] == ["first", "second"]
    assert all((thread == loop_thread) == on_loop for _, thread in threads)
    assert durable == [m.id for m in sent]
    assert committer.stats.on_loop == (1 if on_loop else 0)
    assert committer._held == {} and committer._in_hand == 0


def test_a_turn_of_more_writes_than_a_batch_takes_is_several_transactions_in_order(
    store: Store, space: str, join: Callable[..., Agent]
) -> None:
    """``max_batch`` bounds a transaction wherever it runs: five writes of one
    turn with a cap of two are three transactions, committed in their order."""
    lynx, _ = join("flow/lynx"), join("flow/otter")
    committer = Committer(store, max_batch=2)

    async def main() -> list[Any]:
        jobs = [committer.job(sending(lynx, str(n))) for n in range(5)]
        return list(await asyncio.gather(*jobs))

    try:
        sent = asyncio.run(main())
    finally:
        committer.close()
    assert committed_ids(store, space) == [m.id for m in sent]
    assert committer.stats.transactions == 3 and committer.stats.sizes == {2: 2, 1: 1}


def test_a_checkpoint_due_after_a_commit_on_the_loop_runs_on_the_writer_thread(
    store: Store, space: str, join: Callable[..., Agent], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint is I/O that may take milliseconds: when a commit the loop
    ran makes one due, the writer thread runs it, never the loop."""
    if store.dialect != "sqlite":
        pytest.skip("PostgreSQL checkpoints itself")
    lynx, _ = join("flow/lynx"), join("flow/otter")
    committer = Committer(store)
    ran_on: list[int] = []
    checkpoint_after = store.checkpoint_after

    def watched(since: int) -> None:
        ran_on.append(threading.get_ident())
        checkpoint_after(since)

    monkeypatch.setattr(store, "checkpoint_after", watched)

    async def main() -> int:
        for n in range(1001):  # one is due within CHECKPOINT_EVERY_BOUNDS commits
            await committer.submit(sending(lynx, str(n)))
            await until(lambda: committer._in_hand == 0)
            if ran_on:
                break
        return threading.get_ident()

    try:
        loop_thread = asyncio.run(main())
    finally:
        committer.close()
    assert ran_on and loop_thread not in ran_on
    assert committer.stats.on_loop == committer.stats.transactions  # every batch on the loop
