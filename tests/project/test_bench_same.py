"""The bench's ``raw_same_flock`` swarm peer runs the broker's own statements.

``bench.peers.raw_same_swarm.SameAgent`` stands for "the broker's semantics without
its Python library" in the swarm scenario; the split of the broker's gap to
the minimal queue into statements and library rests on it doing, statement for
statement, what ``Agent.send``, ``Agent.claim`` and ``Agent.ack`` do. Traced on
both sides with a fixed clock (the heartbeat does not recur), one swarm step
must run the same sequence: a send, a claim that finds mail and its ack, and a
claim that finds nothing (a snapshot read alone, no write lock).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import Clock

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.peers.raw_same_swarm import swarm_statements  # noqa: E402
from broker import Store  # noqa: E402


def test_the_swarm_peer_of_the_brokers_statements_runs_exactly_what_the_broker_runs(
    tmp_path: Path, clock: Clock
) -> None:
    broker = Store(f"sqlite:///{tmp_path / 'broker.db'}", clock=clock)
    same = Store(f"sqlite:///{tmp_path / 'same.db'}", clock=clock)
    try:
        seen = swarm_statements(broker, same)
    finally:
        broker.close()
        same.close()
    assert seen["broker"] == seen["raw_same"], seen
    # The step is what the docstring says: a send (the caller check reads the
    # space's counters, the recipient and the space's last log time: S44),
    # a snapshot read (the caller, inbox.claimable) then the claim
    # (the caller, inbox.claim), the ack (the caller, inbox.ack: S4), and the
    # empty claim's snapshot read, which ends there: no BEGIN IMMEDIATE.
    assert seen["broker"] == [
        "BEGIN IMMEDIATE",
        "SELECT spaces",
        "INSERT messages",
        "INSERT deliveries",
        "COMMIT",
        "BEGIN",
        "SELECT participants",
        "SELECT deliveries",
        "COMMIT",
        "BEGIN IMMEDIATE",
        "SELECT participants",
        "UPDATE deliveries",
        "COMMIT",
        "BEGIN IMMEDIATE",
        "SELECT participants",
        "UPDATE deliveries",
        "COMMIT",
        "BEGIN",
        "SELECT participants",
        "SELECT deliveries",
        "COMMIT",
    ]


def test_the_swarm_times_its_writer_lock_holds_on_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``BENCH_SWARM_HOLD=1``: an agent's process counts its write transactions,
    how long each held the writer lock and the statements' share of it (the
    swarm's ceiling is one over held × write transactions a message)."""
    from bench.scenarios.swarm import _held, _lock_holds
    from broker import Operator
    from broker.store import sqlite, writelock

    for cls, name in (
        (writelock.WriterLock, "acquire"),
        (writelock.WriterLock, "release"),
        (sqlite.Connection, "execute"),
    ):
        monkeypatch.setattr(cls, name, getattr(cls, name))  # put back after the test
    store = Store(f"sqlite:///{tmp_path / 'broker.db'}")
    try:
        op = Operator(store)
        space = op.create_space("workflow").id
        lynx, otter = op.join(space, "lynx")[0], op.join(space, "otter")[0]
        holds = _lock_holds()
        for n in range(20):
            lynx.send("otter", f"m{n}")
        lease = otter.claim(limit=32)  # a write: the claim; then its ack
        otter.ack(lease.lease_token)
    finally:
        store.close()
    assert holds["writes"] == 22 and 0 < holds["sql_s"] < holds["held_s"], holds
    got = _held([{"holds": holds, "got": [("m", 0)] * 20}])
    assert got["writes_per_msg"] == 1.1, got
    assert 0 < got["lock_held_sql_us"] < got["lock_held_us"], got
