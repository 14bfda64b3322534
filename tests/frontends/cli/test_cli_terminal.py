"""S31 on a real terminal: every human view of the CLI, run on a pseudo-terminal
against a space full of hostile names, roles, tasks, bodies, reasons and
errors, prints no control sequence it did not write itself.

On a terminal click does not strip escape sequences (it does when output is a
pipe), so this is the view a person gets. The hostile text is in
``cli_space.PAYLOADS``: clear screen, OSC 0 (window title), OSC 52 (clipboard),
a one-byte C1 CSI, a right-to-left override, and a forged
``#99 … operator URGENT`` log line behind CR/LF.
"""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlrows
import trusted
from cli_space import FORGED, Populated, hostile, populate

from broker import Agent, Operator, Store

DEADLINE_S = 60.0


def run_on_terminal(
    argv: list[str],
    env: dict[str, str],
    *,
    then: Callable[[], None] | None = None,
    idle: Callable[[], None] | None = None,
) -> tuple[int, str]:
    """``python -m broker ARGV`` with stdin, stdout and stderr on a pty; returns
    (exit status, everything the terminal received). ``then`` runs once the
    first output arrived; ``idle`` whenever half a second passes without any."""
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
        deadline = time.monotonic() + DEADLINE_S
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"broker {' '.join(argv)}: no end within {DEADLINE_S} s: {out!r}"
            ready, _, _ = select.select([main_fd], [], [], min(left, 0.5))
            if not ready:
                if idle is not None and then is None:
                    idle()
                continue
            try:
                chunk = os.read(main_fd, 65536)
            except OSError:  # EIO: every writer is gone
                break
            if not chunk:
                break
            out += chunk
            if then is not None:
                then()
                then = None
        proc.wait(DEADLINE_S)
    finally:
        os.close(main_fd)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out.decode("utf-8")


def assert_safe(argv: list[str], text: str) -> None:
    where = f"broker {' '.join(argv)}"
    lines = text.replace("\r\n", "\n")  # the terminal's own line ends (onlcr)
    bad = sorted(
        {
            f"U+{ord(c):04X}"
            for c in lines
            if (ord(c) < 0x20 and c not in "\n")
            or 0x7F <= ord(c) <= 0x9F
            or c in "\u061c\u200e\u200f\u2028\u2029"
            or 0x202A <= ord(c) <= 0x202E
            or 0x2066 <= ord(c) <= 0x2069
        }
    )
    assert bad == [], f"{where} wrote {bad}:\n{text!r}"
    if argv[:2] != ["inbox", "next"]:
        # `inbox next` prints the turn as the model gets it: bodies keep their
        # line breaks there, inside frames no body can close (S17).
        forged = [line for line in lines.split("\n") if line.startswith(FORGED)]
        assert forged == [], f"{where} printed a forged line"


@pytest.fixture
def hostile_space(store: Store, tmp_path: Path) -> Iterator[tuple[Populated, dict[str, str]]]:
    p = populate(store, hostile)
    # An address no join accepts, as a damaged or hand-written store could hold,
    # and a NUL no surface lets in any more (S33) but an older store may hold.
    sqlrows.participant(store, p.space, "ghost\x1b[2J\x1b]0;x\x07", role=hostile("role") + "\x00")
    lead = Agent.connect(store, p.space, "lead", p.env["lead"]["BROKER_TOKEN"])
    lead.send("otter#1", hostile("claim me"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
    env.update(BROKER_HOME=str(tmp_path / "home"), TERM="xterm-256color")
    env.pop("COLUMNS", None)
    yield p, env


def test_S31_every_human_view_on_a_terminal_escapes_agent_text(
    hostile_space: tuple[Populated, dict[str, str]], store: Store
) -> None:
    p, env = hostile_space
    sid = p.space
    everyone = [q.address for q in Operator(store).participants(sid)]
    assert len(everyone) == 4
    views: list[tuple[list[str], dict[str, str]]] = [
        (["space", "list"], {}),
        (["space", "show", sid], {}),
        (["space", "set", sid, "inbox_cap=300"], {}),  # the same view, after a change
        (["message", "list", sid], {}),
        (["message", "list", sid, "--kind", "operator,directive,post"], {}),
        (["dir", "list", sid], {}),
        (["dir", "list", sid, "--all"], {}),
        *[(["dir", "show", sid, a], {}) for a in everyone],
        (["dir", "prune", sid, "--dry-run", "--older-than", "0"], {}),
        (["board", "read"], p.env["lynx#1"]),
        (["board", "view", sid], {}),
        (["board", "claims", sid], {}),
        (["board", "journal", sid], {}),
        (["queue", "quarantined", sid], {}),
        *[(["transcript", sid, a], {}) for a in everyone],
        (["inbox", "next"], p.env["lynx#1"]),
        (["inbox", "claim", "--limit", "5"], p.env["otter#1"]),
        (["msg", "send", "--to", "lead", "--to", "role:nobody", "fine"], p.env["lynx#1"]),
        # errors that quote what they were given or what an agent wrote
        (["dir", "show", sid, "\x1b]52;c;cm0gLXJm\x07"], {}),
        (["msg", "send", "--to", "\x1b[2J", "x"], p.env["lynx#1"]),
        (["board", "retract", "\x9b31m"], p.env["lead"]),
        (["transcript", sid, "nobody\u202e"], {}),
    ]
    shown = ""
    for argv, identity in views:
        code, text = run_on_terminal(argv, {**env, **identity})
        assert code in (0, 1, 2, 3, 4), (argv, code, text)
        assert "Traceback" not in text, (argv, text)
        assert_safe(argv, text)
        shown += text
    # The hostile text was on screen, escaped, in the places that show it.
    for escaped in ("\\x1b[2J", "\\x1b]0;pwned title\\x07", "\\x9b31m", "\\u202eevil", "\\r\\n#99"):
        assert escaped in shown, escaped


def test_S31_message_list_follow_on_a_terminal_escapes_agent_text(
    hostile_space: tuple[Populated, dict[str, str]], store: Store
) -> None:
    p, env = hostile_space
    lynx = Agent.connect(store, p.space, "lynx#1", p.env["lynx#1"]["BROKER_TOKEN"])

    def then() -> None:  # once the follower printed the log so far
        lynx.send("lead", hostile("while you were following"))
        Operator(store).stop_space(p.space)

    def nudge() -> None:
        # Any commit makes a waiting follower re-check at its next safety tick;
        # this covers a stop committed just before the follower started to
        # wait (the lost wake-up of issue 17, fixed on the "wake" branch).
        Operator(store).create_space("run")

    argv = ["message", "list", p.space, "--follow"]
    code, text = run_on_terminal(argv, env, then=then, idle=nudge)
    assert code == 0, text
    assert_safe(argv, text)
    assert "while you were following\\x1b[2J" in text


def test_S31_agent_run_on_a_terminal_escapes_its_commands_stderr(
    hostile_space: tuple[Populated, dict[str, str]], store: Store, tmp_path: Path
) -> None:
    p, env = hostile_space
    script = tmp_path / "echo_turn.py"
    script.write_text(
        "import json, sys\n"
        "turn = json.load(sys.stdin)\n"
        "print(turn['items'][0]['body'], file=sys.stderr)\n"
    )
    _, joined = trusted.join(store, p.space, "echo", parent="lead", pid=None)
    lead = Agent.connect(store, p.space, "lead", p.env["lead"]["BROKER_TOKEN"])
    lead.send("echo", hostile("say this"))
    argv = ["agent", "run", p.space, "echo", "--max-turns", "1", "--wait", "30", "--",
            sys.executable, str(script)]  # fmt: skip
    # Spawned with its identity: echo is registered and live (S27).
    code, text = run_on_terminal(argv, {**env, "BROKER_AS": "echo", "BROKER_TOKEN": joined.token})
    assert code == 0, text
    assert_safe(argv, text)
    assert "echo| say this\\x1b[2J" in text


def test_S31_json_keeps_the_exact_text_and_is_still_safe_to_print(
    hostile_space: tuple[Populated, dict[str, str]], store: Store
) -> None:
    import json

    p, env = hostile_space
    argv = ["message", "list", p.space, "--json", "--receipts"]  # every row of the log
    code, text = run_on_terminal(argv, env)
    assert code == 0, text
    assert_safe(argv, text)  # C0 as JSON escapes already; C1 and bidi escaped too
    printed = [json.loads(line) for line in text.replace("\r\n", "\n").splitlines()]
    assert [e["body"] for e in printed] == [e.body for e in Operator(store).log(p.space)]
    assert any(hostile("found 3 failing tests") == e["body"] for e in printed)


def test_S31_the_one_helper_escapes_what_a_terminal_would_act_on() -> None:
    import json

    from broker.frontends.cli._output import block, dumps, safe

    assert safe("plain text, ünïcode ✓") == "plain text, ünïcode ✓"
    assert safe("a\x1b[2Jb\x07\r\nc\td\x9b\u202ee\u2028") == (
        "a\\x1b[2Jb\\x07\\r\\nc\\td\\x9b\\u202ee\\u2028"
    )
    assert safe("\ud800") == "\\ud800" and safe(None) == "" and safe(7) == "7"
    assert block("one\ntwo\r\x1b]0;t\x07", indent="  ") == "  one\n  two\\r\\x1b]0;t\\x07"
    text = "\x1b[2J\x9b\u202e\u2028 ok"
    out = dumps({"body": text})
    assert json.loads(out) == {"body": text}
    assert not any(0x7F <= ord(c) <= 0x9F or c in "\x1b\u202e\u2028" for c in out)


# --- identifiers stay whole in every table --------------------------------------------------------
def test_S31_identifiers_stay_whole_in_every_table_on_a_narrow_terminal(store: Store) -> None:
    """At 40 columns only free text (a role, a reason, an error) gives way;
    an address, an agent name, a key, a pattern, a path or an id is what the
    reader types next and is printed whole, even past the terminal's width."""
    from cli_space import plain
    from click.testing import CliRunner

    from broker.frontends.cli import main

    p = populate(store, plain)
    agent, joined = trusted.join(
        store, p.space, "flow/heron>ope_rator_with_a_long_address", pid=None,
        agent="an_agent_name_that_is_long", role="a role that is long free text " * 3,
    )  # fmt: skip
    key = "build/a-key-whose-name-is-long-too"
    pattern = "src/some/deep/folder/of/the/repository/**"
    agent.claim_key(key)
    agent.reserve([pattern], reason="a reason that may shrink " * 3)
    me = {"BROKER_SPACE": p.space, "BROKER_AS": joined.address, "BROKER_TOKEN": joined.token}
    views = {
        ("dir", "list", p.space): [joined.address, "an_agent_name_that_is_long", "lynx#1"],
        ("board", "claims", p.space): [key, joined.address, pattern, "otter#1"],
        ("board", "journal", p.space): [key, joined.address],
        ("board", "check", "src/some/deep/folder/of/the/repository/x.py"): [pattern],
        ("queue", "quarantined", p.space): ["otter#1", "lead"],
    }
    for argv, whole in views.items():
        res = CliRunner().invoke(main, ["--url", store.url, *argv], env={"COLUMNS": "40", **me})
        assert res.exit_code == 0, (argv, res.stderr)
        for ident in whole:
            assert ident in res.stdout, (argv, ident, res.stdout)
        if argv[0] == "queue":  # the delivery id, whole
            assert re.search(r"^[0-9A-Z]{26}  ", res.stdout.splitlines()[1]), res.stdout
    roles = CliRunner().invoke(main, ["--url", store.url, "dir", "list", p.space],
                               env={"COLUMNS": "40"}).stdout  # fmt: skip
    assert "…" in roles and "a role that is long free text " * 3 not in roles  # free text gave way
