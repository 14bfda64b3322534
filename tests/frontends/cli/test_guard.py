"""S37: the git guard. A real git repository, real commits through the
installed pre-commit hook (which runs the real broker CLI): commits touching
paths someone else reserved exclusively are refused, including deletions and
both sides of renames; BROKER_GUARD=off lets them through and is posted on the
board; a foreign hook is never overwritten silently."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import broker

# The hook runs `python -m broker` in the repository: this checkout's broker.
SOURCE = str(Path(broker.__file__).resolve().parent.parent)


def run_git(repo: Path, home: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("BROKER_", "GIT_"))}
    path = [SOURCE, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    full.update(BROKER_HOME=str(home), GIT_CONFIG_NOSYSTEM="1", HOME=str(home))
    full["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in path)
    full.update(env or {})
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, env=full, timeout=120
    )


class World:
    def __init__(self, tmp_path: Path, cli: Callable[..., Any]) -> None:
        self.cli = cli
        self.home = tmp_path / "home"
        self.repo = tmp_path / "repo"
        self.repo.mkdir()
        self.space = cli("space", "create", "--kind", "run", "--json").json()["id"]
        self.ids = {name: self._join(name) for name in ("lynx", "otter")}
        self.git("init", "-q", "-b", "main")
        self.git("config", "user.email", "t@example.org")
        self.git("config", "user.name", "t")
        for rel in ("src/a.py", "src/b.py", "docs/x.md", "README"):
            self.write(rel, f"{rel}\n")
        self.git("add", "-A")
        self.git("commit", "-q", "-m", "init")

    def _join(self, name: str) -> dict[str, str]:
        data = self.cli("join", self.space, name, "--json").json()
        return {
            "BROKER_SPACE": self.space,
            "BROKER_AS": data["address"],
            "BROKER_TOKEN": data["token"],
        }

    def write(self, rel: str, text: str) -> None:
        path = self.repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")

    def git(self, *args: str, who: str | None = None, env: dict[str, str] | None = None) -> Any:
        extra = {**(self.ids[who] if who else {}), **(env or {})}
        return run_git(self.repo, self.home, *args, env=extra)

    def head(self) -> str:
        return self.git("rev-parse", "HEAD").stdout.strip()

    def commit(self, who: str | None, message: str, env: dict[str, str] | None = None) -> Any:
        self.git("add", "-A")
        return self.git("commit", "-q", "-m", message, who=who, env=env)

    def reserve(self, who: str, *args: str) -> Any:
        r = self.cli("board", "reserve", *args, "--json", env=self.ids[who])
        assert r.code == 0, r.err
        return r.lines()


@pytest.fixture
def world(tmp_path: Path, cli: Callable[..., Any]) -> World:
    w = World(tmp_path, cli)
    r = cli("guard", "install", "--repo", str(w.repo), env={"BROKER_SPACE": w.space})
    assert r.code == 0, r.err
    return w


def test_S37_guard_refuses_a_commit_on_paths_another_holds_exclusively_and_allows_the_holder(
    world: World,
) -> None:
    hook = world.repo / ".git" / "hooks" / "pre-commit"
    assert os.access(hook, os.X_OK)
    [g] = world.reserve("lynx", "src/**", "--reason", "parser rewrite")
    before = world.head()
    world.write("src/a.py", "otter was here\n")
    r = world.commit("otter", "otter edits src")
    assert r.returncode != 0 and world.head() == before
    assert "src/a.py (modified)" in r.stderr and "'src/**'" in r.stderr
    assert "lynx" in r.stderr and g["expires_at"] in r.stderr and "parser rewrite" in r.stderr
    assert "Traceback" not in r.stderr
    # The holder commits the same change.
    r = world.commit("lynx", "lynx edits src")
    assert r.returncode == 0, r.stderr
    assert world.head() != before
    # Another path, not reserved: otter commits.
    world.write("README", "readme by otter\n")
    assert world.commit("otter", "otter edits the readme").returncode == 0
    # Shared reservations never block.
    world.reserve("lynx", "docs/**", "--shared")
    world.write("docs/x.md", "otter docs\n")
    assert world.commit("otter", "otter edits shared docs").returncode == 0


def test_S37_guard_sees_deletions_and_both_sides_of_renames(world: World) -> None:
    world.reserve("lynx", "docs/**", "notes/**")
    before = world.head()
    # Renaming out of a reserved folder (the old side is reserved).
    assert world.git("mv", "docs/x.md", "x.md").returncode == 0
    r = world.commit("otter", "move docs out")
    assert r.returncode != 0 and "docs/x.md (renamed to x.md)" in r.stderr
    world.git("reset", "-q", "--hard")
    # Renaming into a reserved folder (the new side is reserved).
    (world.repo / "notes").mkdir()
    assert world.git("mv", "README", "notes/README").returncode == 0
    r = world.commit("otter", "move readme in")
    assert r.returncode != 0 and "notes/README (renamed from README)" in r.stderr
    world.git("reset", "-q", "--hard")
    # Deleting a reserved file.
    world.reserve("lynx", "src/b.py")
    world.git("rm", "-q", "src/b.py")
    r = world.commit("otter", "delete b")
    assert r.returncode != 0 and "src/b.py (deleted)" in r.stderr
    assert world.head() == before
    world.git("reset", "-q", "--hard")
    # An unreserved rename and deletion go through.
    world.git("mv", "src/a.py", "src/c.py")
    assert world.commit("otter", "rename a").returncode == 0


def test_S37_guard_override_is_allowed_and_posted_on_the_board(world: World) -> None:
    world.reserve("lynx", "src/**")
    world.write("src/a.py", "urgent fix\n")
    r = world.commit("otter", "hotfix", env={"BROKER_GUARD": "off"})
    assert r.returncode == 0, r.stderr
    assert "override posted" in r.stderr
    board = world.cli("board", "view", world.space, "--json").lines()
    [post] = [e for e in board if e["kind"] == "post"]
    assert post["sender"] == "otter" and "BROKER_GUARD=off" in post["body"]
    assert "src/a.py" in post["body"] and "lynx" in post["body"]


def test_S37_guard_without_an_identity_checks_as_nobody(world: World) -> None:
    """A committer with no BROKER_AS/TOKEN (a human) is blocked by any
    exclusive reservation; the space comes from the hook (install time)."""
    world.reserve("lynx", "src/**")
    world.write("src/a.py", "human edit\n")
    r = world.commit(None, "human edits src")
    assert r.returncode != 0 and "lynx" in r.stderr


def test_S37_guard_never_overwrites_a_foreign_hook_and_chains_it_with_force(
    tmp_path: Path, cli: Callable[..., Any]
) -> None:
    w = World(tmp_path, cli)
    hooks = w.repo / ".git" / "hooks"
    foreign = hooks / "pre-commit"
    foreign.write_text(f"#!/bin/sh\necho ran >> '{tmp_path / 'foreign.log'}'\n", encoding="utf-8")
    foreign.chmod(0o755)
    r = cli("guard", "install", "--repo", str(w.repo), env={"BROKER_SPACE": w.space})
    assert r.code == 5 and "--force" in r.err and "Traceback" not in r.err
    assert "echo ran" in foreign.read_text()  # untouched
    r = cli("guard", "install", "--repo", str(w.repo), "--force", env={"BROKER_SPACE": w.space})
    assert r.code == 0 and "pre-commit.pre-broker" in r.out
    w.reserve("lynx", "README")
    w.write("README", "x\n")
    r = w.commit("otter", "blocked")
    assert r.returncode != 0 and "README (modified)" in r.stderr
    assert (tmp_path / "foreign.log").read_text() == "ran\n"  # chained: it ran first
    assert w.commit("lynx", "allowed").returncode == 0
    r = cli("guard", "uninstall", "--repo", str(w.repo))
    assert r.code == 0 and "restored" in r.out
    assert "echo ran" in foreign.read_text() and not (hooks / "pre-commit.pre-broker").exists()
    r = cli("guard", "uninstall", "--repo", str(w.repo))
    assert r.code == 5 and "not broker's" in r.err  # the foreign hook is left alone


def test_S37_guard_install_outside_a_repository_is_invalid_input(
    tmp_path: Path, cli: Callable[..., Any]
) -> None:
    (tmp_path / "plain").mkdir()  # refused before any store or hook is touched: in this process
    r = cli("guard", "install", "--repo", str(tmp_path / "plain"))
    assert r.code == 2 and r.err.startswith("broker: invalid_input: ") and r.err.count("\n") == 1
    for cmd in ("install", "uninstall", "pre-commit"):
        assert cli("guard", cmd, "--help").code == 0


def _hook(world: World, *env_pairs: tuple[str, str], who: str | None = None) -> Any:
    """The hook's own command, as git runs it (``python -m broker guard pre-commit``)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("BROKER_", "GIT_"))}
    path = [SOURCE, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    full.update(BROKER_HOME=str(world.home), HOME=str(world.home), GIT_CONFIG_NOSYSTEM="1")
    full["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in path)
    full.update({"BROKER_SPACE": world.space, **(world.ids[who] if who else {}), **dict(env_pairs)})
    return subprocess.run(
        [sys.executable, "-m", "broker", "guard", "pre-commit", "--repo", str(world.repo)],
        capture_output=True,
        text=True,
        env=full,
        timeout=120,
    )


def _stage_raw(world: World, *names: bytes) -> None:
    for name in names:
        path = os.path.join(os.fsencode(world.repo), name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(b"1\n")
    assert world.git("add", "-A").returncode == 0


def test_S37_guard_override_is_honoured_before_anything_else(world: World) -> None:
    """BROKER_GUARD=off lets the commit through even when nothing can be
    checked (no identity, no operator key, a name the broker cannot take)."""
    _stage_raw(world, b"nl\nname.txt", b"src/\x1b]0;owned\x07.py")
    world.reserve("lynx", "src/**")
    key = world.home / "broker.db.operator-key"
    hidden = key.with_name("elsewhere")
    key.rename(hidden)  # a committer without the operator key
    try:
        r = _hook(world, ("BROKER_GUARD", "off"))
        assert r.returncode == 0, r.stderr
        assert "commit allowed" in r.stderr and "NOT logged" in r.stderr
        assert "Traceback" not in r.stderr
    finally:
        hidden.rename(key)
    # Whatever else is set: a junk value, text that is not UTF-8 (S33 refuses
    # both for every other command).
    junk = _hook(
        world,
        ("BROKER_GUARD", "off"),
        ("BROKER_WRITER_LOCK", "junk"),
        ("BROKER_AS", os.fsdecode(b"ot\xffter")),
    )
    assert junk.returncode == 0 and "commit allowed" in junk.stderr, junk.stderr
    r = _hook(world, ("BROKER_GUARD", "OFF"), who="otter")
    assert r.returncode == 0 and "override posted" in r.stderr, r.stderr
    board = world.cli("board", "view", world.space, "--json").lines()
    [post] = [e for e in board if e["kind"] == "post"]
    assert post["sender"] == "otter" and "lynx" in post["body"]
    assert "src/\\x1b]0;owned\\x07.py (added)" in post["body"]  # escaped in the post too
    assert world.commit("otter", "override", env={"BROKER_GUARD": "off"}).returncode == 0


def test_S37_guard_checks_names_with_control_characters_and_prints_them_escaped(
    world: World,
) -> None:
    """A file name is bytes: control characters and bytes that are not UTF-8
    are checked like any name (src/** covers them: no name slips past the
    guard) and never reach the terminal raw (S31)."""
    world.reserve("lynx", "src/**")
    # U+009B (a one-byte CSI) is b"\xc2\x9b" in UTF-8; b"\xff\xfe" is not UTF-8.
    _stage_raw(world, b"src/nl\nname.py", b"src/\x1b[2Jcls\xc2\x9b.py", b"src/\xff\xfe.py")
    r = _hook(world, who="otter")
    assert r.returncode == 5, r.stderr
    assert "src/nl\\nname.py (added)" in r.stderr
    assert "src/\\x1b[2Jcls\\x9b.py (added)" in r.stderr
    assert "src/\\xff\\xfe.py (added)" in r.stderr
    assert "\x1b" not in r.stderr and "\x9b" not in r.stderr and "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 5  # the header, three paths, the error line
    # Through git: refused; the holder commits; an unreserved odd name passes.
    before = world.head()
    assert world.commit("otter", "odd names").returncode != 0 and world.head() == before
    assert world.commit("lynx", "odd names").returncode == 0
    _stage_raw(world, b"nl\nname.txt")
    r = _hook(world, who="otter")
    assert (r.returncode, r.stderr) == (0, "")
    assert world.commit("otter", "an unreserved odd name").returncode == 0


def test_S37_guard_without_an_identity_or_the_operator_key_says_how_to_set_up_or_bypass(
    world: World,
) -> None:
    world.write("README", "human edit\n")
    world.git("add", "-A")
    key = world.home / "broker.db.operator-key"
    hidden = key.with_name("elsewhere")
    key.rename(hidden)
    try:
        r = _hook(world)
    finally:
        hidden.rename(key)
    assert r.returncode == 4 and r.stdout == ""
    assert r.stderr.startswith("broker: auth_failed: the guard has no identity")
    for hint in ("BROKER_AS", "BROKER_TOKEN", "BROKER_OPERATOR_KEY", "BROKER_GUARD=off"):
        assert hint in r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    r = _hook(world, ("BROKER_AS", "otter"), ("BROKER_TOKEN", "not-otters-token"))
    assert r.returncode == 4 and r.stderr.startswith("broker: auth_failed: ")
    assert "BROKER_GUARD=off" in r.stderr and r.stderr.count("\n") == 1
