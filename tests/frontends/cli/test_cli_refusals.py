"""A refusal at the command line says what is wrong in the user's words (S33):
it names the flag the user typed (not the library's parameter), states the
one bound that applies, once, says what a field takes in words (never a
regex or pydantic's phrasing), and names what a path is when it is not what
the command needs. Each is one line, exit 2 (or the documented code), and
writes nothing.

In-process (click's runner) on a real store, like tests/frontends/cli/test_cli_fuzz.py.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_space import Populated, count_rows, populate
from click.testing import CliRunner
from conftest import open_store

from broker import Operator, Store, errors
from broker.frontends.cli import main


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Store, Populated, str]]:
    url = f"sqlite:///{tmp_path / 'broker.db'}"
    store = open_store(url)
    try:
        yield store, populate(store), url
    finally:
        store.close()


def assert_refused(world: tuple[Store, Populated, str], argv: list[str], line: str,
                   code: int = 2, who: str = "lynx#1") -> None:  # fmt: skip
    """``broker ARGV`` as ``who`` is refused with exactly ``line`` and writes nothing."""
    store, p, url = world
    before = count_rows(store)
    res = CliRunner().invoke(main, ["--url", url, *argv], env=p.env[who])
    assert (res.exit_code, res.stderr) == (code, line + "\n"), argv
    assert count_rows(store) == before, argv


def test_S33_a_library_refusal_names_the_flag_the_user_typed(
    world: tuple[Store, Populated, str],
) -> None:
    lease = world[1].lease_token
    cases = [
        (["inbox", "claim", "--ttl", "604801"],
         "bad --ttl 604801: at least 0.001 and at most 604800 seconds"),
        (["inbox", "extend", "--lease-token", lease, "--ttl", "0"],  # the record's words
         "bad --ttl 0: at least 0.001 and at most 604800 seconds"),
        (["inbox", "claim", "--wait", "-1"],
         "bad --wait -1: at least 0 and at most 86400 seconds"),
        (["msg", "send", "--to", "lead", "--reply-to", "abc", "hi"],
         "bad --reply-to: a message id (26 letters and digits)"),
        (["msg", "send", "--to", "lead", "--thread", "a b", "hi"],
         "bad --thread: a thread name: 1 to 64 letters, digits or _ . : # @ / + - (no spaces)"),
        (["msg", "send", "--to", "lead", "--idempotency-key", "k" * 201, "hi"],
         "bad --idempotency-key: at most 200 characters, not 201"),
        (["msg", "send", "--to", "lead", "--to", " ", "hi"], "bad --to (value 2): not empty"),
    ]  # fmt: skip
    for argv, said in cases:
        assert_refused(world, argv, f"broker: invalid_input: {said}")


def test_S33_one_bound_stated_once_the_commands_own(world: tuple[Store, Populated, str]) -> None:
    """The option's type only reads a number; the bound is the command's
    (86400 for a board claim, not 1e9 first and 86400 after)."""
    for ttl in ("604801", "1e10", "-1"):
        assert_refused(
            world,
            ["board", "claim", "k", "--ttl", ttl],
            f"broker: invalid_input: bad --ttl {float(ttl):g}: at least 0.001 and at most 86400 "
            "seconds",
        )
    for nan in ("nan", "inf"):
        assert_refused(
            world,
            ["board", "claim", "k", "--ttl", nan],
            f"broker: invalid_input: Invalid value for '--ttl': '{nan}' is not a number of "
            "seconds (see 'main board claim --help')",
        )
    assert_refused(
        world,
        ["board", "read", "--limit", "nan"],
        "broker: invalid_input: Invalid value for '--limit': 'nan' is not a whole number from 1 "
        "to 1000 (see 'main board read --help')",
    )


def test_S22_releasing_a_key_never_held_says_you_do_not_hold_it(
    world: tuple[Store, Populated, str],
) -> None:
    assert_refused(
        world,
        ["board", "release", "never-held", "--fence", "1"],
        "broker: lease_lost: cannot release key 'never-held': you do not hold it "
        "(nobody holds it; claim it first)",
        code=errors.LeaseLost.exit_code,
    )
    assert_refused(
        world,
        ["board", "release", "build/lock", "--fence", "1"],
        "broker: lease_lost: cannot release key 'build/lock': you do not hold it "
        "(it is held by otter#1 now)",
        code=errors.LeaseLost.exit_code,
    )


def test_S33_agent_run_with_a_bad_duration_joins_nobody(
    world: tuple[Store, Populated, str],
) -> None:
    store, p, url = world
    before = count_rows(store)
    for flag, value, said in (
        ("--ttl", "0", "bad --ttl 0.0: at least 0.001 and at most 604800 seconds"),
        ("--wait", "-1", "bad --wait -1.0: at least 0 and at most 604800 seconds"),
    ):
        res = CliRunner().invoke(
            main, ["--url", url, "agent", "run", p.space, "newcomer", flag, value, "--", "true"]
        )
        assert (res.exit_code, res.stderr) == (2, f"broker: invalid_input: {said}\n")
    assert count_rows(store) == before
    assert "newcomer" not in {x.address for x in Operator(store).participants(p.space)}


def test_S33_a_socket_path_too_long_for_unix_sockets_says_so(tmp_path: Path) -> None:
    long = tmp_path / ("s" * 150 + ".sock")
    url = f"sqlite:///{tmp_path / 'broker.db'}"
    res = CliRunner().invoke(main, ["--url", url, "serve", "--no-tcp", "--socket", str(long)])
    size = len(os.fsencode(long))
    assert (res.exit_code, res.stderr) == (
        2,
        f"broker: invalid_input: cannot listen on {long}: the path is {size} bytes, and a Unix "
        "socket's path takes at most 107; give a shorter --socket\n",
    )
    assert not long.exists()


def test_S33_a_store_path_that_is_a_folder_is_named_a_folder(tmp_path: Path) -> None:
    (tmp_path / "d" / "broker.db").mkdir(parents=True)
    env = {"BROKER_HOME": str(tmp_path / "d"), "BROKER_URL": ""}
    said = (
        f"the store's database {tmp_path / 'd' / 'broker.db'} is a folder, not a database file: "
        "move it away, or point BROKER_HOME/BROKER_URL/--url elsewhere"
    )
    for argv in (["space", "list"], ["space", "create", "--kind", "run"], ["db", "upgrade"]):
        res = CliRunner().invoke(main, argv, env=env)
        assert (res.exit_code, res.stderr) == (2, f"broker: invalid_input: {said}\n"), argv
    res = CliRunner().invoke(main, ["doctor"], env=env)
    assert res.exit_code == 9
    assert res.stdout.splitlines()[0].split(None, 2)[2] == said  # and no "fix: broker db upgrade"
    assert "fix:" not in res.stdout
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["broker.db"]


def test_S33_every_pattern_the_send_models_check_is_said_in_words() -> None:
    """No refusal shows a regex: each pattern a declared input checks has its
    words (what it takes), and pydantic's phrases are reworded (broker.wording)."""
    from broker.api.operations import OPERATIONS
    from broker.model import fields

    texts = [
        f.item if isinstance(f, fields.Texts) else f
        for op in OPERATIONS
        for f in op.input.FIELDS
        if isinstance(f, fields.Text | fields.Texts)
    ]
    patterned = [t for t in texts if t.pattern is not None]
    assert patterned and all(not t.words.startswith("text matching") for t in patterned)
    said = [
        errors.InvalidInput(f"bad x: {m}").message
        for m in ("List should have at least 1 item after validation, not 0",
                  "List should have at most 64 items after validation, not 65",
                  "String should have at most 200 characters",
                  "Input should be 'low', 'normal' or 'high'",
                  "Value error, message text is empty", "Field required")
    ]  # fmt: skip
    assert said == [
        "bad x: at least 1 item, not 0",
        "bad x: at most 64 items, not 65",
        "bad x: at most 200 characters",
        "bad x: one of 'low', 'normal' or 'high'",
        "bad x: message text is empty",
        "bad x: required",
    ]


def test_send_many_reads_json_lines_from_stdin_and_a_bad_line_names_its_item(
    world: tuple[Store, Populated, str],
) -> None:
    """`msg send-many`: each --item one JSON object, '--item -' the lines of
    stdin; text that is not JSON, or an item its record refuses, is refused
    naming the item (counted from 0 across both) and sends nothing."""
    store, p, url = world
    lines = '{"to": "lead", "text": "from stdin"}\n\n{"to": "lead", "text": "again"}\n'
    res = CliRunner().invoke(
        main,
        ["--url", url, "msg", "send-many", "--item", '{"to": "lead", "text": "first"}',
         "--item", "-", "--json"],
        env=p.env["lynx#1"],
        input=lines,
    )  # fmt: skip
    assert res.exit_code == 0, res.stderr
    sent = [json.loads(line) for line in res.stdout.splitlines()]
    assert [s["reached"] for s in sent] == [["lead"]] * 3
    bodies = [e.body for e in Operator(store).log(p.space, tail=3)]
    assert bodies == ["first", "from stdin", "again"]
    first = ["msg", "send-many", "--item", '{"to": "lead", "text": "ok"}', "--item"]
    assert_refused(
        world,
        [*first, "{to: lead}"],
        "broker: invalid_input: bad items[1]: not JSON "
        "(Expecting property name enclosed in double quotes: line 1 column 2 (char 1))",
    )
    assert_refused(
        world,
        [*first, '{"to": "lead", "text": " "}'],
        "broker: invalid_input: bad items[1].text: message text is empty",
    )
    assert_refused(world, [*first, '{"to": "lead", "text": "x", "from": "lead"}'],
                   "broker: invalid_input: unknown field 'items[1].from': this tool does not "
                   "take it")  # fmt: skip
