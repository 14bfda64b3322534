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

from bench.peers.broker_queue import BrokerQueue, bulk_load, join_agent, open_space
from broker import Agent, Joined, Store
from broker.delivery.inbox import CLAIMED
from broker.ids import fmt_ts, message_id, new_token, ts_after
from broker.spaces.auth import Identity
from broker.store.sql import CatalogueError, Stmt, stmt

# --- the broker's statements, by name from its public catalogue (broker/store/sql/*.sql) ----------
# Each name is looked up in the catalogue; while a statement is not catalogued
# yet (the modules are moving theirs in), a copy of today's text stands in, and
# ``FROM_COPY`` says which did, in the report. The statement check (a trace of
# one operation of each) tells whether the sequence still matches the broker's.
FROM_COPY: set[str] = set()


def broker_sql(name: str, copy: str) -> Stmt:
    """The broker's statement ``name`` from the catalogue, else ``copy`` (named
    parameters, as the catalogue writes them)."""
    try:
        return stmt(name)
    except CatalogueError:
        FROM_COPY.add(name)
        return Stmt(name, copy)


CALLER = broker_sql("auth.caller", "")
CALLER_HEARTBEAT = broker_sql("auth.caller_heartbeat", "")
CALLER_SEND = broker_sql("auth.caller_send", "")
SEL_RECIPIENT = broker_sql("messages.at_address", "")
SEL_SPACE = broker_sql("messages.space", "")
LAST_AT = broker_sql("messages.last_at", "")
INS_MESSAGE = broker_sql("messages.insert_message", "")
INS_DELIVERY = broker_sql("inbox.insert", "")
CLAIM = broker_sql("inbox.claim", "")
ACK = broker_sql("inbox.ack", "")
BODY = CLAIMED.index("body")  # where a claimed row's JSON array holds the body
HEARTBEAT_S = 1.0  # the broker refreshes a caller's heartbeat at most once a second
LEASE_S = 30.0
MAX_DELIVERIES = 5


class RawSame:
    system = "raw_same"
    how = (
        "sqlite3 module on a broker-migrated database, the broker's own pragmas "
        "(Store.connect), the broker's statements by name from its catalogue (broker.store.sql) for "
        "one send (BEGIN IMMEDIATE; the caller check that reads the space's counters (derived "
        "from the log) and the recipient, one SELECT -- on the once-a-second heartbeat call "
        "instead the heartbeat UPDATE and the recipient SELECT; "
        "INSERT message; INSERT delivery; COMMIT) "
        "and for claim + ack (the caller check, the claim UPDATE ... RETURNING, the body SELECT; "
        "the caller check, the ack UPDATE)"
    )
    batch_how = "the same statements, 100 sends in one transaction; claim LIMIT 100, one ack"

    def __init__(self, folder: Path | None, attach: BrokerQueue | None = None) -> None:
        """A fresh broker database in ``folder``, or the database of ``attach``."""
        if attach is not None:
            self.store, self.space = attach.store, attach.space
            sender, worker = attach.sender_joined, attach.worker_joined
            self._owns_store = False
        else:
            assert folder is not None
            self.store, self.space = open_space(folder)
            sender = join_agent(self.store, self.space, "sender")
            worker = join_agent(self.store, self.space, "worker")
            self._owns_store = True
        self.sender = _Caller(self.store, self.space, sender)
        self.worker = _Caller(self.store, self.space, worker)
        self.worker_id = worker.participant_id
        self.conn = self.store.connect()  # the broker's pragmas, nothing else
        if FROM_COPY:
            self.how += (
                f" (copies of statements not catalogued yet: {', '.join(sorted(FROM_COPY))})"
            )

    def after_fork(self) -> None:
        """In a forked child: a connection of its own (the inherited one is kept
        referenced, never closed: closing it would drop this process's locks)."""
        self._inherited = self.conn
        self.conn = self.store.connect()

    # -- send ----------------------------------------------------------------------
    def _send(self, c: sqlite3.Connection, text: str) -> None:
        send_statements(c, self.store, self.space, self.sender, "sender", "worker", text)

    def _in_tx(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        return in_write_tx(self.conn, fn)

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
    def _claim(self, c: sqlite3.Connection, k: int, checked: bool = False) -> tuple[str, list[str]]:
        return claim_statements(c, self.store, self.worker, self.worker_id, "worker", k, checked)

    def claim(self, k: int) -> tuple[str, list[str]]:
        return self._in_tx(lambda c: self._claim(c, k))  # type: ignore[no-any-return]

    def _ack(self, c: sqlite3.Connection, token: str) -> None:
        ack_statements(c, self.store, self.worker, self.worker_id, token)

    def ack(self, token: str) -> None:
        self._in_tx(lambda c: self._ack(c, token))

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
                self._ack(c, token)
            return self._claim(c, k, checked=token is not None)

        return self._in_tx(run)  # type: ignore[no-any-return]

    def close(self) -> None:
        self.conn.close()
        if self._owns_store:
            self.store.close()


class _Caller:
    """The broker's caller check as raw statements: ``auth.caller``, or
    ``auth.caller_heartbeat`` when the heartbeat is due (at most once a second)."""

    def __init__(self, store: Store, space: str, joined: Joined | Identity) -> None:
        """``joined``: a participant's join, or the identity of its ``Agent``."""
        ident = (
            joined
            if isinstance(joined, Identity)
            else Agent.connect(store, space, joined.address, joined.token).identity
        )
        self.values = {"id": ident.participant_id, "token_hash": ident.token_hash}
        self.space = space
        self.due = ""

    def check_send(
        self, c: sqlite3.Connection, now_dt: Any, now: str, to: str, size: int
    ) -> tuple[tuple[int, str] | None, Any]:
        """A send's caller check: ``auth.caller_send`` -> ((seq, recipient id), row),
        or (None, the caller row) when the heartbeat was due (``auth.caller_heartbeat``
        ran instead)."""
        if now >= self.due:
            return None, self.check(c, now_dt, now)
        values = {**self.values, "space_id": self.space, "to": to, "size": size}
        row = c.execute(CALLER_SEND, values).fetchone()
        if row is None or row["status"] in (None, "left") or row["space_state"] != "running":
            raise RuntimeError("caller not allowed")
        return (row["last_seq"] + 1, row["to_id"]), row

    def check(self, c: sqlite3.Connection, now_dt: Any, now: str) -> Any:
        return self._judged(c.execute(*self._statement(now_dt, now)).fetchone())

    def check_then(
        self, c: Any, now_dt: Any, now: str, sql: str, values: dict[str, Any]
    ) -> list[Any]:
        """``check`` and ``sql`` after it, together (``auth.caller_then``: one
        round trip on PostgreSQL): ``sql``'s rows."""
        rows, after = c.two(self._statement(now_dt, now), (sql, values))
        self._judged(rows[0] if rows else None)
        return after  # type: ignore[no-any-return]

    def _statement(self, now_dt: Any, now: str) -> tuple[Any, dict[str, Any]]:
        if now < self.due:
            return CALLER, self.values
        self.due = ts_after(now_dt, HEARTBEAT_S)
        return CALLER_HEARTBEAT, {**self.values, "now": now}

    @staticmethod
    def _judged(row: Any) -> Any:
        if row is None or row["status"] == "left" or row["space_state"] != "running":
            raise RuntimeError("caller not allowed")
        return row


def in_write_tx(c: sqlite3.Connection, fn: Callable[[sqlite3.Connection], Any]) -> Any:
    """``fn(c)`` in one ``BEGIN IMMEDIATE`` transaction, rolled back if it raises."""
    c.execute("BEGIN IMMEDIATE")
    try:
        out = fn(c)
    except BaseException:
        c.execute("ROLLBACK")
        raise
    c.execute("COMMIT")
    return out


def claim_statements(
    c: sqlite3.Connection,
    store: Store,
    caller: _Caller,
    recipient_id: str,
    owner: str,
    k: int,
    checked: bool = False,
) -> tuple[str, list[str]]:
    """One claim of up to ``k`` as the broker's statements (the caller check and
    the claim, together as the broker sends them on PostgreSQL), inside the
    caller's write transaction: (lease token, bodies). ``checked``: the
    transaction checked the caller already (an ack's, before it in
    ``ack_and_claim``)."""
    now_dt = store.now()
    now = fmt_ts(now_dt)
    token = new_token()
    values = {
        "recipient_id": recipient_id,
        "limit": k,
        "n": k,
        "now": now,
        "max_deliveries": MAX_DELIVERIES,
        "token": token,
        "owner": owner,
        "process": None,
        "expires": ts_after(now_dt, LEASE_S),
    }
    if checked:
        rows = c.execute(CLAIM, values).fetchall()
    else:
        rows = caller.check_then(c, now_dt, now, CLAIM, values)
    # The broker's claim returns the messages itself, in one statement (a JSON
    # array each, its values in the order broker.delivery.inbox.CLAIMED names),
    # in the log's order, the rowid's.
    rows.sort(key=lambda r: r["r"])
    return token, [json.loads(r["message"])[BODY] for r in rows if r["state"] == "processing"]


def ack_statements(
    c: sqlite3.Connection, store: Store, caller: _Caller, recipient_id: str, token: str
) -> None:
    """The ack of a whole lease as the broker's statements (the caller check and
    the ack, together as the broker sends them), inside ``c``'s transaction."""
    now_dt = store.now()
    now = fmt_ts(now_dt)
    values = {
        "now": now,
        "token": token,
        "recipient_id": recipient_id,
        "ids": None,
        "error": None,
    }
    caller.check_then(c, now_dt, now, ACK, values)


def send_statements(
    c: sqlite3.Connection,
    store: Store,
    space: str,
    caller: _Caller,
    sender: str,
    to: str,
    text: str,
) -> None:
    """One direct send of ``text`` from ``sender`` to the address ``to``, as the
    broker's statements, inside the caller's write transaction on ``c``."""
    now_dt = store.now()
    now = fmt_ts(now_dt)
    recipients = json.dumps([to])
    reached = recipients
    size = len(text.encode("utf-8")) + len(recipients) + len(reached) + 2
    sent, sp = caller.check_send(c, now_dt, now, to, size)
    if sent is not None:  # auth.caller_send: counters (derived), recipient, last time read
        seq, recipient_id = sent
        last_at = sp["last_at"]
    else:  # the heartbeat's call (it reads the counters): recipient and last time read
        rc = c.execute(SEL_RECIPIENT, {"space_id": space, "address": to}).fetchone()
        seq, recipient_id = sp["last_seq"] + 1, rc["id"]
        last = c.execute(LAST_AT, {"space_id": space}).fetchone()  # S44
        last_at = last[0] if last is not None else ""
    now = max(now, last_at)
    mid = message_id(seq)  # an id that names its seq (the log keeps no index of ids)
    row = message_row(mid, space, seq, sender, text, reached, size, now)
    # As the broker: writes nobody reads an answer of are deferred (on
    # PostgreSQL, sent with the COMMIT in one round trip; on SQLite, run now).
    c.defer(INS_MESSAGE, row)
    c.defer(INS_DELIVERY, delivery_row(space, seq, recipient_id))


def message_row(
    mid: str, space: str, seq: int, sender: str, text: str, reached: str, size: int, now: str
) -> dict[str, Any]:
    """Every column of a direct message's log row, by name."""
    return {
        "id": mid,
        "space_id": space,
        "seq": seq,
        "kind": "direct",
        "sender": sender,
        "recipients": reached,
        "body": text,
        "urgent": False,
        "via": None,
        "ref": None,
        "reached": reached,
        "not_reached": "[]",
        "reached_n": 1,
        "bcast_no": None,
        "idempotency_key": None,
        "size_bytes": size,
        "created_at_utc": now,
        "thread": None,
        "reply_to": None,
        "importance": None,
        "ack_required": None,
    }


def delivery_row(space: str, seq: int, recipient_id: str) -> dict[str, Any]:
    """A new delivery's values as a send binds them (inbox.insert writes the rest,
    its id derived from its message's: revision 0024)."""
    return {"space_id": space, "message_seq": seq, "recipient_id": recipient_id}


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


_NESTED = re.compile(r"\([^()]*\)")


def signature(sql: str) -> str:
    """A statement reduced to verb + table (parameters, columns and subqueries
    dropped: the space's counters are subqueries of the log, revision 0017);
    a statement with no table of its own (``SELECT EXISTS (...)``) by its first
    subquery's."""
    outer = sql
    while (flat := _NESTED.sub("", outer)) != outer:
        outer = flat
    m = _SIG.match(outer) or _SIG.match(sql)
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
