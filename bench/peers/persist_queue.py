"""persist-queue's ``SQLiteAckQueue``: put / get / ack, as its README shows.

Its connection is put in WAL mode by the library and given
``synchronous=NORMAL`` here (the library leaves SQLite's default FULL), so it
runs with the same durability as the broker. ``get(block=False, raw=True)``
returns the row id, and ``ack(id=...)`` acks by id (no search of its unacked
cache). It has no batch API: a batch is 100 single operations.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.peers import Unavailable


class PersistQueue:
    system = "persist_queue"
    how = (
        "SQLiteAckQueue(path, multithreading=False, auto_commit=True), synchronous=NORMAL set "
        "on its connection (same durability as the broker); put(body); "
        "get(block=False, raw=True) then ack(id=pqid)"
    )
    batch_how = "no batch API: 100 single put / get+ack"

    def __init__(self, folder: Path) -> None:
        try:
            import persistqueue
            from persistqueue import SQLiteAckQueue
        except ImportError as exc:  # the bench extra is not installed
            raise Unavailable(f"persist-queue not installed: {exc}") from None
        self._empty: type[Exception] = persistqueue.Empty
        self.q: Any = SQLiteAckQueue(str(folder / "pq"), multithreading=False, auto_commit=True)
        self.q._conn.execute("PRAGMA synchronous = NORMAL")

    def put(self, text: str) -> None:
        self.q.put(text)

    def put_many(self, texts: list[str]) -> None:
        for text in texts:
            self.q.put(text)

    def preload(self, texts: list[str]) -> None:
        self.q._conn.execute("PRAGMA synchronous = OFF")  # setup only
        try:
            for text in texts:
                self.q.put(text)
        finally:
            self.q._conn.execute("PRAGMA synchronous = NORMAL")

    def claim_ack(self) -> list[str]:
        try:
            item = self.q.get(block=False, raw=True)
        except self._empty:
            return []
        self.q.ack(id=item["pqid"])
        return [item["data"]]

    def claim_ack_many(self, k: int) -> list[str]:
        out: list[str] = []
        for _ in range(k):
            got = self.claim_ack()
            if not got:
                break
            out += got
        return out

    def close(self) -> None:
        self.q.close()
