"""The broker through its public Python API, as a queue (one sender, one worker inbox)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from importlib import import_module
from pathlib import Path
from typing import Any

from broker import Agent, Operator, Store
from broker.ids import message_id
from broker.model.records import Joined
from broker.store.settings import StoreSettings

# Caps out of the way: the bench measures speed, not the inbox_full / log_max_mb rules.
LIMITS: dict[str, Any] = {
    "inbox_cap": 1_000_000_000,
    "log_max_mb": 1_000_000.0,
    "broadcast_cap": 1_000_000_000,
    "sender_share": 1,  # one producer may fill an inbox and the log alone (S30)
}
BULK_CHUNK = 20_000


# Agent methods and the library functions they wrap, for a tree where the thin
# Agent method is not there (yet): the bench then calls the library directly.
_LIBRARY = {
    "claim": ("delivery.inbox", "claim"),
    "ack": ("delivery.inbox", "ack"),
    "release": ("delivery.inbox", "release"),
    "ack_and_claim": ("delivery.inbox", "ack_and_claim"),
    "next_turn": ("delivery.turns", "next_turn"),
    "seen": ("delivery.turns", "seen"),
    "claim_key": ("board.claims", "claim"),
    "release_key": ("board.claims", "release"),
}


def api(agent: Agent, name: str) -> Callable[..., Any]:
    """``agent.<name>`` (the public API), or the library function it wraps."""
    method = getattr(agent, name, None)
    if method is not None:
        return method  # type: ignore[no-any-return]
    module, fn_name = _LIBRARY[name]
    fn = getattr(import_module(f"broker.{module}"), fn_name)

    def call(*args: Any, **kw: Any) -> Any:
        return fn(agent.store, agent.identity, *args, **kw)

    return call


def url_of(folder: Path) -> str:
    return f"sqlite:///{folder / 'broker.db'}"


def store_settings(folder: Path, *, writer_lock: bool = True) -> StoreSettings:
    """The settings of the bench's store in ``folder``: the environment's, with
    the writer lock on (the default) or off (``BROKER_WRITER_LOCK=off``)."""
    url = url_of(folder)
    return dataclasses.replace(StoreSettings.from_env(url), writer_lock=writer_lock)


def open_space(folder: Path, *, writer_lock: bool = True) -> tuple[Store, str]:
    """A fresh store in ``folder`` with one running workflow space, caps lifted."""
    store = Store(settings=store_settings(folder, writer_lock=writer_lock))
    space = Operator(store).create_space("workflow", **LIMITS).id
    return store, space


def warmed_sender(folder: Path, warm: int) -> tuple[Store, Any]:
    """A fresh store in ``folder`` whose agent "sender" has sent ``warm``
    messages to "worker": one embedded send's steady state (bench.profile_send,
    bench.send_phases)."""
    store, space = open_space(folder)
    op = Operator(store)
    sender, _ = op.join(space, "sender")
    op.join(space, "worker")
    for i in range(warm):
        sender.send("worker", f"warm {i:06d}")
    return store, sender


def join_agent(store: Store, space: str, codename: str) -> Joined:
    """Join ``codename`` to ``space`` (the bench's one place that knows how)."""
    return Operator(store).join(space, codename)[1]


class BrokerQueue:
    system = "broker"
    how = (
        "public API: Agent.send(address, body), one send per transaction; "
        "Agent.claim(limit=1) then Agent.ack(token)"
    )
    batch_how = (
        "Agent.send_many(100 items) (one transaction, one executemany per table); "
        "Agent.claim(limit=100) then one Agent.ack(token)"
    )

    writer_lock = True

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.store, self.space = open_space(folder, writer_lock=self.writer_lock)
        self.sender, self.sender_joined = Operator(self.store).join(self.space, "sender")
        self.worker, self.worker_joined = Operator(self.store).join(self.space, "worker")
        self.claim = api(self.worker, "claim")
        self.ack = api(self.worker, "ack")
        self.ack_and_claim = api(self.worker, "ack_and_claim")

    def put(self, text: str) -> None:
        self.sender.send("worker", text)

    def put_many(self, texts: list[str]) -> None:
        self.sender.send_many([{"to": "worker", "text": text} for text in texts])

    def preload(self, texts: list[str]) -> None:
        bulk_load(self.store, self.space, "sender", self.worker.identity.participant_id, texts)

    def claim_ack(self) -> list[str]:
        lease = self.claim(limit=1)
        if not lease.deliveries:
            return []
        self.ack(lease.lease_token)
        return [d.body for d in lease.deliveries]

    def claim_ack_many(self, k: int) -> list[str]:
        lease = self.claim(limit=k)
        if not lease.deliveries:
            return []
        self.ack(lease.lease_token)
        return [d.body for d in lease.deliveries]

    def close(self) -> None:
        self.store.close()


class BrokerNoLockQueue(BrokerQueue):
    """The broker with ``BROKER_WRITER_LOCK=off``: SQLite's busy handler alone
    orders its writers (what the writer lock costs and buys, side by side)."""

    system = "broker_nolock"
    how = BrokerQueue.how + "; BROKER_WRITER_LOCK=off (SQLite's busy handler alone)"
    writer_lock = False


def bulk_load(store: Store, space: str, sender: str, recipient_id: str, texts: list[str]) -> None:
    """Write the rows ``texts`` direct sends would write (log rows + ready deliveries,
    in FIFO order), in big transactions: setup for claim scenarios, not measured
    (so its connection skips fsync and uses a large cache)."""
    from bench.peers.raw_sqlite import (
        INS_DELIVERY,
        INS_MESSAGE,
        SEL_SPACE,
        delivery_row,
        message_row,
    )

    recipient = store_address(store, recipient_id)
    reached = json.dumps([recipient])
    conn = store.connect()
    try:
        conn.execute("PRAGMA synchronous = OFF")
        conn.execute("PRAGMA foreign_keys = OFF")  # the rows are consistent by construction
        conn.execute("PRAGMA cache_size = -262144")  # 256 MB
        for i in range(0, len(texts), BULK_CHUNK):
            chunk = texts[i : i + BULK_CHUNK]
            conn.execute("BEGIN IMMEDIATE")
            # The counters are the log's (revision 0017): read, never written.
            sp = conn.execute(SEL_SPACE, {"space_id": space}).fetchone()
            now = store.now_ts()
            seqs = [sp["last_seq"] + 1 + j for j in range(len(chunk))]
            mids = [message_id(seq) for seq in seqs]
            sizes = [len(text.encode()) + 2 * len(reached) + 2 for text in chunk]
            conn.executemany(
                INS_MESSAGE,
                [
                    message_row(mid, space, seq, sender, text, reached, n, now)
                    for mid, seq, text, n in zip(mids, seqs, chunk, sizes, strict=True)
                ],
            )
            conn.executemany(
                INS_DELIVERY,
                [delivery_row(space, seq, recipient_id) for seq in seqs],
            )
            conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def store_address(store: Store, participant_id: str) -> str:
    with store.read() as t:
        return str(t.one("SELECT address FROM participants WHERE id = ?", (participant_id,))[0])
