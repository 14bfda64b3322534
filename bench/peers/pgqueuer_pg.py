"""pgqueuer (a Python job queue on PostgreSQL that users pick today) as a peer
where its shape fits: enqueue, and dequeue + mark done (enqueue / claim+ack).

One database per run on the same server as ``broker_pg`` (``BENCH_PG_URL``),
pgqueuer's own schema (``Queries.install``), its psycopg async driver on one
connection driven by one event loop: ``Queries.enqueue``, ``Queries.dequeue``
(its FOR UPDATE SKIP LOCKED pick) then ``Queries.log_jobs(successful)``.
Not installed (the optional ``bench`` extra): skipped.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench.peers import Unavailable
from bench.peers.broker_pg import SERVER, _admin

ENTRYPOINT = "bench"
PRELOAD_CHUNK = 1000


class PgQueuerPeer:
    system = "pgqueuer"
    how = (
        "pgqueuer (psycopg async driver, one connection, one event loop): "
        "Queries.enqueue(entrypoint, body); Queries.dequeue(batch_size=1) then "
        "Queries.log_jobs([(job, 'successful', None)])"
    )
    batch_how = "Queries.enqueue of 100 jobs in one call; dequeue(batch_size=100), one log_jobs"

    def __init__(self, folder: Path) -> None:
        try:
            import psycopg
            from pgqueuer.db import PsycopgDriver
            from pgqueuer.queries import EntrypointExecutionParameter, Queries
        except ImportError as exc:
            raise Unavailable("pgqueuer is not installed (pip install -e '.[bench]')") from exc
        self.db = f"pgqueuer_bench_{os.getpid()}_{secrets.token_hex(3)}"
        with _admin() as conn:
            conn.execute(f'CREATE DATABASE "{self.db}"')
        base, _, _ = SERVER.replace("+psycopg", "").rpartition("/")
        self.loop = asyncio.new_event_loop()
        self.conn = self.loop.run_until_complete(
            psycopg.AsyncConnection.connect(f"{base}/{self.db}", autocommit=True)
        )
        self.q = Queries(PsycopgDriver(self.conn))
        self._run(self.q.install())
        self.entrypoints = {ENTRYPOINT: EntrypointExecutionParameter(concurrency_limit=0)}
        self.manager = uuid.uuid4()

    def _run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def put(self, text: str) -> None:
        self._run(self.q.enqueue(ENTRYPOINT, text.encode()))

    def put_many(self, texts: list[str]) -> None:
        n = len(texts)
        self._run(self.q.enqueue([ENTRYPOINT] * n, [t.encode() for t in texts], [0] * n))

    def preload(self, texts: list[str]) -> None:
        for i in range(0, len(texts), PRELOAD_CHUNK):
            self.put_many(texts[i : i + PRELOAD_CHUNK])

    def claim_ack(self) -> list[str]:
        return self.claim_ack_many(1)

    def claim_ack_many(self, k: int) -> list[str]:
        jobs = self._run(
            self.q.dequeue(k, self.entrypoints, self.manager, None, timedelta(seconds=30))
        )
        if not jobs:
            return []
        self._run(self.q.log_jobs([(j, "successful", None) for j in jobs]))
        return [j.payload.decode() for j in jobs if j.payload is not None]

    def close(self) -> None:
        try:
            self._run(self.conn.close())
            self.loop.close()
        finally:
            with _admin() as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{self.db}" WITH (FORCE)')
