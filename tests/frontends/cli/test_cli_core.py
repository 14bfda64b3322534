"""The core CLI through real processes (`python -m broker`): spaces, join/leave,
agent sends, operator sends, the log, participants, db; errors as one line and a
stable exit code; help and --json on every command."""

from __future__ import annotations

import json
import os
import re
import select
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import terminal
import trusted

from broker import Agent, Operator, Store, errors
from broker.spaces import participants, spaces
from broker.store.migrate import HEAD

Cli = Callable[..., Any]


def one_error_line(res: Any, code: int) -> str:
    """A BrokerError on the CLI: exit ``code``, one line on stderr, no traceback."""
    assert res.code == code, (res.code, res.out, res.err)
    assert "Traceback" not in res.err
    lines = res.err.splitlines()
    assert len(lines) == 1, res.err
    assert lines[0].startswith("broker: ")
    return str(lines[0])


def cli_create(cli: Cli, kind: str = "workflow", *extra: str) -> str:
    """`broker space create --kind KIND --json` -> {"id": ...}."""
    res = cli("space", "create", "--kind", kind, "--json", *extra)
    assert res.code == 0, res.err
    data = res.json()
    assert data["kind"] == kind and data["state"] == "running"
    return str(data["id"])


def cli_join(cli: Cli, space: str, codename: str, *extra: str) -> dict[str, str]:
    """`broker join RUN_ID CODENAME --json` -> the agent's BROKER_* environment."""
    res = cli("join", space, codename, "--json", *extra)
    assert res.code == 0, res.err
    data = res.json()
    assert set(data) >= {"address", "token"}
    return {"BROKER_SPACE": space, "BROKER_AS": data["address"], "BROKER_TOKEN": data["token"]}


# Set-up that is not the subject of a test goes through the library, on the same
# file the CLI processes use (conftest: `store` lives in the cli's BROKER_HOME).
def make(store: Store, kind: str = "workflow", **settings: Any) -> str:
    return Operator(store).create_space(kind, **settings).id  # type: ignore[arg-type]


def enter(store: Store, space: str, codename: str, **fields: Any) -> dict[str, str]:
    _, joined = trusted.join(store, space, codename, **fields)
    return {"BROKER_SPACE": space, "BROKER_AS": joined.address, "BROKER_TOKEN": joined.token}


def test_cli_python_dash_m_broker_help(cli: Cli) -> None:
    res = cli("--help")
    assert res.code == 0 and "Usage:" in res.out
    for group in ("space", "join", "leave", "msg", "message", "board", "inbox", "dir", "db"):
        assert group in res.out
    assert "Traceback" not in res.err


# --- spaces -------------------------------------------------------------------------------------
def test_cli_space_create_list_show_stop_archive(cli: Cli, store: Store) -> None:
    sid = cli_create(cli, "workflow")
    res = cli("space", "create", "--kind", "agentiflow")
    # S27: one line for `eval`, with the join key shown this once.
    assert res.code == 0 and re.fullmatch(
        r"export BROKER_SPACE=af_\w+ BROKER_JOIN_KEY=[\w-]{40,}\n", res.out
    ), res.out
    af = res.out.split()[1].split("=")[1]
    ses = cli("space", "create", "--kind", "session", "--setting", "inbox_cap=8", "--json").json()
    assert ses["id"].startswith("ses_") and ses["settings"] == {"inbox_cap": 8}

    listed = cli("space", "list", "--json").lines()  # one object per line
    assert sorted(s["id"] for s in listed) == sorted([sid, af, ses["id"]])
    text = cli("space", "list").out
    assert sid in text and "KIND" in text.splitlines()[0]

    compact = sid.split("_", 1)[1]
    shown = cli("space", "show", compact, "--json").json()
    assert shown["id"] == sid and shown["state"] == "running"
    assert sid in cli("space", "show", sid).out

    assert cli("space", "stop", sid, "--yes", "--json").json()["state"] == "stopped"
    assert [s["id"] for s in cli("space", "list", "--state", "stopped", "--json").lines()] == [sid]
    res = cli("space", "archive", sid, "--yes")
    assert res.code == 0 and res.out.strip() == f"{sid} archived"
    assert cli("space", "archive", af, "-y", "--json").json()["state"] == "archived"
    assert cli("space", "stop", ses["id"], "--yes").out.strip() == f"{ses['id']} stopped"
    line = one_error_line(cli("space", "stop", sid, "--yes"), errors.Conflict.exit_code)
    assert "archived" in line


def test_cli_space_errors_are_one_line_with_stable_exit_codes(cli: Cli, store: Store) -> None:
    a, b = make(store), make(store)
    common = os.path.commonprefix([a, b])
    line = one_error_line(cli("space", "show", common), errors.AmbiguousId.exit_code)
    assert "ambiguous" in line and a in line and b in line
    one_error_line(cli("space", "show", "af_nothing"), errors.SpaceNotFound.exit_code)
    one_error_line(
        cli("space", "create", "--kind", "workflow", "--setting", "inbox_cap=-1"),
        errors.InvalidInput.exit_code,
    )
    res = cli("space", "create", "--kind", "galaxy")  # a usage error, click's own format
    assert res.code == 2 and "Traceback" not in res.err


# --- join, leave, agent sends -----------------------------------------------------------------------
def test_cli_join_with_every_field_and_the_address_derivation(cli: Cli, store: Store) -> None:
    sid = make(store)
    res = cli(
        "join", sid, "cobalt-harbor/lynx", "--agent", "scanner", "--run-id", "r-1", "--step", "scan",
        "--role", "recon", "--archetype", "surveyor", "--task", "map it", "--json",
    )  # fmt: skip
    lynx = res.json()
    assert lynx["address"] == "lynx" and len(lynx["token"]) >= 32
    child = cli_join(cli, sid, "cobalt-harbor/lynx>otter#1", "--parent", "lynx")
    assert child["BROKER_AS"] == "lynx>otter#1"
    text = cli("join", sid, "cobalt-harbor/lynx#2")
    assert text.code == 0 and "address: lynx#2" in text.out and "BROKER_TOKEN=" in text.out

    people = {p.address: p for p in Operator(store).participants(sid)}
    p = people["lynx"]
    assert (p.agent, p.run_id, p.step, p.role, p.archetype, p.task) == (
        "scanner", "r-1", "scan", "recon", "surveyor", "map it",
    )  # fmt: skip
    assert people["lynx>otter#1"].parent == "lynx"

    af = make(store, "agentiflow")
    assert cli_join(cli, af, "cobalt-harbor/heron", "--lead")["BROKER_AS"] == "lead"
    assert cli_join(cli, af, "cobalt-harbor/heron>lynx#1")["BROKER_AS"] == "lynx#1"
    line = one_error_line(cli("join", sid, "cobalt-harbor/operator"), errors.InvalidInput.exit_code)
    assert "reserved" in line
    one_error_line(
        cli("join", "run_nothing", "flow/x", "--join-key", "k"), errors.SpaceNotFound.exit_code
    )


def test_cli_retried_codename_rejoins_and_the_old_token_is_refused(cli: Cli, store: Store) -> None:
    sid = make(store)
    first = enter(store, sid, "flow/lynx")
    other = enter(store, sid, "flow/otter")
    assert cli("msg", "send", "--to", "lynx", "keep", "this", env=other).code == 0
    again = cli_join(cli, sid, "flow/lynx@2", "--token", first["BROKER_TOKEN"])  # S27: a retry
    assert again["BROKER_AS"] == "lynx" and again["BROKER_TOKEN"] != first["BROKER_TOKEN"]
    one_error_line(
        cli("msg", "send", "--to", "otter", "stale", env=first), errors.AuthError.exit_code
    )
    people = {p.address: p for p in Operator(store).participants(sid)}
    assert people["lynx"].waiting == 1  # the inbox survived the retry
    assert cli("msg", "send", "--to", "otter", "fresh", env=again).code == 0


def test_cli_msg_send_with_flags_or_env_and_its_json(cli: Cli, store: Store) -> None:
    sid = make(store)
    lynx = enter(store, sid, "flow/lynx", agent="scanner")
    enter(store, sid, "flow/otter", agent="scanner")
    heron = enter(store, sid, "flow/heron")
    # identity from flags
    res = cli(
        "msg", "send", "--space", sid, "--as", "heron", "--token", heron["BROKER_TOKEN"],
        "--to", "lynx", "--json", "hello", "lynx",
    )  # fmt: skip
    assert res.code == 0, res.err
    data = res.json()
    assert set(data) >= {"id", "seq", "reached", "not_reached"}
    assert (data["seq"], data["reached"], data["not_reached"]) == (1, ["lynx"], [])
    # identity from the environment; several --to
    data = cli(
        "msg", "send", "--to", "role:scanner", "--to", "operator", "--json", "x", env=heron
    ).json()
    assert sorted(data["reached"]) == ["lynx", "operator", "otter"]
    # text from stdin
    assert cli("msg", "send", "--to", "heron", "-", env=lynx, input="from stdin\n").code == 0
    # idempotency key: the repeat returns the first result and writes nothing
    first = cli(
        "msg", "send", "--to", "heron", "--idempotency-key", "k1", "--json", "once", env=lynx
    ).json()
    again = cli(
        "msg", "send", "--to", "heron", "--idempotency-key", "k1", "--json", "once", env=lynx
    ).json()
    assert again["id"] == first["id"] and again["duplicate"] is True
    res = cli("msg", "send", "--to", "heron", "--idempotency-key", "k1", "once", env=lynx)
    assert res.code == 0 and "duplicate" in res.out and "delivered to heron" in res.out
    log = Operator(store).log(sid)
    assert [e.body for e in log] == ["hello lynx", "x", "from stdin\n", "once"]
    assert [e.sender for e in log] == ["heron", "heron", "lynx", "lynx"]


def test_cli_msg_send_that_reached_nobody_prints_the_json_and_exits_1(
    cli: Cli, store: Store
) -> None:
    sid = make(store)
    lynx = enter(store, sid, "flow/lynx")
    res = cli(
        "msg", "send", "--to", "ghost#1", "--to", "role:nobody", "--json", "anyone?", env=lynx
    )
    assert res.code == 1
    data = res.json()
    assert data["reached"] == []
    assert data["not_reached"] == [
        {"address": "ghost#1", "reason": "unknown_participant"},
        {"address": "role:nobody", "reason": "no_live_participant"},
    ]
    assert "Traceback" not in res.err
    res = cli("msg", "send", "--to", "broadcast", "hello?", env=lynx)
    assert res.code == 1 and "not delivered to broadcast: no_live_participant" in res.out
    log = Operator(store).log(sid)
    assert [e.id for e in log][0] == data["id"] and len(log) == 2  # both logged


def test_cli_agent_error_paths(cli: Cli, store: Store) -> None:
    sid = make(store, body_max_bytes=16)
    lynx = enter(store, sid, "flow/lynx")
    otter = enter(store, sid, "flow/otter")
    said = one_error_line(cli("msg", "send", "--to", "otter", "x"), 2)  # no identity: usage
    assert said.startswith("broker: usage: no identity: set BROKER_TOKEN")
    no_address = {k: v for k, v in lynx.items() if k != "BROKER_AS"}  # a token, no address
    said = one_error_line(cli("msg", "send", "--to", "otter", "x", env=no_address), 2)
    assert said.startswith("broker: usage: no identity: set BROKER_AS")
    one_error_line(
        cli("msg", "send", "--to", "otter", "x", env={**lynx, "BROKER_TOKEN": "wrong"}),
        errors.AuthError.exit_code,
    )
    one_error_line(
        cli(
            "msg", "send", "--to", "otter", "x", env={**lynx, "BROKER_TOKEN": otter["BROKER_TOKEN"]}
        ),
        errors.AuthError.exit_code,
    )
    one_error_line(
        cli("msg", "send", "--to", "otter", "x" * 17, env=lynx), errors.BodyTooLarge.exit_code
    )
    one_error_line(
        cli("msg", "send", "--to", "role:", "x", env=lynx), errors.InvalidInput.exit_code
    )
    one_error_line(
        cli("msg", "send", "--to", "otter", "-", env=lynx, input=""), errors.InvalidInput.exit_code
    )
    assert Operator(store).log(sid) == []  # nothing was written


def test_cli_messaging_full_exit_code(cli: Cli, store: Store) -> None:
    sid = make(store, log_max_mb=0.0001)
    lynx = enter(store, sid, "flow/lynx")
    Agent.connect(store, sid, "lynx", lynx["BROKER_TOKEN"]).send("operator", "x" * 200)
    line = one_error_line(
        cli("msg", "send", "--to", "operator", "x", env=lynx), errors.MessagingFull.exit_code
    )
    assert "messaging_full" in line


def test_cli_board_post_channel_and_addressed(cli: Cli, store: Store) -> None:
    sid = make(store)
    lynx = enter(store, sid, "flow/lynx")
    enter(store, sid, "flow/otter")
    res = cli("board", "post", "--json", "found", "it", env=lynx)
    assert res.code == 0 and res.json()["reached"] == [] and res.json()["kind"] == "post"
    res = cli("board", "post", "--to", "otter", "--json", "look", env=lynx)
    assert res.json()["reached"] == ["otter"]
    res = cli("board", "post", "--to", "ghost#1", "--json", "nobody", env=lynx)
    assert res.code == 1 and res.json()["not_reached"][0]["reason"] == "unknown_participant"
    assert [(e.kind, e.body) for e in Operator(store).log(sid)] == [
        ("post", "found it"),
        ("post", "look"),
        ("post", "nobody"),
    ]


def test_cli_leave_then_sends_are_refused(cli: Cli, store: Store) -> None:
    sid = make(store)
    lynx = enter(store, sid, "flow/lynx")
    otter = enter(store, sid, "flow/otter")
    res = cli("leave", "--json", env=lynx)
    assert res.code == 0 and res.json() == {"address": "lynx", "status": "left"}
    line = one_error_line(
        cli("msg", "send", "--to", "otter", "x", env=lynx), errors.ParticipantLeft.exit_code
    )
    assert "left" in line
    res = cli("msg", "send", "--to", "lynx", "--json", "still there?", env=otter)
    assert res.code == 1 and res.json()["not_reached"] == [
        {"address": "lynx", "reason": "participant_left"}
    ]
    res = cli("leave", "--space", sid, "--as", "otter", "--token", otter["BROKER_TOKEN"])
    assert res.code == 0 and "otter left" in res.out
    assert {p.address: p.status for p in Operator(store).participants(sid)} == {
        "lynx": "left",
        "otter": "left",
    }
    assert [e.event for e in participants.journal(store, sid)].count("left") == 2


# --- operator -------------------------------------------------------------------------------------
def test_cli_operator_message_send_to_urgent_and_default_targets(cli: Cli, store: Store) -> None:
    sid = make(store)
    enter(store, sid, "flow/lynx")
    enter(store, sid, "flow/otter")
    res = cli("message", "send", sid, "--to", "lynx", "--urgent", "--json", "stop", "now")
    assert res.code == 0 and res.json()["reached"] == ["lynx"]
    res = cli("message", "send", sid.split("_", 1)[1], "--json", "everyone")  # default: broadcast
    assert sorted(res.json()["reached"]) == ["lynx", "otter"]
    res = cli("message", "send", sid, "--to", "otter", "plain")
    assert res.code == 0 and "delivered to otter" in res.out
    assert [(e.kind, e.sender, e.via, e.urgent, e.body) for e in Operator(store).log(sid)] == [
        ("operator", "operator", "cli", True, "stop now"),
        ("operator", "operator", "cli", False, "everyone"),
        ("operator", "operator", "cli", False, "plain"),
    ]
    af = make(store, "agentiflow")
    enter(store, af, "cobalt-harbor/heron", lead=True)
    enter(store, af, "cobalt-harbor/heron>lynx#1")
    assert cli("message", "send", af, "--json", "plan").json()["reached"] == ["lead"]


def test_S35_cli_operator_message_send_has_msg_sends_mail_flags(cli: Cli, store: Store) -> None:
    """The operator's `message send` takes --thread, --reply-to, --importance
    and --ack-required, with the names and help of the agent's `msg send`."""
    from click.testing import CliRunner

    from broker.frontends.cli import main

    def helps(*path: str) -> dict[str, str | None]:
        cmd: Any = main
        for part in path:
            cmd = cmd.get_command(None, part)  # type: ignore[arg-type]
        return {p.opts[0]: getattr(p, "help", None) for p in cmd.params}

    agent_flags, operator_flags = helps("msg", "send"), helps("message", "send")
    for flag in ("--thread", "--reply-to", "--importance"):
        assert operator_flags[flag] == agent_flags[flag], flag
    assert "--ack-required" in operator_flags
    assert CliRunner().invoke(main, ["message", "send", "--help"]).exit_code == 0
    sid = make(store)
    enter(store, sid, "flow/lynx")
    first = cli("message", "send", sid, "--to", "lynx", "--thread", "plan", "--importance",
                "high", "--ack-required", "--json", "plan").json()  # fmt: skip
    res = cli("message", "send", sid, "--to", "lynx", "--reply-to", first["id"], "more")
    assert res.code == 0, res.err
    log = Operator(store).log(sid)
    assert [(e.thread, e.reply_to, e.importance, e.ack_required) for e in log] == [
        ("plan", None, "high", True),
        ("plan", first["id"], "normal", False),
    ]
    res = cli("message", "status", sid, first["id"])
    assert res.out.splitlines()[0] == f"{first['id']} (ack required): seen by 0 of 1"
    res = cli("message", "send", sid, "--to", "lynx", "--reply-to", "abc", "x")
    assert (res.code, res.err) == (
        2, "broker: invalid_input: bad --reply-to: a message id (26 letters and digits)\n"
    )  # fmt: skip
    assert len(Operator(store).log(sid)) == 2


def test_cli_operator_broadcast_to_an_empty_space_is_not_delivered(cli: Cli, store: Store) -> None:
    sid = make(store, "session")
    res = cli("message", "send", sid, "hello?")
    assert res.code != 0
    assert "not delivered to broadcast: no_live_participant" in res.out
    assert "Traceback" not in res.err
    assert len(Operator(store).log(sid)) == 1  # logged all the same


def test_cli_operator_send_into_a_stopped_space_is_refused(cli: Cli, store: Store) -> None:
    sid = make(store)
    lynx = enter(store, sid, "flow/lynx")
    spaces.stop(store, sid)
    line = one_error_line(
        cli("message", "send", sid, "--to", "lynx", "x"), errors.SpaceNotRunning.exit_code
    )
    assert "stopped" in line
    line = one_error_line(cli("msg", "send", "--to", "operator", "x", env=lynx), 5)
    assert "space_not_running" in line and "stopped" in line


def test_cli_message_list_after_and_kind(cli: Cli, store: Store) -> None:
    sid = make(store)
    lynx_env = enter(store, sid, "flow/lynx")
    enter(store, sid, "flow/otter")
    lynx = Agent.connect(store, sid, "lynx", lynx_env["BROKER_TOKEN"])
    ids = [
        lynx.send("otter", "d1").id,
        lynx.post("p1").id,
        Operator(store).send(sid, "o1", to=["otter"]).id,
    ]
    res = cli("message", "list", sid, "--json")
    assert len(res.out.splitlines()) == 3  # one JSON object per line
    assert [e["id"] for e in res.lines()] == ids
    assert res.lines()[0]["reached"] == ["otter"] and res.lines()[0]["sender"] == "lynx"
    assert [
        e["body"] for e in cli("message", "list", sid, "--after", ids[0], "--json").lines()
    ] == ["p1", "o1"]
    assert [
        e["body"]
        for e in cli("message", "list", sid, "--kind", "direct,operator", "--json").lines()
    ] == [
        "d1",
        "o1",
    ]
    text = cli("message", "list", sid).out
    assert "#1 " in text and "d1" in text and "operator" in text
    one_error_line(cli("message", "list", sid, "--kind", "gossip"), errors.InvalidInput.exit_code)
    one_error_line(
        cli("message", "list", sid, "--after", "01NOPE"), errors.MessageNotFound.exit_code
    )


def test_cli_message_list_cursor_filters_and_the_id_in_text(cli: Cli, store: Store) -> None:
    sid = make(store)
    lynx, _ = trusted.join(store, sid, "flow/lynx")
    otter, _ = trusted.join(store, sid, "flow/otter", agent="worker")
    op = Operator(store)
    ids = [
        lynx.send("otter", "l1").id,  # seq 1
        otter.send("lynx", "o1").id,  # seq 2
        lynx.send("role:worker", "l2").id,  # seq 3: reached otter by role
        op.send(sid, "op", to=["lynx"]).id,  # seq 4
    ]

    def bodies(*args: str) -> list[str]:
        res = cli("message", "list", sid, *args, "--json")
        assert res.code == 0, res.err
        return [e["body"] for e in res.lines()]

    assert bodies("--after", "2") == bodies("--after", "#2") == bodies("--after", ids[1])
    assert bodies("--after", "2") == ["l2", "op"]
    assert bodies("--limit", "2") == ["l1", "o1"] and bodies("--tail", "1") == ["op"]
    assert bodies("--after", "1", "--limit", "1") == ["o1"]
    assert bodies("--from", "lynx") == ["l1", "l2"] and bodies("--from", "operator") == ["op"]
    assert bodies("--to", "otter") == ["l1", "l2"]  # by address, and reached by role
    assert bodies("--to", "role:worker") == ["l2"]
    assert bodies("--from", "lynx", "--tail", "1") == ["l2"]
    assert bodies("--since", "1h") == ["l1", "o1", "l2", "op"]
    assert bodies("--since", "2999-01-01") == []
    assert bodies("--after", "4") == [] and bodies("--after", "99") == []
    text = cli("message", "list", sid, "--tail", "1").out
    assert text.startswith(f"#4 {ids[3]} ") and text.rstrip().endswith("operator -> lynx: op")
    for bad in (["--limit", "1", "--tail", "1"], ["--since", "soon"], ["--tail", "-1"]):
        res = cli("message", "list", sid, *bad)
        assert res.code == 2 and len(res.err.splitlines()) == 1, bad


def test_cli_message_list_follow_until_the_space_stops(
    cli: Cli, store: Store, tmp_path: Path
) -> None:
    sid = make(store)
    lynx = enter(store, sid, "flow/lynx")
    Agent.connect(store, sid, "lynx", lynx["BROKER_TOKEN"]).send("operator", "before the follower")
    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
    env.update(BROKER_HOME=str(tmp_path / "home"), PYTHONUNBUFFERED="1")
    follower = subprocess.Popen(
        [sys.executable, "-m", "broker", "message", "list", sid, "--follow", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert follower.stdout is not None
        ready, _, _ = select.select([follower.stdout], [], [], 60)
        assert ready, "the follower printed nothing"
        assert "before the follower" in follower.stdout.readline()
        bodies = [f"followed {i}" for i in range(3)]
        for body in bodies:  # a writer process per message
            assert cli("msg", "send", "--to", "operator", body, env=lynx).code == 0
        assert cli("space", "stop", sid, "--yes").code == 0
        out, err = follower.communicate(timeout=60)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    assert follower.returncode == 0, err
    assert "Traceback" not in err
    assert [json.loads(line)["body"] for line in out.splitlines() if line.strip()] == bodies


# --- store: where it lives, db commands -------------------------------------------------------------
def test_cli_db_upgrade_on_a_terminal_names_each_revision_as_it_goes(tmp_path: Path) -> None:
    """On a terminal, ``db upgrade`` names each revision on stderr as it is
    applied, with its time (a large store's rewrite of a table takes a while);
    stdout says what it did, as off a terminal (where stderr stays quiet)."""
    import pty

    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
    env["BROKER_HOME"] = str(tmp_path / "home")
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "broker", "db", "upgrade"],
        stdout=subprocess.PIPE,
        stderr=follower,
        env=env,
    )
    os.close(follower)
    err = terminal.read_to_end(leader, proc)
    out, _ = proc.communicate(timeout=60)
    os.close(leader)
    assert proc.returncode == 0, err
    lines = err.decode().replace("\r\n", "\n").splitlines()
    from alembic.script import ScriptDirectory

    from broker.store.migrate import config

    script = ScriptDirectory.from_config(config())
    want = [r.revision for r in reversed(list(script.walk_revisions()))]
    assert [line.split()[0] for line in lines] == want
    assert re.fullmatch(rf"  {HEAD}  .+ \(\d+\.\d s\)", lines[-1]), lines[-1]
    assert out.decode().strip().endswith(f"empty -> {HEAD}")


def test_cli_broker_home_holds_the_db_file_0600_in_a_0700_folder(cli: Cli, tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert not home.exists()
    res = cli("db", "upgrade", "--json")
    assert res.code == 0 and res.json()["before"] is None and res.json()["after"] == HEAD
    db = home / "broker.db"
    url = res.json()["url"]
    assert url in (f"sqlite:///{db}", f"sqlite:///{db.resolve()}")
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    res = cli("db", "upgrade")
    assert res.code == 0 and f"{HEAD} -> {HEAD}" in res.out
    res = cli("db", "current", "--json")
    assert res.json() == {
        "url": url,  # the same database as the upgrade's
        "current": HEAD,
        "head": HEAD,
        "up_to_date": True,
    }
    assert "up to date" in cli("db", "current").out


def test_cli_db_current_on_a_missing_database_creates_nothing(cli: Cli, tmp_path: Path) -> None:
    missing = tmp_path / "nothing" / "empty.db"
    res = cli("db", "current", "--json", env={"BROKER_URL": f"sqlite:///{missing}"})
    line = one_error_line(res, errors.NotFound.exit_code)
    assert "no broker database" in line and str(missing) in line
    assert not missing.parent.exists()


def test_cli_db_current_on_an_empty_database_file(cli: Cli, tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    res = cli("db", "current", "--json", env={"BROKER_URL": f"sqlite:///{empty}"})
    assert res.code == 0, res.err
    assert (res.json()["current"], res.json()["head"], res.json()["up_to_date"]) == (
        None,
        HEAD,
        False,
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.db"]  # no lock file left


def test_cli_broker_url_and_url_option_override_broker_home(
    cli: Cli, store: Store, tmp_path: Path
) -> None:
    sid = make(store)  # in BROKER_HOME
    other = tmp_path / "other" / "b.db"
    third = tmp_path / "third.db"
    for path in (other, third):  # migrated here: the subject is which file, not migrating
        Store(f"sqlite:///{path}").close()
    res = cli("space", "list", "--json", env={"BROKER_URL": f"sqlite:///{other}"})
    assert res.code == 0 and res.out == ""  # an empty list: no line at all
    make(Store(f"sqlite:///{third}"), "session")
    res = cli("--url", f"sqlite:///{third}", "space", "list", "--json")
    assert res.code == 0 and [s["kind"] for s in res.lines()] == ["session"]
    # --url after the subcommand, like --space: it wins over BROKER_URL
    res = cli("space", "list", "--url", f"sqlite:///{third}", "--json",
              env={"BROKER_URL": f"sqlite:///{other}"})  # fmt: skip
    assert res.code == 0 and [s["kind"] for s in res.lines()] == ["session"]
    assert [s["id"] for s in cli("space", "list", "--json").lines()] == [sid]
    one_error_line(
        cli("space", "list", env={"BROKER_URL": "mysql://x/y"}), errors.InvalidInput.exit_code
    )
    one_error_line(
        cli("space", "list", env={"BROKER_SYNCHRONOUS": "sometimes"}), errors.InvalidInput.exit_code
    )
    one_error_line(
        cli("space", "list", env={"BROKER_WRITER_LOCK": "sometimes"}), errors.InvalidInput.exit_code
    )


def test_cli_default_home_is_xdg_data_home(cli: Cli, tmp_path: Path) -> None:
    res = cli("db", "upgrade", env={"BROKER_HOME": "", "XDG_DATA_HOME": str(tmp_path / "xdg")})
    assert res.code == 0, res.err
    assert (tmp_path / "xdg" / "broker" / "broker.db").exists()


def test_cli_message_list_follow_after_the_last_message_prints_only_newer_ones(
    cli: Cli, store: Store, tmp_path: Path
) -> None:
    sid = make(store)
    lynx, _ = trusted.join(store, sid, "flow/lynx")
    enter(store, sid, "flow/otter")
    last = [lynx.send("otter", f"old {i}").id for i in range(3)][-1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
    env["BROKER_HOME"] = str(tmp_path / "home")
    follower = subprocess.Popen(
        [sys.executable, "-m", "broker", "message", "list", sid, "--after", last, "--kind", "direct", "--follow", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )  # fmt: skip
    try:
        Operator(store).send(sid, "not a direct message", to=["otter"])
        lynx.send("otter", "new")
        spaces.stop(store, sid)
        out, err = follower.communicate(timeout=60)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    assert follower.returncode == 0, err
    assert [json.loads(line)["body"] for line in out.splitlines() if line.strip()] == ["new"]


def test_cli_store_errors_are_one_line_with_exit_code_10(cli: Cli, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    line = one_error_line(
        cli("space", "create", "--kind", "run", env={"BROKER_HOME": str(blocker / "home")}), 10
    )
    assert "cannot create the database file" in line
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database" * 500)
    line = one_error_line(cli("space", "list", env={"BROKER_URL": f"sqlite:///{junk}"}), 10)
    assert "not a database" in line
