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
import sqlrows
import trusted

from broker import Operator, Store
from broker.ids import parse_ts
from broker.model.records import Joined

WORKER = str(Path(__file__).parents[1].joinpath("chaos_worker.py"))


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
    url: str, joined: Joined, out: Path, lease: float, batch: int, stop: Path, slow_at: int
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
            str(stop),
            str(slow_at),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _done(store: Store, pid: str) -> int:
    with store.read() as t:
        return int(
            t.one(
                f"SELECT count(*) FROM deliveries WHERE recipient_no = {sqlrows.RECIPIENT_NO} AND state = 'done'",
                (pid,),
            )[0]
        )


def _holders(store: Store, pid: str) -> set[int]:
    """Worker pids holding a lease on the inbox right now (owner ``pool:<pid>``)."""
    with store.read() as t:
        rows = t.all(
            f"SELECT DISTINCT lease_owner FROM deliveries WHERE recipient_no = {sqlrows.RECIPIENT_NO} "
            "AND state = 'processing'",
            (pid,),
        )
    return {int(r[0].rsplit(":", 1)[1]) for r in rows if r[0]}


def run_chaos(
    tmp_path: Path,
    *,
    messages: int,
    workers: int,
    kills: int,
    lease: float = 1.0,
    batch: int = 5,
    hang_guard_s: float = 240.0,
    url: str | None = None,
) -> Accounting:
    """Workers drain ``messages``; ``kills`` times, as the work passes another
    equal share, a worker holding a lease is SIGKILLed and replaced. Worker 0
    of the first generation is never killed and always outlives the lease of
    its second batch. At the end the workers finish their batches and exit.

    The last share is held back until every kill has happened, so the work
    cannot run out before them however fast the workers drain it (a kill needs
    a worker holding a lease): if the rest is drained first, the held-back
    messages go out five at a time until the kills are done, looked at every
    millisecond meanwhile."""
    url = url or f"sqlite:///{tmp_path / 'chaos.db'}"  # or a PostgreSQL one (test_pg_net)
    store = Store(url)
    sid = (
        Operator(store)
        .create_space("workflow", inbox_cap=messages + 10, max_deliveries=1000, sender_share=1)
        .id
    )
    producer, _ = trusted.join(store, sid, "producer")
    pool, joined = trusted.join(store, sid, "pool")
    inbox_id = pool.identity.participant_id
    held_back = list(range(messages - messages // (kills + 1), messages))
    with store.transaction() as t:
        sent = {producer.send("pool", f"job {i}", tx=t).id for i in range(held_back[0])}

    out_dir = tmp_path / "records"
    out_dir.mkdir()
    stop = tmp_path / "stop"
    rng = random.Random(1234)
    killed: set[int] = set()
    acc = Accounting(messages=messages, workers=workers)

    def spawn(slot: int, slow_at: int = -1) -> subprocess.Popen[bytes]:
        name = f"w{slot}-{len(killed)}-{time.monotonic_ns()}"
        return _start(url, joined, out_dir / name, lease, batch, stop, slow_at)

    procs = [spawn(i, slow_at=1 if i == 0 else -1) for i in range(workers)]
    everyone = list(procs)
    protected = procs[0].pid
    kill_at = [len(sent) * k // (kills + 1) for k in range(1, kills + 1)]
    end = time.monotonic() + hang_guard_s
    try:
        while (done := _done(store, inbox_id)) < messages:
            assert time.monotonic() < end, f"chaos run hung: {done} of {messages} done"
            for p in procs:
                if p.poll() is not None and p.pid not in killed:
                    err = p.stderr.read().decode() if p.stderr else ""
                    raise AssertionError(f"worker {p.pid} died on its own: {err[-2000:]}")
            if kill_at and done >= kill_at[0]:
                live = {p.pid: i for i, p in enumerate(procs)}
                holders = sorted(h for h in _holders(store, inbox_id) if h in live)
                holders = [h for h in holders if h != protected]
                if holders:  # else: nobody holds a lease this instant; look again
                    slot = live[rng.choice(holders)]
                    victim = procs[slot]
                    os.kill(victim.pid, signal.SIGKILL)
                    victim.wait()
                    killed.add(victim.pid)
                    acc.kills += 1
                    kill_at.pop(0)
                    procs[slot] = spawn(slot)
                    everyone.append(procs[slot])
            if held_back and (not kill_at or done >= len(sent)):
                n = len(held_back) if not kill_at else 5
                with store.transaction() as t:
                    sent |= {producer.send("pool", f"job {i}", tx=t).id for i in held_back[:n]}
                del held_back[:n]
            # While a kill is due, look for a holder often: a released handful is
            # drained in a few milliseconds by fast workers (PostgreSQL over TCP on
            # a loaded machine drained the held-back share between two looks).
            time.sleep(0.001 if kill_at else 0.02)
        stop.touch()  # the live workers finish what they hold (acks included) and exit
        for p in procs:
            p.wait(timeout=60)
            assert p.returncode == 0, p.stderr.read().decode()[-2000:] if p.stderr else ""
    finally:
        for p in everyone:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=30)
            if p.stderr is not None:
                p.stderr.close()

    # --- the accounting ---------------------------------------------------------------
    # Each C record: (lease token, worker pid, lease expiry). A claim sets the expiry
    # to its own time + lease, so a lease's claim time is its expiry - lease, exactly.
    claims: dict[str, list[tuple[str, int, datetime]]] = defaultdict(list)
    told_lost: dict[str, set[str]] = defaultdict(set)
    attempted: set[str] = set()  # leases whose holder lived to try its ack
    for f in out_dir.iterdir():
        lines = f.read_text().split("\n")
        for line in lines[:-1]:  # the last piece is empty or a line cut by SIGKILL
            parts = line.split(" ")
            if parts[0] == "C":
                claims[parts[1]].append((parts[2], int(parts[3]), parse_ts(parts[4])))
            elif parts[0] == "A":
                attempted.add(parts[1])
            elif parts[0] == "L":
                attempted.add(parts[1])
                told_lost[parts[1]].update(parts[2:])
    with store.read() as t:
        rows = t.all(
            f"SELECT message_id, state, lease_token FROM {sqlrows.delivery_rows()} WHERE recipient_id = ?",
            (inbox_id,),
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
            elif tok in attempted:
                # A live holder outlived its lease: its ack must have been refused
                # for this message (whether the reclaimer had acked it yet or not).
                acc.by_expired += 1
                if mid in told_lost[tok]:
                    acc.told_lost += 1
                else:
                    acc.unexplained.append(f"{mid}: stale lease {tok} was not told LeaseLost")
            elif holder in killed:
                acc.by_killed += 1  # killed before it could try its ack
            else:
                acc.unexplained.append(f"{mid}: lease {tok} of live worker {holder} never settled")
    acc.unexplained += [f"{m}: acked without a record" for m in final if m not in claims]
    store.close()
    return acc


def _check(acc: Accounting, kills: int) -> None:
    assert acc.lost == 0
    assert acc.unexpected == 0
    assert acc.quarantined == 0
    assert acc.unexplained == []
    assert acc.kills == kills
    # Every duplicate is a killed lease or an expired one, and every expired
    # lease of a live holder was refused with LeaseLost.
    assert acc.told_lost == acc.by_expired
    assert acc.duplicates <= acc.by_killed + acc.by_expired


def test_S16_chaos_kill9_workers_lose_nothing_and_every_duplicate_is_a_killed_or_expired_lease(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    acc = run_chaos(tmp_path, messages=1000, workers=4, kills=6)
    with capsys.disabled():
        print("\n" + acc.line())
    _check(acc, kills=6)


@pytest.mark.soak
def test_S16_chaos_soak_10000_messages_8_workers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    acc = run_chaos(tmp_path, messages=10_000, workers=8, kills=40, hang_guard_s=900)
    with capsys.disabled():
        print("\n" + acc.line())
    _check(acc, kills=40)


def test_S14_a_holder_stopped_past_its_lease_is_refused_and_the_message_went_to_another(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'stop.db'}"
    store = Store(url)
    sid = Operator(store).create_space("workflow").id
    sender, _ = trusted.join(store, sid, "sender")
    me, joined = trusted.join(store, sid, "worker")
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
        assert second.lease_token != first["token"]
        os.kill(holder.pid, signal.SIGCONT)
        go.touch()
        assert holder.stdout.readline().strip() == "lease_lost"
        assert holder.wait(timeout=30) == 0
    finally:
        if holder.poll() is None:
            os.kill(holder.pid, signal.SIGCONT)
            holder.kill()
        holder.wait()
        for f in (holder.stdout, holder.stderr):
            if f is not None:
                f.close()
    assert me.ack(second.lease_token) == 1
    with store.read() as t:
        state, token = t.one(
            f"SELECT state, lease_token FROM {sqlrows.delivery_rows()} WHERE message_id = ?", (mid,)
        )
    assert (state, token) == ("done", second.lease_token)
    store.close()
