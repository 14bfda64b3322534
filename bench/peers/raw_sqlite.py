"""Raw sqlite3: the physical limit.

``RawSame`` runs, on a database made by the broker's own migrations (same
tables, indexes and triggers) and on a connection configured by the broker's
own ``Store.connect`` (same pragmas: WAL, synchronous, foreign_keys,
busy_timeout), exactly the statements the broker executes for a direct send
and for claim + ack, with no Python around them but the values they need.
``statements()`` traces both and the report says whether they match.

``RawFloor`` is the simplest possible queue: one table, one INSERT per
transaction, one UPDATE ... RETURNING per claim and one UPDATE per ack, same
pragmas: the floor no queue on SQLite goes below.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.peers.broker_queue import BrokerQueue, bulk_load, open_space
from broker import Agent, Store
from broker.ids import fmt_ts, new_id, new_token, ts_after

# --- the broker's statements (broker/messages.py, broker/tools.py, broker/inbox.py) ---
SEL_CALLER = (
    "SELECT status, messaging, tools, is_lead, agent, parent FROM participants "
    "WHERE id = ? AND token_hash = ?"
)
SEL_SPACE = "SELECT state, settings, last_seq, log_bytes, last_bcast FROM spaces WHERE id = ?"
SEL_RECIPIENT = (
    "SELECT id, address, status, waiting FROM participants WHERE space_id = ? AND address = ?"
)
UPD_SPACE = (
    "UPDATE spaces SET last_seq = ?, log_bytes = log_bytes + ?, last_bcast = last_bcast + ? "
    "WHERE id = ?"
)
INS_MESSAGE = (
    "INSERT INTO messages (id, space_id, seq, kind, sender, recipients, body, urgent, via, ref, "
    "reached, not_reached, reached_n, bcast_no, idempotency_key, size_bytes, created_at_utc) "
    "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
)
INS_DELIVERY = (
    "INSERT INTO deliveries (id, space_id, message_id, recipient_id, state, created_at_utc) "
    "VALUES (?, ?, ?, ?, 'ready', ?)"
)


# Claim + ack: the broker's own statement texts where broker/inbox.py exposes them
# (so this baseline follows the broker), else copies of them.
def _inbox_sql(name: str, default: str) -> str:
    try:
        from broker import inbox
    except ImportError:
        return default
    value = getattr(inbox, name, default)
    return value if isinstance(value, str) else default


CLAIM = _inbox_sql(
    "CLAIM_SQL",
    "UPDATE deliveries SET state = 'processing', attempts = attempts + 1, lease_token = ?5, "
    "lease_owner = ?6, lease_expires_at = ?7 WHERE id IN (SELECT id FROM deliveries "
    "WHERE recipient_id = ?1 AND state = 'ready' ORDER BY created_at_utc, id LIMIT ?2) "
    "AND ?3 IS NOT NULL AND ?4 IS NOT NULL "
    "RETURNING id, message_id, state, attempts, created_at_utc",
)
CHECK_CALLER = _inbox_sql(
    "_CHECK_SQL",
    "SELECT status, (SELECT settings FROM spaces WHERE spaces.id = participants.space_id) "
    "FROM participants WHERE id = ? AND token_hash = ?",
)
ENTER_CALLER = _inbox_sql(
    "_ENTER_SQL",
    "UPDATE participants SET last_seen_utc = ? WHERE id = ? AND token_hash = ? "
    "RETURNING status, (SELECT settings FROM spaces WHERE spaces.id = participants.space_id)",
)
HEARTBEAT_S = 1.0
SEL_BODIES = "SELECT id, kind, sender, body, urgent FROM messages WHERE id IN ({})"
ACK = (
    "UPDATE deliveries SET state = 'done', acked_at_utc = ? WHERE lease_token = ? "
    "AND recipient_id = ? AND state = 'processing' RETURNING message_id"
)


class RawSame:
    system = "raw_same"
    how = (
        "sqlite3 module on a broker-migrated database, the broker's own pragmas "
        "(Store.connect), the broker's statements for one send (BEGIN IMMEDIATE; caller, space "
        "and recipient SELECTs; UPDATE spaces; INSERT message; INSERT delivery; COMMIT) and for "
        "claim + ack (the broker's UPDATE ... RETURNING claim, the body SELECT, the ack UPDATE)"
    )
    batch_how = "the same statements, 100 sends in one transaction; claim LIMIT 100, one ack"

    def __init__(self, folder: Path | None, attach: BrokerQueue | None = None) -> None:
        """A fresh broker database in ``folder``, or the database of ``attach``."""
        if attach is not None:
            self.store, self.space = attach.store, attach.space
            sender, worker = attach.sender, attach.worker
            self._owns_store = False
        else:
            assert folder is not None
            self.store, self.space = open_space(folder)
            sender, _ = Agent.join(self.store, self.space, "sender")
            worker, _ = Agent.join(self.store, self.space, "worker")
            self._owns_store = True
        self.sender_id = sender.identity.participant_id
        self.token_hash = sender.identity.token_hash
        self.worker_id = worker.identity.participant_id
        self.worker_token_hash = worker.identity.token_hash
        self.conn = self.store.connect()  # the broker's pragmas, nothing else
        self._beat_due = ""

    def after_fork(self) -> None:
        """In a forked child: a connection of its own (the inherited one is kept
        referenced, never closed: closing it would drop this process's locks)."""
        self._inherited = self.conn
        self.conn = self.store.connect()

    # -- send ----------------------------------------------------------------------
    def _send(self, c: sqlite3.Connection, text: str) -> None:
        row = c.execute(SEL_CALLER, (self.sender_id, self.token_hash)).fetchone()
        if row is None or row[0] == "left":
            raise RuntimeError("caller not found")
        sp = c.execute(SEL_SPACE, (self.space,)).fetchone()
        if sp[0] != "running":
            raise RuntimeError("space not running")
        rc = c.execute(SEL_RECIPIENT, (self.space, "worker")).fetchone()
        now = self.store.now_ts()
        mid = new_id()
        seq = sp[2] + 1
        recipients = json.dumps(["worker"])
        reached = json.dumps(["worker"])
        size = len(text.encode("utf-8")) + len(recipients) + len(reached) + 2
        c.execute(UPD_SPACE, (seq, size, 0, self.space))
        c.execute(
            INS_MESSAGE,
            (
                mid,
                self.space,
                seq,
                "direct",
                "sender",
                recipients,
                text,
                False,
                None,
                None,
                reached,
                "[]",
                1,
                None,
                None,
                size,
                now,
            ),
        )
        c.execute(INS_DELIVERY, (new_id(), self.space, mid, rc[0], now))

    def _in_tx(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        try:
            out = fn(c)
        except BaseException:
            c.execute("ROLLBACK")
            raise
        c.execute("COMMIT")
        return out

    def put(self, text: str) -> None:
        self._in_tx(lambda c: self._send(c, text))

    def put_many(self, texts: list[str]) -> None:
        def run(c: sqlite3.Connection) -> None:
            for text in texts:
                self._send(c, text)

        self._in_tx(run)

    def preload(self, texts: list[str]) -> None:
        bulk_load(self.store, self.space, "sender", self.worker_id, texts)

    # -- claim + ack -------------------------------------------------------------------
    def _claim(self, c: sqlite3.Connection, k: int) -> tuple[str, list[str]]:
        now_dt = self.store.now()
        now = fmt_ts(now_dt)
        # The caller check, with the heartbeat write at most once a second (as the broker).
        if now < self._beat_due:
            row = c.execute(CHECK_CALLER, (self.worker_id, self.worker_token_hash)).fetchone()
        else:
            row = c.execute(ENTER_CALLER, (now, self.worker_id, self.worker_token_hash)).fetchone()
            self._beat_due = ts_after(now_dt, HEARTBEAT_S)
        if row is None or row[0] == "left":
            raise RuntimeError("caller not found")
        token = new_token()
        expires = ts_after(now_dt, 30.0)
        rows = c.execute(CLAIM, (self.worker_id, k, now, 5, token, "worker", expires)).fetchall()
        if not rows:
            return token, []
        ids = [r[1] for r in rows]
        found = {
            m[0]: m[3]
            for m in c.execute(SEL_BODIES.format(",".join("?" * len(ids))), ids).fetchall()
        }
        if len(rows) > 1:
            rows.sort(key=lambda r: (r[4], r[0]))  # FIFO, as the broker returns them
        return token, [found[r[1]] for r in rows]

    def claim(self, k: int) -> tuple[str, list[str]]:
        return self._in_tx(lambda c: self._claim(c, k))  # type: ignore[no-any-return]

    def ack(self, token: str) -> None:
        now = self.store.now_ts()
        self._in_tx(lambda c: c.execute(ACK, (now, token, self.worker_id)).fetchall())

    def claim_ack(self) -> list[str]:
        return self.claim_ack_many(1)

    def claim_ack_many(self, k: int) -> list[str]:
        token, bodies = self.claim(k)
        if bodies:
            self.ack(token)
        return bodies

    def ack_and_claim(self, token: str | None, k: int = 1) -> tuple[str, list[str]]:
        """Ack the previous lease and claim the next in one transaction."""

        def run(c: sqlite3.Connection) -> tuple[str, list[str]]:
            if token is not None:
                c.execute(ACK, (self.store.now_ts(), token, self.worker_id)).fetchall()
            return self._claim(c, k)

        return self._in_tx(run)  # type: ignore[no-any-return]

    def close(self) -> None:
        self.conn.close()
        if self._owns_store:
            self.store.close()


class RawFloor:
    system = "raw_floor"
    how = (
        "sqlite3 module, one table q(id INTEGER PRIMARY KEY, body, state) with a partial index "
        "on ready rows, broker pragmas; autocommit: one INSERT per send, one "
        "UPDATE ... RETURNING per claim, one UPDATE per ack"
    )
    batch_how = "executemany of 100 INSERTs in one transaction; claim LIMIT 100, one ack UPDATE"

    def __init__(self, folder: Path) -> None:
        store = Store(f"sqlite:///{folder / 'floor.db'}", migrate=False)
        self.conn = store.connect()  # same pragmas as the broker
        self.conn.execute(
            "CREATE TABLE q (id INTEGER PRIMARY KEY, body TEXT NOT NULL, state INTEGER NOT NULL)"
        )
        self.conn.execute("CREATE INDEX q_ready ON q (id) WHERE state = 0")

    def put(self, text: str) -> None:
        self.conn.execute("INSERT INTO q (body, state) VALUES (?, 0)", (text,))

    def put_many(self, texts: list[str]) -> None:
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        c.executemany("INSERT INTO q (body, state) VALUES (?, 0)", [(t,) for t in texts])
        c.execute("COMMIT")

    def preload(self, texts: list[str]) -> None:
        self.put_many(texts)

    def claim_ack(self) -> list[str]:
        return self.claim_ack_many(1)

    def claim_ack_many(self, k: int) -> list[str]:
        rows = self.conn.execute(
            "UPDATE q SET state = 1 WHERE id IN "
            "(SELECT id FROM q WHERE state = 0 ORDER BY id LIMIT ?) RETURNING id, body",
            (k,),
        ).fetchall()
        if not rows:
            return []
        if len(rows) == 1:
            self.conn.execute("UPDATE q SET state = 2 WHERE id = ?", (rows[0][0],))
        else:
            ids = [r[0] for r in rows]
            self.conn.execute(
                f"UPDATE q SET state = 2 WHERE id IN ({','.join('?' * len(ids))})", ids
            )
        return [r[1] for r in rows]

    def close(self) -> None:
        self.conn.close()


# --- checking that RawSame runs what the broker runs ------------------------------------
_SIG = re.compile(
    r"^\s*(BEGIN(?: IMMEDIATE)?|COMMIT|ROLLBACK|SELECT .*? FROM (\w+)|UPDATE (\w+)|INSERT INTO (\w+)"
    r"|DELETE FROM (\w+))",
    re.S | re.I,
)


def signature(sql: str) -> str:
    """A statement reduced to verb + table (parameters and columns dropped)."""
    m = _SIG.match(sql)
    if m is None:
        return sql.strip().split()[0].upper() if sql.strip() else ""
    verb = m.group(1).split()[0].upper()
    if verb in ("BEGIN", "COMMIT", "ROLLBACK"):
        return m.group(1).upper()
    table = next(g for g in m.groups()[1:] if g)
    return f"{verb} {table}"


def trace(conn: sqlite3.Connection, fn: Callable[[], object]) -> list[str]:
    """Statement signatures ``conn`` runs while ``fn`` runs (trigger bodies excluded)."""
    seen: list[str] = []

    def cb(sql: str) -> None:
        if not sql.lstrip().startswith("--"):  # trigger sub-statements are reported as comments
            seen.append(signature(sql))

    conn.set_trace_callback(cb)
    try:
        fn()
    finally:
        conn.set_trace_callback(None)
    # The sqlite3 module reports trigger steps with the text of the statement that
    # fired them, so one INSERT with a trigger shows up more than once: collapse.
    out: list[str] = []
    for sig in seen:
        if not sig.startswith("PRAGMA") and (not out or out[-1] != sig):
            out.append(sig)
    return out


def broker_connection(store: Store) -> sqlite3.Connection:
    """The calling thread's connection of a broker Store (what its writes run on)."""
    with store.read() as t:
        return t.raw
