"""Teammates (S26) and the directory (S25) with real threads and processes."""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlrows
import trusted

from broker import Agent, Operator, Store, errors
from broker.delivery import inbox_view
from broker.model.records import Turn
from broker.spaces import directory, participants
from broker.teammates.runtime import Team, TeammateContext


@pytest.fixture
def lead(store: Store) -> Agent:
    space = Operator(store).create_space("agentiflow", lease_seconds=1.0)
    agent, _ = trusted.join(store, space.id, "flow/lead", lead=True)
    return agent


@pytest.fixture
def team(store: Store, lead: Agent) -> Any:
    t = Team(Operator(store), lead, lease=1.0)
    yield t
    t.shutdown()


def wait_for(cond: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("condition not met in time")


def lead_messages(lead: Agent, count: int, timeout: float = 20.0) -> list[str]:
    got: list[str] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        turn = lead.next_turn(wait=0.5)
        got += [i.body for i in turn.items if i.group == "message"]
        if turn.id:
            lead.seen(turn.id)
    return got


def test_S26_spawn_delivers_the_first_task_durably_before_the_worker_runs(
    team: Team, store: Store
) -> None:
    seen: list[str] = []
    mate = team.spawn_teammate(
        "alice", "worker", "first task", lambda ctx, turn: seen.extend(i.body for i in turn.items)
    )
    wait_for(lambda: seen)
    assert seen == ["first task"]
    rows = team.history("alice")
    assert [r.body for r in rows] == ["first task"]
    assert rows[0].sender == "lead" and rows[0].message_id == mate.agent.history()[0].message_id


def test_S26_idle_teammate_wakes_on_new_mail(team: Team) -> None:
    seen: list[str] = []
    team.spawn_teammate(
        "alice", "worker", "one", lambda ctx, turn: seen.extend(i.body for i in turn.items)
    )
    wait_for(lambda: team.status()["alice"] == "idle" and seen)
    team.send_message("alice", "two")
    wait_for(lambda: "two" in seen)
    assert seen == ["one", "two"]
    assert wait_for(lambda: team.status()["alice"] == "idle")


def test_S26_send_message_to_an_unknown_teammate_is_a_clear_error(team: Team) -> None:
    with pytest.raises(errors.ParticipantNotFound, match="no teammate 'ghost'"):
        team.send_message("ghost", "hello")


def echo(ctx: TeammateContext, turn: Turn) -> None:
    """Module level: process-mode handlers are pickled to a worker process."""
    for item in turn.items:
        ctx.reply(f"done: {item.body}")


def noop(ctx: TeammateContext, turn: Turn) -> None:
    return None


def test_S26_teammate_replies_reach_the_lead(team: Team, lead: Agent) -> None:
    team.spawn_teammate("alice", "worker", "task A", echo)
    team.spawn_teammate("bob", "worker", "task B", echo, mode="process")
    assert sorted(lead_messages(lead, 2)) == ["done: task A", "done: task B"]


def test_S26_handler_failure_quarantines_input_marks_failed_and_tells_the_lead(
    team: Team, lead: Agent, store: Store
) -> None:
    def boom(ctx: TeammateContext, turn: Turn) -> None:
        raise ValueError("cannot do it")

    team.spawn_teammate("carol", "worker", "poison task", boom)
    wait_for(lambda: team.status()["carol"] == "failed")
    reports = lead_messages(lead, 1)
    assert (
        len(reports) == 1
        and "carol failed" in reports[0]
        and "ValueError: cannot do it" in reports[0]
    )
    quarantined = inbox_view.quarantined(store, lead.space_id)
    assert [(q.recipient, q.body) for q in quarantined] == [("carol", "poison task")]
    assert "cannot do it" in (quarantined[0].reason or "")


def test_S26_status_is_visible_in_dir_list(team: Team, lead: Agent, cli: Any, db_url: str) -> None:
    team.spawn_teammate("alice", "worker", "t", lambda ctx, turn: None)
    # Idle after its first turn (its task), not only before it: the loop says
    # idle as it starts, then running while the task's turn is handled.
    wait_for(lambda: bool(team.history("alice")) and team.status()["alice"] == "idle")
    out = cli("dir", "list", lead.space_id, "--json", env={"BROKER_URL": db_url})
    assert out.code == 0, out.err
    statuses = {p["address"]: p["status"] for p in out.lines()}
    assert statuses["alice"] == "idle"
    assert statuses["lead"] == "running"


def test_S26_shutdown_closes_everything_even_when_one_close_fails(team: Team) -> None:
    closed: list[str] = []

    def bad() -> None:
        closed.append("bad")
        raise RuntimeError("close failed")

    team.spawn_teammate("alice", "worker", "t", lambda ctx, turn: None)
    team.spawn_teammate("bob", "worker", "t", noop, mode="process")
    team.add_closer("scheduler", bad)
    team.add_closer("model", lambda: closed.append("model"))
    wait_for(lambda: set(team.status().values()) == {"idle"})
    failures = team.shutdown()
    assert closed == ["bad", "model"]  # the failing close did not skip the next one
    assert [(name, str(exc)) for name, exc in failures] == [("scheduler", "close failed")]
    assert team.status() == {"alice": "shutdown", "bob": "shutdown"}
    assert not team.teammates["bob"].process.is_alive()


KILLABLE = textwrap.dedent(
    """
    import json, os, sys, time
    turn = json.load(sys.stdin)
    marker = os.environ["MARKER"]
    first = not os.path.exists(marker)
    with open(marker, "a") as f:
        f.write(json.dumps([i["id"] for i in turn["items"]]) + "\\n")
    if first:
        time.sleep(30)  # killed here, mid-message
    print(json.dumps({"to": "lead", "text": "handled " + turn["items"][0]["body"]}))
    """
)


def test_S26_teammate_killed_mid_message_is_restarted_and_handles_it_once(
    team: Team, lead: Agent, store: Store, tmp_path: Path
) -> None:
    script = tmp_path / "killable.py"
    script.write_text(KILLABLE)
    marker = tmp_path / "marker"
    mate = team.spawn_teammate(
        "dave",
        "worker",
        "important",
        command=[sys.executable, str(script)],
        env={"MARKER": str(marker)},  # a teammate's process gets only what it is given (S39)
    )
    wait_for(lambda: marker.exists() and marker.read_text().endswith("\n"))  # mid-message now
    first_pid = mate.process.pid
    os.killpg(
        first_pid, signal.SIGKILL
    )  # the worker and its command: a crash of the whole teammate
    # The supervisor restarts it; the restarted worker gets the unconfirmed turn
    # back at once (S32: the process that held it is gone).
    replies = lead_messages(lead, 1, timeout=30)
    assert replies == ["handled important"]
    assert mate.restarts >= 1 and mate.process.pid != first_pid
    attempts = [json.loads(line) for line in marker.read_text().splitlines()]
    assert len(attempts) == 2 and attempts[0] == attempts[1]  # the same message, delivered twice
    rows = team.history("dave")
    assert [r.message_id for r in rows] == attempts[0]  # ... and in the history once


def test_S25_directory_register_list_show_unregister(store: Store, space: str) -> None:
    joined = directory.register(
        store,
        space,
        "monkey-a3f7",
        credential=trusted.credential(store),
        role="API integration specialist",
        archetype="specialist",
        task="Implement OAuth2 flow",
    )
    entry = directory.show(store, space, "monkey-a3f7")
    assert (entry.role, entry.archetype, entry.task) == (
        "API integration specialist",
        "specialist",
        "Implement OAuth2 flow",
    )
    assert [e.address for e in directory.entries(store, space)] == ["monkey-a3f7"]
    # A directory entry is a participant: reachable by its id.
    other, _ = trusted.join(store, space, "w/other")
    assert other.send("monkey-a3f7", "hi").reached == ["monkey-a3f7"]
    directory.unregister(
        store, participants.authenticate(store, space, "monkey-a3f7", joined.token)
    )
    assert [e.address for e in directory.entries(store, space)] == [["w", "other"][1]]
    events = [(e.event, e.address, e.reason) for e in participants.journal(store, space)]
    assert ("left", "monkey-a3f7", "unregister") in events


def test_S25_archetype_must_be_one_of_the_five(store: Store, space: str) -> None:
    with pytest.raises(errors.InvalidInput, match="archetype must be one of"):
        directory.register(
            store,
            space,
            "x",
            credential=trusted.credential(store),
            role="r",
            archetype="wizard",
            task="t",
        )


def test_S25_prune_removes_stale_heartbeats_and_gone_processes(db_url: str, tmp_path: Path) -> None:
    now = [time.time()]
    from datetime import UTC, datetime

    store = Store(db_url, clock=lambda: datetime.fromtimestamp(now[0], UTC))
    space = Operator(store).create_space("session").id
    fresh, _ = trusted.join(store, space, "s/fresh")
    directory.register(
        store,
        space,
        "stale",
        credential=trusted.credential(store),
        role="r",
        archetype="planner",
        task="t",
    )
    trusted.in_a_gone_process(  # registered by a process that is gone now
        store,
        lambda s: directory.register(
            s,
            space,
            "gone",
            credential=trusted.credential(s),
            role="r",
            archetype="surveyor",
            task="t",
            pid=os.getpid(),
        ),
    )
    now[0] += 120
    fresh.claim()  # a claim is a heartbeat
    pruned = directory.prune(store, space, older_than=60)
    assert sorted(p.address for p in pruned) == ["gone", "stale"]
    assert [e.address for e in directory.entries(store, space)] == ["fresh"]
    assert {e.reason for e in participants.journal(store, space) if e.event == "left"} == {"prune"}


def test_S25_prune_keeps_live_processes_and_entries_without_a_pid(store: Store, space: str) -> None:
    directory.register(
        store,
        space,
        "me",
        credential=trusted.credential(store),
        role="r",
        archetype="planner",
        task="t",
        pid=os.getpid(),
    )
    directory.register(
        store,
        space,
        "cli-joined",
        credential=trusted.credential(store),
        role="r",
        archetype="planner",
        task="t",
    )
    assert directory.prune(store, space) == []


def test_S25_prune_by_age_never_removes_the_lead_or_a_live_participant(db_url: str) -> None:
    now = [time.time()]
    from datetime import UTC, datetime

    store = Store(db_url, clock=lambda: datetime.fromtimestamp(now[0], UTC))
    space = Operator(store).create_space("agentiflow", lease_seconds=300).id
    trusted.join(store, space, "flow/lead", lead=True, pid=None)  # no process to watch
    trusted.join(store, space, "flow/alive")  # this process: alive
    trusted.join(store, space, "flow/quiet", pid=None)
    now[0] += 120
    fresh, _ = trusted.join(store, space, "flow/fresh", pid=None)
    # 60 s is less than the space's lease (300 s): nobody quieter than the lease goes.
    assert directory.prune(store, space, older_than=60) == []
    now[0] += 600
    fresh.claim()  # a heartbeat
    plan = directory.prune(store, space, older_than=60, dry_run=True)
    assert [p.address for p in plan] == ["quiet"]
    assert {e.address for e in directory.entries(store, space)} == {
        "lead",
        "alive",
        "quiet",
        "fresh",
    }
    assert [p.address for p in directory.prune(store, space, older_than=60)] == ["quiet"]
    assert {e.address for e in directory.entries(store, space)} == {"lead", "alive", "fresh"}
    assert directory.prune(store, space, older_than=0, dry_run=True) == []


def test_S25_prune_dry_run_writes_nothing(store: Store, space: str) -> None:
    trusted.in_a_gone_process(  # registered by a process that is gone now
        store,
        lambda s: directory.register(
            s,
            space,
            "gone",
            credential=trusted.credential(s),
            role="r",
            archetype="surveyor",
            task="t",
            pid=os.getpid(),
        ),
    )
    with store.read() as t:
        before = [tuple(r) for r in t.all("SELECT * FROM participant_events ORDER BY id")]
    assert [p.address for p in directory.prune(store, space, dry_run=True)] == ["gone"]
    assert directory.show(store, space, "gone").status == "running"
    with store.read() as t:
        assert [tuple(r) for r in t.all("SELECT * FROM participant_events ORDER BY id")] == before
    assert [p.address for p in directory.prune(store, space)] == ["gone"]
    assert directory.show(store, space, "gone").status == "left"


SHELL_AGENT = """#!/bin/sh
body=$(cat)
echo "{\\"to\\": \\"lead\\", \\"text\\": \\"shell saw $BROKER_AS\\"}"
"""

PY_AGENT = """import json, sys
turn = json.load(sys.stdin)
for item in turn["items"]:
    print("python got: " + item["body"])
"""

FAILING_AGENT = """import sys
sys.stdin.read()
print("about to fail", file=sys.stderr)
sys.exit(7)
"""


def _run_agent(
    cli: Any,
    db_url: str,
    space: str,
    name: str,
    *command: str,
    extra: tuple[str, ...] = (),
    token: str | None = None,
) -> Any:
    """``broker agent run``; with ``token``, spawned with NAME's identity (it is
    registered and live already: S27 lets only its token re-join it)."""
    env = {"BROKER_URL": db_url}
    if token is not None:
        env |= {"BROKER_AS": name, "BROKER_TOKEN": token}
    return cli(
        "agent",
        "run",
        space,
        name,
        "--wait",
        "1.5",
        "--json",
        *extra,
        "--",
        *command,
        env=env,
    )


def test_S26_agent_run_with_a_shell_script(
    cli: Any, db_url: str, store: Store, lead: Agent, tmp_path: Path
) -> None:
    script = tmp_path / "agent.sh"
    script.write_text(SHELL_AGENT)
    script.chmod(0o755)
    # registered earlier; run serves it with its identity
    joined = participants.join(
        store, lead.space_id, _join("shelly"), credential=trusted.credential(store)
    )
    lead.send("shelly", "do it")
    out = _run_agent(cli, db_url, lead.space_id, "shelly", str(script), token=joined.token)
    assert out.code == 0, out.err
    assert out.json() == {"address": "shelly", "status": "shutdown"}
    assert lead_messages(lead, 1) == ["shell saw shelly"]


def test_S26_agent_run_with_a_python_script(
    cli_process: Any, db_url: str, store: Store, lead: Agent, tmp_path: Path
) -> None:
    # `agent run` serves in a process of its own while this test talks to it.
    cli = cli_process
    script = tmp_path / "agent.py"
    script.write_text(PY_AGENT)
    result: dict[str, Any] = {}
    th = threading.Thread(
        target=lambda: result.update(
            out=_run_agent(
                cli,
                db_url,
                lead.space_id,
                "pyagent",
                sys.executable,
                str(script),
                extra=("--role", "helper"),
            )
        )
    )
    th.start()
    wait_for(
        lambda: any(
            p.address == "pyagent" for p in participants.list_participants(store, lead.space_id)
        )
    )
    lead.send("pyagent", "hello")
    assert lead_messages(lead, 1) == ["python got: hello"]
    th.join(60)
    assert result["out"].code == 0, result["out"].err
    assert directory.show(store, lead.space_id, "pyagent").role == "helper"


def test_S26_agent_run_command_failure_is_teammate_failure(
    cli: Any, db_url: str, store: Store, lead: Agent, tmp_path: Path
) -> None:
    script = tmp_path / "fail.py"
    script.write_text(FAILING_AGENT)
    joined = participants.join(
        store, lead.space_id, _join("failing"), credential=trusted.credential(store)
    )
    lead.send("failing", "try")
    out = _run_agent(
        cli, db_url, lead.space_id, "failing", sys.executable, str(script), token=joined.token
    )
    assert out.code == 7  # errors.HandlerFailed
    assert directory.show(store, lead.space_id, "failing").status == "failed"
    reports = lead_messages(lead, 1)
    assert "exited 7" in reports[0] and "about to fail" in reports[0]
    assert [q.body for q in inbox_view.quarantined(store, lead.space_id)] == ["try"]


def _join(name: str) -> Any:
    from broker.model.inputs import JoinInput

    return JoinInput(codename=name, parent="lead")


def test_main_job_demo_finishes_with_a_consistent_summary(cli: Any, db_url: str) -> None:
    out = cli("demo", "--teammates", "3", "--tasks", "9", "--json", env={"BROKER_URL": db_url})
    assert out.code == 0, out.err
    s = out.json()
    assert s["tasks_done"] == s["tasks"] == 9
    assert s["results_received"] == s["tasks_done"] + s["duplicate_results"]
    store = Store(db_url)
    with store.read() as t:
        logged = t.one(
            f"SELECT count(*) FROM messages WHERE space_no = {sqlrows.SPACE_NO}",
            (s["space"],),
        )[0]
        claimed = t.one(
            "SELECT count(*) FROM claim_journal WHERE space_id = ? AND event = 'claimed'",
            (s["space"],),
        )[0]
        results = t.one(
            f"SELECT count(*) FROM messages WHERE space_no = {sqlrows.SPACE_NO} AND kind = 'direct' AND body LIKE 'result %'",
            (s["space"],),
        )[0]
        state = t.one("SELECT state FROM spaces WHERE id = ?", (s["space"],))[0]
    assert logged == s["messages"]
    assert claimed == s["claims"] >= s["tasks"]
    assert results == s["results_received"]
    assert state == "running"  # left inspectable
    assert any(cmd.startswith("broker message list") for cmd in s["inspect"])


def test_runtime_and_demo_are_front_ends_of_the_library_only() -> None:
    """spec §Module layout: the runtime and the demo import the library surface
    (broker.api.handles, records, errors, models; vocab, the fixed vocabularies and
    bounds) and nothing below it, and run no SQL."""
    import ast

    root = Path(__file__).resolve().parents[3] / "broker"
    allowed = {
        "broker.api.handles",
        "broker.model.records",
        "broker.errors",
        "broker.model.inputs",
        "broker.vocab",
    }
    for name, extra in (
        ("teammates/runtime.py", set()),
        ("teammates/demo.py", {"broker.teammates.runtime"}),
    ):
        tree = ast.parse((root / name).read_text(encoding="utf-8"))
        used: set[str] = set()
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.startswith("broker")
            ):
                if node.module == "broker":
                    used |= {f"broker.{a.name}" for a in node.names}
                else:
                    used.add(node.module)
            elif isinstance(node, ast.Import):
                used |= {a.name for a in node.names if a.name.startswith("broker")}
        assert used <= allowed | extra, f"{name} imports {sorted(used - allowed - extra)}"
        assert used & {"broker.api.handles"}, name
        strings = [
            n.value
            for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str)
        ]
        assert not [
            s
            for s in strings
            if s.lstrip().upper().startswith(("SELECT ", "INSERT ", "UPDATE ", "DELETE "))
        ], name
