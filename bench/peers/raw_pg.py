"""Raw psycopg: the limit on PostgreSQL, as ``raw_sqlite.RawSame`` is on SQLite.

On a database the broker made (``BrokerPgQueue``: its migrations, its
triggers, the same server), over one plain psycopg connection configured by
the broker's own ``PgStore.connect``, exactly the statements the broker runs
on PostgreSQL, by name from the catalogue (their ``-- postgresql:`` texts):
for a send, BEGIN READ COMMITTED; the space row lock (``store.lock_space``,
FOR UPDATE: the gap-free sequence); the caller check; the space and recipient
SELECTs; UPDATE spaces; INSERT message; INSERT delivery; COMMIT; then the
wake-up NOTIFY (``store.notify``). For claim + ack: the caller check, the
claim (a CTE of candidates FOR UPDATE SKIP LOCKED feeding UPDATE ...
RETURNING), the body SELECT; the caller check and the ack UPDATE; each in
its transaction.
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
COMMIT = stmt("store.commit")
ROLLBACK = stmt("store.rollback")
LOCK_SPACE = stmt("store.lock_space")
NOTIFY = stmt("store.notify")


class RawPgSame(RawSame):
    system = "raw_pg"
    how = (
        "psycopg 3, one connection (PgStore.connect: the broker's settings) on a "
        "broker-migrated PostgreSQL database, the broker's PostgreSQL statements by name "
        "from its catalogue: a send (BEGIN READ COMMITTED; SELECT ... FOR UPDATE of the "
        "space row; the caller check; space and recipient SELECTs; UPDATE spaces; INSERT "
        "message; INSERT delivery; COMMIT; pg_notify) and claim + ack (the caller check, the "
        "SKIP LOCKED claim, the body SELECT; the caller check, the ack UPDATE)"
    )
    batch_how = "the same statements, 100 sends in one transaction; claim LIMIT 100, one ack"

    def __init__(self, folder: Path) -> None:
        self.owner = BrokerPgQueue(folder)  # a fresh database, migrated and joined
        super().__init__(None, attach=self.owner)  # type: ignore[arg-type]
        self.locked = False
        self.keys = ""

    def _send(self, c: Any, text: str) -> None:
        if not self.locked:  # once per transaction, first, as PgStore.lock_space
            c.execute(LOCK_SPACE, {"space_id": self.space})
            self.locked = True
        super()._send(c, text)
        from broker.delivery import wake

        self.keys = f"{wake.space_key(self.space)} {wake.participant_key(self.worker_id)}"

    def _in_tx(self, fn: Callable[[Any], Any]) -> Any:
        c = self.conn
        self.locked, self.keys = False, ""
        c.execute(BEGIN)
        try:
            out = fn(c)
        except BaseException:
            c.execute(ROLLBACK)
            raise
        c.execute(COMMIT)
        if self.keys:  # the broker rings after a send's commit
            c.execute(NOTIFY, {"channel": "broker_wake", "payload": self.keys})
        return out

    def preload(self, texts: list[str]) -> None:
        self.owner.preload(texts)

    def close(self) -> None:
        self.conn.close()
        self.owner.close()
