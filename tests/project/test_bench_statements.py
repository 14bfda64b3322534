"""``python -m bench.statements`` times each statement of a ``raw_same`` send.

The floor it reports (bench/results, spec §Targets) rests on it timing the
broker's own statements for a one-recipient send, each under its own name,
and the references beside them; a statement the broker adds or drops shows
up here as a name more or less.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.peers.raw_sqlite import INS_MESSAGE  # noqa: E402
from bench.statements import APART, LADDER, measure  # noqa: E402


def test_each_statement_of_a_raw_same_send_is_timed_beside_the_minimal_queue(
    tmp_path: Path,
) -> None:
    got = measure(tmp_path, sends=40, warm=5, body="x" * 100)
    assert list(got) == [
        "BEGIN IMMEDIATE",
        "SELECT: the caller check (auth.caller_send)",
        "INSERT INTO messages",
        "INSERT INTO deliveries",
        "COMMIT",
        "raw_same: the whole send (statements + the values they need)",
        "raw_floor: one autocommit INSERT",
        "raw_floor's INSERT in BEGIN IMMEDIATE ... COMMIT",
        f"binding {len(INS_MESSAGE.params)} named parameters (no table)",
        "binding them numbered, as the broker does (no table)",
        *LADDER,
        APART,
    ]
    statements = sum(list(got.values())[:5])
    assert all(us > 0 for us in got.values()), got
    assert got["raw_same: the whole send (statements + the values they need)"] >= statements * 0.5


def test_a_space_with_earlier_senders_times_the_same_statements(tmp_path: Path) -> None:
    """``--senders``: other agents sent first (the space's log size was a sum
    over its senders' rows before revision 0020); the send's statements are the
    same ones."""
    got = measure(tmp_path, sends=20, warm=2, body="x" * 100, senders=3)
    assert "SELECT: the caller check (auth.caller_send)" in got
    assert "INSERT INTO deliveries" in got


def test_the_ladder_writes_a_log_row_per_step_and_send_on_the_brokers_own_table(
    tmp_path: Path,
) -> None:
    """Each step of the ladder appends real log rows (the checked steps refuse
    to time a statement that wrote nothing: its caller and recipient exist);
    the last step's trigger writes each of its rows' delivery, to the
    recipient the row names. The reference beside the broker's schema
    (``apart``) writes a log row and a state row a put."""
    import sqlite3

    got = measure(tmp_path, sends=30, warm=3, body="x" * 100)
    assert all(got[name] > 0 for name in (*LADDER, APART))
    db = sqlite3.connect(tmp_path / "same" / "broker.db")
    try:
        (rows,) = db.execute("SELECT count(*) FROM messages").fetchone()
        (deliveries,) = db.execute("SELECT count(*) FROM deliveries").fetchone()
        to_worker = db.execute(
            "SELECT count(*) FROM deliveries d JOIN participants p ON p.rowid = d.recipient_no "
            "WHERE p.address = 'worker'"
        ).fetchone()[0]
    finally:
        db.close()
    assert rows == 3 + 30 + len(LADDER) * 30  # warm-up, raw_same's sends, each step's
    assert deliveries == to_worker == 3 + 30 + 30  # raw_same's sends, and the last step's
    apart = sqlite3.connect(tmp_path / "apart" / "floor.db")
    try:
        counts = [apart.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("log", "st")]
    finally:
        apart.close()
    assert counts == [3 + 30, 3 + 30]
