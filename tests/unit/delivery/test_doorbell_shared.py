"""S41: a process has one doorbell per store, however many participants wait in it.

A parked wait (a claim or a turn with a wait, a follow, an MCP inbox watcher)
holds no file descriptor of its own: its bell is rung by the process's one
socket (SQLite) and its thread. Counted here on the real process: the sockets
in ``/proc/self/fd`` before the waits park and while they are parked. Before
the fix each waiter bound a socket of its own (40 waiters, 40 sockets).

A process whose doorbell queue is full (it is stopped, or too busy to read)
never blocks a writer, and loses no wake-up: the writer leaves a mark, and the
process rings all its waiters when it reads again."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import trusted

from broker import Agent, Operator, Store
from broker.api import aio
from broker.api.aio import AsyncAgent
from broker.delivery import doorbells, wake

N = 40
pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")


def _sockets() -> set[str]:
    """Sockets this process holds open now (``socket:[inode]``). Compared as
    sets: what a wait opened is what is new, whatever an earlier test's
    connection closed meanwhile (a loaded machine collects them late)."""
    out: set[str] = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor, closed since
            link = os.readlink(f"/proc/self/fd/{fd}")
            if link.startswith("socket:"):
                out.add(link)
    return out


def _bound_under(folder: str) -> set[str]:
    """The Unix sockets of the machine bound to a path under ``folder``
    (``socket:[inode]``, as ``/proc/self/fd`` names them): a doorbell is one,
    bound in the store's doorbell folder."""
    out: set[str] = set()
    with open("/proc/net/unix", encoding="utf-8") as table:
        next(table)  # the header
        for line in table:
            fields = line.split()
            if len(fields) >= 8 and fields[7].startswith(folder):
                out.add(f"socket:[{fields[6]}]")
    return out


def _fds(store: Store) -> int:
    """Descriptors this process holds open now, but the store's own files: a
    worker thread of the asyncio API opens its connection (the database, its
    WAL and shared memory, the writer lock) the first time it runs a call,
    which a loaded machine may leave to the waits; that is a few per thread,
    never one per waiter."""
    own = str(store.path)
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor, closed since
            if not os.readlink(f"/proc/self/fd/{fd}").startswith(own):
                n += 1
    return n


@pytest.fixture
def crowd(store: Store) -> tuple[Agent, list[Agent]]:
    space = Operator(store).create_space("workflow").id
    sender, _ = trusted.join(store, space, "sender")
    agents = []
    for i in range(N):
        agent, joined = trusted.join(store, space, f"w{i}")
        agent.token = joined.token  # type: ignore[attr-defined]  # for a helper process
        agents.append(agent)
    return sender, agents


def test_S41_many_identities_parked_in_one_event_loop_share_one_doorbell_socket(
    store: Store, crowd: tuple[Agent, list[Agent]]
) -> None:
    sender, agents = crowd

    async def main() -> tuple[
        tuple[set[str], int], tuple[set[str], int], set[str], list[list[str]]
    ]:
        twins = [AsyncAgent.wrap(a) for a in agents]
        # Warm up what any call opens once (worker threads' connections, the
        # loop thread's own), so that what is counted below is the waits'.
        await asyncio.gather(*(t.claim() for t in twins))
        async with twins[0].doorbell() as bell:
            await bell.wait(0.01)
        doorbells.release_idle()
        before = (_sockets(), _fds(store))
        tasks = [asyncio.create_task(t.claim(wait=60)) for t in twins]
        deadline = time.monotonic() + 60
        while aio.waiting() < N and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert aio.waiting() == N
        during = (_sockets(), _fds(store))
        bound = _bound_under(doorbells.root_path(store))  # while the waits are parked
        assert doorbells.count() == 1
        await aio.run(lambda: [sender.send(f"w{i}", f"for w{i}") for i in range(N)])
        leases = await asyncio.wait_for(asyncio.gather(*tasks), 60)
        return before, during, bound, [[d.body for d in lease.deliveries] for lease in leases]

    before, during, bound, bodies = asyncio.run(main())
    assert bodies == [[f"for w{i}"] for i in range(N)]  # every one woke with its mail
    # One doorbell socket, not one per waiter: the new sockets bound in the
    # store's doorbell folder (another test's thread of this process may open
    # a socket of its own meanwhile on a loaded machine: not a doorbell).
    bells = (during[0] - before[0]) & bound
    assert len(bells) == 1, (before, during)
    assert len(during[0] - before[0]) < N // 2, (before, during)
    # No descriptor per waiter: a socket each would add N. (The asyncio API's
    # worker threads' connections to the store are left out: _fds.)
    assert during[1] - before[1] < N // 2, (before, during)


def test_S41_many_identities_waiting_in_threads_of_one_process_share_one_doorbell_socket(
    store: Store, crowd: tuple[Agent, list[Agent]]
) -> None:
    sender, agents = crowd
    agents = agents[:12]
    doorbells.release_idle()
    before = _sockets()
    parked = threading.Barrier(len(agents) + 1)
    counted: list[set[str]] = []
    got: dict[int, list[str]] = {}

    def hook(waiter: wake.Waiter, event: str) -> None:
        if event == "sleep" and not getattr(waiter, "_counted", False):
            waiter._counted = True  # type: ignore[attr-defined]
            parked.wait(60)

    def claim(i: int) -> None:
        got[i] = [d.body for d in agents[i].claim(wait=60).deliveries]

    wake._hook = hook
    try:
        threads = [threading.Thread(target=claim, args=(i,)) for i in range(len(agents))]
        for th in threads:
            th.start()
        parked.wait(60)  # every thread is registered and about to sleep
        counted.append(_sockets())
        bound = _bound_under(doorbells.root_path(store))  # while the waits are parked
        assert doorbells.count() == 1
        for i in range(len(agents)):
            sender.send(f"w{i}", f"for w{i}")
        for th in threads:
            th.join(60)
    finally:
        wake._hook = None
    assert got == {i: [f"for w{i}"] for i in range(len(agents))}
    # One doorbell socket, not one per waiting thread: the new sockets bound in
    # the store's doorbell folder (as the event loop's test counts them: a
    # socket another thread of this process opened meanwhile is not a doorbell;
    # one did, once, in CI).
    assert len((counted[0] - before) & bound) == 1, (before, counted)
    assert len(counted[0] - before) < len(agents) // 2, (before, counted)


HELPER = str(Path(__file__).parents[2].joinpath("wake_waiter.py"))


def test_S41_a_stopped_process_whose_doorbell_queue_fills_loses_no_wake_up_and_blocks_no_writer(
    store: Store, db_url: str, crowd: tuple[Agent, list[Agent]]
) -> None:
    """The waiting process is stopped (SIGSTOP): rings for one key fill its
    queue, so the ring for another key cannot be queued. The writer neither
    blocks nor fails; when the process runs again it rings all its waiters,
    and the waiter on the other key returns with its mail."""
    sender, agents = crowd
    a, b = agents[0], agents[1]
    proc = subprocess.Popen(
        [
            sys.executable,
            HELPER,
            "two-waiters",
            db_url,
            a.space_id,
            a.address,
            a.token,  # type: ignore[attr-defined]
            b.address,
            b.token,  # type: ignore[attr-defined]
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert json.loads(proc.stdout.readline()) == {"parked": 2}
        os.kill(proc.pid, signal.SIGSTOP)
        key_a = wake.participant_key(a.identity.participant_id)
        started = time.monotonic()
        rung = [wake.ring_keys(store, [key_a]) for _ in range(200)]  # fills its queue
        sender.send("w1", "after the queue filled")  # its ring cannot be queued
        assert time.monotonic() - started < 30  # never blocked on the stopped reader
        assert rung == [1] * 200
        os.kill(proc.pid, signal.SIGCONT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    results = [json.loads(line) for line in out.splitlines()]
    assert {"w1": ["after the queue filled"], "woke": "rung"} in results
