"""CLI failure modes through real processes: every one is a single line on
stderr and a documented exit code (README "Exit codes"), never a traceback,
and nothing written.

Exit codes: 0 done, 1 not delivered, 2 invalid input or usage, 3 not found,
4 auth, 5 conflict, 6 messaging full, 7 handler failed, 10-13 storage and file
system, 70 internal error (a bug), 130 interrupted, 141 output closed early.
"""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlrows
import trusted
from cli_space import count_rows
from click.testing import CliRunner

from broker import Operator, Store, errors
from broker.frontends.cli import main

Cli = Callable[..., Any]


def one_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("broker: "), err
    return lines[0]


def broker_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
    env.update(BROKER_HOME=str(home), PYTHONUNBUFFERED="1", **extra)
    return env


# --- S33 at the command line: text is UTF-8 ---------------------------------------------------
def test_S33_invalid_utf8_in_an_argument_is_one_line_and_writes_nothing(
    store: Store, tmp_path: Path
) -> None:
    sid = Operator(store).create_space("workflow").id
    _, joined = trusted.join(store, sid, "flow/lynx")
    trusted.join(store, sid, "flow/otter")
    before = count_rows(store)
    env = broker_env(
        tmp_path / "home", BROKER_SPACE=sid, BROKER_AS="lynx", BROKER_TOKEN=joined.token
    )
    argvs = [
        [b"msg", b"send", b"--to", b"otter", b"\xff"],  # broker msg send $'\xff'
        [b"msg", b"send", b"--to", b"ot\xc3ter", b"hi"],
        [b"message", b"send", sid.encode(), b"caf\xe9"],
        [b"board", b"claim", b"k\xff"],
        [b"dir", b"show", sid.encode(), b"\xed\xa0\x80"],  # an encoded lone surrogate
    ]
    for argv in argvs:
        proc = subprocess.run(
            [sys.executable.encode(), b"-m", b"broker", *argv], capture_output=True, env=env
        )
        line = one_line(proc.stderr.decode())
        assert proc.returncode == 2, (argv, proc.stderr)
        assert "invalid_input" in line and "not valid UTF-8" in line
    bad_env = {**env, "BROKER_AS": "ly\udcffnx"}  # Python hands invalid bytes over like this
    proc = subprocess.run(
        [sys.executable, "-m", "broker", "msg", "send", "--to", "otter", "hi"],
        capture_output=True,
        env={k: v.encode("utf-8", "surrogateescape") for k, v in bad_env.items()},
    )
    assert proc.returncode == 2 and "BROKER_AS is not valid UTF-8" in one_line(proc.stderr.decode())
    proc = subprocess.run(
        [sys.executable, "-m", "broker", "msg", "send", "--to", "otter", "-"],
        input=b"caf\xe9\n",
        capture_output=True,
        env=env,
    )
    assert proc.returncode == 2 and "stdin is not valid UTF-8" in one_line(proc.stderr.decode())
    assert count_rows(store) == before


def test_S33_lone_surrogates_and_controls_in_arguments(store: Store, db_url: str) -> None:
    sid = Operator(store).create_space("workflow").id
    _, joined = trusted.join(store, sid, "flow/lynx")
    env = {"BROKER_SPACE": sid, "BROKER_AS": "lynx", "BROKER_TOKEN": joined.token}
    before = count_rows(store)
    runner = CliRunner()
    res = runner.invoke(main, ["--url", db_url, "msg", "send", "--to", "lynx", "\ud800"], env=env)
    assert res.exit_code == 2 and "argument 7 is not valid UTF-8" in one_line(res.stderr)
    res = runner.invoke(main, ["--url", db_url, "msg", "send", "--to", "\x1b[2J", "x"], env=env)
    assert res.exit_code == 2
    line = one_line(res.stderr)
    assert "\x1b" not in line and "\\x1b[2J" in line  # the error quotes it, escaped (S31)
    assert count_rows(store) == before


def test_S33_a_NUL_in_an_argument_or_a_path_is_one_line_and_writes_nothing(
    store: Store, db_url: str, tmp_path: Path
) -> None:
    # No process argument can carry NUL, but an in-process caller can: every
    # path-taking command and library call refuses it as bad input, never a crash.
    sid = Operator(store).create_space("workflow").id
    before = count_rows(store)
    runner = CliRunner()
    for argv in (
        ["import", "\x00", "--kind", "run"],
        ["export", sid, "--root", f"{tmp_path}/a\x00b"],
        ["backup", "\x00"],
        ["msg", "send", "--to", "lynx", "a\x00b"],
    ):
        res = runner.invoke(main, ["--url", db_url, *argv])
        assert res.exit_code == 2, (argv, res.stderr)
        assert "contains a NUL character" in one_line(res.stderr), argv
    op = Operator(store)
    # Text with NUL is refused at the API's edge, naming the argument (S33).
    with pytest.raises(errors.InvalidInput, match="NUL") as info:
        op.import_dir("a\x00b")
    assert info.value.fields.get("field") == "path"
    with pytest.raises(errors.InvalidInput, match="cannot contain NUL"):
        op.export_space(sid, tmp_path / "a\x00b")
    assert count_rows(store) == before


def test_S33_numbers_that_are_not_numbers_are_usage_errors(cli: Cli, store: Store) -> None:
    sid = Operator(store).create_space("workflow").id
    _, joined = trusted.join(store, sid, "flow/lynx")
    env = {"BROKER_SPACE": sid, "BROKER_AS": "lynx", "BROKER_TOKEN": joined.token}
    before = count_rows(store)
    for argv in [
        ["inbox", "claim", "--wait", "nan"],
        ["inbox", "next", "--wait", "inf"],
        ["inbox", "claim", "--ttl", "-1"],
        ["board", "claim", "k", "--ttl", "1e300"],
        ["board", "release", "k", "--fence", str(2**70)],
        ["inbox", "claim", "--limit", str(2**70)],
        ["dir", "prune", sid, "--older-than", "1e300", "--yes"],
        ["dir", "prune", sid, "--older-than", "nan", "--yes"],
        ["dir", "prune", sid, "--older-than", "inf", "--yes"],
        ["join", sid, "flow/x", "--pid", str(2**70)],
        ["message", "list", sid, "--tail", "0"],
        ["message", "list", sid, "--since", "yesterday"],
        ["agent", "run", sid, "x", "--ttl", "nan", "--", "true"],
    ]:
        res = cli(*argv, env=env)
        assert res.code == 2, (argv, res.err)
        one_line(res.err)
    assert count_rows(store) == before


# --- usage mistakes: one line, "did you mean" at every level -----------------------------------
def test_cli_did_you_mean_at_every_level_despite_lazy_loading(cli: Cli) -> None:
    # A real process: a fresh interpreter has loaded no command module yet.
    res = cli("mesage", "list")
    assert res.code == 2 and "'message'" in one_line(res.err) and "Did you mean" in res.err
    res = cli("space", "lst")
    assert res.code == 2 and "'list'" in one_line(res.err) and "Did you mean" in res.err
    res = cli("board", "claim", "k", "--tll", "5")
    assert res.code == 2 and "--ttl" in one_line(res.err)
    res = cli("inbox", "ack", "--lease", "t")  # the old spelling
    assert res.code == 2 and "--lease-token" in one_line(res.err)


def test_cli_a_group_without_a_command_shows_its_help(cli: Cli) -> None:
    for argv in ([], ["space"], ["board"]):
        res = cli(*argv)
        assert res.code == 0 and res.out.startswith("Usage: broker") and res.err == "", argv
        assert "Commands:" in res.out


# --- read-only commands never create files ----------------------------------------------------
READ_ONLY = [
    ["space", "list"], ["space", "show", "af_x"], ["db", "current"],
    ["message", "list", "af_x"], ["dir", "list", "af_x"], ["dir", "show", "af_x", "a"],
    ["board", "view", "af_x"], ["board", "claims", "af_x"], ["board", "journal", "af_x"],
    ["queue", "quarantined", "af_x"], ["transcript", "af_x", "a"],
    ["msg", "send", "--space", "af_x", "--as", "a", "--token", "t", "--to", "b", "x"],
    ["inbox", "claim", "--space", "af_x", "--as", "a", "--token", "t"],
    ["join", "af_x", "flow/a"],
]  # fmt: skip


def test_cli_commands_on_a_missing_store_say_so_and_create_nothing(
    cli: Cli, cli_process: Cli, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    for argv in READ_ONLY:  # a real process for one of them: exit 3 is the process's
        res = (cli_process if argv == ["space", "list"] else cli)(*argv)
        assert res.code == errors.NotFound.exit_code, (argv, res.err)
        assert "no broker database at" in one_line(res.err)
        assert not home.exists(), argv
    readonly = tmp_path / "ro"
    readonly.mkdir(mode=0o500)
    res = cli("space", "list", env={"BROKER_URL": f"sqlite:///{readonly / 'broker.db'}"})
    assert res.code == 3 and sorted(readonly.iterdir()) == []


# --- SIGINT, SIGPIPE, file system errors, bugs ------------------------------------------------
def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_cli_ctrl_c_exits_130_without_noise(store: Store, tmp_path: Path) -> None:
    sid = Operator(store).create_space("workflow").id
    lynx, _ = trusted.join(store, sid, "flow/lynx")
    lynx.send("operator", "first")
    follower = subprocess.Popen(
        [sys.executable, "-m", "broker", "message", "list", sid, "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=broker_env(tmp_path / "home"),
        # As a shell starts a command in the foreground: a suite started in the
        # background (`pytest &`, nohup) hands its children SIGINT ignored, and
        # Python then never raises KeyboardInterrupt.
        preexec_fn=_default_sigint,
    )
    try:
        assert follower.stdout is not None
        ready, _, _ = select.select([follower.stdout], [], [], 60)
        assert ready and "first" in follower.stdout.readline()  # it is following now
        follower.send_signal(signal.SIGINT)
        _, err = follower.communicate(timeout=60)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    assert follower.returncode == 130, err  # what it said, if it died by the signal
    assert "Aborted" not in err and "Traceback" not in err and err.strip() == ""


# A Ctrl-C that lands while a module loads, raised by the import of it as the
# signal's handler would: (the module, the code its import runs).
LOADING = {
    # the command line itself, the first tenth of a second of every call
    "the_command_line": ("broker.frontends.cli", "raise KeyboardInterrupt"),
    # a command's module, loaded well into the call, from code run by exec() of a
    # string (as dataclasses make their methods): CPython then killed a
    # `python -m` process by SIGINT at its exit, the interrupt caught or not
    "in_exec_code": ("broker.frontends.cli.space", "exec('raise KeyboardInterrupt')"),
    # a library's own error made of it: Python's class creation wraps it in a
    # RuntimeError, chained; pydantic-core folds it into a SchemaError's text
    "wrapped_chained": (
        "broker.frontends.cli.space",
        "try:\n    raise KeyboardInterrupt\n"
        "except KeyboardInterrupt as e:\n    raise RuntimeError('__set_name__') from e",
    ),
    "wrapped_in_text": (
        "broker.frontends.cli.space",
        "from pydantic_core import SchemaError\n"
        "raise SchemaError('Error building \"literal\" validator:\\n  KeyboardInterrupt: ')",
    ),
}


@pytest.mark.parametrize("where", sorted(LOADING))
def test_cli_ctrl_c_while_a_module_loads_exits_130_without_noise(
    tmp_path: Path, where: str
) -> None:
    module, raising = LOADING[where]
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import sys\n"
        "def interrupt():\n"
        + "".join(f"    {line}\n" for line in raising.splitlines())
        + "class Interrupt:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name == {module!r}:\n"
        "            interrupt()\n"
        "sys.meta_path.insert(0, Interrupt())\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "broker", "space", "list"],
        capture_output=True,
        text=True,
        env=broker_env(tmp_path / "home", PYTHONPATH=str(hook)),
        timeout=60,
    )
    assert proc.returncode == 130, proc.stderr  # -2: killed by its own SIGINT; 70: "a bug"
    assert proc.stderr.strip() == ""  # click ends the ^C's line: nothing else


def test_cli_a_reader_that_went_away_ends_the_output_quietly(store: Store, tmp_path: Path) -> None:
    sid = Operator(store).create_space("workflow").id
    lynx, _ = trusted.join(store, sid, "flow/lynx")
    lynx.send("operator", "nobody reads this")
    read_end, write_end = os.pipe()
    os.close(read_end)  # `broker message list | head -0`: the reader is gone before we write
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "broker", "message", "list", sid],
            stdout=write_end,
            stderr=subprocess.PIPE,
            env=broker_env(tmp_path / "home"),
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert proc.returncode == 141 and proc.stderr == b""


def test_cli_file_system_errors_are_one_line_exit_10(cli: Cli, store: Store) -> None:
    sid = Operator(store).create_space("workflow").id
    # sysfs refuses any new folder (EPERM, even to root): the file system said no.
    res = cli("export", sid, "--root", "/sys/nope")
    assert res.code == 10
    line = one_line(res.err)
    assert line.startswith("broker: file_error: ") and "/sys/nope" in line
    # A path that cannot be one (its parent does not take folders) is bad input.
    res = cli("export", sid, "--root", "/proc/1/nope")
    assert res.code == 2
    assert one_line(res.err).startswith("broker: invalid_input: cannot export to /proc/1/nope")


def test_cli_an_unexpected_error_is_one_line_exit_70_and_BROKER_DEBUG_shows_it(
    cli: Cli, store: Store
) -> None:
    sid = Operator(store).create_space("workflow").id
    with store.write() as t:  # a damaged row, written behind the broker's back
        t.execute(
            "INSERT INTO messages (id, space_no, seq, kind, sender, recipients, body, urgent, "
            "reached, not_reached, created_at_utc) VALUES ('01DAMAGED', "
            f"{sqlrows.SPACE_NO}, 1, 'direct', 'x', "
            "'not json', 'b', 0, '[]', '[]', '2026-01-01T00:00:00.000000Z')",
            (sid,),
        )
    res = cli("message", "list", sid)
    assert res.code == 70
    line = one_line(res.err)
    assert line.startswith("broker: internal_error: JSONDecodeError") and "BROKER_DEBUG=1" in line
    res = cli("message", "list", sid, env={"BROKER_DEBUG": "1"})
    assert res.code == 70 and "Traceback" in res.err and "json" in res.err


# --- destructive operator commands ask first --------------------------------------------------
def _in_pty(argv: list[str], answer: bytes, env: dict[str, str]) -> tuple[int, str]:
    """Run the CLI on a terminal (stdin and stdout a pty), answer its question."""
    main_fd, sub_fd = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "broker", *argv],
        stdin=sub_fd,
        stdout=sub_fd,
        stderr=sub_fd,
        env=env,
        close_fds=True,
    )
    os.close(sub_fd)
    out = b""
    try:
        while b"[y/N]" not in out:
            ready, _, _ = select.select([main_fd], [], [], 60)
            assert ready, out
            out += os.read(main_fd, 4096)
        os.write(main_fd, answer)
        while True:
            ready, _, _ = select.select([main_fd], [], [], 60)
            assert ready, out
            try:
                chunk = os.read(main_fd, 4096)
            except OSError:  # EIO: the other side closed
                break
            if not chunk:
                break
            out += chunk
        proc.wait(60)
    finally:
        os.close(main_fd)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out.decode(errors="replace")


def test_cli_space_stop_and_archive_ask_first(cli: Cli, store: Store, tmp_path: Path) -> None:
    op = Operator(store)
    sid = op.create_space("workflow").id
    trusted.join(store, sid, "flow/lynx")
    res = cli("space", "stop", sid)  # no terminal to ask on, no --yes: refused
    assert res.code == 2 and "pass --yes" in one_line(res.err)
    assert op.get_space(sid).state == "running"
    code, out = _in_pty(["space", "stop", sid], b"n\n", broker_env(tmp_path / "home"))
    assert code == 2 and "1 participant will be recorded as left" in out
    assert op.get_space(sid).state == "running"
    code, out = _in_pty(["space", "stop", sid], b"y\n", broker_env(tmp_path / "home"))
    assert code == 0 and f"{sid} stopped" in out
    res = cli("space", "archive", sid)
    assert res.code == 2 and op.get_space(sid).state == "stopped"
    assert cli("space", "archive", sid, "--yes").code == 0
    assert op.get_space(sid).state == "archived"


def test_S25_dir_prune_dry_run_lists_and_the_real_one_asks(cli: Cli, store: Store) -> None:
    op = Operator(store)
    sid = op.create_space("agentiflow").id
    trusted.join_gone(store, sid, "flow/heron", lead=True)  # its process is gone
    trusted.join_gone(store, sid, "flow/heron>lynx#1")
    trusted.join(store, sid, "flow/heron>otter#1", pid=None)  # seen just now: age alone keeps it
    before = count_rows(store)
    dry = cli("dir", "prune", sid, "--older-than", "0", "--dry-run")
    assert dry.code == 0 and dry.out.strip() == "would prune 2: lead, lynx#1"
    listed = cli("dir", "prune", sid, "--older-than", "0", "--dry-run", "--json").lines()
    assert [p["address"] for p in listed] == ["lead", "lynx#1"]
    refused = cli("dir", "prune", sid, "--older-than", "0")  # the lead included: asks
    assert refused.code == 2 and "lead, lynx#1" in one_line(refused.err)
    assert count_rows(store) == before
    assert all(p.status == "running" for p in op.participants(sid))
    done = cli("dir", "prune", sid, "--older-than", "0", "--yes", "--json")
    assert done.code == 0 and [p["address"] for p in done.lines()] == ["lead", "lynx#1"]
    status = {p.address: p.status for p in op.participants(sid)}
    assert status == {"lead": "left", "lynx#1": "left", "otter#1": "running"}


# --- agent run shows what its command says, and one line per turn --------------------------------
CHATTY = """import json, sys
turn = json.load(sys.stdin)
print("working on " + turn["items"][0]["body"] + " \\x1b]0;title\\x07", file=sys.stderr)
print("done")
"""


def test_S26_agent_run_streams_the_commands_stderr_and_logs_each_turn(
    cli: Cli, store: Store, tmp_path: Path
) -> None:
    op = Operator(store)
    sid = op.create_space("agentiflow").id
    lead, _ = trusted.join(store, sid, "flow/heron", lead=True)
    script = tmp_path / "chatty.py"
    script.write_text(CHATTY)
    for quiet in (False, True):
        name = "quiet" if quiet else "chatty"
        _, joined = trusted.join(store, sid, name, parent="lead", pid=None)
        lead.send(name, "task 1")
        flags = ["--quiet"] if quiet else []
        res = cli(
            "agent", "run", sid, name, "--max-turns", "1", "--wait", "30", *flags, "--json",
            "--", sys.executable, str(script),
            env={"BROKER_AS": name, "BROKER_TOKEN": joined.token},  # spawned with its identity
        )  # fmt: skip
        assert res.code == 0, res.err
        assert json.loads(res.out) == {"address": name, "status": "shutdown"}
        lines = res.err.splitlines()
        assert f"{name}| working on task 1 \\x1b]0;title\\x07" in lines  # escaped (S31)
        turn_lines = [line for line in lines if line.startswith(f"{name}: turn ")]
        if quiet:
            assert turn_lines == []
        else:
            assert len(turn_lines) == 1 and "1 item, seen in" in turn_lines[0]
        assert "\x1b" not in res.err
    replies = [e.body for e in op.log(sid, kinds=["direct"], sender="chatty")]
    assert replies == ["done"]


# --- S33: a closed stdin, an unknown ~user, a URL that is not one -----------------------------
def _closed_stdin() -> None:
    os.close(0)  # `<&-`: Python then has no sys.stdin at all


def test_S33_a_closed_stdin_is_invalid_input_for_every_command_that_reads_it(
    store: Store, tmp_path: Path
) -> None:
    sid = Operator(store).create_space("workflow").id
    _, joined = trusted.join(store, sid, "flow/lynx")
    trusted.join(store, sid, "flow/otter")
    before = count_rows(store)
    env = broker_env(
        tmp_path / "home", BROKER_SPACE=sid, BROKER_AS="lynx", BROKER_TOKEN=joined.token
    )
    for argv, said in [
        (
            ["msg", "send", "--to", "otter", "-"],
            "'-' reads the text from stdin, but stdin is closed",
        ),
        (["board", "post", "-"], "'-' reads the text from stdin, but stdin is closed"),
        (["message", "send", sid, "-"], "'-' reads the text from stdin, but stdin is closed"),
        (["mcp"], "broker mcp serves on stdin and stdout, but stdin is closed"),
        (["space", "stop", sid], "Nothing changed: pass --yes to confirm."),
    ]:
        proc = subprocess.run(
            [sys.executable, "-m", "broker", *argv],
            capture_output=True, text=True, env=env, preexec_fn=_closed_stdin, timeout=60,
        )  # fmt: skip
        line = one_line(proc.stderr)
        assert proc.returncode == 2, (argv, proc.stderr)
        assert line.startswith("broker: invalid_input: ") and line.endswith(said), (argv, line)
    assert count_rows(store) == before


def test_S33_an_unknown_user_in_a_path_and_a_malformed_url_are_invalid_input(
    cli: Cli, tmp_path: Path
) -> None:
    cases = {
        ("BROKER_HOME", "~nosuchuser"): "BROKER_HOME '~nosuchuser': cannot expand "
        "'~nosuchuser': no user 'nosuchuser'",
        ("BROKER_URL", "sqlite:///~nosuchuser/x.db"): "the database file '~nosuchuser/x.db': "
        "cannot expand '~nosuchuser': no user 'nosuchuser'",
        ("BROKER_URL", "http://[::1"): "bad server URL 'http://[::1': Invalid IPv6 URL",
        ("BROKER_URL", "http://127.0.0.1:99999"): "bad server URL 'http://127.0.0.1:99999': "
        "Port out of range 0-65535",
        ("BROKER_URL", "https://h:x"): "bad server URL 'https://h:x': Port could not be cast",
        ("BROKER_URL", "postgresql+psycopg://u:pw@[::1/x"): "bad database URL "
        "'postgresql+psycopg://***@[::1/x': Invalid IPv6 URL",
        ("BROKER_URL", "postgresql+psycopg://u:pw@h:70000/x"): "bad database URL "
        "'postgresql+psycopg://u:***@h:70000/x': Port out of range",
    }
    for (name, value), said in cases.items():
        for argv in (["space", "list"], ["msg", "send", "--space", "x", "--as", "y",
                                         "--token", "z", "--to", "a", "hi"]):  # fmt: skip
            res = cli(*argv, env={name: value})
            line = one_line(res.err)
            assert res.code == 2, (name, value, argv, res.err)
            assert line.startswith(f"broker: invalid_input: {said}"), (name, value, line)
            assert "pw" not in line  # a password in a URL is never echoed
    assert not (tmp_path / "home").exists()


def test_S33_backup_to_an_unknown_users_folder_is_invalid_input_naming_path(store: Store) -> None:
    with pytest.raises(errors.InvalidInput, match="cannot expand '~nosuchuser'") as refused:
        Operator(store).backup("~nosuchuser/b.db")
    assert refused.value.fields == {"field": "path"}


# --- the BROKER_* variables: one rule (README "Environment") ------------------------------------
def test_S33_every_broker_variable_empty_is_unset_and_junk_is_invalid_input_naming_it(
    cli: Cli, cli_process: Cli, store: Store, tmp_path: Path
) -> None:
    from broker import envvars

    # The variables are read where the command starts: in this process (click's
    # runner sets them), but for the first two, real processes of their own.

    sid = Operator(store).create_space("workflow").id
    key = {"XDG_DATA_HOME": str(tmp_path / "xdg")}  # the store's key file is beside it
    empty = {name: "" for name in envvars.VARIABLES if name not in ("BROKER_URL", "BROKER_HOME")}
    res = cli_process("space", "show", sid, env={**empty, **key})
    assert res.code == 0, res.err  # every variable empty: every default applies
    res = cli_process("space", "show", sid, env={**key, "BROKER_URL": "", "BROKER_HOME": ""})
    assert res.code == 3  # the default store (in XDG_DATA_HOME), not one in ./
    assert f"no broker database at {tmp_path / 'xdg' / 'broker' / 'broker.db'}:" in res.err
    takes = {
        "BROKER_GUARD": "on or off",
        "BROKER_DEBUG": "on or off",
        "BROKER_WRITER_LOCK": "on, off or flock",
        "BROKER_SYNCHRONOUS": "NORMAL or FULL",
        "BROKER_BUSY_TIMEOUT_MS": "a whole number from 0 to 3600000",
    }
    before = count_rows(store)
    for name, what in takes.items():
        for junk in ("junk", " ", "-1", "99999999999"):
            res = cli("space", "show", sid, env={**key, name: junk})
            assert res.code == 2, (name, junk, res.err)
            assert (
                one_line(res.err) == f"broker: invalid_input: {name} must be {what}, not {junk!r}"
            )
    for name in ("BROKER_GUARD", "BROKER_DEBUG", "BROKER_WRITER_LOCK"):
        for word in ("ON", "off", "1", "0", "True", "no"):
            assert cli("space", "show", sid, env={**key, name: word}).code == 0, (name, word)
    assert cli("space", "show", sid, env={**key, "BROKER_WRITER_LOCK": "FLOCK"}).code == 0
    assert count_rows(store) == before
    assert set(envvars.VARIABLES) <= set(README_ENV_ROWS())
    # The git guard's override lets a commit through whatever else is set (S37).
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    junk = {"BROKER_SYNCHRONOUS": "junk", "BROKER_SPACE": ""}
    off = {**junk, "BROKER_GUARD": "off"}
    assert cli("guard", "pre-commit", "--repo", str(repo), env=off).code == 0
    res = cli("guard", "pre-commit", "--repo", str(repo), env=junk)
    assert res.code == 2 and "BROKER_SYNCHRONOUS must be" in one_line(res.err)


def README_ENV_ROWS() -> list[str]:  # noqa: N802 - reads like the table it returns
    import re

    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    section = readme.split("### Environment", 1)[1].split("### ", 1)[0]
    return re.findall(r"`(BROKER_[A-Z_]+)`", section)


# --- S10, S26: a teammate's output is one batch, checked whole -----------------------------------
FORGER = """import json, sys
json.load(sys.stdin)
print(json.dumps({"to": "lead", "text": "hi", "sender": "operator", "urgent": True}))
print("plain \\x1b[2J reply")
"""
SCATTERED = """import json, sys
json.load(sys.stdin)
print(json.dumps({"to": "nobody-here", "text": "lost"}))
print(json.dumps({"to": "lead", "text": "threaded", "thread": "t1", "importance": "high"}))
print("plain reply")
"""


def _one_teammate_turn(
    cli: Cli, store: Store, tmp_path: Path, program: str
) -> tuple[Operator, str, Any]:
    """An agentiflow whose lead gives the teammate ``tm`` one task, and
    ``broker agent run`` of ``program`` for that one turn: (operator, space, result)."""
    op = Operator(store)
    sid = op.create_space("agentiflow").id
    lead, _ = trusted.join(store, sid, "flow/heron", lead=True)
    script = tmp_path / "teammate.py"
    script.write_text(program)
    _, joined = trusted.join(store, sid, "tm", parent="lead", pid=None)
    lead.send("tm", "task 1")
    res = cli(
        "agent", "run", sid, "tm", "--max-turns", "1", "--wait", "30",
        "--", sys.executable, str(script),
        env={"BROKER_AS": "tm", "BROKER_TOKEN": joined.token},
    )  # fmt: skip
    return op, sid, res


def test_S10_S26_a_teammate_line_with_unknown_fields_fails_the_turn_and_sends_nothing(
    cli: Cli, store: Store, tmp_path: Path
) -> None:
    op, sid, res = _one_teammate_turn(cli, store, tmp_path, FORGER)
    assert res.code == errors.HandlerFailed.exit_code, res.err
    reason = (
        "HandlerFailed: stdout line 1: unknown field 'sender': this tool does not take it; "
        "nothing of the turn's output was sent (2 messages)"
    )
    lines = res.err.splitlines()
    assert lines[0].startswith("tm: turn ") and lines[0].endswith(f" failed: {reason}")
    assert "failed in" in lines[1] and res.out.strip() == "tm failed"
    sent = [e.body for e in op.log(sid, kinds=["direct"], sender="tm")]
    assert len(sent) == 1 and sent[0].endswith(reason)  # only the failure, told to the lead
    assert not [e for e in op.log(sid) if e.sender == "operator"]


def test_S8_S26_a_teammate_line_that_reaches_nobody_is_logged_and_the_rest_is_sent(
    cli: Cli, store: Store, tmp_path: Path
) -> None:
    op, sid, res = _one_teammate_turn(cli, store, tmp_path, SCATTERED)
    assert res.code == 0, res.err
    assert (
        "tm: stdout line 1 did not reach nobody-here: no_live_participant" in res.err.splitlines()
    )
    sent = op.log(sid, kinds=["direct"], sender="tm")
    assert [e.body for e in sent] == ["lost", "threaded", "plain reply"]
    assert sent[1].thread == "t1" and sent[1].importance == "high"


def test_commands_on_the_file_itself_refuse_client_mode_in_one_line(cli: Cli) -> None:
    """doctor, backup and vacuum run where the database file is: with BROKER_URL
    naming a server they say so (as export and key show do), never that the
    server's URL is a bad database URL."""
    env = {"BROKER_URL": "http://127.0.0.1:9"}
    for argv in (["doctor"], ["backup", "copy.db"], ["vacuum"]):
        res = cli(*argv, env=env)
        assert res.code == 2, (argv, res.err)
        assert res.err.strip() == (
            f"broker: invalid_input: 'broker {argv[0]}' needs the database file: not "
            "available in client mode (BROKER_URL names a server)"
        ), argv
