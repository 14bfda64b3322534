"""The broker on PostgreSQL (``postgresql+psycopg://``), the same public API as
``broker_queue.BrokerQueue``: one database per run of a lane, dropped at close.

The server is ``BENCH_PG_URL`` (default: this machine's,
``postgresql+psycopg://postgres@127.0.0.1:5432/test``); unreachable: skipped.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

from bench.peers import Unavailable
from bench.peers.broker_queue import LIMITS, api

SERVER = os.environ.get("BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
PRELOAD_CHUNK = 1000


def _admin() -> Any:
    try:
        import psycopg
    except ImportError as exc:
        raise Unavailable("psycopg is not installed (pip install -e '.[pg]')") from exc
    try:
        return psycopg.connect(SERVER.replace("+psycopg", ""), autocommit=True, connect_timeout=5)
    except Exception as exc:  # noqa: BLE001 - any failure: no server here
        raise Unavailable(f"PostgreSQL at {SERVER} is not reachable: {exc}") from exc


class BrokerPgQueue:
    system = "broker_pg"
    how = (
        "public API on PostgreSQL (psycopg 3 pool, READ COMMITTED, same server on "
        "loopback TCP): Agent.send, one send per transaction; Agent.claim(limit=1) "
        "then Agent.ack(token)"
    )
    batch_how = "Agent.send_many(100 items); Agent.claim(limit=100) then one Agent.ack(token)"

    def __init__(self, folder: Path) -> None:
        from broker import Operator, Store

        self.db = f"broker_bench_{os.getpid()}_{secrets.token_hex(3)}"
        with _admin() as conn:
            conn.execute(f'CREATE DATABASE "{self.db}"')
        base, _, _ = SERVER.rpartition("/")
        self.store = Store(f"{base}/{self.db}")
        op = Operator(self.store)
        self.space = op.create_space("workflow", **LIMITS).id
        self.sender, self.sender_joined = op.join(self.space, "sender")
        self.worker, self.worker_joined = op.join(self.space, "worker")
        self.claim = api(self.worker, "claim")
        self.ack = api(self.worker, "ack")

    def put(self, text: str) -> None:
        self.sender.send("worker", text)

    def put_many(self, texts: list[str]) -> None:
        self.sender.send_many([{"to": "worker", "text": text} for text in texts])

    def preload(self, texts: list[str]) -> None:
        for i in range(0, len(texts), PRELOAD_CHUNK):
            self.put_many(texts[i : i + PRELOAD_CHUNK])

    def claim_ack(self) -> list[str]:
        return self.claim_ack_many(1)

    def claim_ack_many(self, k: int) -> list[str]:
        lease = self.claim(limit=k)
        if not lease.deliveries:
            return []
        self.ack(lease.lease_token)
        return [d.body for d in lease.deliveries]

    def close(self) -> None:
        self.store.close()
        with _admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.db}" WITH (FORCE)')
