"""Fuzz every CLI command (S33, issue "Trust"): arbitrary text (controls, lone
surrogates, invalid UTF-8), numbers that are not (nan, inf, huge, negative)
and wrong types, in every argument and option.

For every outcome: the exit code is a documented one (never 70, "a bug"),
stderr is at most one line and never a traceback, and a refusal (invalid
input, not found, conflict) leaves every table's row count as it was.

The commands run in-process (click's runner) on a real store, hundreds of
times; the invalid-UTF-8 case runs as real processes, since only a real argv
can carry bytes that are not UTF-8.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from cli_space import Populated, count_rows, populate
from click.testing import CliRunner
from conftest import open_store
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cli_contract import COMMANDS

from broker import Store
from broker.frontends.cli import main

DOCUMENTED = {0, 1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14}
DOCTOR = {8, 9}  # `broker doctor`: warnings, errors found
# Refusals that must write nothing at all. (4 may leave a tool_unavailable
# notice in the caller's transcript, S24: that is checked separately below.)
NOTHING_WRITTEN = {2, 3, 5}

# Not run in-process: `agent run` and `demo` start processes, `export` and
# `import` touch folders named by their arguments (they are fuzzed with a
# fixed root below). --follow and --yes are never drawn: one blocks until the
# space stops, the other would stop or prune the space under the fuzzer.
OUT_OF_PROCESS = {("agent", "run"), ("demo",), ("export",), ("import",)}
# Serve until stopped: fuzzed as real processes below, stopped once serving.
SERVING = {("serve",), ("mcp",)}
# Write files where their arguments say (tested with their own roots elsewhere).
WRITE_FILES = {("backup",), ("space", "purge")}
IN_PROCESS = sorted(set(COMMANDS) - OUT_OF_PROCESS - WRITE_FILES - SERVING)
NEVER = {"--follow", "--yes", "-y", "--help", "-h", "--url"}
IDENTITY = {"--space", "--as", "--token"}

NUMBERS = st.sampled_from(
    ["nan", "inf", "-inf", "-1", "0", "-0", "1e300", "1e-300", str(2**63), str(2**70),
     "-" + str(2**70), "0x10", "1_000", " 5 ", "5.5", "", "abc", "1e9", "86401"]
)  # fmt: skip
HOSTILE_TEXT = st.text(
    alphabet=st.one_of(
        st.characters(categories=["Cc", "Cs", "Cf", "Zl", "Zp"]),
        st.characters(min_codepoint=0x20, max_codepoint=0x7E),
        st.characters(),
    ),
    max_size=30,
)
# A wait that blocks would stall the fuzzer: only values that do not.
WAITS = st.sampled_from(["nan", "inf", "-1", "0", "abc", "1e300", "0.0", "1e-9"])


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Store, Populated, str]]:
    folder = tmp_path_factory.mktemp("fuzz")
    url = f"sqlite:///{folder / 'broker.db'}"
    store = Store(url)
    try:
        yield store, populate(store), url
    finally:
        store.close()


def real_values(p: Populated) -> dict[str, list[str]]:
    """Values that get a command past its first check, so the fuzzer reaches
    the later ones too (by parameter name)."""
    return {
        "run_id": [p.space, p.space[:6]],
        "address": ["lynx#1", "lead"],
        "codename": ["flow/heron>fuzz#1"],
        "to": ["lead", "role:worker", "broadcast", "operator"],
        "key": ["build/lock", "task-2"],
        "fence": ["1", "2"],
        "lease_token": [p.lease_token],
        "ids": [p.leased_id, p.quarantined_id],
        "message_id": [p.leased_id],
        "directive_id": [p.directive_id],
        "turn_id": [p.turn_id],
        "kind": ["direct,operator", "run"],
        "after": ["1", p.leased_id],
        "text": ["hello"],
        "limit": ["1", "5"],
        "ttl": ["30"],
    }


def value(param: click.Parameter, p: Populated) -> st.SearchStrategy[str]:
    name = param.name or ""
    if name == "wait":
        return WAITS
    real = list(real_values(p).get(name, []))
    if isinstance(param.type, click.Choice):
        real += [str(c) for c in param.type.choices]
    if not real:
        return st.one_of(HOSTILE_TEXT, NUMBERS)
    # Half the time a value that passes, so the other parts get their turn.
    return st.one_of(st.sampled_from(real), st.one_of(HOSTILE_TEXT, NUMBERS))


@st.composite
def argv_for(draw: st.DrawFn, path: tuple[str, ...], p: Populated) -> list[str]:
    cmd = COMMANDS[path]
    argv = list(path)
    for param in cmd.params:
        if isinstance(param, click.Argument):
            if param.nargs == -1:
                argv += draw(st.lists(value(param, p), max_size=3))
            else:
                argv.append(draw(value(param, p)))
        elif isinstance(param, click.Option):
            name = param.opts[0]
            if name in NEVER or (path == ("leave",) and name in IDENTITY):
                continue
            # Required options always, the others one time in four: enough
            # examples get past parsing to reach the library's own checks.
            if not param.required and draw(st.integers(0, 3)) != 0:
                continue
            if param.is_flag:
                argv.append(name)
            else:
                for _ in range(draw(st.integers(1, 2)) if param.multiple else 1):
                    argv += [name, draw(value(param, p))]
    return argv


def identities(p: Populated) -> st.SearchStrategy[dict[str, str]]:
    lynx = p.env["lynx#1"]
    wrong = [
        {},
        {**lynx, "BROKER_TOKEN": "not-the-token"},
        {**lynx, "BROKER_SPACE": "af_nothing"},
        {**lynx, "BROKER_AS": "lead"},
    ]
    return st.one_of(st.just(lynx), st.sampled_from(wrong))  # half the time, who it says


def check(res: Any, before: dict[str, int], after: dict[str, int], argv: list[str]) -> None:
    where = f"broker {' '.join(map(repr, argv))}"
    assert res.exception is None or isinstance(res.exception, SystemExit), (where, res.exception)
    codes = DOCUMENTED | (DOCTOR if argv[:1] == ["doctor"] else set())
    assert res.exit_code in codes, (where, res.exit_code, res.stderr)
    assert "Traceback" not in res.stdout + res.stderr, where
    assert len(res.stderr.splitlines()) <= 1, (where, res.stderr)
    if res.exit_code in NOTHING_WRITTEN:
        assert after == before, (where, res.exit_code, res.stderr)
    elif res.exit_code == 4:
        assert {k: v for k, v in after.items() if k != "transcript"} == {
            k: v for k, v in before.items() if k != "transcript"
        }, (where, res.stderr)


@pytest.mark.parametrize("path", IN_PROCESS, ids=" ".join)
def test_S33_fuzz_every_cli_command(
    path: tuple[str, ...], world: tuple[Store, Populated, str], tmp_path: Path
) -> None:
    store, p, url = world

    @settings(
        max_examples=25,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(argv=argv_for(path, p), env=identities(p))
    def run(argv: list[str], env: dict[str, str]) -> None:
        if path == ("leave",) and env == p.env["lynx#1"]:
            env = {}  # the fuzzer's own participant stays in the space (no --as either)
        before = count_rows(store)
        # In a folder of its own: what acts on the working directory (``guard
        # install`` without --repo: the repository there) never touches the
        # checkout the tests run from.
        with contextlib.chdir(tmp_path):
            res = CliRunner().invoke(main, ["--url", url, *argv], env=env)
        check(res, before, count_rows(store), argv)

    run()


def os_bytes(text: str) -> bytes:
    """What a real process can be given for a drawn string: its UTF-8 bytes,
    a lone surrogate as the invalid UTF-8 it stands for, and no NUL (a C
    string ends there; the in-process tests cover NUL)."""
    return text.encode("utf-8", "surrogatepass").replace(b"\0", b"")


@pytest.mark.parametrize("path", sorted(SERVING), ids=" ".join)
def test_S33_fuzz_the_serving_commands_as_processes(
    path: tuple[str, ...], world: tuple[Store, Populated, str], tmp_path: Path
) -> None:
    """`serve` and `mcp` run until stopped: each example is a real process
    (stdin closed, so `mcp` ends at EOF); one still serving after a few
    seconds is stopped with SIGTERM and must have said where it serves."""
    store, p, url = world
    base = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}

    @settings(
        max_examples=6,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(argv=argv_for(path, p), env=identities(p))
    def run(argv: list[str], env: dict[str, str]) -> None:
        if "--allow-remote" in argv:  # never listen beyond loopback from a test
            argv.remove("--allow-remote")
        if path == ("serve",) and "--port" not in argv:
            argv += ["--port", "0"]
        before = count_rows(store)
        log = tmp_path / "stderr"
        with open(log, "w+b") as err_file:
            proc = subprocess.Popen(
                [sys.executable, "-m", "broker", "--url", url, *map(os_bytes, argv)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err_file,
                env={os_bytes(k): os_bytes(v) for k, v in {**base, **env}.items()},
                cwd=tmp_path,  # a drawn --socket name lands here
            )
            try:
                served = _exit_or_serve(proc, log, deadline=time.monotonic() + 120)
            finally:
                if proc.poll() is None:
                    proc.terminate()
                proc.wait(timeout=60)
        text = log.read_text(errors="replace")
        assert "Traceback" not in text, (argv, text)
        if served:  # stopped by SIGTERM once it said where it serves
            assert path == ("serve",) and text.startswith("broker serve: "), (argv, text)
            return
        assert proc.returncode in DOCUMENTED, (argv, proc.returncode, text)
        if proc.returncode != 0:
            assert len(text.splitlines()) <= 1, (argv, text)
        if proc.returncode in NOTHING_WRITTEN:
            assert count_rows(store) == before, (argv, text)

    run()


def _exit_or_serve(proc: subprocess.Popen[bytes], log: Path, deadline: float) -> bool:
    """Wait for the process to end (False) or to announce that it serves (True)."""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        if log.read_bytes().startswith(b"broker serve: "):
            return True
        time.sleep(0.05)
    raise AssertionError(f"neither ended nor served: {log.read_text(errors='replace')}")


@given(data=st.data())
@settings(max_examples=30, deadline=None, database=None)
def test_S33_fuzz_export_and_import_with_a_root_of_their_own(
    data: st.DataObject, tmp_path_factory: pytest.TempPathFactory
) -> None:
    folder = tmp_path_factory.mktemp("fuzz-export")
    url = f"sqlite:///{folder / 'broker.db'}"
    store = open_store(url)  # a new store per example: a copy of the migrated template
    try:
        p = populate(store)
        root = str(folder / "out")
        text = st.one_of(HOSTILE_TEXT, NUMBERS, st.just(p.space))
        argv = data.draw(
            st.one_of(
                st.builds(lambda r, lay: ["export", r, "--root", root, "--layout", lay],
                          text, st.sampled_from(["space", "mailbox", "nope"])),
                st.builds(lambda f, k: ["import", f, "--kind", k, "--quiet"],
                          text, st.sampled_from(["run", "galaxy"])),
            )
        )  # fmt: skip
        before = count_rows(store)
        res = CliRunner().invoke(main, ["--url", url, *argv])
        assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
        assert res.exit_code in DOCUMENTED and "Traceback" not in res.stderr, res.stderr
        if res.exit_code in NOTHING_WRITTEN:
            assert count_rows(store) == before
    finally:
        store.close()


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=" ".join)
def test_S33_invalid_utf8_is_refused_by_every_command(
    path: tuple[str, ...], tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
    env["BROKER_HOME"] = str(tmp_path / "home")
    argv = [sys.executable.encode(), b"-m", b"broker", *(w.encode() for w in path), b"\xff\xfe"]
    proc = subprocess.run(argv, capture_output=True, env=env, timeout=60)
    assert proc.returncode == 2, (path, proc.stderr)
    err = proc.stderr.decode()
    assert len(err.splitlines()) == 1 and "not valid UTF-8" in err and "Traceback" not in err
    assert not (tmp_path / "home").exists()


# Values of BROKER_* variables that once crashed a command (exit 70) or were
# read as something else: an unknown ~user, URLs that do not parse, junk
# switches; plus drawn text and numbers (README "Environment").
ENV_VALUES = st.one_of(
    HOSTILE_TEXT,
    NUMBERS,
    st.sampled_from(
        ["~nosuchuser", "~nosuchuser/x", "~", "sqlite:///~nosuchuser/x.db", "sqlite:///",
         "http://[::1", "http://127.0.0.1:99999", "https://h:x", "unix://", "http://127.0.0.1:0",
         "postgresql+psycopg://[::1/x", "postgresql://u:pw@h:70000/x", "on", "OFF", "FULL", ""]
    ),
)  # fmt: skip


@given(data=st.data())
@settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
def test_S33_fuzz_every_broker_variable_under_every_command(
    data: st.DataObject, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from broker import envvars

    path = data.draw(st.sampled_from(IN_PROCESS))
    names = sorted(set(envvars.VARIABLES) - IDENTITY_VARS)
    drawn = data.draw(st.dictionaries(st.sampled_from(names), ENV_VALUES, min_size=1, max_size=3))
    # What a real environment can carry: no NUL, and invalid UTF-8 as the
    # lone surrogates Python makes of it (os.environ refuses any other).
    env = {k: os_bytes(v).decode("utf-8", "surrogateescape") for k, v in drawn.items()}
    argv = [*path, *data.draw(st.sampled_from([[], ["x"], ["x", "y"]]))]
    folder = tmp_path_factory.mktemp("env")
    with contextlib.chdir(folder):  # a relative BROKER_HOME lands in a folder of its own
        res = CliRunner().invoke(main, argv, env={"XDG_DATA_HOME": str(folder), **env})
    where = f"{env} broker {' '.join(argv)}"
    assert res.exception is None or isinstance(res.exception, SystemExit), (where, res.exception)
    assert res.exit_code in DOCUMENTED | DOCTOR, (where, res.exit_code, res.stderr)
    assert "Traceback" not in res.stdout + res.stderr, where
    assert len(res.stderr.splitlines()) <= 1, (where, res.stderr)


IDENTITY_VARS = {"BROKER_SPACE", "BROKER_AS", "BROKER_TOKEN"}
