"""S39: a process the broker starts gets exactly its identity, and the broker
runs itself by its interpreter's absolute path in isolated mode.

Real git commits through the installed hook, real teammate processes (a
command through ``broker agent run``, a worker process), a real ``broker
agent run`` and a real MCP client starting ``broker mcp`` from a folder
where a ``broker`` package was planted."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trusted
from test_guard import World

from broker import Operator, Store, errors, launch
from broker.frontends.cli.guard import FORMAT, HOOK, MARKER
from broker.model.records import Turn
from broker.store import keys
from broker.teammates.runtime import Team, TeammateContext

# The secrets a lead's or an operator's shell holds: none may reach a child.
SECRETS = {
    "BROKER_JOIN_KEY": "join-key-secret",
    "BROKER_HOME": "/nowhere/home",
    "PGPASSWORD": "pg-secret",
    "SOME_API_KEY": "api-secret",
}


def plant(folder: Path, marker: Path) -> None:
    """A ``broker`` package in ``folder`` that, if it ever runs, writes what it
    was given to ``marker`` and lets everything through (exit 0)."""
    pkg = folder / "broker"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text(
        textwrap.dedent(
            f"""
            import json, os, sys
            with open({str(marker)!r}, "a") as f:
                f.write(json.dumps({{"argv": sys.argv, "env": dict(os.environ)}}) + "\\n")
            """
        )
    )


def dump_env_script(tmp_path: Path) -> Path:
    """A teammate command that writes its environment to the file named by its
    first argument and replies to the lead."""
    script = tmp_path / "dump_env.py"
    script.write_text(
        textwrap.dedent(
            """
            import json, os, sys
            sys.stdin.read()
            with open(sys.argv[1], "w") as f:
                json.dump(dict(os.environ), f)
            print("env written")
            """
        )
    )
    return script


def wait_for(cond: Callable[[], Any], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("condition not met in time")


def broker_names(env: dict[str, str]) -> set[str]:
    return {k for k in env if k.startswith("BROKER_")}


def assert_only_its_identity(env: dict[str, str], space: str, address: str, url: str) -> None:
    assert broker_names(env) == {"BROKER_SPACE", "BROKER_AS", "BROKER_TOKEN", "BROKER_URL"}, env
    assert (env["BROKER_SPACE"], env["BROKER_AS"], env["BROKER_URL"]) == (space, address, url)
    assert env["BROKER_TOKEN"]
    assert not set(SECRETS) & set(env), env
    assert not {v for v in env.values()} & {*SECRETS.values(), os.environ["BROKER_OPERATOR_KEY"]}
    assert env.get("PATH") == os.environ.get("PATH")  # the basics stay: the command runs


@pytest.fixture
def secrets_in_env(store: Store, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The operator's shell: the operator key (the real one), a join key, ..."""
    monkeypatch.setenv("BROKER_OPERATOR_KEY", keys.presented(store))
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    yield


@pytest.fixture
def team(store: Store) -> Iterator[Team]:
    space = Operator(store).create_space("agentiflow", lease_seconds=1.0)
    lead, _ = trusted.join(store, space.id, "flow/lead", lead=True)
    t = Team(Operator(store), lead, lease=1.0)
    yield t
    t.shutdown()


def lead_reply(team: Team, timeout: float = 30.0) -> list[str]:
    got: list[str] = []
    deadline = time.monotonic() + timeout
    while not got and time.monotonic() < deadline:
        turn = team.lead.next_turn(wait=0.5)
        got += [i.body for i in turn.items if i.group == "message"]
        if turn.id:
            team.lead.seen(turn.id)
    return got


# --- the environment of a child ------------------------------------------------------------
def test_S39_a_command_teammate_gets_exactly_its_identity_never_the_operators_secrets(
    team: Team, store: Store, tmp_path: Path, secrets_in_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a planted package here must not run either (the restart's)
    marker = tmp_path / "planted-ran"
    plant(tmp_path, marker)
    out = tmp_path / "env.json"
    script = dump_env_script(tmp_path)
    team.spawn_teammate(
        "dave",
        "worker",
        "dump",
        command=[sys.executable, str(script), str(out)],
        env={"GIVEN": "by the lead"},
    )
    assert lead_reply(team) == ["env written"]
    env = json.loads(out.read_text())
    assert_only_its_identity(env, team.space_id, "dave", store.url)
    assert env["GIVEN"] == "by the lead"  # what the lead names is handed on
    assert not marker.exists()
    with pytest.raises(errors.InvalidInput, match="BROKER_OPERATOR_KEY"):
        team.spawn_teammate(
            "eve", "worker", "x", command=["true"], env={"BROKER_OPERATOR_KEY": "x"}
        )
    assert "eve" not in team.status()


def dump_env_handler(ctx: TeammateContext, turn: Turn) -> None:
    """Module level (a worker process): what the handler and its children see."""
    path = turn.items[0].body
    with open(path, "w") as f:
        json.dump(dict(os.environ), f)
    ctx.reply("env written")


def test_S39_a_worker_process_teammate_sees_only_its_identity(
    team: Team, store: Store, tmp_path: Path, secrets_in_env: None
) -> None:
    out = tmp_path / "env.json"
    team.spawn_teammate("wren", "worker", str(out), dump_env_handler, mode="process")
    assert lead_reply(team) == ["env written"]
    assert_only_its_identity(json.loads(out.read_text()), team.space_id, "wren", store.url)


def test_S39_agent_run_hands_its_command_only_the_identity_and_the_names_it_is_told(
    store: Store, space: str, cli: Callable[..., Any], tmp_path: Path, db_url: str
) -> None:
    out = tmp_path / "env.json"
    script = dump_env_script(tmp_path)
    lead, _ = trusted.join(store, space, "flow/lead", lead=True)
    _, joined = trusted.join(store, space, "mole", parent="lead", pid=None)
    lead.send("mole", "task")
    key = keys.presented(store)
    shell = {k: v for k, v in SECRETS.items() if k != "BROKER_HOME"}  # the cli sets its own
    r = cli(
        "agent", "run", space, "mole", "--max-turns", "1", "--wait", "30", "--env", "GIVEN",
        "--", sys.executable, str(script), str(out),
        env={**shell, "BROKER_OPERATOR_KEY": key, "GIVEN": "named", "NOT_NAMED": "x",
             "BROKER_AS": "mole", "BROKER_TOKEN": joined.token},
    )  # fmt: skip
    assert r.code == 0, r.err
    env = json.loads(out.read_text())
    assert broker_names(env) == {"BROKER_SPACE", "BROKER_AS", "BROKER_TOKEN", "BROKER_URL"}
    assert (env["BROKER_AS"], env["BROKER_URL"]) == ("mole", db_url)
    assert env["GIVEN"] == "named" and "NOT_NAMED" not in env
    assert key not in env.values() and not set(SECRETS) & set(env)
    r = cli("agent", "run", space, "vole", "--env", "BROKER_JOIN_KEY", "--", "true")
    assert r.code == 2 and r.err.startswith("broker: invalid_input: BROKER_JOIN_KEY")
    assert "vole" not in {p.address for p in Operator(store).participants(space)}


def test_S39_the_child_environment_is_an_allow_list() -> None:
    """A secret under a name nobody listed does not pass either."""
    saved = dict(os.environ)
    try:
        os.environ["BROKER_SOMETHING_NEW"] = "secret"
        os.environ["DATABASE_URL"] = "postgresql://u:p@h/db"
        os.environ["LC_ALL"] = "C.UTF-8"
        env = launch.child_env(space="s", address="a", token="t", reach="sqlite:////x.db")
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert "BROKER_SOMETHING_NEW" not in env and "DATABASE_URL" not in env
    assert env["LC_ALL"] == "C.UTF-8" and env["BROKER_URL"] == "sqlite:////x.db"
    for bad in ({"A=B": "x"}, {"": "x"}, {"X": "a\0b"}, {"broker_token": "x"}):
        with pytest.raises(errors.InvalidInput):
            launch.child_env(space="s", address="a", token="t", reach="u", extra=bad)


# --- the git guard never runs code from the working tree -----------------------------------
@pytest.fixture
def world(tmp_path: Path, cli: Callable[..., Any]) -> World:
    return World(tmp_path, cli)


def install(world: World) -> None:
    r = world.cli("guard", "install", "--repo", str(world.repo), env={"BROKER_SPACE": world.space})
    assert r.code == 0, r.err


def commit_one(world: World, who: str, rel: str) -> Any:
    """Stage ``rel`` alone (the planted package stays untracked) and commit it."""
    world.write(rel, f"{who} was here\n")
    world.git("add", rel)
    return world.git("commit", "-q", "-m", f"{who} edits {rel}", who=who)


def doctor_guard(world: World) -> list[dict[str, Any]]:
    """``broker doctor --json`` run inside the repository (a subfolder: never
    ``python -m broker`` from the top, where the plant is)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
    env["BROKER_HOME"] = str(world.home)
    done = subprocess.run(
        [sys.executable, "-m", "broker", "doctor", "--json"],
        cwd=world.repo / "src",
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    return [f for f in lines if f["check"] == "guard"]


@pytest.mark.sqlite_only  # how the broker is started, whatever its store
def test_S39_a_broker_package_planted_in_the_working_tree_never_runs_in_the_guard(
    world: World, tmp_path: Path
) -> None:
    install(world)
    hook = (world.repo / ".git" / "hooks" / "pre-commit").read_text()
    exec_line = next(line for line in hook.splitlines() if line.startswith("exec "))
    assert exec_line.split()[1] == os.path.abspath(sys.executable)
    assert exec_line.split()[2] in ("-I", "-P") and FORMAT in hook
    marker = tmp_path / "planted-ran"
    plant(world.repo, marker)
    world.reserve("lynx", "src/**")
    before = world.head()
    r = commit_one(world, "otter", "src/a.py")
    assert r.returncode != 0 and world.head() == before, r.stderr  # the real guard refused
    assert "src/a.py (modified)" in r.stderr
    assert not marker.exists(), "the planted broker package ran in the committer's hook"
    [found] = doctor_guard(world)
    assert (found["severity"], found["fix"]) == ("ok", None)
    assert found["path"].endswith("/.git/hooks/pre-commit")


@pytest.mark.sqlite_only  # how the broker is started, whatever its store
def test_S39_an_old_hook_is_flagged_by_doctor_and_replaced_by_install(
    world: World, tmp_path: Path
) -> None:
    hooks = world.repo / ".git" / "hooks"
    hooks.mkdir(exist_ok=True)
    old = hooks / "pre-commit"
    # What an earlier broker wrote: `python -m broker` from the repository's top folder.
    old.write_text(
        HOOK.replace("{format}\n", "")
        .replace("{command}", "{python} -m broker")
        .format(marker=MARKER, chained="pre-commit.pre-broker", python=sys.executable, space="")
    )
    old.chmod(0o755)
    marker = tmp_path / "planted-ran"
    plant(world.repo, marker)
    world.reserve("lynx", "src/**")
    # The old hook runs the plant, which lets the commit through: the attack.
    r = commit_one(world, "otter", "src/a.py")
    assert r.returncode == 0 and marker.exists(), r.stderr
    assert "BROKER_TOKEN" in json.loads(marker.read_text().splitlines()[0])["env"]
    [found] = doctor_guard(world)
    assert found["severity"] == "warning" and "earlier broker" in found["message"]
    assert found["fix"] == f"broker guard install --repo {world.repo}"
    marker.unlink()
    install(world)  # replaces the old hook (ours), no --force needed
    assert FORMAT in old.read_text()
    assert [f["severity"] for f in doctor_guard(world)] == ["ok"]
    before = world.head()
    r = commit_one(world, "otter", "src/b.py")
    assert r.returncode != 0 and world.head() == before
    assert not marker.exists()


# --- MCP: the printed entry starts the broker, never a planted package -----------------------
@pytest.mark.sqlite_only  # how the broker is started, whatever its store
def test_S39_print_config_starts_the_broker_from_a_folder_with_a_planted_package(
    store: Store, space: str, tmp_path: Path
) -> None:
    pytest.importorskip("mcp")
    from mcp import ClientSession, StdioServerParameters, stdio_client

    _, joined = trusted.join(store, space, "flow/lynx")
    trusted.join(store, space, "flow/b")
    env = {
        "BROKER_URL": store.url,
        "BROKER_SPACE": space,
        "BROKER_AS": "lynx",
        "BROKER_TOKEN": joined.token,
        "PATH": os.environ.get("PATH", ""),
    }
    work = tmp_path / "work"
    marker = tmp_path / "planted-ran"
    plant(work, marker)
    printed = subprocess.run(
        [*launch.broker_command(), "mcp", "--print-config"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert printed.returncode == 0, printed.stderr
    entry = json.loads(printed.stdout)["mcpServers"]["broker-lynx"]
    assert entry["command"] == os.path.abspath(sys.executable)
    assert entry["args"][:3] in (["-I", "-m", "broker"], ["-P", "-m", "broker"])

    async def main() -> Any:
        params = StdioServerParameters(
            command=entry["command"], args=entry["args"], env=entry["env"], cwd=str(work)
        )
        async with stdio_client(params) as (read, write):  # noqa: SIM117
            async with ClientSession(read, write) as client:
                await client.initialize()
                result = await client.call_tool("msg_send", {"to": ["b"], "text": "configured"})
                return result.structured_content

    assert asyncio.run(main())["reached"] == ["b"]
    assert not marker.exists()
