"""S32: a restarted participant gets its own work back at once.

Real processes: a consumer claims under a 30 s lease and is killed with
SIGKILL; its successor (a re-join, or a reconnect with the token, from a new
process) finds the messages ready again without waiting out the lease, counted
as a delivery attempt. Leases of live processes, and of transient claimers (a
CLI call), are untouched. Every process started here is killed and reaped.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlrows
import trusted

from broker import Agent, Operator, Store
from broker.delivery import inbox
from broker.model.inputs import ClaimInput
from broker.store import keys, procs
from broker.store.sql import stmt

LEASE_S = 30.0

# A consumer: joins (or connects with a token), claims, says so on stdout, then
# holds its lease until it is killed (or told to ack on stdin).
CONSUMER = textwrap.dedent(
    """
    import json, os, sys, time
    from broker import Agent, Store
    url, space, name, mode, token, what = sys.argv[1:7]
    started = time.perf_counter()
    store = Store(url)
    if mode == "join":  # a restart on its behalf (S40); a retry of a live holder gives its token
        holder = None if token == "-" else token
        me, joined = Agent.join(
            store, space, name, operator_key=os.environ["OPERATOR_KEY"], token=holder
        )
        token = joined.token
    else:
        me = Agent.connect(store, space, name, token)
    connected = time.perf_counter()
    if what == "turn":
        turn = me.next_turn(lease=float(os.environ["LEASE"]))
        got = [[i.id, i.deliveries] for i in turn.items]
        lease = turn.id
    else:
        claim = me.claim(limit=100, lease=float(os.environ["LEASE"]))
        got = [[d.id, d.deliveries] for d in claim.deliveries]
        lease = claim.lease_token
    done = time.perf_counter()
    print(json.dumps({
        "pid": os.getpid(), "token": token, "got": got, "lease": lease,
        "connect_s": connected - started, "claim_s": done - connected,
    }), flush=True)
    if sys.stdin.readline().strip() == "ack" and what == "claim":
        print(json.dumps({"acked": me.ack(lease)}), flush=True)
    """
)


class Consumers:
    """Consumer processes of one test; all killed and reaped at the end."""

    def __init__(self, tmp_path: Path, url: str, space: str, operator_key: str) -> None:
        self.script = tmp_path / "consumer.py"
        self.script.write_text(CONSUMER)
        self.url, self.space, self.operator_key = url, space, operator_key
        self.procs: list[subprocess.Popen[str]] = []

    def start(
        self, name: str, mode: str = "join", token: str = "-", what: str = "claim"
    ) -> tuple[subprocess.Popen[str], dict[str, Any]]:
        env = {**os.environ, "LEASE": str(LEASE_S), "OPERATOR_KEY": self.operator_key}
        proc = subprocess.Popen(
            [sys.executable, str(self.script), self.url, self.space, name, mode, token, what],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the barrier: it has claimed (or died trying)
        assert line, f"consumer exited {proc.wait()} before claiming"
        return proc, json.loads(line)

    def kill(self, proc: subprocess.Popen[str]) -> float:
        """SIGKILL and reap; returns the time of the kill (perf_counter)."""
        at = time.perf_counter()
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        return at

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            for f in (proc.stdin, proc.stdout):
                if f is not None:
                    f.close()


@pytest.fixture
def setup(store: Store, db_url: str, tmp_path: Path) -> Iterator[tuple[str, Agent, Consumers]]:
    created = Operator(store).create_space("workflow", lease_seconds=LEASE_S)
    space = created.id
    sender, _ = trusted.join(store, space, "sender")
    consumers = Consumers(tmp_path, db_url, space, keys.presented(store))
    try:
        yield space, sender, consumers
    finally:
        consumers.close()


def states(store: Store, space: str) -> dict[str, tuple[str, int]]:
    with store.read() as t:
        rows = t.all(
            f"SELECT d.message_id, d.state, d.attempts FROM {sqlrows.delivery_rows('d')} "
            "JOIN participants p ON p.id = d.recipient_id WHERE d.space_id = ? "
            "AND p.address = 'worker'",
            (space,),
        )
    return {r["message_id"]: (r["state"], r["attempts"]) for r in rows}


def test_S32_a_sigkilled_consumers_rejoined_successor_gets_its_messages_back_at_once(
    store: Store, setup: tuple[str, Agent, Consumers], capsys: pytest.CaptureFixture[str]
) -> None:
    space, sender, consumers = setup
    _, pre = trusted.join(store, space, "worker")  # its inbox exists before the sends
    ids = [sender.send("worker", f"job {i}").id for i in range(5)]
    first, held = consumers.start("worker", token=pre.token)  # a live holder: its token
    assert [m for m, _ in held["got"]] == ids
    assert {s for s, _ in states(store, space).values()} == {"processing"}
    killed_at = consumers.kill(first)
    # S27, S40: the successor re-joins with the operator key alone: the killed holder is
    # gone at once (its process is dead), though its heartbeat is still fresh.
    successor, back = consumers.start("worker")
    back_at = time.perf_counter()
    # Every message is back, to the successor's first claim (no wait), each
    # counted as a second delivery: the 30 s lease was not waited out.
    assert back["got"] == [[m, 2] for m in ids]
    with capsys.disabled():
        print(
            f"\nS32 restart recovery (lease {LEASE_S:.0f} s): kill -> successor holds the "
            f"messages {back_at - killed_at:.3f} s (process start + import included); "
            f"inside the successor: join {back['connect_s'] * 1000:.1f} ms, "
            f"claim {back['claim_s'] * 1000:.1f} ms"
        )
    assert back_at - killed_at < LEASE_S
    with store.read() as t:
        evidence = t.one(
            f"SELECT last_error FROM {sqlrows.delivery_rows()} WHERE message_id = ? AND state = 'processing'",
            (ids[0],),
        )["last_error"]
    assert f":{first.pid}:" in evidence and "is gone" in evidence
    successor.stdin.write("ack\n")  # type: ignore[union-attr]
    successor.stdin.flush()  # type: ignore[union-attr]
    assert json.loads(successor.stdout.readline()) == {"acked": 5}  # type: ignore[union-attr]
    assert successor.wait() == 0


def test_S32_a_reconnect_with_the_token_from_a_new_process_also_recovers(
    store: Store, setup: tuple[str, Agent, Consumers]
) -> None:
    space, sender, consumers = setup
    _, joined = trusted.join(store, space, "worker", pid=None)
    mid = sender.send("worker", "only job").id
    first, held = consumers.start("worker", mode="connect", token=joined.token)
    assert held["got"] == [[mid, 1]]
    consumers.kill(first)
    _, back = consumers.start("worker", mode="connect", token=joined.token)
    assert back["got"] == [[mid, 2]]


def test_S32_leases_of_a_live_process_are_untouched(
    store: Store, setup: tuple[str, Agent, Consumers]
) -> None:
    space, sender, consumers = setup
    _, joined = trusted.join(store, space, "worker", pid=None)
    mid = sender.send("worker", "mine").id
    holder, held = consumers.start("worker", mode="connect", token=joined.token)
    assert held["got"] == [[mid, 1]]
    # Another process connects as the same participant: the holder lives, its lease stays.
    _, other = consumers.start("worker", mode="connect", token=joined.token)
    assert other["got"] == []
    again = Agent.connect(store, space, "worker", joined.token)  # and from this process
    assert again.claim().deliveries == []
    assert states(store, space) == {mid: ("processing", 1)}
    holder.stdin.write("ack\n")  # type: ignore[union-attr]
    holder.stdin.flush()  # type: ignore[union-attr]
    assert json.loads(holder.stdout.readline()) == {"acked": 1}  # type: ignore[union-attr]
    assert holder.wait() == 0
    assert states(store, space) == {mid: ("done", 1)}


def test_S32_a_transient_cli_claim_is_not_taken_back_when_its_process_ends(
    store: Store, setup: tuple[str, Agent, Consumers], cli_process: Callable[..., Any], db_url: str
) -> None:
    cli = cli_process  # the process that claimed ends before the next call: the point
    space, sender, _ = setup
    _, joined = trusted.join(store, space, "worker", pid=None)
    mid = sender.send("worker", "via the cli").id
    env = {
        "BROKER_URL": db_url,
        "BROKER_SPACE": space,
        "BROKER_AS": "worker",
        "BROKER_TOKEN": joined.token,
    }
    out = cli("inbox", "claim", "--json", env=env)
    assert out.code == 0, out.err
    lease = out.json()
    # The CLI process is gone; the next call (another process) connects again:
    # the lease belongs to the agent running the CLI, not to that process.
    again = Agent.connect(store, space, "worker", joined.token)
    assert again.claim().deliveries == []
    assert states(store, space) == {mid: ("processing", 1)}
    token = next(lease[k] for k in ("lease_token", "lease", "token") if k in lease)
    done = cli("inbox", "ack", "--json", *_lease_flag(token), env=env)
    assert done.code == 0, done.err
    assert states(store, space) == {mid: ("done", 1)}


def _lease_flag(token: str) -> list[str]:
    from broker.frontends.cli.inbox import ack

    names = {opt for p in ack.params for opt in getattr(p, "opts", [])}
    return ["--lease-token" if "--lease-token" in names else "--lease", token]


def test_S32_a_killed_turn_comes_back_at_once_with_its_broadcasts(
    store: Store, setup: tuple[str, Agent, Consumers]
) -> None:
    space, sender, consumers = setup
    _, pre = trusted.join(store, space, "worker")
    mid = sender.send("worker", "direct").id
    bid = sender.send("broadcast", "to all").id
    first, held = consumers.start("worker", what="turn", token=pre.token)
    assert held["got"] == [[mid, 1], [bid, None]]
    consumers.kill(first)
    successor, back = consumers.start("worker", what="turn")
    # The dead process's open turn holds nothing any more: the message (second
    # delivery) and the broadcast are in the successor's first turn.
    assert back["got"] == [[mid, 2], [bid, None]]
    successor.stdin.close()  # type: ignore[union-attr]
    assert successor.wait() == 0


def test_S32_recovered_deliveries_count_as_attempts_up_to_quarantine(
    store: Store, db_url: str, tmp_path: Path
) -> None:
    created = Operator(store).create_space("workflow", max_deliveries=2)
    space = created.id
    sender, _ = trusted.join(store, space, "sender")
    _, pre = trusted.join(store, space, "worker")
    mid = sender.send("worker", "poison").id
    consumers = Consumers(tmp_path, db_url, space, keys.presented(store))
    try:
        for attempt in (1, 2):
            # The first takes over from this process's live join with its token;
            # the second finds its killed predecessor gone (S27), its token stale.
            proc, held = consumers.start("worker", token=pre.token)
            assert held["got"] == [[mid, attempt]]
            consumers.kill(proc)
        _, held = consumers.start("worker")
        assert held["got"] == []  # handed out max_deliveries times: quarantined
    finally:
        consumers.close()
    quarantined = Operator(store).quarantined(space)
    assert [(q.id, q.deliveries, q.reason) for q in quarantined] == [(mid, 2, "max_deliveries")]


def test_S32_a_forked_child_holds_its_leases_as_itself_not_as_its_parent() -> None:
    """``this_process`` is worked out once a process, and again in a forked
    child (a lease the child takes must not name its parent, which may live on)."""
    parent = procs.this_process()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave at once
        try:
            os.write(write, procs.this_process().encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        child = pipe.read().decode()
    os.waitpid(pid, 0)
    assert child.rsplit(":", 2)[1] == str(pid) and parent.rsplit(":", 2)[1] == str(os.getpid())
    assert procs.this_process() == parent


def test_S32_a_process_is_gone_when_its_pid_is_free_or_reused() -> None:
    me = procs.this_process()
    host, pid, start = me.rsplit(":", 2)
    assert int(pid) == os.getpid() and not procs.gone(me)
    # The same pid with another start time: the pid was reused by another process.
    assert procs.gone(f"{host}:{pid}:{int(start) + 1}") == (int(start) != 0)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert procs.gone(f"{host}:{child.pid}:0")  # exited and reaped
    assert not procs.gone(f"another-host.example:{child.pid}:0")  # not ours to judge
    assert not procs.gone("garbage")


def test_S32_recovery_reads_once_and_writes_nothing_when_nothing_is_dead(
    store: Store, db_url: str, setup: tuple[str, Agent, Consumers]
) -> None:
    space, sender, _ = setup
    worker, joined = trusted.join(store, space, "worker")
    sender.send("worker", "held by this live process")
    assert worker.claim().deliveries
    probe = Store(db_url)  # another connection: data_version moves when `store` commits
    with probe.read() as t:
        before = t.one("PRAGMA data_version")[0]
        plan = " ".join(
            r["detail"]
            for r in t.all(
                "EXPLAIN QUERY PLAN " + stmt("inbox.lease_processes"),
                {"recipient_id": worker.identity.participant_id},
            )
        )
    Agent.connect(store, space, "worker", joined.token)
    with probe.read() as t:
        assert t.one("PRAGMA data_version")[0] == before  # no write transaction committed
    probe.close()
    assert "ix_deliveries_leased" in plan


def test_S32_recovery_counts_what_came_back_and_nothing_when_no_holder_is_gone(
    store: Store, setup: tuple[str, Agent, Consumers]
) -> None:
    space, sender, _ = setup
    worker, _ = trusted.join(store, space, "worker", pid=None)
    pid = worker.identity.participant_id
    ids = [sender.send("worker", f"job {i}").id for i in range(3)]
    assert inbox.recover_on_connect(store, pid) == 0  # nothing held
    with store.write() as t:
        assert inbox.recover(t, pid, store.now_ts()) == 0
    # Two leases held by a process that has exited (its pid reaped: gone).
    dead = trusted.dead_process()
    held = inbox.claim(store, worker.identity, ClaimInput(limit=2), process=dead)
    assert [d.id for d in held.deliveries] == ids[:2]
    mine = inbox.claim(
        store, worker.identity, ClaimInput(), process=procs.this_process()
    )  # live: kept
    assert inbox.recover_on_connect(store, pid) == 2
    assert inbox.recover_on_connect(store, pid) == 0  # once
    assert {m: s for m, (s, _) in states(store, space).items()} == {
        ids[0]: "ready",
        ids[1]: "ready",
        ids[2]: "processing",
    }
    assert mine.deliveries[0].id == ids[2]
