"""``python -m bench.statements``: the floor of the broker's statements, one by one.

``raw_same`` (bench/peers/raw_sqlite.py) runs the broker's own statements for a
one-recipient send with no library around them; this times each of those
statements on its own (SQLite's C time, parameters bound), as the median over
``--sends`` sends after ``--warm``, beside the minimal queue's one autocommit
INSERT (``raw_floor``) and the cost of binding as many parameters as the log
row's INSERT takes, by name and numbered as the broker binds them. It answers
where ``raw_same``'s distance from ``raw_floor`` lies: which statements, and
how much of it is work any log row, delivery and caller check must do,
whatever the library around them.

Below those, the ladder (``ladder``): a send cut down on the broker's own schema
(its tables, indexes and triggers as they are), each step in autocommit as
``raw_floor`` runs: the log row alone as the broker writes it (values made per
send, then bound only), the log row with only the columns a plain send sets,
and the leanest send this schema allows, that row written by one
``INSERT ... SELECT`` that checks the caller's token and the recipient's
address in the statement itself (no delivery row, no counters, no caps), then
the same statement with its delivery row written by a trigger (still one
statement: a send's least on this schema that keeps its inbox row). Each with
its ratio to ``raw_floor``: how far a redesign of the send could go.

And one reference below every design that keeps the rules (``apart``):
``raw_floor``'s row in an append-only log table and its state in a table of
its own, the state row written by a trigger, one autocommit INSERT. A log that
nobody updates (spec S11) keeps a message's delivery state out of its row, so
every send writes two rows where ``raw_floor`` writes one: this is the most a
send of any schema can reach against ``raw_floor``.

``--senders N``: N other agents have each sent a message in the space first
(a space's log size was a sum over its senders' rows before revision 0020).

python -m bench.statements --sends 3000
python -m bench.statements --sends 3000 --senders 64
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from operator import itemgetter
from pathlib import Path
from typing import Any

from bench.core import count, whole
from bench.peers.raw_sqlite import INS_MESSAGE, RawFloor, RawSame, in_write_tx, message_row
from broker import Operator
from broker.ids import fmt_ts, message_id

_clock = time.perf_counter_ns
FLOOR = "raw_floor: one autocommit INSERT"  # the row every other is read against


class _Timed:
    """A connection whose statements are timed, by their first words."""

    def __init__(self, conn: sqlite3.Connection, into: dict[str, list[int]]) -> None:
        self.conn, self.into = conn, into

    def execute(self, sql: Any, params: Any = ()) -> sqlite3.Cursor:
        t0 = _clock()
        cur = self.conn.execute(sql, params)
        self.into.setdefault(_label(str(sql)), []).append(_clock() - t0)
        return cur

    defer = execute  # as the broker: on SQLite a deferred write runs at once

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


def _label(sql: str) -> str:
    words = sql.split()
    if words[0] == "SELECT":
        return "SELECT: the caller check (auth.caller_send)"
    if words[0] == "INSERT":
        return f"INSERT INTO {words[2]}"
    return " ".join(words[:2]) if words[0] == "BEGIN" else words[0]


def _median_us(samples: list[int]) -> float:
    return statistics.median(samples) / 1000


def _each(n: int, fn: Callable[[], object]) -> list[int]:
    out = []
    for _ in range(n):
        t0 = _clock()
        fn()
        out.append(_clock() - t0)
    return out


def measure(folder: Path, sends: int, warm: int, body: str, senders: int = 0) -> dict[str, float]:
    """Median µs of each statement of a raw_same send, and of the references;
    ``senders`` other agents have each sent one message in the space first."""
    same = RawSame(folder / "same")
    for i in range(senders):
        Operator(same.store).join(same.space, f"earlier{i}")[0].send("worker", body)
    for _ in range(warm):
        same.put(body)
    times: dict[str, list[int]] = {}
    plain = same.conn
    same.conn = _Timed(same.conn, times)  # type: ignore[assignment]
    whole = _each(sends, lambda: same.put(body))
    same.conn = plain
    got = {k: _median_us(v) for k, v in times.items() if len(v) >= sends // 2}
    got["raw_same: the whole send (statements + the values they need)"] = _median_us(whole)
    floor = RawFloor(folder / "floor")
    for _ in range(warm):
        floor.put(body)
    got[FLOOR] = _median_us(_each(sends, lambda: floor.put(body)))
    # The same INSERT inside BEGIN IMMEDIATE ... COMMIT: the least a send that
    # reads before it writes (the caller check, S10) pays for its transaction.
    got["raw_floor's INSERT in BEGIN IMMEDIATE ... COMMIT"] = _median_us(
        _each(sends, lambda: in_write_tx(floor.conn, lambda c: floor.put(body)))
    )
    # Binding alone: a statement that reads nothing but its parameters, with as
    # many named parameters as the log row's INSERT binds.
    names = INS_MESSAGE.params
    probe = "SELECT " + ", ".join(f":{p}" for p in names)
    values = dict.fromkeys(names, "x" * 26)
    conn = sqlite3.connect(":memory:")
    got[f"binding {len(names)} named parameters (no table)"] = _median_us(
        _each(sends, lambda: conn.execute(probe, values))
    )
    # As the broker binds a catalogue statement's values: numbered, taken from
    # the row by name in C (``Stmt.numbered``).
    numbered = "SELECT " + ", ".join(f"?{i}" for i in range(1, len(names) + 1))
    take = itemgetter(*names)
    got["binding them numbered, as the broker does (no table)"] = _median_us(
        _each(sends, lambda: conn.execute(numbered, take(values)))
    )
    got.update(ladder(same, sends, body))
    apart = _Apart(folder / "apart")
    for _ in range(warm):
        apart.put(body)
    got[APART] = _median_us(_each(sends, lambda: apart.put(body)))
    apart.close()
    same.close()
    floor.close()
    return got


APART = "apart: raw_floor's row in a log, its state row by a trigger (one autocommit INSERT)"


class _Apart:
    """The minimal queue with its log and its delivery state apart (module
    docstring): ``raw_floor``'s columns over two tables, the same pragmas."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir()
        self.floor = RawFloor(folder)  # its connection and pragmas; its table q stays empty
        self.conn = self.floor.conn
        self.conn.executescript(
            "CREATE TABLE log (id INTEGER PRIMARY KEY, body TEXT NOT NULL);"
            "CREATE TABLE st (id INTEGER PRIMARY KEY, state INTEGER NOT NULL);"
            "CREATE INDEX st_ready ON st (id) WHERE state = 0;"
            "CREATE TRIGGER log_st AFTER INSERT ON log "
            "BEGIN INSERT INTO st (id, state) VALUES (NEW.id, 0); END;"
        )

    def put(self, text: str) -> None:
        self.conn.execute("INSERT INTO log (body) VALUES (?)", (text,))

    def close(self) -> None:
        self.floor.close()


# The ladder's statements: bench-only cuts of the catalogue's log row INSERT
# (messages.insert_message), on the broker's own table.
_FEWEST = (
    "INSERT INTO messages (id, space_no, seq, kind, sender, recipients, body, reached_n, "
    "size_bytes, created_at_utc) VALUES (?, ?, ?, 'direct', ?, ?, ?, 1, ?, ?)"
)
_CHECKED = (
    "INSERT INTO messages (id, space_no, seq, kind, sender, recipients, body, reached_n, "
    "size_bytes, created_at_utc) "
    "SELECT ?, ?, ?, 'direct', p.address, ?, ?, 1, ?, ? FROM participants p "
    "JOIN participants r ON r.space_id = p.space_id AND r.address = ? "
    "WHERE p.id = ? AND p.token_hash = ? AND p.status != 'left' AND p.messaging"
)
LADDER = (
    "ladder: the log row alone, as the broker writes it (autocommit)",
    "ladder: the same, its values made once (binding only)",
    "ladder: the log row with only the columns a plain send sets",
    "ladder: that row checking the caller and the recipient in its INSERT (one statement)",
    "ladder: the same, its delivery row written by a trigger (one statement)",
)
# Step 5's trigger (this connection's only, dropped after the step): the
# delivery a send writes (inbox.insert: the first of its message's rowid range,
# ready, out of the ready index until the waiting fold), its recipient the
# one the row names.
_DELIVERY_TRIGGER = (
    "CREATE TEMP TRIGGER ladder_delivery AFTER INSERT ON main.messages BEGIN "
    "INSERT INTO deliveries (rowid, recipient_no, state, attempts, queued) "
    "SELECT NEW.rowid * 1048576, p.rowid, 'ready', 0, 0 FROM participants p "
    "WHERE p.space_id = (SELECT id FROM spaces WHERE rowid = NEW.space_no) "
    "AND p.address = json_extract(NEW.recipients, '$[0]'); END"
)


def ladder(same: RawSame, sends: int, body: str) -> dict[str, float]:
    """Median µs of each step of the ladder (module docstring) on ``same``'s
    store, after its sends: each step appends log rows of its own, in autocommit."""
    c = same.conn
    seq = int(c.execute("SELECT max(seq) FROM messages").fetchone()[0])
    space_no = c.execute("SELECT rowid FROM spaces WHERE id = ?", (same.space,)).fetchone()[0]
    who = same.sender.values
    now = fmt_ts(same.store.now())
    to = '["worker"]'
    size = len(body.encode("utf-8")) + 2 * len(to) + 2

    def next_seq() -> int:
        nonlocal seq
        seq += 1
        return seq

    def as_written() -> None:
        n = next_seq()
        row = message_row(message_id(n), same.space, n, "sender", body, to, size, now)
        c.execute(INS_MESSAGE, row)

    made = message_row(message_id(1), same.space, 1, "sender", body, to, size, now)

    def bound_only() -> None:
        made["seq"] = n = next_seq()
        made["id"] = message_id(n)
        c.execute(INS_MESSAGE, made)

    def fewest() -> None:
        n = next_seq()
        c.execute(_FEWEST, (message_id(n), space_no, n, "sender", to, body, size, now))

    def checked() -> None:
        n = next_seq()
        values = (
            message_id(n),
            space_no,
            n,
            to,
            body,
            size,
            now,
            "worker",
            who["id"],
            who["token_hash"],
        )
        if c.execute(_CHECKED, values).rowcount != 1:
            raise RuntimeError("the caller or the recipient was refused")

    got = {
        name: _median_us(_each(sends, step))
        for name, step in zip(LADDER[:4], (as_written, bound_only, fewest, checked), strict=True)
    }
    c.execute(_DELIVERY_TRIGGER)
    try:
        got[LADDER[4]] = _median_us(_each(sends, checked))
    finally:
        c.execute("DROP TRIGGER temp.ladder_delivery")
    return got


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.statements", description=__doc__)
    p.add_argument("--sends", type=count, default=3000)
    p.add_argument("--warm", type=whole, default=500)
    p.add_argument("--body-bytes", type=count, default=100)
    p.add_argument("--senders", type=whole, default=0, help="other agents that sent first")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-statements-") as d:
        got = measure(Path(d), a.sends, a.warm, "x" * a.body_bytes, a.senders)
    earlier = f", {a.senders} other senders in the space" if a.senders else ""
    print(f"{a.sends} one-recipient sends after {a.warm}{earlier}, median µs")
    floor = got[FLOOR]
    print("| statement | µs | raw_floor ÷ it |\n|---|---|---|")
    for name, us in got.items():
        print(f"| {name} | {us:.1f} | {floor / us:.2f} |")


if __name__ == "__main__":
    main()
