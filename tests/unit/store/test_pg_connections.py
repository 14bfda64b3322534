"""S41 on PostgreSQL: the connection budget of a process, and a full server.

- Every waiter of a process shares its ONE listening connection
  (``application_name`` ``broker-listen`` in ``pg_stat_activity``), however
  many participants wait, with the sync and the asyncio API.
- A process holds at most its pool's size besides that (pooled connections
  are named ``broker``).
- A server at its connection limit is one clear line at once
  (``too_many_connections``, exit 11), for a new process and for a process
  whose pool must grow, never a hang until some timeout.

The limit is made reachable with a role of its own (``CONNECTION LIMIT``:
superusers are exempt from it, so the role is not one), on the test's own
database; the role is dropped after the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pgtest
import pytest
import trusted

from broker import Operator, Store, errors
from broker.api.aio import AsyncAgent
from broker.delivery import pgwake, wake
from broker.store import postgres


@pytest.fixture
def pg_url() -> Iterator[str]:
    with pgtest.database() as url:
        yield url


@pytest.fixture
def pg(pg_url: str) -> Iterator[Store]:
    s = Store(pg_url)
    yield s
    s.close()


def _admin() -> Any:
    import psycopg

    return psycopg.connect(pgtest.SERVER.replace("+psycopg", ""), autocommit=True)


def _activity(url: str, application: str) -> int:
    """Connections to ``url``'s database named ``application`` now."""
    database = url.rpartition("/")[2]
    with _admin() as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND application_name = %s",
            (database, application),
        ).fetchone()
    return int(row[0])


def test_pg_S41_waiters_of_one_process_share_one_listen_connection(pg: Store, pg_url: str) -> None:
    space = Operator(pg).create_space("workflow").id
    sender, _ = trusted.join(pg, space, "sender")
    agents = [trusted.join(pg, space, f"w{i}")[0] for i in range(12)]
    keys = [wake.participant_key(a.identity.participant_id) for a in agents]
    with contextlib.ExitStack() as stack:
        waiters = [stack.enter_context(wake.Waiter(pg, [k])) for k in keys[:6]]
        assert not any(w.polling for w in waiters)

        async def parked() -> list[int]:
            twins = [AsyncAgent.wrap(a) for a in agents[6:]]
            tasks = [asyncio.create_task(t.claim(wait=60)) for t in twins]
            listener = pgwake.listener(pg)
            deadline = time.monotonic() + 30
            while not all(listener.waiting(k) for k in keys[6:]):
                assert time.monotonic() < deadline, "the asyncio waits never parked"
                await asyncio.sleep(0.01)
            counted = [
                await asyncio.to_thread(_activity, pg_url, pgwake.APPLICATION),
                await asyncio.to_thread(_activity, pg_url, postgres.APPLICATION),
            ]
            for i in range(6, 12):
                await asyncio.to_thread(sender.send, f"w{i}", "wake")
            leases = await asyncio.wait_for(asyncio.gather(*tasks), 60)
            assert all(len(lease.deliveries) == 1 for lease in leases)
            return counted

        listening, pooled = asyncio.run(parked())
    assert listening == 1  # twelve participants waiting, one LISTEN connection
    assert 1 <= pooled <= postgres.POOL_SIZE


# --- a full server ------------------------------------------------------------------------
class Role:
    """A login role limited to ``limit`` connections, reading and writing all data."""

    def __init__(self, url: str, limit: int) -> None:
        self.name = f"broker_t_{secrets.token_hex(4)}"
        with _admin() as conn:
            conn.execute(f"CREATE ROLE {self.name} LOGIN CONNECTION LIMIT {limit}")
            conn.execute(f"GRANT pg_read_all_data, pg_write_all_data TO {self.name}")
        scheme, _, rest = url.partition("://")
        self.url = f"{scheme}://{self.name}@{rest.partition('@')[2]}"

    def hold(self) -> Any:
        """One connection of the role, held (the caller closes it)."""
        import psycopg

        return psycopg.connect(self.url.replace("+psycopg", ""), autocommit=True)

    def drop(self) -> None:
        with _admin() as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (self.name,),
            )
            deadline = time.monotonic() + 10
            while (
                conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE usename = %s", (self.name,)
                ).fetchone()[0]
                and time.monotonic() < deadline
            ):
                time.sleep(0.05)
            conn.execute(f"DROP ROLE IF EXISTS {self.name}")


@pytest.fixture
def role(pg_url: str) -> Iterator[Any]:
    made: list[Role] = []

    def make(limit: int) -> Role:
        r = Role(pg_url, limit)
        made.append(r)
        return r

    yield make
    for r in made:
        r.drop()


def test_pg_S41_a_full_server_refuses_a_new_process_in_one_line_at_once(role: Any) -> None:
    r = role(1)
    held = r.hold()
    try:
        started = time.monotonic()
        with pytest.raises(errors.TooManyConnections) as info:
            Store(r.url)
        assert time.monotonic() - started < 5  # at once, not the pool's retries
    finally:
        held.close()
    message = str(info.value)
    assert info.value.code == "too_many_connections" and info.value.exit_code == 11
    assert "\n" not in message and "too many connections" in message
    assert r.name in message  # the server's own words: which role is full


def test_pg_S41_the_cli_on_a_full_server_exits_11_with_one_line(role: Any, tmp_path: Path) -> None:
    r = role(1)
    held = r.hold()
    try:
        env = pgtest.process_env(tmp_path, r.url)
        done = subprocess.run(
            [sys.executable, "-m", "broker", "space", "list"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
    finally:
        held.close()
    assert done.returncode == 11, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("broker: too_many_connections: "), lines


def test_pg_S41_a_pool_that_cannot_grow_on_a_full_server_says_so_within_seconds(
    role: Any,
) -> None:
    """The process has its one pooled connection busy (an open transaction in
    another thread); the server has no room for a second: the next call is
    ``too_many_connections`` after about ``GROW_WAIT_S``, not the busy timeout."""
    r = role(2)
    s = Store(r.url)
    try:
        s.size_pool(4)
        assert s.pool().get_stats()["pool_max"] == 4  # type: ignore[attr-defined]
        outsider = r.hold()  # the role's second and last connection
        holding, release = threading.Event(), threading.Event()

        def hold_the_pooled_one() -> None:
            with s.read():
                holding.set()
                release.wait(30)

        th = threading.Thread(target=hold_the_pooled_one)
        th.start()
        try:
            assert holding.wait(30)
            started = time.monotonic()
            with pytest.raises(errors.TooManyConnections), s.read():
                pass
            took = time.monotonic() - started
        finally:
            release.set()
            th.join(30)
            outsider.close()
        assert took < s.settings.busy_timeout_ms / 1000 / 2, took
        with s.read():  # room again: the pool works on
            pass
    finally:
        s.close()
