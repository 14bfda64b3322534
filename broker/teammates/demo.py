"""``broker demo``: a real swarm on the embedded SQLite store.

A lead posts tasks on the board of an agentiflow space and spawns N teammate
*processes*. Each teammate, one task per turn, claims a task key on the board
(an exclusive lease with a fencing token), does the work, reports the result
to the lead and releases the key; it nudges itself with a message to take its
next turn, so between tasks it sees whatever arrived meanwhile. Midway the lead
issues a standing directive to every worker, and the operator sends an urgent
message; every report says which of the two its author had seen. One teammate
is killed with SIGKILL mid-run: the supervisor restarts it, the restarted
worker gets the unconfirmed turn back at once (S32: its predecessor's process
is gone), and the claimed key expires so another teammate can take the task
(at-least-once, de-duplicated by task number).

The demo is a front end of the library: ``broker.api.handles`` only (no SQL).

Everything stays in the space for inspection afterwards.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from broker import errors
from broker.api.handles import Operator, Store, by_sender_hint
from broker.model.records import Turn
from broker.teammates.runtime import Team, TeammateContext
from broker.vocab import BOARD_READ_MAX

TASK = re.compile(r"^task (\d+): ")
RESULT = re.compile(r"^result (\d+) = (\d+) \[directive:(yes|no) urgent:(yes|no)\]")
DIRECTIVE = "Standing order from the lead: report every result with its task number."
URGENT = "Wrap up: finish the task in hand, then take the remaining ones quickly."
DONE = re.compile(r"^done (\d+)$")
NEXT = "next"  # a teammate's nudge to itself: take another turn


@dataclass(frozen=True, slots=True)
class DemoSummary:
    """What ``broker demo`` prints (``--json``: these fields)."""

    space: str
    db: str
    teammates: int
    tasks: int
    tasks_done: int
    results_received: int
    duplicate_results: int
    saw_directive: int
    saw_urgent: int
    messages: int
    claims: int
    redeliveries: int
    quarantined: int
    restarts: int
    wall_seconds: float
    inspect: list[str]


WORK_S = 0.15  # each task also waits this long, like a tool call would


def _work(n: int) -> int:
    """The task itself: deterministic and checkable by the lead."""
    return sum(i * i for i in range(n * 100))


def _done(posts: list[Any]) -> set[int]:
    return {int(m.group(1)) for e in posts if e.kind == "post" and (m := DONE.match(e.body))}


def worker(ctx: TeammateContext, turn: Turn) -> None:
    """One teammate turn: note what arrived, then do at most one task."""
    me = ctx.agent
    state = ctx.extra
    # A standing directive is re-shown on every turn while in force; an urgent
    # message arrives once, so remember it.
    state["directive"] = any(i.group == "directive" for i in turn.items)
    if any(i.group == "urgent" for i in turn.items):
        state["urgent"] = True
    if not any(i.group in ("message", "urgent") for i in turn.items):
        return
    posts = me.board_read(limit=BOARD_READ_MAX)
    done = _done(posts)
    for entry in posts:
        m = TASK.match(entry.body) if entry.kind == "post" else None
        if m is None or int(m.group(1)) in done:
            continue
        n = int(m.group(1))
        try:
            grant = me.claim_key(f"task-{n}", ttl=3.0)
        except errors.ClaimHeld:
            continue
        if n in _done(me.board_read(limit=BOARD_READ_MAX)):  # finished while we were looking
            me.release_key(f"task-{n}", grant.fence)
            continue
        result = _work(n)
        time.sleep(WORK_S)
        flags = f"[directive:{'yes' if state.get('directive') else 'no'} urgent:{'yes' if state.get('urgent') else 'no'}]"
        me.send("lead", f"result {n} = {result} {flags}")
        me.post(f"done {n}")
        with contextlib.suppress(errors.BrokerError):
            me.release_key(f"task-{n}", grant.fence)
        me.send(me.address, NEXT)  # keep going: the next task is another turn
        return


def _drain(op: Operator, space_id: str, lead: str, deadline: float) -> None:
    """Let the teammates settle their last turns (a killed teammate's unconfirmed
    turn comes back to its restarted worker) before the team is shut down."""
    while time.monotonic() < deadline:
        pending = sum(p.waiting for p in op.participants(space_id) if p.address != lead)
        if not pending:
            return
        time.sleep(0.1)


def _kill_one_busy(team: Team) -> bool:
    """SIGKILL a teammate in the middle of a turn, so its turn must be redelivered."""
    status = team.status()
    for name, mate in team.teammates.items():
        if status.get(name) == "running" and mate.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(mate.process.pid, signal.SIGKILL)
            return True
    return False


def run_demo(
    store: Store,
    teammates: int = 8,
    tasks: int = 40,
    kill: int = 1,
    progress: Callable[[int, int], Any] | None = None,
    timeout: float = 50.0,
) -> DemoSummary:
    started = time.perf_counter()
    op = Operator(store)
    space = op.create_space("agentiflow", lease_seconds=2.0)
    lead, _ = op.join(
        space.id,
        "demo/lead",
        lead=True,
        agent="lead",
        role="coordinator",
        archetype="planner",
        task="hand out tasks, collect results",
    )
    for n in range(1, tasks + 1):
        lead.post(f"task {n}: sum of squares below {n * 100}")
    team = Team(op, lead, lease=2.0)
    for i in range(1, teammates + 1):
        team.spawn_teammate(
            f"worker-{i}",
            "worker",
            "Claim tasks from the board, one per turn; report each result.",
            worker,
            mode="process",
            agent="worker",
            archetype="specialist",
        )

    results: dict[int, str] = {}
    duplicates = 0
    saw_directive = saw_urgent = 0
    directive_sent = urgent_sent = killed = False
    deadline = time.monotonic() + timeout
    try:
        while len(results) < tasks and time.monotonic() < deadline:
            turn = lead.next_turn(wait=0.2)
            for item in turn.items:
                m = RESULT.match(item.body) if item.group == "message" else None
                if m is None:
                    continue
                n = int(m.group(1))
                if int(m.group(2)) != _work(n):
                    raise errors.BrokerError(f"wrong result for task {n}: {item.body}")
                if n in results:
                    duplicates += 1  # at-least-once: a redelivered task done twice
                    continue
                results[n] = item.body
                saw_directive += m.group(3) == "yes"
                saw_urgent += m.group(4) == "yes"
            if turn.id is not None:
                lead.seen(turn.id)
            if progress:
                progress(len(results), tasks)
            if not directive_sent and len(results) >= tasks // 4:
                lead.directive("role:worker", DIRECTIVE)
                directive_sent = True
            if not killed and kill and len(results) >= tasks // 3:
                killed = _kill_one_busy(team)
            if not urgent_sent and len(results) >= tasks // 2:
                op.send(space.id, URGENT, to=["role:worker"], urgent=True)
                urgent_sent = True
        _drain(op, space.id, lead.address, deadline=time.monotonic() + 10)
    finally:
        team.shutdown()
    lead.leave()
    entries = op.log(space.id)
    claims = sum(e.event == "claimed" for e in op.claim_journal(space.id))
    queue = op.queue_stats(space.id)
    if len(results) < tasks:
        raise errors.BrokerError(
            f"demo timed out: {len(results)} of {tasks} tasks done in {timeout:.0f} s"
        )
    return DemoSummary(
        space=space.id,
        db=store.display,
        teammates=teammates,
        tasks=tasks,
        tasks_done=len(results),
        results_received=len(results) + duplicates,
        duplicate_results=duplicates,
        saw_directive=saw_directive,
        saw_urgent=saw_urgent,
        messages=len(entries),
        claims=claims,
        redeliveries=queue.redeliveries,
        quarantined=queue.quarantine,
        restarts=sum(m.restarts for m in team.teammates.values()),
        wall_seconds=round(time.perf_counter() - started, 2),
        inspect=[
            f"broker message list {space.id} --kind operator,directive",
            f"broker dir list {space.id} --all",
            f"broker board journal {space.id}",
            # A space id is [a-z0-9_]: quoted as it is, it cannot break the query.
            by_sender_hint(store, space.id),
        ],
    )
