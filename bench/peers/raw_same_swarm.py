"""The broker's statements in the swarm, with no library around them.

``SameAgent`` is one agent of the swarm scenario (``bench.scenarios.swarm``,
system ``raw_same_flock``) doing what ``Agent.send``, ``Agent.claim`` and
``Agent.ack`` do, as the broker's own statements by name (``broker.store.sql``),
so that a run splits the broker's gap to the minimal queue in two: what its
statements (its semantics) cost, and what its Python library costs on top.
``swarm_statements`` traces one swarm step on each side; the swarm report
and ``tests/project/test_bench_same.py`` compare them.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import time
from collections.abc import Callable
from typing import Any

from bench.peers.broker_queue import LIMITS, join_agent
from bench.peers.raw_sqlite import (
    _Caller,
    ack_statements,
    broker_connection,
    broker_sql,
    claim_statements,
    in_write_tx,
    send_statements,
    trace,
)
from broker import Agent, Joined, Operator, Store
from broker.ids import fmt_ts

CLAIMABLE = broker_sql("inbox.claimable", "")


class SameAgent:
    """One swarm agent (``bench.scenarios.swarm``) doing what ``Agent.send``,
    ``Agent.claim`` and ``Agent.ack`` do, as the broker's own statements with
    no Python around them but their values: the broker's semantics, less its
    library. Each write transaction holds a blocking ``flock`` on a lock file
    beside the database from ``BEGIN IMMEDIATE`` to ``COMMIT`` (the broker's
    writer lock, without its timeout). A claim reads first in a snapshot
    (``auth.caller``, ``inbox.claimable``) unless the last claim filled its
    limit, as the broker does; waiting for mail polls ``PRAGMA data_version``
    every 1 ms (the raw swarm peers' way)."""

    POLL_S = 0.001

    def __init__(self, store: Store, space: str, joined: Joined, addresses: list[str]) -> None:
        self.store, self.space, self.addresses = store, space, addresses
        self.caller = _Caller(store, space, joined)
        self.me = joined.participant_id
        self.address = joined.address
        self.conn = store.connect()
        self.lock_fd = os.open(f"{store.path}.same-lock", os.O_RDWR | os.O_CREAT, 0o600)
        self.filled = False

    def _write(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        fcntl.flock(self.lock_fd, fcntl.LOCK_EX)
        try:
            return in_write_tx(self.conn, fn)
        finally:
            fcntl.flock(self.lock_fd, fcntl.LOCK_UN)

    def send(self, to: int, text: str) -> None:
        self._write(
            lambda c: send_statements(
                c, self.store, self.space, self.caller, self.address, self.addresses[to], text
            )
        )

    def _claimable(self) -> bool:
        c = self.conn
        now_dt = self.store.now()
        now = fmt_ts(now_dt)
        if self.filled or now >= self.caller.due:
            return True  # the broker claims at once then (a backlog, or the heartbeat)
        c.execute("BEGIN")
        try:
            self.caller.check(c, now_dt, now)
            got = c.execute(CLAIMABLE, {"recipient_id": self.me, "now": now}).fetchone()[0]
        finally:
            c.execute("COMMIT")
        return bool(got)

    def _claim_now(self, limit: int) -> tuple[str, list[str]]:
        token, bodies = self._write(
            lambda c: claim_statements(c, self.store, self.caller, self.me, self.address, limit)
        )
        self.filled = len(bodies) >= limit
        return token, bodies

    def ack(self, token: str) -> None:
        self._write(lambda c: ack_statements(c, self.store, self.caller, self.me, token))

    def claim(self, limit: int, wait: float) -> tuple[str, list[str]]:
        """(lease token, bodies): up to ``limit``, waiting up to ``wait`` s for mail."""
        deadline = time.monotonic() + wait
        while True:
            version = self.conn.execute("PRAGMA data_version").fetchone()[0]
            token, bodies = self._claim_now(limit) if self._claimable() else ("", [])
            if bodies or time.monotonic() >= deadline:
                return token, bodies
            while self.conn.execute("PRAGMA data_version").fetchone()[0] == version:
                if time.monotonic() >= deadline:
                    return "", []
                time.sleep(self.POLL_S)

    def close(self) -> None:
        self.conn.close()
        os.close(self.lock_fd)


def swarm_statements(broker_store: Store, same_store: Store) -> dict[str, list[str]]:
    """One swarm step traced on each side: a0 sends to a1; a1 claims (mail),
    acks, claims again (nothing). The broker through ``Agent`` on
    ``broker_store``; ``SameAgent`` on ``same_store`` (each a fresh store with
    the broker's schema). Each side warms up first (the once-a-second
    heartbeat), so a store with a fixed clock traces what every later step
    runs. Returns both sequences of statement signatures."""
    return {"broker": _broker_step(broker_store), "raw_same": _same_step(same_store)}


def _two_agents(store: Store) -> tuple[str, list[Joined]]:
    space = Operator(store).create_space("workflow", **LIMITS).id
    return space, [join_agent(store, space, f"a{i}") for i in range(2)]


def _broker_step(store: Store) -> list[str]:
    space, joined = _two_agents(store)
    a0, a1 = (Agent.connect(store, space, j.address, j.token) for j in joined)
    to = joined[1].address
    a0.send(to, "warm")
    a1.ack(a1.claim(limit=32).lease_token)
    conn = broker_connection(store)  # both agents' calls run on this thread's
    return (
        trace(conn, lambda: a0.send(to, "step"))
        + trace(conn, lambda: a1.ack(a1.claim(limit=32).lease_token))
        + trace(conn, lambda: a1.claim(limit=32))
    )


def _same_step(store: Store) -> list[str]:
    space, joined = _two_agents(store)
    addresses = [j.address for j in joined]
    s0, s1 = (SameAgent(store, space, j, addresses) for j in joined)
    try:
        s0.send(1, "warm")
        s1.ack(s1.claim(32, 0.0)[0])
        return (
            trace(s0.conn, lambda: s0.send(1, "step"))
            + trace(s1.conn, lambda: s1.ack(s1.claim(32, 0.0)[0]))
            + trace(s1.conn, lambda: s1.claim(32, 0.0))
        )
    finally:
        s0.close()
        s1.close()
