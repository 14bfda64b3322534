"""Queues measured side by side: the broker and its baselines, behind one interface.

Each adapter does the same work per operation (one message of the same body
in, one claimed and acknowledged out) in its documented fastest single-process
use; its ``how`` says exactly what that is, and the report prints it. Message
bodies are unique (``bench.core.body``), so every claim is accounted for by
body: lost and duplicated messages are counted the same way for every system.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol


class Unavailable(Exception):
    """This system cannot run here (server not reachable, package missing): skip it."""


class Queue(Protocol):
    system: str
    how: str  # how one operation is done (printed in the report)
    batch_how: str  # how a batch is done, or why there is no batch form

    def put(self, text: str) -> None: ...

    def put_many(self, texts: list[str]) -> None: ...

    def preload(self, texts: list[str]) -> None:
        """Fill the queue before timing, as fast as possible (not measured)."""
        ...

    def claim_ack(self) -> list[str]:
        """Claim the oldest message and acknowledge it; its body, or [] if empty."""
        ...

    def claim_ack_many(self, k: int) -> list[str]: ...

    def close(self) -> None: ...


QueueFactory = Callable[[Path], Queue]


def factories(systems: list[str]) -> dict[str, QueueFactory]:
    """Constructors of the named queue systems (imported lazily: peers are an extra)."""
    out: dict[str, QueueFactory] = {}
    for name in systems:
        if name == "broker":
            from bench.peers.broker_queue import BrokerQueue

            out[name] = BrokerQueue
        elif name == "broker_nolock":
            from bench.peers.broker_queue import BrokerNoLockQueue

            out[name] = BrokerNoLockQueue
        elif name == "raw_same":
            from bench.peers.raw_sqlite import RawSame

            out[name] = RawSame
        elif name == "raw_floor":
            from bench.peers.raw_sqlite import RawFloor

            out[name] = RawFloor
        elif name == "file_mailbox":
            from bench.peers.file_mailbox import FileMailbox

            out[name] = FileMailbox
        elif name == "persist_queue":
            from bench.peers.persist_queue import PersistQueue

            out[name] = PersistQueue
        elif name == "litequeue":
            from bench.peers.lite_queue import LiteQueuePeer

            out[name] = LiteQueuePeer
        elif name == "broker_pg":
            from bench.peers.broker_pg import BrokerPgQueue

            out[name] = BrokerPgQueue
        elif name == "raw_pg":
            from bench.peers.raw_pg import RawPgSame

            out[name] = RawPgSame
        elif name == "pgqueuer":
            from bench.peers.pgqueuer_pg import PgQueuerPeer

            out[name] = PgQueuerPeer
        elif name == "redis":
            from bench.peers.redis_streams import RedisStreams

            out[name] = RedisStreams
        else:
            raise ValueError(f"unknown system {name!r}")
    return out
