"""S14-S16 under faults, with real processes (spec §Reliability): kill -9 of workers in
the middle of claim/ack (Jepsen-style accounting: lost 0, unexpected 0, every
duplicate traced to a killed or expired lease), and a holder frozen with
SIGSTOP past its lease whose late ack is refused after the message went to
someone else."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from broker import Agent, Operator, Store
from broker.ids import parse_ts
from broker.records import Joined

WORKER = str(Path(__file__).with_name("chaos_worker.py"))


@dataclass
class Accounting:
    messages: int
    workers: int
    kills: int = 0
    claims: int = 0
    duplicates: int = 0
    by_killed: int = 0
    by_expired: int = 0
    told_lost: int = 0
    lost: int = 0
    unexpected: int = 0
    unexplained: list[str] = field(default_factory=list)
    quarantined: int = 0

    def line(self) -> str:
        return (
            f"chaos: messages={self.messages} workers={self.workers} kills={self.kills} "
            f"claims={self.claims} duplicates={self.duplicates} "
            f"(killed lease={self.by_killed}, expired lease={self.by_expired}, "
            f"of which refused LeaseLost={self.told_lost}) "
            f"lost={self.lost} unexpected={self.unexpected} "
            f"unexplained={len(self.unexplained)} quarantined={self.quarantined}"
        )


def _start(
    url: str, joined: Joined, out: Path, lease: float, batch: int
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            WORKER,
            "worker",
            url,
            joined.space_id,
            joined.address,
            joined.token,
            str(out),
            str(lease),
            str(batch),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _done(store: Store, pid: str) -> int:
    with store.read() as t:
        return int(
            t.one(
                "SELECT count(*) FROM deliveries WHERE recipient_id = ? AND state = 'done'", (pid,)
            )[0]
        )


def run_chaos(
    tmp_path: Path,
    *,
    messages: int,
    workers: int,
    kill_every: tuple[float, float],
    lease: float = 1.0,
    batch: int = 5,
    deadline_s: float = 240.0,
) -> Accounting:
    url = f"sqlite:///{tmp_path / 'chaos.db'}"
    store = Store(url)
    sid = Operator(store).create_space("workflow", inbox_cap=messages + 10, max_deliveries=1000).id
    producer, _ = Agent.join(store, sid, "producer")
    pool, joined = Agent.join(store, sid, "pool")
    with store.transaction() as t:
        sent = {producer.send("pool", f"job {i}", tx=t).id for i in range(messages)}

    out_dir = tmp_path / "records"
    out_dir.mkdir()
    rng = random.Random(1234)
    procs: list[subprocess.Popen[bytes]] = []
    killed: set[int] = set()
    acc = Accounting(messages=messages, workers=workers)

    def spawn(slot: int) -> subprocess.Popen[bytes]:
        return _start(
            url, joined, out_dir / f"w{slot}-{len(killed)}-{time.monotonic_ns()}", lease, batch
        )

    procs = [spawn(i) for i in range(workers)]
    end = time.monotonic() + deadline_s
    next_kill = time.monotonic() + rng.uniform(*kill_every)
    try:
        while _done(store, pool.identity.participant_id) < messages:
            assert time.monotonic() < end, "chaos run did not finish in time"
            for p in procs:
                if p.poll() is not None and p.pid not in killed:
                    err = p.stderr.read().decode() if p.stderr else ""
                    raise AssertionError(f"worker {p.pid} died on its own: {err[-2000:]}")
            if time.monotonic() >= next_kill:
                slot = rng.randrange(workers)
                victim = procs[slot]
                os.kill(victim.pid, signal.SIGKILL)
                victim.wait()
                killed.add(victim.pid)
                acc.kills += 1
                procs[slot] = spawn(slot)
                next_kill = time.monotonic() + rng.uniform(*kill_every)
            time.sleep(0.02)
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            p.wait(timeout=30)

    # --- the accounting ---------------------------------------------------------------
    # Each record: (lease token, worker pid, lease expiry). A claim sets the expiry to
    # its own time + lease, so a lease's claim time is its expiry - lease, exactly.
    claims: dict[str, list[tuple[str, int, datetime]]] = defaultdict(list)
    told_lost: dict[str, set[str]] = defaultdict(set)
    for f in out_dir.iterdir():
        lines = f.read_text().split("\n")
        for line in lines[:-1]:  # the last piece is empty or a line cut by SIGKILL
            parts = line.split(" ")
            if parts[0] == "C":
                claims[parts[1]].append((parts[2], int(parts[3]), parse_ts(parts[4])))
            elif parts[0] == "L":
                told_lost[parts[1]].update(parts[2:])
    with store.read() as t:
        rows = t.all(
            "SELECT message_id, state, lease_token FROM deliveries WHERE recipient_id = ?",
            (pool.identity.participant_id,),
        )
    final = {r[0]: r[2] for r in rows if r[1] == "done"}
    acc.quarantined = sum(1 for r in rows if r[1] == "quarantine")
    acc.claims = sum(len(v) for v in claims.values())
    acc.lost = len(sent - set(final))
    acc.unexpected = len(set(claims) - sent) + len(set(final) - sent) + (len(rows) - len(sent))
    span = timedelta(seconds=lease)
    for mid, leases in claims.items():
        leases.sort(key=lambda x: x[2])
        if final.get(mid) != leases[-1][0]:
            acc.unexplained.append(f"{mid}: acked under a lease that is not its last recorded one")
        if len(leases) < 2:
            continue
        acc.duplicates += 1
        for (tok, holder, expiry), nxt in zip(leases, leases[1:], strict=False):
            if nxt[2] - span <= expiry:
                acc.unexplained.append(f"{mid}: lease {tok} was claimed again before it expired")
            elif holder in killed:
                acc.by_killed += 1
            else:
                acc.by_expired += 1  # a live holder outlived its lease
                acc.told_lost += mid in told_lost[tok]
    acc.unexplained += [f"{m}: acked without a record" for m in final if m not in claims]
    store.close()
    return acc


def _check(acc: Accounting) -> None:
    assert acc.lost == 0
    assert acc.unexpected == 0
    assert acc.quarantined == 0
    assert acc.unexplained == []
    assert acc.kills >= 1


def test_S16_chaos_kill9_workers_lose_nothing_and_every_duplicate_is_a_killed_or_expired_lease(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    acc = run_chaos(tmp_path, messages=1000, workers=4, kill_every=(0.2, 0.5), deadline_s=120)
    with capsys.disabled():
        print("\n" + acc.line())
    _check(acc)


@pytest.mark.soak
def test_S16_chaos_soak_10000_messages_8_workers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    acc = run_chaos(tmp_path, messages=10_000, workers=8, kill_every=(0.3, 1.0), deadline_s=900)
    with capsys.disabled():
        print("\n" + acc.line())
    _check(acc)


def test_S14_a_holder_stopped_past_its_lease_is_refused_and_the_message_went_to_another(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'stop.db'}"
    store = Store(url)
    sid = Operator(store).create_space("workflow").id
    sender, _ = Agent.join(store, sid, "sender")
    me, joined = Agent.join(store, sid, "worker")
    mid = sender.send("worker", "the job").id
    go = tmp_path / "go"
    holder = subprocess.Popen(
        [sys.executable, WORKER, "holder", url, sid, joined.address, joined.token, str(go), "0.5"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        first = json.loads(holder.stdout.readline())
        assert first["id"] == mid
        os.kill(holder.pid, signal.SIGSTOP)  # frozen mid-work, holding the lease
        # Another claimer waits; the claim takes the expired lease back (no sweeper).
        second = me.claim(wait=30, lease=60)
        assert [(d.id, d.deliveries) for d in second.deliveries] == [(mid, 2)]
        assert second.token != first["token"]
        os.kill(holder.pid, signal.SIGCONT)
        go.touch()
        assert holder.stdout.readline().strip() == "lease_lost"
        assert holder.wait(timeout=30) == 0
    finally:
        if holder.poll() is None:
            os.kill(holder.pid, signal.SIGCONT)
            holder.kill()
            holder.wait()
    assert me.ack(second.token) == 1
    with store.read() as t:
        state, token = t.one(
            "SELECT state, lease_token FROM deliveries WHERE message_id = ?", (mid,)
        )
    assert (state, token) == ("done", second.token)
    store.close()
