"""Raw sqlite3 with a minimal queue: the floor of a multi-process swarm on SQLite.

One table ``q(id, recipient, body, state)`` with a partial index on ready rows;
a send is one INSERT, a claim one ``UPDATE ... RETURNING`` of up to N ready
rows of the recipient, an ack one UPDATE by id: each its own transaction, as
the broker does (``BEGIN IMMEDIATE`` ... ``COMMIT``). The pragmas are the
broker's: WAL, ``synchronous=NORMAL``, the same busy timeout.

Two ways to wait for SQLite's write lock, the difference the swarm measures:

- ``lock=False``: SQLite's own busy handler (it sleeps 1, 2, 5, 10 ... 100 ms
  between retries and wakes late);
- ``lock=True``: a blocking ``flock`` on a lock file beside the database, held
  from ``BEGIN IMMEDIATE`` to ``COMMIT``: the kernel wakes the next writer the
  moment the lock is free. A plain blocking ``flock`` with no timeout: the
  ideal the broker's bounded writer lock is measured against.

``checkpoints=False`` turns SQLite's automatic checkpoint off on the
connection (``wal_autocheckpoint = 0``): the same work without the checkpoint a
commit otherwise runs every 1,000 WAL pages, to show what that does to the tail.
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import time
from pathlib import Path

BUSY_TIMEOUT_S = 10.0  # the broker's default busy_timeout
POLL_S = 0.001

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS q (id INTEGER PRIMARY KEY, recipient INTEGER NOT NULL, "
    "body TEXT NOT NULL, state INTEGER NOT NULL DEFAULT 0)",
    "CREATE INDEX IF NOT EXISTS q_ready ON q (recipient, id) WHERE state = 0",
)
_SEND = "INSERT INTO q (recipient, body) VALUES (?, ?)"
_CLAIM = (
    "UPDATE q SET state = 1 WHERE id IN (SELECT id FROM q WHERE recipient = ? AND state = 0 "
    "ORDER BY id LIMIT ?) RETURNING id, body"
)
_ACK = "UPDATE q SET state = 2 WHERE id IN (SELECT value FROM json_each(?))"


def create(path: Path) -> None:
    """Make the database and its table (once, in the parent)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        for ddl in _SCHEMA:
            conn.execute(ddl)
    finally:
        conn.close()


class MiniQueue:
    """One process's handle (open it in the process that uses it, after fork)."""

    def __init__(self, path: Path, *, lock: bool, checkpoints: bool = True) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, timeout=BUSY_TIMEOUT_S)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = NORMAL")
        if not checkpoints:
            self.conn.execute("PRAGMA wal_autocheckpoint = 0")
        self.lock_fd = (
            os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600) if lock else None
        )

    def _write(self, sql: str, params: tuple[object, ...]) -> list[sqlite3.Row]:
        fd = self.lock_fd
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            c = self.conn
            c.execute("BEGIN IMMEDIATE")
            try:
                rows = c.execute(sql, params).fetchall()
            except BaseException:
                c.execute("ROLLBACK")
                raise
            c.execute("COMMIT")
            return rows
        finally:
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_UN)

    def send(self, to: int, text: str) -> None:
        self._write(_SEND, (to, text))

    def claim(self, me: int, limit: int, wait: float = 0.0) -> list[tuple[int, str]]:
        """Up to ``limit`` ready messages of ``me``; with ``wait``, poll
        ``PRAGMA data_version`` every 1 ms (a read, no lock) until a commit lands."""
        deadline = time.monotonic() + wait
        while True:
            version = self.conn.execute("PRAGMA data_version").fetchone()[0]
            rows = self._write(_CLAIM, (me, limit))
            if rows or time.monotonic() >= deadline:
                return [(int(r[0]), str(r[1])) for r in rows]
            while self.conn.execute("PRAGMA data_version").fetchone()[0] == version:
                if time.monotonic() >= deadline:
                    return []
                time.sleep(POLL_S)

    def ack(self, ids: list[int]) -> None:
        self._write(_ACK, (json.dumps(ids),))

    def close(self) -> None:
        self.conn.close()
        if self.lock_fd is not None:
            os.close(self.lock_fd)
