"""The asyncio API (spec §Served mode): AsyncAgent / AsyncOperator have the
sync handles' methods, wait on the doorbell without a thread per waiter (S20),
and a cancelled claim neither loses nor doubles a message (S13, S16).

Real SQLite files, real sender processes; the event loop is asyncio's own."""

from __future__ import annotations

import asyncio
import inspect
import random
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import sqlrows
import trusted

from broker import Agent, Operator, Store, errors
from broker.api import aio
from broker.api.aio import AsyncAgent, AsyncOperator
from broker.delivery import wake
from broker.model.records import Lease

T = TypeVar("T")

# A sender in ANOTHER process: connects as an agent and sends one message per
# line of "to<TAB>text" read from argv[4], printing each message id.
SENDER = """
import sys
from broker import Agent, Store
url, space, address, token, plan = sys.argv[1:6]
store = Store(url)
agent = Agent.connect(store, space, address, token)
for line in open(plan, encoding="utf-8"):
    to, text = line.rstrip("\\n").split("\\t", 1)
    print(agent.send(to, text).id, flush=True)
store.close()
"""


def arun(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@pytest.fixture
def sender_process(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []

    def start(store: Store, space: str, joined_as: tuple[str, str], plan: list[tuple[str, str]]):
        path = tmp_path / f"plan{len(procs)}.tsv"
        path.write_text("".join(f"{to}\t{text}\n" for to, text in plan), encoding="utf-8")
        proc = subprocess.Popen(
            [sys.executable, "-c", SENDER, store.url, space, *joined_as, str(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        return proc

    try:
        yield start
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.communicate(timeout=60)


def _threads() -> int:
    """Live threads but the writer lock's helpers (one per contended connection of
    the bounded pool, not per waiter: broker.store.writelock), a store's keeper
    (one per store while waits are parked, broker.delivery.waits) and its
    doorbell listener (broker.delivery.wake), whether or not an earlier test's
    store started them."""
    fixed = ("broker-writer-lock", "broker-keeper", "broker-doorbell")
    return sum(1 for t in threading.enumerate() if t.name not in fixed)


def _public(obj: object) -> set[str]:
    return {n for n in dir(obj) if not n.startswith("_")}


# Names only the async twins have: the sync handle, a wrapper, the inbox's
# doorbell (a front end's watcher awaits it without a thread; a sync caller
# waits through claim(wait=...) or next_turn(wait=...)), and a server's bounds
# on its parked waits (S41).
ASYNC_ONLY = {"sync", "wrap", "doorbell", "parking", "writer"}


def test_async_twins_have_the_sync_handles_methods_as_coroutines(
    store: Store, join: Callable[..., Agent]
) -> None:
    agent, operator = join("a"), Operator(store)
    pairs = ((agent, AsyncAgent.wrap(agent)), (operator, AsyncOperator.wrap(operator)))
    for sync_obj, async_obj in pairs:
        # Instances: attributes set in __init__ (store, identity, via) count too.
        assert _public(async_obj) - ASYNC_ONLY == _public(sync_obj), type(async_obj).__name__
        sync_cls, async_cls = type(sync_obj), type(async_obj)
        for name in _public(sync_cls):
            sync_attr = inspect.getattr_static(sync_cls, name, None)
            async_attr = getattr(async_cls, name, None)
            if isinstance(sync_attr, property) or not callable(sync_attr):
                continue
            if isinstance(sync_attr, classmethod):
                assert inspect.iscoroutinefunction(async_attr), name  # connect, join
                continue
            assert inspect.iscoroutinefunction(async_attr) or (
                name == "follow" and inspect.isasyncgenfunction(async_attr)
            ), f"{async_cls.__name__}.{name}"
            sync_params = list(inspect.signature(getattr(sync_cls, name)).parameters)
            async_params = list(inspect.signature(async_attr).parameters)
            assert async_params == sync_params, name


def test_S10_async_agent_sends_as_itself_and_reads_what_it_sent(store: Store, space: str) -> None:
    async def main() -> None:
        a, joined = await trusted.ajoin(store, space, "a")
        b, _ = await trusted.ajoin(store, space, "b")
        again = await AsyncAgent.connect(store, space, "a", joined.token)
        sent = await again.send("b", "hello", idempotency_key="k1")
        assert sent.reached == ["b"]
        lease = await b.claim()
        assert [(d.sender, d.body) for d in lease.deliveries] == [("a", "hello")]
        assert await b.ack(lease.lease_token) == 1
        await a.post("on the board")
        assert [e.body for e in await b.board_read()] == ["on the board"]
        grant = await a.claim_key("files/x")
        with pytest.raises(errors.ClaimHeld):
            await b.claim_key("files/x")
        await a.release_key("files/x", grant.fence)
        op = AsyncOperator(store, via="mcp")
        await op.send(space, "from the human", to=["b"])
        log = await op.log(space)
        assert [(e.sender, e.kind) for e in log] == [
            ("a", "direct"),
            ("a", "post"),
            ("operator", "operator"),
        ]

    arun(main())


def test_S33_async_waits_are_checked(store: Store, space: str, join: Callable[..., Agent]) -> None:
    b = AsyncAgent.wrap(join("b"))

    async def main() -> None:
        for bad in (float("nan"), float("inf"), -1.0, aio.MAX_WAIT_S * 2):
            with pytest.raises(errors.InvalidInput, match="bad wait"):
                await b.claim(wait=bad)
            with pytest.raises(errors.InvalidInput, match="bad wait"):
                await b.next_turn(wait=bad)

    arun(main())


def test_S20_many_async_waiters_wake_on_another_process_send_without_a_thread_each(
    store: Store,
    space: str,
    join: Callable[..., Agent],
    sender_process: Callable[..., subprocess.Popen[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Only a doorbell may wake them: the data_version safety tick is pushed
    # past the test, so a waiter the ring missed would sit out its whole wait.
    monkeypatch.setattr(wake, "SAFETY_S", 3600.0)
    n = 150
    names = [f"w{i}" for i in range(n)]
    agents = [AsyncAgent.wrap(join(name)) for name in names]
    _, sender = trusted.join(store, space, "sender")
    plan = [(name, f"for {name}") for name in names]

    async def main() -> None:
        threads_before = _threads()
        claims = [asyncio.create_task(a.claim(wait=60)) for a in agents[: n // 2]]
        turns = [asyncio.create_task(a.next_turn(wait=60)) for a in agents[n // 2 :]]
        follow = asyncio.create_task(_first_batch(AsyncOperator(store), space))
        while aio.waiting() < n + 1:  # barrier: every waiter parked on its doorbell
            await asyncio.sleep(0.005)
        # Parked waiters hold no thread: the pool is bounded, whatever n is.
        assert _threads() <= threads_before + aio.WORKERS
        proc = sender_process(store, space, (sender.address, sender.token), plan)
        leases = await asyncio.wait_for(asyncio.gather(*claims), 30)
        got_turns = await asyncio.wait_for(asyncio.gather(*turns), 30)
        first = await asyncio.wait_for(follow, 30)
        assert proc.wait(30) == 0
        for name, lease in zip(names, leases, strict=False):
            assert [d.body for d in lease.deliveries] == [f"for {name}"]
        for name, turn in zip(names[n // 2 :], got_turns, strict=True):
            assert turn.id is not None
            assert [i.body for i in turn.items] == [f"for {name}"]
        assert first and first[0].sender == "sender"

    arun(main())


async def _first_batch(op: AsyncOperator, space: str) -> list[Any]:
    async for batch in op.follow(space, after=0):
        return batch
    return []


def test_S20_async_follow_yields_new_rows_and_ends_when_idle(
    store: Store, space: str, join: Callable[..., Agent]
) -> None:
    a = join("a")
    join("b")
    a.send("b", "before")

    async def main() -> list[str]:
        op = AsyncOperator(store)
        bodies: list[str] = []
        first = asyncio.create_task(asyncio.to_thread(a.send, "b", "after 1"))
        async for batch in op.follow(space, after=1, idle_timeout=0.5):
            bodies += [e.body for e in batch]
            if bodies == ["after 1"]:
                await asyncio.to_thread(a.send, "b", "after 2")
        await first
        return bodies

    assert arun(main()) == ["after 1", "after 2"]


def _hold_write_lock(store: Store) -> tuple[threading.Event, threading.Thread]:
    """Another thread holds the write transaction until the event is set."""
    held, go = threading.Event(), threading.Event()

    def hold() -> None:
        with store.write():
            held.set()
            go.wait(30)

    thread = threading.Thread(target=hold)
    thread.start()
    assert held.wait(10)
    return go, thread


def _delivery_rows(store: Store) -> list[dict[str, Any]]:
    with store.read() as t:
        return t.rows(
            f"SELECT message_id, state, attempts FROM {sqlrows.delivery_rows()} ORDER BY rowid"
        )


def test_S13_a_claim_cancelled_after_its_statement_ran_gives_the_messages_back_at_once(
    store: Store, space: str, join: Callable[..., Agent]
) -> None:
    a, b = join("a"), join("b")
    sent = a.send("b", "precious").id
    ab = AsyncAgent.wrap(b)

    async def main() -> None:
        # The claim's statement is held back by another writer, and the
        # cancellation lands while it waits: the statement still runs after it.
        go, holder = _hold_write_lock(store)
        task = asyncio.create_task(ab.claim(wait=10))
        await asyncio.sleep(0)  # the task submitted its claim to a worker thread
        task.cancel()
        go.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        holder.join(10)
        # The claim ran (the message was handed out once) and was given back.
        assert _delivery_rows(store) == [{"message_id": sent, "state": "ready", "attempts": 1}]
        lease = await ab.claim()
        assert [d.id for d in lease.deliveries] == [sent]

    arun(main())


def test_S18_a_turn_taken_by_a_cancelled_next_turn_is_the_next_turn(
    store: Store, space: str, join: Callable[..., Agent]
) -> None:
    a, b = join("a"), join("b")
    sent = a.send("b", "see me once").id
    ab = AsyncAgent.wrap(b)

    async def main() -> None:
        go, holder = _hold_write_lock(store)
        task = asyncio.create_task(ab.next_turn(wait=10))
        await asyncio.sleep(0)
        task.cancel()
        go.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        holder.join(10)
        turn = await ab.next_turn()
        assert turn.id is not None and [i.id for i in turn.items] == [sent]
        seen = await ab.seen(turn.id)
        assert seen.message_ids == [sent]
        assert (await ab.next_turn()).id is None  # shown once, not twice

    arun(main())


def test_S4_a_turn_kept_from_a_cancelled_next_turn_is_not_handed_to_a_participant_that_left(
    store: Store, space: str, join: Callable[..., Agent]
) -> None:
    a, b = join("a"), join("b")
    a.send("b", "see me once")
    ab = AsyncAgent.wrap(b)

    async def main() -> None:
        go, holder = _hold_write_lock(store)
        task = asyncio.create_task(ab.next_turn(wait=10))
        await asyncio.sleep(0)
        task.cancel()
        go.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        holder.join(10)
        await ab.leave()
        with pytest.raises(errors.ParticipantLeft):
            await ab.next_turn()

    arun(main())


def test_cancelled_write_finishes_before_the_cancellation_propagates(
    store: Store, space: str, join: Callable[..., Agent]
) -> None:
    a = AsyncAgent.wrap(join("a"))
    join("b")

    async def main() -> None:
        go, holder = _hold_write_lock(store)
        task = asyncio.create_task(a.send("b", "once", idempotency_key="k"))
        await asyncio.sleep(0)
        task.cancel()
        go.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        holder.join(10)
        # Nothing in flight behind the caller's back: the send is committed (once).
        log = Operator(store).log(space)
        assert [e.body for e in log] == ["once"]

    arun(main())


def test_S16_cancelling_1000_waiting_claims_loses_and_doubles_no_message(
    store: Store,
    join: Callable[..., Agent],
    sender_process: Callable[..., subprocess.Popen[str]],
) -> None:
    # A cancelled claim's release keeps the delivery count (S14), so a message
    # caught by several cancelled claims would reach max_deliveries: raised here
    # so the test counts losses to cancellation, not poison handling (S15).
    op = Operator(store)
    space = op.create_space("workflow", max_deliveries=10_000, inbox_cap=10_000).id
    _, sender = trusted.join(store, space, "sender")
    b = AsyncAgent.wrap(trusted.join(store, space, "b")[0])
    total = 600
    rng = random.Random(20240601)
    proc = sender_process(
        store, space, (sender.address, sender.token), [("b", f"m{i}") for i in range(total)]
    )
    completed: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()

    async def one(i: int) -> None:
        task = asyncio.create_task(b.claim(limit=rng.choice([1, 2, 5]), wait=rng.random() * 0.2))
        delay = rng.choice([None, 0.0, 0.0, 0.0001, 0.0005, 0.001, 0.002, 0.005, 0.02])
        if delay is not None:
            if delay:
                await asyncio.sleep(delay)
            else:
                await asyncio.sleep(0)
            task.cancel()
        try:
            lease: Lease = await task
        except asyncio.CancelledError:
            outcomes["cancelled"] += 1
            return
        outcomes["completed"] += 1
        completed.update(d.id for d in lease.deliveries)
        if lease.deliveries:
            await b.ack(lease.lease_token)

    async def main() -> None:
        sem = asyncio.Semaphore(24)

        async def bounded(i: int) -> None:
            async with sem:
                await one(i)

        await asyncio.gather(*(bounded(i) for i in range(1000)))
        # Drain what is left once the sender is done: nothing may be stuck.
        await asyncio.to_thread(proc.wait, 60)
        while sum(completed.values()) < total:
            lease = await b.claim(limit=100, wait=5)
            if not lease.deliveries:
                break
            completed.update(d.id for d in lease.deliveries)
            await b.ack(lease.lease_token)

    arun(main())
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    sent_ids = out.split()
    assert len(sent_ids) == total
    assert outcomes["cancelled"] > 0 and outcomes["completed"] > 0
    assert set(completed) == set(sent_ids)  # 0 lost
    assert [m for m, c in completed.items() if c != 1] == []  # 0 delivered twice
    states = Counter(r["state"] for r in _delivery_rows(store))
    assert states == {"done": total}  # nothing stuck in processing, nothing quarantined


def test_readme_asyncio_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import re

    monkeypatch.setenv("BROKER_HOME", str(tmp_path))
    monkeypatch.delenv("BROKER_URL", raising=False)
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "AsyncAgent" in b]
    assert blocks, "the README lost its asyncio example"
    exec(compile(blocks[0], "README.md", "exec"), {})  # noqa: S102 - our own documentation
    store = Store()
    try:
        log = Operator(store).log(_only_space(store))
    finally:
        store.close()
    assert [(e.sender, e.body) for e in log] == [("lynx", "found 3 failing tests")]


def _only_space(store: Store) -> str:
    from broker.spaces import spaces

    (space,) = spaces.list_spaces(store)
    return space.id
