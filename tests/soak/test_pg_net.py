"""PostgreSQL over the network (issue 15): hosts simulated by processes that
reach the server over TCP (127.0.0.1:5432; no network namespaces here).

- SIGKILLed workers: the chaos run of tests/soak/test_chaos.py on PostgreSQL,
  0 lost, every duplicate a killed or an expired lease (S14, S16).
- A network cut mid-transaction: the server drops the worker's connection
  (``pg_terminate_backend``) while its claim is applied but not committed; the
  transaction rolls back (no half-applied lease), the broken connection leaves
  the pool, and the next call succeeds.
- A writer killed right after its COMMIT has rung already: the NOTIFY is
  queued in its transaction and PostgreSQL delivers it with the COMMIT; a
  rolled-back write rings nobody (S20, S41).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pgtest
import pytest
import trusted
from test_chaos import _check, run_chaos

from broker import Agent, Operator, Store, errors
from broker.delivery import wake

FORK = mp.get_context("fork")


@pytest.fixture
def pg_url() -> Iterator[str]:
    with pgtest.database() as url:
        yield url


@pytest.fixture
def pg(pg_url: str) -> Iterator[Store]:
    s = Store(pg_url)
    yield s
    s.close()


def _admin(url: str) -> Any:
    import psycopg

    return psycopg.connect(url.replace("+psycopg", ""), autocommit=True)


def test_pg_S16_chaos_kill9_workers_over_tcp_lose_nothing(
    pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The default run: every kill of the soak run below, on a third of the messages.
    acc = run_chaos(tmp_path, messages=300, workers=4, kills=4, url=pg_url)
    with capsys.disabled():
        print("\nPostgreSQL " + acc.line())
    # Every planned kill happens: the last share of the work is held back until
    # they have (run_chaos), however fast the server drains the rest.
    _check(acc, kills=4)


@pytest.mark.soak
def test_pg_S16_chaos_soak_3000_messages_8_workers_over_tcp(
    pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    acc = run_chaos(tmp_path, messages=3000, workers=8, kills=12, url=pg_url, hang_guard_s=900)
    with capsys.disabled():
        print("\nPostgreSQL soak " + acc.line())
    _check(acc, kills=12)


def test_pg_S14_a_connection_cut_mid_transaction_rolls_back_and_the_next_call_succeeds(
    pg: Store, pg_url: str
) -> None:
    sid = Operator(pg).create_space("workflow").id
    a, _ = trusted.join(pg, sid, "a")
    b, _ = trusted.join(pg, sid, "b")
    sent = a.send("b", "survives the cut").id
    with _admin(pg_url) as admin:
        with pytest.raises(errors.StoreError, match="cannot reach the database"), pg.write() as t:
            backend = t.one("SELECT pg_backend_pid()")[0]
            lease = b.claim(tx=t)
            assert [d.id for d in lease.deliveries] != []  # applied, not committed
            # The cut, from the server's side, while the transaction is open.
            admin.execute("SELECT pg_terminate_backend(%s)", (backend,))
        gone = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (backend,)
        ).fetchone()
        assert gone is not None and gone[0] == 0
    with pg.read() as t:
        row = t.one("SELECT state, attempts, lease_token FROM deliveries")
    assert (row["state"], row["attempts"], row["lease_token"]) == ("ready", 0, None)
    lease = b.claim()  # a pooled connection that works: the broken one was discarded
    assert [d.body for d in lease.deliveries] == ["survives the cut"]
    assert lease.deliveries[0].id == sent
    b.ack(lease.lease_token)
    with pg.read() as t:
        assert t.one("SELECT state FROM deliveries")[0] == "done"


def _send_then_die_right_after_commit(url: str, ident: Any) -> None:
    store = Store(url)
    with store.transaction() as tx:  # the hook runs right after the COMMIT
        tx.after_commit(lambda: os.kill(os.getpid(), signal.SIGKILL))
        Agent(store, ident).send("b", "committed, then killed")


def test_pg_S20_a_writer_killed_right_after_its_commit_still_rings_its_waiters(
    pg: Store, pg_url: str
) -> None:
    """The NOTIFY is queued inside the send's transaction and delivered by
    PostgreSQL at COMMIT: a writer killed right after its COMMIT has rung
    already (before, the ring came after the commit and this waiter slept
    to its safety tick)."""
    sid = Operator(pg).create_space("workflow").id
    a, _ = trusted.join(pg, sid, "a")
    b, _ = trusted.join(pg, sid, "b")
    with wake.Waiter(pg, [wake.participant_key(b.identity.participant_id)]) as waiter:
        assert b.claim().deliveries == []
        writer = FORK.Process(target=_send_then_die_right_after_commit, args=(pg_url, a.identity))
        writer.start()
        writer.join(60)
        assert writer.exitcode == -signal.SIGKILL
        with pg.read() as t:  # committed before the kill
            assert t.one("SELECT count(*) FROM deliveries")[0] == 1
        assert waiter.wait(60) is True
        assert waiter.woke == "rung"  # by the COMMIT's own NOTIFY, not a re-check
    assert [d.body for d in b.claim().deliveries] == ["committed, then killed"]


def test_pg_S20_a_rolled_back_write_rings_nobody(pg: Store) -> None:
    """A NOTIFY queued in a transaction that rolls back is dropped with it."""
    sid = Operator(pg).create_space("workflow").id
    a, _ = trusted.join(pg, sid, "a")
    b, _ = trusted.join(pg, sid, "b")
    with wake.Waiter(pg, [wake.participant_key(b.identity.participant_id)]) as waiter:
        with pytest.raises(RuntimeError), pg.transaction() as tx:
            a.send("b", "never committed", tx=tx)
            raise RuntimeError("the caller's own work failed")
        assert waiter.wait(0.5) is False and waiter.woke == "timeout"
        a.send("b", "committed")
        assert waiter.wait(30) is True and waiter.woke == "rung"
