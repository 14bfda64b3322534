"""The directory and teammates at the command line (S25, S26): `broker dir
list|show|prune` -- the one listing of participants, their directory entry and
their teammate state -- and `broker demo`'s text, line by line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import trusted

from broker import Operator, Store, errors

Cli = Callable[..., Any]
LONG = "an unusually long role description that goes on " * 3


def test_S25_dir_list_is_the_one_listing_of_participants(cli: Cli, store: Store) -> None:
    op = Operator(store)
    sid = op.create_space("agentiflow").id
    trusted.join(store, sid, "flow/heron", lead=True, agent="lead", role="coordinator")
    lynx, _ = trusted.join(
        store, sid, "flow/heron>lynx#1", agent="worker", parent="lead", role="log surveyor"
    )
    trusted.join(store, sid, "flow/heron>mute#1", parent="lead", messaging=False)
    Operator(store).send(sid, "queued", to=["lynx#1"])
    gone, _ = trusted.join(store, sid, "flow/heron>gone#1", parent="lead")
    gone.leave()

    res = cli("dir", "list", sid)
    assert res.code == 0, res.err
    header, *rows = res.out.splitlines()
    assert header.split() == ["ADDRESS", "AGENT", "ROLE", "STATUS", "WAITING", "PARENT", "LAST",
                              "SEEN"]  # fmt: skip
    assert [r.split()[0] for r in rows] == ["lead", "lynx#1", "mute#1"]  # who left: --all
    lynx_row = next(r for r in rows if r.startswith("lynx#1"))
    assert re.search(r"lynx#1\s+worker\s+log surveyor\s+running\s+1\s+lead\s+\d{4}-", lynx_row)

    everyone = cli("dir", "list", sid, "--all", "--json").lines()
    assert [(p["address"], p["status"]) for p in everyone] == [
        ("lead", "running"), ("lynx#1", "running"), ("mute#1", "running"), ("gone#1", "left"),
    ]  # fmt: skip
    assert everyone[1]["waiting"] == 1 and everyone[1]["role"] == "log surveyor"
    assert everyone[2]["messaging"] is False
    assert not {"token", "token_hash"} & set(everyone[0])
    assert lynx.address == "lynx#1"


def test_S25_dir_show_is_one_entry_with_everything_known(cli: Cli, store: Store) -> None:
    sid = Operator(store).create_space("workflow").id
    me = os.getpid()  # an ancestor of the CLI process: a process it may record (S27)
    res = cli(
        "join", sid, "flow/lynx", "--agent", "scanner", "--role", "recon", "--archetype",
        "surveyor", "--task", "map it", "--step", "scan", "--pid", str(me), "--tool", "msg.send",
    )  # fmt: skip
    assert res.code == 0, res.err
    shown = cli("dir", "show", sid, "lynx")
    assert shown.code == 0, shown.err
    fields = {}
    for line in shown.out.splitlines():
        key, _, value = line.partition("  ")
        fields[key.strip()] = value.strip()
    assert (fields["address"], fields["agent"], fields["role"], fields["archetype"]) == (
        "lynx", "scanner", "recon", "surveyor",
    )  # fmt: skip
    assert (fields["task"], fields["step"], fields["pid"], fields["tools"]) == (
        "map it", "scan", str(me), "msg.send",
    )  # fmt: skip
    assert fields["status"] == "running" and fields["messaging"] == "on"
    data = cli("dir", "show", sid, "lynx", "--json").json()
    assert (data["archetype"], data["pid"], data["tools"]) == ("surveyor", me, ["msg.send"])
    missing = cli("dir", "show", sid, "nobody")
    assert missing.code == errors.ParticipantNotFound.exit_code
    assert "no participant 'nobody'" in missing.err


def test_S25_dir_prune_records_those_whose_process_is_gone(cli: Cli, store: Store) -> None:
    sid = Operator(store).create_space("workflow").id
    # The shell that ran `broker join --pid $$` has exited: its pid names no process now.
    ghost = subprocess.run(
        ["sh", "-c", '"$0" -m broker join "$1" flow/ghost --pid $$', sys.executable, sid],
        env=_join_env(store, sid),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ghost.returncode == 0, ghost.stderr
    # This process is the CLI's parent: alive, and one it may record (S27).
    assert cli("join", sid, "flow/alive", "--pid", str(os.getpid())).code == 0
    assert cli("join", sid, "flow/nopid").code == 0  # no pid: only an age can prune it
    res = cli("dir", "prune", sid, "--dry-run")
    assert res.code == 0 and res.out.strip() == "would prune 1: ghost"
    res = cli("dir", "prune", sid, "--yes")
    assert res.code == 0 and res.out.strip() == "pruned 1: ghost"
    kept = cli("dir", "prune", sid, "--no-pid-check", "--yes", "--json")
    assert kept.code == 0 and kept.out == ""  # nothing stale by age: nothing said
    statuses = {p.address: p.status for p in Operator(store).participants(sid)}
    assert statuses == {"ghost": "left", "alive": "running", "nopid": "running"}
    assert [e.reason for e in _left(store, sid)] == ["prune"]


def _join_env(store: Store, sid: str) -> dict[str, str]:
    """A shell's environment for ``broker join`` of ``sid`` (a fresh join key)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
    key = Operator(store).rotate_join_key(sid).join_key
    return {**env, "BROKER_URL": store.url, "BROKER_JOIN_KEY": key}


def _left(store: Store, sid: str) -> list[Any]:
    from broker.spaces import participants

    return [e for e in participants.journal(store, sid) if e.event == "left"]


def test_cli_tables_fit_80_columns_and_say_where_they_cut(cli: Cli, store: Store) -> None:
    sid = Operator(store).create_space("workflow").id
    for name in ("lynx", "otter"):
        trusted.join(store, sid, f"flow/{name}", role=LONG + name, agent="a-long-agent")
    res = cli("dir", "list", sid)
    lines = res.out.splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    assert all("…" in line for line in lines[1:])  # the role gave way
    assert all("a-long-agent" in line for line in lines[1:])  # a name never does
    assert cli("dir", "list", sid, "--json").lines()[0]["role"] == LONG + "lynx"  # whole in JSON
    wide = cli("dir", "list", sid, env={"COLUMNS": "300"})
    assert LONG.strip() in wide.out and "…" not in wide.out


# --- broker demo: the main job's text ------------------------------------------------------------
DEMO_LINES = [
    r"tasks done.*",
    r"space          af_[0-9a-z]{26}",
    r"database       /.+/broker\.db",
    r"teammates      2 processes \([01] restarted after SIGKILL\)",  # 0: nobody busy to kill
    r"tasks          4/4 done, \d+ done twice \(at-least-once\)",
    r"saw directive  \d+ results? reported under the lead's standing directive",
    r"saw urgent     \d+ results? reported after the operator's urgent message",
    r"messages       \d+ in the log",
    r"claims         \d+ board claims granted",
    r"redeliveries   \d+",
    r"quarantined    0",
    r"wall time      \d+\.\d\d s",
    r"inspect it:",
    r"  broker message list (?P<space>af_\w+) --kind operator,directive",
    r"  broker dir list af_\w+ --all",
    r"  broker board journal af_\w+",
    r"  sqlite3 /.+/broker\.db \"SELECT sender, count\(\*\) FROM v_log WHERE .+\"",
]


def test_S26_demo_text_says_what_happened_and_how_to_look(cli: Cli) -> None:
    res = cli("demo", "--teammates", "2", "--tasks", "4")
    assert res.code == 0, res.err
    lines = res.out.splitlines()
    assert len(lines) == len(DEMO_LINES), res.out
    for pattern, line in zip(DEMO_LINES, lines, strict=True):
        assert re.fullmatch(pattern, line), (pattern, line)
    space = re.fullmatch(DEMO_LINES[13], lines[13]).group("space")  # type: ignore[union-attr]
    # The commands it suggests work.
    for line in lines[13:16]:
        argv = line.split()[1:]
        shown = cli(*argv)
        assert shown.code == 0 and shown.out.strip(), (argv, shown.err)
    log = cli("message", "list", space, "--kind", "operator,directive").out
    assert "directive" in log and "operator URGENT operator -> " in log
    team = cli("dir", "list", space, "--all", "--json").lines()
    assert {p["address"] for p in team} == {"lead", "worker-1", "worker-2"}
