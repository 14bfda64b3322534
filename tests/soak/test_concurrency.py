"""S7/S12 under contention: many processes sending into one space at once.
Every send is in the log exactly once, sequences are gap-free, and no
`database is locked` reaches a caller."""

from __future__ import annotations

import multiprocessing as mp
import traceback
from typing import Any

import pytest
import trusted
from sqlrows import spaces_as_read

from broker import Agent, Operator, Store

CTX = mp.get_context("fork")


def _worker(
    url: str, space: str, me: str, token: str, peer: str, n: int, barrier: Any, out: Any
) -> None:
    failures: list[str] = []
    sent: list[tuple[str, str, int]] = []
    try:
        store = Store(url)  # its own store: nothing crosses the fork
        agent = Agent.connect(store, space, me, token)
        barrier.wait(60)
        for i in range(n):
            key = f"{me}-{i}"
            to = peer if i % 2 else "operator"  # half direct (inbox rows), half logged only
            try:
                r = agent.send(to, key, idempotency_key=key)
                sent.append((key, r.id, r.seq))
            except Exception as exc:  # noqa: BLE001 - every failure reported to the parent
                failures.append(f"{key}: {exc!r}")
        store.close()
    except BaseException:  # noqa: BLE001
        failures.append(traceback.format_exc())
    out.put((me, sent, failures))


def run_senders(store: Store, workers: int, per_worker: int) -> int:
    op = Operator(store)
    space = op.create_space("workflow", inbox_cap=per_worker, sender_share=1).id
    names = [f"w{w}" for w in range(workers)]
    tokens = {name: trusted.join(store, space, f"flow/{name}")[1].token for name in names}
    barrier = CTX.Barrier(workers)
    out = CTX.Queue()
    procs = [
        CTX.Process(
            target=_worker,
            args=(
                store.url,
                space,
                name,
                tokens[name],
                names[(k + 1) % workers],
                per_worker,
                barrier,
                out,
            ),
        )
        for k, name in enumerate(names)
    ]
    for p in procs:
        p.start()
    reports = [out.get(timeout=240) for _ in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0

    failures = [f for _, _, fs in reports for f in fs]
    assert failures == []  # no `database is locked` (nor anything else) reached a caller
    total = workers * per_worker
    claimed = {key: (mid, seq) for _, sent, _ in reports for key, mid, seq in sent}
    assert len(claimed) == total

    log = op.log(space)
    assert [e.seq for e in log] == list(range(1, total + 1))  # gap-free
    keys = [e.idempotency_key for e in log]
    assert len(keys) == len(set(keys)) == total  # each send exactly once
    assert {e.idempotency_key: (e.id, e.seq) for e in log} == claimed
    assert all(e.body == e.idempotency_key for e in log)
    with store.read() as t:
        per_recipient = dict(
            t.all(
                "SELECT p.address, count(*) FROM deliveries d JOIN participants p "
                "ON p.rowid = d.recipient_no WHERE p.space_id = ? GROUP BY p.address",
                (space,),
            )
        )
        assert (
            t.one(f"SELECT last_seq FROM {spaces_as_read(store)} WHERE id = ?", (space,))[0]
            == total
        )
    assert per_recipient == {name: per_worker // 2 for name in names}
    return len(log)


def test_S7_eight_processes_sending_concurrently_each_send_logged_once(store: Store) -> None:
    assert run_senders(store, workers=8, per_worker=200) == 8 * 200


@pytest.mark.soak
def test_S7_sixteen_processes_sending_concurrently_soak(store: Store) -> None:
    assert run_senders(store, workers=16, per_worker=2000) == 16 * 2000
