"""The CLI contract (issue "One shape"), walked over every command:

- help on every command and group; ``--json`` on every command;
- one vocabulary: ``--token`` is only ever the secret, ``--fence`` the board
  fencing token, ``--lease-token`` an inbox lease, ``--ttl SECONDS`` every
  lifetime and ``--wait SECONDS`` the blocking timeout; no other spelling;
- one audience rule: agent tools take --space/--as/--token, operator
  commands a positional RUN_ID; no two commands for one job;
- the output contract: a list is JSON Lines, a single result one object, and
  the field names are the records' (broker/model/records.py), one name per concept.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
import trusted
from cli_space import Populated, populate
from click.testing import CliRunner

from broker import Store
from broker.frontends.cli import main
from broker.frontends.cli._common import Seconds
from broker.model import records


def walk(
    cmd: click.Command, path: tuple[str, ...] = (), parent: click.Context | None = None
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    """Every command and group, through list_commands/get_command (the CLI loads lazily)."""
    yield path, cmd
    if isinstance(cmd, click.Group):
        ctx = click.Context(cmd, info_name=path[-1] if path else "broker", parent=parent)
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            assert sub is not None, f"broker {' '.join((*path, name))} is listed but cannot load"
            yield from walk(sub, (*path, name), ctx)


COMMANDS = {path: cmd for path, cmd in walk(main) if not isinstance(cmd, click.Group)}

# The audience rule (README "The CLI's vocabulary"): commands named after an
# agent tool act as the participant (--space/--as/--token), and `leave`.
AGENT_TOOLS = {
    ("msg", "send"), ("msg", "send-many"), ("leave",),
    ("board", "post"), ("board", "read"), ("board", "directive"), ("board", "retract"),
    ("board", "claim"), ("board", "release"), ("board", "renew"),
    ("board", "reserve"), ("board", "check"), ("board", "unreserve"),
    ("board", "renew-reservation"), ("guard", "pre-commit"),
    ("inbox", "claim"), ("inbox", "ack"), ("inbox", "release"), ("inbox", "extend"),
    ("inbox", "quarantine"), ("inbox", "next"), ("inbox", "seen"),
    ("msg", "status"), ("msg", "search"), ("msg", "policy"),
    ("mcp",),  # serves one agent's tools as that agent (--operator: the operator's, by key)
}  # fmt: skip
# Commands about the whole store, not one space.
STORE_LEVEL = {
    ("space", "create"), ("space", "list"), ("db", "upgrade"), ("db", "current"),
    ("demo",), ("import",), ("doctor",), ("backup",), ("vacuum",), ("serve",),
    ("guard", "install"), ("guard", "uninstall"),  # a git repository's hook, not a space
    ("migrate-store",),  # every space into another store (test_pg_export)
    ("key", "show"),  # the store's operator key
}  # fmt: skip
# Merged away: one command per job (join/leave, dir list).
GONE = [("team", "status"), ("dir", "register"), ("dir", "unregister")]
# The source's names kept beside the broker's: the same command under a second name.
ALIASES = {("message", "participants"): ("dir", "list")}


def options(cmd: click.Command) -> dict[str, click.Option]:
    return {o: p for p in cmd.params if isinstance(p, click.Option) for o in p.opts}


def test_cli_walk_finds_the_commands_of_every_audience() -> None:
    assert set(COMMANDS) >= AGENT_TOOLS
    assert {("board", "view"), ("dir", "list"), ("message", "list")} <= set(COMMANDS)
    assert len(COMMANDS) > len(AGENT_TOOLS) + len(STORE_LEVEL)


def test_cli_no_two_commands_for_one_job() -> None:
    runner = CliRunner()
    for path in GONE:
        assert path not in COMMANDS
        res = runner.invoke(main, [*path, "--help"])
        assert res.exit_code == 2 and "No such command" in res.stderr, path
    assert ("team",) not in {p for p, _ in walk(main)}
    for alias, command in ALIASES.items():
        assert COMMANDS[alias].callback is COMMANDS[command].callback, alias
        assert COMMANDS[alias].params == COMMANDS[command].params, alias


def test_cli_every_command_and_group_has_help_text() -> None:
    runner = CliRunner()
    for path, cmd in walk(main):
        text = (cmd.help or "").strip()
        assert text, f"broker {' '.join(path)} has no help text"
        res = runner.invoke(main, [*path, "--help"])
        assert res.exit_code == 0, (path, res.output)
        assert text.splitlines()[0].strip()[:30] in " ".join(res.output.split()), path
        for param in cmd.params:
            if isinstance(param, click.Option) and not param.hidden and param.name != "help":
                assert param.help, f"broker {' '.join(path)} {param.opts[0]} has no help"


def test_cli_every_command_takes_json_and_url() -> None:
    for path, cmd in COMMANDS.items():
        flags = options(cmd)
        assert "--json" in flags, f"broker {' '.join(path)} lacks --json"
        assert "--url" in flags, f"broker {' '.join(path)} lacks --url"


def test_cli_one_audience_rule() -> None:
    for path, cmd in COMMANDS.items():
        flags = options(cmd)
        args = [p.name for p in cmd.params if isinstance(p, click.Argument)]
        acts_as_agent = {"--space", "--as", "--token"} <= set(flags)
        if path in AGENT_TOOLS:
            assert acts_as_agent, path
            assert "run_id" not in args, path
        elif path in STORE_LEVEL:
            assert not acts_as_agent and "run_id" not in args, path
        else:  # the operator's: the space is the first positional argument
            assert not acts_as_agent, path
            assert args[:1] == ["run_id"], f"broker {' '.join(path)}: RUN_ID first, got {args}"


def test_cli_token_is_only_ever_the_secret() -> None:
    for path, cmd in COMMANDS.items():
        flags = options(cmd)
        if "--token" in flags:
            opt = flags["--token"]
            assert opt.envvar == "BROKER_TOKEN" and opt.metavar == "SECRET", path
        assert "--auth-token" not in flags and "--lease" not in flags, path
        if "--fence" in flags:
            assert path in {
                ("board", "release"),
                ("board", "renew"),
                ("board", "unreserve"),
                ("board", "renew-reservation"),
                ("board", "release-key"),
                ("board", "release-reservation"),
            }
            assert isinstance(flags["--fence"].type, click.IntRange), path
        if "--lease-token" in flags:
            assert path[0] == "inbox", path


# Durations: --ttl is every lifetime, --wait the blocking timeout; --older-than
# is an age filter (dir prune), not a lifetime; `serve` has its shutdown
# --grace, two hidden stream timings and two hidden request deadlines (for
# tests). Nothing else takes seconds.
DURATIONS = {
    "--ttl",
    "--wait",
    "--older-than",
    "--grace",
    "--keepalive",
    "--stall-timeout",
    "--header-timeout",
    "--body-timeout",
}
RETIRED = {"--lease", "--seconds", "--lease-seconds", "--idle-exit", "--timeout", "--expires"}


def test_cli_ttl_is_every_lifetime_and_wait_the_blocking_timeout() -> None:
    seen = set()
    for path, cmd in COMMANDS.items():
        for name, opt in options(cmd).items():
            assert name not in RETIRED, (path, name)
            takes_seconds = isinstance(opt.type, Seconds) or opt.metavar == "SECONDS"
            if takes_seconds or name in DURATIONS:
                assert name in DURATIONS, f"broker {' '.join(path)} {name}: a duration"
                assert isinstance(opt.type, Seconds) and opt.metavar == "SECONDS", (path, name)
                seen.add(name)
            elif isinstance(opt.type, click.types.FloatParamType):
                pytest.fail(f"broker {' '.join(path)} {name}: a float that is not a duration")
    assert seen == DURATIONS
    for path in [("board", "claim"), ("board", "renew"), ("inbox", "claim"), ("inbox", "extend"),
                 ("inbox", "next"), ("agent", "run")]:  # fmt: skip
        assert "--ttl" in options(COMMANDS[path]), path


def test_cli_one_metavar_per_option_name() -> None:
    metavars: dict[str, set[str | None]] = {}
    for cmd in COMMANDS.values():
        for name, opt in options(cmd).items():
            if not opt.is_flag and not isinstance(opt.type, click.Choice):
                metavars.setdefault(name, set()).add(opt.metavar)
    mixed = {name: m for name, m in metavars.items() if len(m) > 1 and name != "--after"}
    assert mixed == {}


# --- the output contract -----------------------------------------------------------------------
LISTS: dict[tuple[str, ...], type] = {
    ("space", "list"): records.Space,
    ("message", "list"): records.LogEntry,
    ("dir", "list"): records.Participant,
    ("message", "participants"): records.Participant,
    ("dir", "prune"): records.Participant,
    ("board", "read"): records.BoardEntry,
    ("msg", "send-many"): records.SendResult,  # each item's outcome, in order
    ("board", "view"): records.BoardEntry,
    ("board", "claims"): records.ClaimGrant,
    ("board", "journal"): records.JournalEntry,
    ("board", "reserve"): records.Reservation,
    ("board", "check"): records.PathCheck,
    ("queue", "quarantined"): records.QuarantinedDelivery,
    ("transcript",): records.TurnRecord,
}
SPACE_FIELDS = ("id", "kind", "state", "settings", "created_at_utc", "updated_at_utc")
SINGLE: dict[tuple[str, ...], type | set[str]] = {
    ("space", "create"): records.CreatedSpace,
    ("space", "join-key"): records.JoinKey,
    # a Space with its limits in effect and their use (S30): records.SpaceUsage
    ("space", "show"): {*SPACE_FIELDS, "usage"},
    ("space", "set"): {*SPACE_FIELDS, "usage"},
    ("space", "stop"): records.Space,
    ("space", "archive"): records.Space,
    ("join",): records.Joined,
    ("leave",): {"address", "status"},
    ("msg", "send"): records.SendResult,
    ("message", "send"): records.SendResult,
    ("agentiflow", "send"): records.SendResult,
    ("board", "post"): records.SendResult,
    ("board", "directive"): records.SendResult,
    ("board", "retract"): records.SendResult,
    ("board", "claim"): records.ClaimGrant,
    ("board", "renew"): records.ClaimGrant,
    ("board", "release"): records.JournalEntry,
    ("board", "unreserve"): records.JournalEntry,
    ("board", "renew-reservation"): records.Reservation,
    ("board", "release-key"): records.JournalEntry,
    ("board", "release-reservation"): records.JournalEntry,
    ("dir", "show"): records.Participant,
    ("inbox", "claim"): records.Lease,
    ("inbox", "ack"): {"acked"},
    ("inbox", "release"): {"released"},
    ("inbox", "extend"): {"lease_token", "expires_at"},
    ("inbox", "quarantine"): {"quarantined"},
    ("inbox", "next"): records.Turn,
    ("inbox", "seen"): records.TurnSeen,
    ("queue", "requeue"): {"requeued"},
    ("db", "upgrade"): {"url", "before", "after"},
    ("db", "current"): {"url", "current", "head", "up_to_date"},
    ("key", "show"): {"store", "operator_key"},
}
# Run elsewhere with --json (they start processes or write files, or serve):
# agent run (test_runtime), demo (test_cli_directory), export/import (test_export),
# serve (test_server: where it listens), mcp (test_mcp: --print-config --json),
# the git guard (test_guard: a real repository), the mail commands (S35, S36,
# S38: test_mail.py checks their --json shapes).
ELSEWHERE = {
    ("agent", "run"), ("demo",), ("export",), ("import",), ("serve",), ("mcp",),
    ("migrate-store",),
    ("guard", "install"), ("guard", "uninstall"), ("guard", "pre-commit"),
    ("message", "threads"), ("message", "search"), ("message", "status"),
    ("msg", "status"), ("msg", "search"), ("msg", "policy"),
}  # fmt: skip
# Operations commands, tested in depth by their own modules (test_ops.py,
# the purge tests): doctor prints a list (JSON Lines), the others one record.
INCOMING = {("doctor",), ("backup",), ("vacuum",), ("space", "purge")}


def fields_of(record: type) -> set[str]:
    return {f.name for f in dataclasses.fields(record)}


# One name per concept (README "The CLI's vocabulary"): ``token`` is only ever a
# participant's secret, a fencing token is ``fence``, an inbox lease's token
# ``lease_token``, and an expiry ``expires_at``, in every record the CLI prints.
OLD_NAMES = {"lease_expires_at", "lease"}


def test_cli_records_use_one_name_per_concept() -> None:
    for name in dir(records):
        record = getattr(records, name)
        if not (isinstance(record, type) and dataclasses.is_dataclass(record)):
            continue
        names = fields_of(record)
        assert not names & OLD_NAMES, (name, names & OLD_NAMES)
        if "token" in names:  # the secret: only what a join returns
            assert record is records.Joined, name


def test_cli_every_command_has_a_json_shape() -> None:
    known = set(LISTS) | set(SINGLE) | ELSEWHERE | INCOMING
    assert set(COMMANDS) <= known, f"no JSON shape for {set(COMMANDS) - known}"
    assert set(LISTS) | set(SINGLE) | ELSEWHERE <= set(COMMANDS)
    assert not set(LISTS) & set(SINGLE)


@pytest.fixture
def world(tmp_path: Path) -> tuple[Store, Populated, str]:
    url = f"sqlite:///{tmp_path / 'home' / 'broker.db'}"
    store = Store(url)
    try:
        yield store, populate(store), url  # type: ignore[misc]
    finally:
        store.close()


def _invoke(url: str, argv: list[str], env: dict[str, str] | None = None) -> Any:
    res = CliRunner().invoke(main, ["--url", url, *argv], env=env or {})
    assert res.exit_code == 0, (argv, res.stdout, res.stderr)
    assert res.stderr == "", (argv, res.stderr)
    return res


def _keys_everywhere(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _keys_everywhere(v)
    elif isinstance(value, list):
        for v in value:
            yield from _keys_everywhere(v)


def test_cli_json_lines_for_lists_one_object_for_a_result_and_the_records_names(
    world: tuple[Store, Populated, str],
) -> None:
    store, p, url = world
    sid, lynx, lead = p.space, p.env["lynx#1"], p.env["lead"]
    lists = {
        ("space", "list"): ([], None),
        ("message", "list"): ([sid], None),
        ("dir", "list"): ([sid], None),
        ("message", "participants"): ([sid], None),
        ("board", "read"): ([], lynx),
        ("msg", "send-many"): (["--item", '{"to": "lead", "text": "a"}', "--item", "-"], lynx),
        ("board", "reserve"): (["src/**", "docs/*.md"], lynx),  # fences 1 and 2
        ("board", "check"): (["src/a.py", "README"], lynx),
        ("board", "view"): ([sid], None),
        ("board", "claims"): ([sid], None),
        ("board", "journal"): ([sid], None),
        ("queue", "quarantined"): ([sid], None),
        ("transcript",): ([sid, "lynx#1"], None),
        ("dir", "prune"): ([sid, "--dry-run", "--older-than", "0"], None),
    }
    assert set(lists) == set(LISTS)
    trusted.join_gone(store, sid, "flow/heron>gone#1")  # someone to prune: its process is gone
    second = populate(store)  # a second space: `space list` has two lines
    for path, (args, env) in lists.items():
        out = _invoke(url, [*path, *args, "--json"], env).stdout
        lines = out.splitlines()
        assert lines, (path, out)  # every list has something here; a JSON array fails below
        for line in lines:
            obj = json.loads(line)
            assert isinstance(obj, dict), (path, line)
            if path == ("board", "claims") and "pattern" in obj:  # then the path reservations
                assert set(obj) == fields_of(records.Reservation)
                continue
            assert set(obj) == fields_of(LISTS[path]), path

    singles: dict[tuple[str, ...], tuple[list[str], dict[str, str] | None]] = {
        ("space", "show"): ([sid], None),
        ("space", "set"): ([sid, "inbox_cap=300"], None),
        ("dir", "show"): ([sid, "lynx#1"], None),
        ("msg", "send"): (["--to", "lead", "hi"], lynx),
        ("message", "send"): ([sid, "--to", "lead", "hi"], None),
        ("agentiflow", "send"): ([sid, "hi", "--now"], None),
        ("board", "post"): (["green"], lynx),
        ("board", "directive"): (["--to", "lynx#1", "do it"], lead),
        ("board", "claim"): (["task-9"], lynx),
        ("board", "renew"): (["task-9", "--fence", "1"], lynx),
        ("board", "release"): (["task-9", "--fence", "1"], lynx),
        ("board", "renew-reservation"): (["--fence", "1"], lynx),
        ("board", "unreserve"): (["--fence", "1"], lynx),
        ("board", "release-reservation"): ([sid, "--fence", "2", "--reason", "x"], None),
        ("board", "release-key"): ([sid, "build/lock"], None),  # otter's (cli_space.py)
        ("inbox", "extend"): (["--lease-token", p.lease_token], lynx),
        ("inbox", "ack"): (["--lease-token", p.lease_token], lynx),
        ("inbox", "claim"): (["--limit", "2"], p.env["otter#1"]),
        ("inbox", "next"): ([], lynx),
        ("queue", "requeue"): ([sid, p.quarantined_id], None),
        ("db", "upgrade"): ([], None),
        ("db", "current"): ([], None),
        ("key", "show"): ([], None),
    }
    # in this order: extend, then ack, the same lease
    for path, (args, env) in singles.items():
        out = _invoke(url, [*path, *args, "--json"], env).stdout
        assert len(out.splitlines()) == 1, (path, out)
        obj = json.loads(out)
        shape = SINGLE[path]
        expected = fields_of(shape) if isinstance(shape, type) else shape
        assert isinstance(obj, dict) and set(obj) == expected, (path, obj)
        assert "from" not in set(_keys_everywhere(obj)), path

    # the rest need a fresh lease or turn of their own
    directive = json.loads(
        _invoke(url, ["board", "directive", "--to", "lynx#1", "x", "--json"], lead).stdout
    )
    assert set(
        json.loads(_invoke(url, ["board", "retract", directive["id"], "--json"], lead).stdout)
    ) == fields_of(records.SendResult)
    _invoke(url, ["message", "send", sid, "--to", "otter#1", "a", "--json"])
    _invoke(url, ["message", "send", sid, "--to", "otter#1", "b", "--json"])
    lease = json.loads(
        _invoke(url, ["inbox", "claim", "--limit", "2", "--json"], p.env["otter#1"]).stdout
    )
    assert lease["lease_token"] and len(lease["deliveries"]) == 2
    ids = [d["id"] for d in lease["deliveries"]]
    got = _invoke(
        url,
        ["inbox", "release", "--lease-token", lease["lease_token"], ids[0], "--json"],
        p.env["otter#1"],
    )
    assert json.loads(got.stdout) == {"released": 1}
    got = _invoke(
        url,
        [
            "inbox",
            "quarantine",
            "--lease-token",
            lease["lease_token"],
            ids[1],
            "--reason",
            "r",
            "--json",
        ],
        p.env["otter#1"],
    )
    assert json.loads(got.stdout) == {"quarantined": ids[1]}
    turn = json.loads(_invoke(url, ["inbox", "next", "--json"], p.env["otter#1"]).stdout)
    assert turn["id"]
    seen = json.loads(
        _invoke(url, ["inbox", "seen", turn["id"], "--json"], p.env["otter#1"]).stdout
    )
    assert set(seen) == fields_of(records.TurnSeen)
    rotated = json.loads(_invoke(url, ["space", "join-key", sid, "--rotate", "--json"]).stdout)
    assert set(rotated) == fields_of(records.JoinKey)
    joined = json.loads(
        _invoke(
            url, ["join", sid, "flow/heron>heron#2", "--json", "--join-key", rotated["join_key"]]
        ).stdout
    )
    assert set(joined) == fields_of(records.Joined)
    gone = {"BROKER_SPACE": sid, "BROKER_AS": joined["address"], "BROKER_TOKEN": joined["token"]}
    assert json.loads(_invoke(url, ["leave", "--json"], gone).stdout) == {
        "address": "heron#2",
        "status": "left",
    }
    created = json.loads(_invoke(url, ["space", "create", "--kind", "run", "--json"]).stdout)
    assert set(created) == fields_of(records.CreatedSpace)
    for verb, state in (("stop", "stopped"), ("archive", "archived")):
        got = json.loads(_invoke(url, ["space", verb, created["id"], "--yes", "--json"]).stdout)
        assert set(got) == fields_of(records.Space) and got["state"] == state
    assert second.space != sid


def test_cli_an_empty_list_prints_nothing_and_an_empty_claim_no_lease_token(
    world: tuple[Store, Populated, str],
) -> None:
    _, p, url = world
    res = _invoke(url, ["queue", "quarantined", p.space, "--json"])
    assert len(res.stdout.splitlines()) == 1  # a list of one is one line, not an array
    fresh = _invoke(url, ["space", "create", "--kind", "session", "--json"])
    sid = json.loads(fresh.stdout)["id"]
    for argv in (["message", "list", sid], ["dir", "list", sid], ["board", "claims", sid],
                 ["board", "journal", sid], ["queue", "quarantined", sid]):  # fmt: skip
        assert _invoke(url, [*argv, "--json"]).stdout == "", argv
    key = json.loads(fresh.stdout)["join_key"]
    joined = json.loads(_invoke(url, ["join", sid, "solo", "--json", "--join-key", key]).stdout)
    env = {"BROKER_SPACE": sid, "BROKER_AS": "solo", "BROKER_TOKEN": joined["token"]}
    claim = json.loads(_invoke(url, ["inbox", "claim", "--json"], env).stdout)
    assert claim == {
        "lease_token": None,
        "owner": claim["owner"],
        "expires_at": None,
        "deliveries": [],
    }
    assert _invoke(url, ["inbox", "claim"], env).stdout == "(no message)\n"
