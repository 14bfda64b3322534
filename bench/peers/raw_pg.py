"""Raw psycopg: the limit on PostgreSQL, as ``raw_sqlite.RawSame`` is on SQLite.

On a database the broker made (``BrokerPgQueue``: its migrations, its
triggers, the same server), over one plain psycopg connection configured by
the broker's own ``PgStore.connect``, exactly the statements the broker runs
on PostgreSQL, by name from the catalogue (their ``-- postgresql:`` texts):
for a send, BEGIN READ COMMITTED; the space row lock (``store.lock_space``,
FOR NO KEY UPDATE: the gap-free sequence); the caller check (it reads the
counters and the recipient); INSERT message; INSERT delivery; the wake-up
NOTIFY (``store.notify``, in the transaction: delivered by the COMMIT);
COMMIT. In the broker's round trips: what needs no answer goes with the next
statement that does, in one psycopg pipeline (``PgConn.defer``): BEGIN, the
lock and the caller check in one; the inserts, the NOTIFY and the COMMIT in
a second. For claim + ack: the caller check, the claim (a CTE of candidates
FOR UPDATE SKIP LOCKED feeding UPDATE ... RETURNING); the caller check and
the ack UPDATE; each in its transaction.
No pool, no Python around them but the values they need.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.peers.broker_pg import BrokerPgQueue
from bench.peers.raw_sqlite import RawSame
from broker.store.sql import stmt

BEGIN = stmt("store.begin_write")
LOCK_SPACE = stmt("store.lock_space")
NOTIFY = stmt("store.notify")


class RawPgSame(RawSame):
    system = "raw_pg"
    how = (
        "psycopg 3, one connection (PgStore.connect: the broker's settings) on a "
        "broker-migrated PostgreSQL database, the broker's PostgreSQL statements by name "
        "from its catalogue, in the broker's round trips (a pipeline for what needs no "
        "answer): a send (BEGIN READ COMMITTED, the space row's lock, the caller check; "
        "INSERT message, INSERT delivery, pg_notify, COMMIT) and claim + ack (the caller "
        "check, the SKIP LOCKED claim; the caller check, the ack UPDATE)"
    )
    batch_how = "the same statements, 100 sends in one transaction; claim LIMIT 100, one ack"

    def __init__(self, folder: Path) -> None:
        self.owner = BrokerPgQueue(folder)  # a fresh database, migrated and joined
        super().__init__(None, attach=self.owner)  # type: ignore[arg-type]
        self.locked = False
        self.keys = ""

    def _send(self, c: Any, text: str) -> None:
        if not self.locked:  # once per transaction, first, as PgStore.lock_space
            c.defer(LOCK_SPACE, {"space_id": self.space})
            self.locked = True
        super()._send(c, text)
        from broker.delivery import wake

        self.keys = f"{wake.space_key(self.space)} {wake.participant_key(self.worker_id)}"

    def _in_tx(self, fn: Callable[[Any], Any]) -> Any:
        c = self.conn
        self.locked, self.keys = False, ""
        c.defer(BEGIN)  # sent with the first statement, as the broker's
        try:
            out = fn(c)
            if self.keys:  # the broker's NOTIFY is in the send's transaction
                c.defer(NOTIFY, {"channel": "broker_wake", "payload": self.keys})
        except BaseException:
            c.rollback()
            raise
        c.commit()  # with what is deferred: one round trip
        return out

    def preload(self, texts: list[str]) -> None:
        self.owner.preload(texts)

    def close(self) -> None:
        self.conn.close()
        self.owner.close()
