"""litequeue: put / pop / done, as its README shows.

The library sets WAL and ``synchronous=NORMAL`` itself (same durability as the
broker). ``pop()`` is one ``UPDATE ... RETURNING`` in a ``BEGIN IMMEDIATE``
transaction; ``done(message_id)`` one autocommit UPDATE. A batch send is 100
``put`` inside its ``transaction()`` context manager; there is no batch pop.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.peers import Unavailable


class LiteQueuePeer:
    system = "litequeue"
    how = "LiteQueue(path) (WAL, synchronous=NORMAL by the library); put(body); pop() then done(message_id)"
    batch_how = "100 put() inside q.transaction(); no batch pop: 100 pop()+done()"

    def __init__(self, folder: Path) -> None:
        try:
            from litequeue import LiteQueue  # type: ignore[import-untyped]
        except ImportError as exc:
            raise Unavailable(f"litequeue not installed: {exc}") from None
        self.q: Any = LiteQueue(str(folder / "lq.db"))

    def put(self, text: str) -> None:
        self.q.put(text)

    def put_many(self, texts: list[str]) -> None:
        with self.q.transaction():
            for text in texts:
                self.q.put(text)

    def preload(self, texts: list[str]) -> None:
        for i in range(0, len(texts), 1000):
            self.put_many(texts[i : i + 1000])

    def claim_ack(self) -> list[str]:
        msg = self.q.pop()
        if msg is None:
            return []
        self.q.done(msg.message_id)
        return [msg.data]

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
