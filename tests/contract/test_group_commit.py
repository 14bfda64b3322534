"""The server's group committer (broker/frontends/http/commit.py) acknowledges a
write only after its COMMIT (S46), on both backends.

A real store and real library writes run through the real ``Committer``; the
batch's COMMIT is made to fail by a job that leaves a deferred constraint
broken (checked only at COMMIT, as a real conflict would be)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from broker import Agent, Operator, Store, errors
from broker.frontends.http.commit import Committer

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
        first = asyncio.ensure_future(committer.submit(hold))
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
