"""Reliability catalogue (spec §Reliability): crash loops, bounded WAL, redelivery after death."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import sqlrows
import trusted

from broker import Agent, Operator, Store
from broker.spaces import spaces
from broker.store.sql import stmt

WRITER = textwrap.dedent(
    """
    import os, sys
    from broker import Agent, Store
    url, space, token, record = sys.argv[1:5]
    store = Store(url)
    me = Agent.connect(store, space, "writer", token)
    fd = os.open(record, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    i = 0
    while True:
        result = me.send("reader", f"{os.getpid()}-{i}")
        # Only a send that returned (committed) is recorded: it must survive.
        os.write(fd, (result.id + "\\n").encode())
        i += 1
    """
)


def test_crash_loop_sigkill_writer_keeps_integrity_and_every_committed_send(tmp_path: Path) -> None:
    """SIGKILL a writer at random points, again and again: integrity_check stays
    ok and every send that returned to its caller is in the log (no acked commit lost)."""
    assert_crash_loop_keeps_every_commit(tmp_path)


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def assert_crash_loop_keeps_every_commit(tmp_path: Path, rounds: int = 12) -> None:
    """One crash loop: each round starts a writer, lets it commit at least one
    send (a condition, so every round kills a writer in the middle of its work),
    then kills it after a random extra moment; asserts as it goes."""
    url = f"sqlite:///{tmp_path / 'crash.db'}"
    store = Store(url)
    space = Operator(store).create_space("workflow", inbox_cap=10**9).id
    _, writer = trusted.join(store, space, "w/writer")
    trusted.join(store, space, "w/reader")
    store.close()
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    record = tmp_path / "committed.txt"
    rng = random.Random(7)
    for _ in range(rounds):
        before = _lines(record)
        proc = subprocess.Popen(
            [sys.executable, str(script), url, space, writer.token, str(record)]
        )
        try:
            guard = time.monotonic() + 60
            while _lines(record) == before:  # not one send committed yet this round
                assert proc.poll() is None, f"the writer exited with {proc.returncode}"
                assert time.monotonic() < guard, "the writer committed nothing in 60 s"
                time.sleep(0.005)
            time.sleep(rng.uniform(0.0, 0.2))  # then a random point of its work
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    committed = [line for line in record.read_text().splitlines() if line]
    raw = sqlite3.connect(tmp_path / "crash.db")
    try:
        assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        # The search index (S36) is written by triggers in the sends' transactions,
        # in batches: the rows waiting for theirs are indexed as a search does
        # first, then FTS5's own check (against the log, rank 1) raises if a
        # crash split the index from the log.
        raw.execute(stmt("search.index_pending"))
        raw.execute(stmt("search.mark_indexed"))
        raw.execute("INSERT INTO messages_fts (messages_fts, rank) VALUES ('integrity-check', 1)")
        indexed = raw.execute(sqlrows.INDEXED_ROWS).fetchone()[0]
        logged = {
            r[0]
            for r in raw.execute(
                f"SELECT id FROM messages WHERE space_no = {sqlrows.SPACE_NO}",
                (space,),
            )
        }
        seqs = [
            r[0]
            for r in raw.execute(
                f"SELECT seq FROM messages WHERE space_no = {sqlrows.SPACE_NO} ORDER BY seq",
                (space,),
            )
        ]
    finally:
        raw.close()
    missing = [m for m in committed if m not in logged]
    print(
        f"crash loop: kills={rounds} committed_sends={len(committed)} logged={len(logged)} "
        f"missing={len(missing)}"
    )
    assert missing == []
    assert indexed == len(logged)  # one space in this file: every row indexed once
    assert seqs == list(range(1, len(seqs) + 1))  # the sequence stayed gap-free across crashes


def wal_cycle(db: Path) -> int:
    """The WAL header's checkpoint sequence number: it grows each time a writer
    restarts the WAL from its start (which a reader pinning it prevents)."""
    with open(f"{db}-wal", "rb") as f:
        return int.from_bytes(f.read(16)[12:16], "big")


def test_wal_stays_bounded_while_a_follower_tails_the_log(tmp_path: Path) -> None:
    """A long-lived reader (``message list --follow``) must not pin the WAL: its
    reads are short transactions, so the WAL is checkpointed and restarted from
    its start again and again instead of growing with everything written (with
    a reader pinning it, 3,000 sends of 2 KB grow it to ~150 MB, never restarted)."""
    db = tmp_path / "wal.db"
    url = f"sqlite:///{db}"
    store = Store(url)
    space = Operator(store).create_space("workflow", inbox_cap=10**9).id
    a, _ = trusted.join(store, space, "w/a")
    trusted.join(store, space, "w/b")
    env = {**os.environ, "BROKER_URL": url}
    follower = subprocess.Popen(
        [sys.executable, "-m", "broker", "message", "list", space, "--follow", "--json"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        sizes, cycles = [], [wal_cycle(db)]
        body = "x" * 2000
        for _ in range(6):
            # 500 sends write ~25 MB of WAL frames: several times the 1000-page
            # auto-checkpoint, so a WAL that is not pinned restarts in each round.
            for _ in range(500):
                a.send("b", body)
            sizes.append(os.path.getsize(f"{db}-wal"))
            cycles.append(wal_cycle(db))
        print(f"wal sizes after each 500 sends of 2 KB: {sizes}; restarts so far: {cycles}")
        assert all(later > earlier for earlier, later in zip(cycles, cycles[1:], strict=False))
    finally:
        spaces.stop(store, space)  # the follower returns once it has read up to the stop
        try:
            follower.wait(60)
        finally:
            if follower.poll() is None:
                follower.kill()
                follower.wait()
            err = follower.stderr.read().decode() if follower.stderr else ""
            if follower.stderr is not None:
                follower.stderr.close()
            store.close()
    assert follower.returncode == 0, err


def test_S15_redelivery_after_the_holder_dies_waits_for_its_lease(tmp_path: Path) -> None:
    """A holder killed after its claim: the message is claimable again only once
    the lease has expired, and then at once (the claim predicate takes it back).
    The holder is transient (no process recorded on its lease), so restart
    recovery (S32, tests/unit/delivery/test_recovery.py) does not return it earlier."""
    url = f"sqlite:///{tmp_path / 'r.db'}"
    store = Store(url)
    space = Operator(store).create_space("workflow", lease_seconds=1.0).id
    sender, _ = trusted.join(store, space, "w/sender")
    _, worker = trusted.join(store, space, "w/worker")
    sent = sender.send("worker", "job")
    code = textwrap.dedent(
        f"""
        import os, signal, time
        from broker import Agent, Store
        me = Agent.connect(Store({url!r}), {space!r}, "worker", {worker.token!r}, transient=True)
        lease = me.claim(lease=1.0)
        print(lease.expires_at, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == -signal.SIGKILL
    expires_at = out.stdout.strip()
    other = Agent.connect(store, space, "worker", worker.token)
    t0 = time.monotonic()
    lease = other.claim(wait=10)
    waited = time.monotonic() - t0
    print(f"redelivered after {waited * 1000:.0f} ms (lease 1000 ms)")
    assert [d.id for d in lease.deliveries] == [sent.id]
    assert lease.deliveries[0].deliveries == 2
    assert store.now_ts() >= expires_at  # never before the dead holder's lease expired


@pytest.mark.soak
def test_crash_loop_long(tmp_path: Path) -> None:
    for i in range(5):
        folder = tmp_path / str(i)
        folder.mkdir()
        assert_crash_loop_keeps_every_commit(folder)


def test_wal_checkpoint_folds_the_wal_back_when_idle(store: Store, space: str) -> None:
    a, _ = trusted.join(store, space, "w/a")
    trusted.join(store, space, "w/b")
    for i in range(50):
        a.send("b", f"m{i}")
    busy, frames, done = store.checkpoint()
    assert busy == 0 and frames > 0 and done == frames  # nobody reading: all of it
