"""Same input, same answer, on every surface (spec §Module layout: each
operation is declared once, and every surface is derived from it).

Every declared operation (``broker.api.operations``) is held to its
declaration: its library method takes exactly the declared parameters, its
HTTP route, remote method, MCP tool and CLI command exist. Then a table of
inputs per operation runs through the library, the HTTP API of a real
``broker serve``, MCP over HTTP on the same server, the remote client
(client mode) and the CLI, and the outcomes are compared: a refusal's code,
field and words; a success's shape. A write over HTTP and over MCP is counted
by the server's group committer (one writer for the whole server).
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import click
import httpx
import pytest
import trusted
from click.testing import CliRunner
from mcphelp import Session, text

from broker import Agent, Operator, Store, errors
from broker.api.declaration import Operation
from broker.api.handles import Joiner
from broker.api.operations import (
    ACK,
    ACK_AND_CLAIM,
    ACTIVITY,
    ADMIT,
    ARCHIVE_SPACE,
    BOARD_READ,
    BOARD_VIEW,
    CHECK_PATHS,
    CLAIM,
    CLAIM_JOURNAL,
    CLAIM_KEY,
    CLAIMS,
    CREATE_SPACE,
    DIRECTIVE,
    EXTEND,
    GET_SPACE,
    GRANTED,
    HISTORY,
    JOIN,
    ME,
    MESSAGE_STATUS,
    MESSAGES,
    NEXT_TURN,
    OPERATIONS,
    OPERATOR_CHECK_PATHS,
    OPERATOR_MESSAGE_STATUS,
    OPERATOR_RELEASE_KEY,
    OPERATOR_RETRACT,
    OPERATOR_SEARCH,
    OPERATOR_SEND,
    PARTICIPANT,
    PARTICIPANTS,
    POLICY,
    POST,
    PRUNE,
    QUARANTINE,
    QUARANTINED,
    QUEUE_STATS,
    RELEASE,
    RELEASE_KEY,
    RELEASE_RESERVATION,
    RENEW_KEY,
    RENEW_RESERVATION,
    REQUEUE,
    RESERVATIONS,
    RESERVE,
    RETRACT,
    ROTATE_JOIN_KEY,
    SEARCH,
    SEEN,
    SEND,
    SEND_MANY,
    SET_POLICY,
    SET_SPACE,
    SET_STATUS,
    SPACE_USAGE,
    SPACES,
    STOP_SPACE,
    THREADS,
    TRANSCRIPT,
    TURN_HISTORY,
    TURN_HISTORY_UNDO,
    TURN_QUARANTINE,
    UNRESERVE,
)
from broker.frontends.cli import main
from broker.frontends.cli._common import COMMANDS
from broker.frontends.remote import Connection, RemoteAgent, RemoteJoiner, RemoteOperator
from broker.model import fields
from broker.model.records import to_dict
from tests.served import Server, serving, store_of

pytest.importorskip("mcp")
import httpx2  # noqa: E402
from mcp import ClientSession  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

pytestmark = pytest.mark.timeout(300)


# --- each declaration, and where it shows --------------------------------------------------
@pytest.mark.parametrize("op", OPERATIONS, ids=lambda op: op.name)
def test_each_library_method_takes_exactly_its_declared_parameters(op: Operation) -> None:
    handle = {"agent": Agent, "operator": Operator, "joiner": Joiner}[op.caller]
    method = getattr(handle, op.method)
    assert getattr(method, "__operation__", None) is op, f"{handle.__name__}.{op.method}"
    params = list(inspect.signature(method).parameters.values())
    tx = params[-2] if op.spread is not None else params[-1]  # **settings comes after tx
    assert params[0].name == "self" and tx.name == "tx"
    assert tx.kind is inspect.Parameter.KEYWORD_ONLY and tx.default is None
    declared = op.signature().parameters.values()
    assert [(p.name, p.kind, p.default) for p in params[1:] if p is not tx] == [
        (p.name, p.kind, p.default) for p in declared
    ]


@pytest.mark.parametrize("op", OPERATIONS, ids=lambda op: op.name)
def test_each_declared_operation_is_on_the_surfaces_its_declaration_names(op: Operation) -> None:
    from broker.frontends.http import operations as http_ops

    if op.http is not None:
        routes = {(ep.method, ep.path) for ep in http_ops.endpoints()}
        assert any(m == op.http.method and p.endswith(op.http.path) for m, p in routes), op.name
        remote = {"agent": RemoteAgent, "operator": RemoteOperator, "joiner": RemoteJoiner}[
            op.caller
        ]
        assert getattr(getattr(remote, op.method), "__operation__", None) is op
    if op.mcp is not None:
        from broker.frontends.mcp import agent as agent_tools
        from broker.frontends.mcp import operator as operator_tools

        tools = agent_tools.AGENT_TOOLS if op.caller == "agent" else operator_tools.OPERATOR_TOOLS
        spec = next(t for t in tools if t.name == op.mcp)
        assert spec.op is op and spec.schema() == op.input.schema(tool=True)
    if op.cli is not None:
        group, name = op.cli.split()
        assert group in COMMANDS
        command = main.get_command(click.Context(main), group)
        assert isinstance(command, click.Group) and name in command.commands, op.cli


# --- the same input on every surface --------------------------------------------------------
@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from serving(tmp_path_factory, "surfaces")


@pytest.fixture(scope="module")
def store(srv: Server) -> Iterator[Store]:
    yield from store_of(srv)


class World:
    """A space with a sender (``lynx``), a recipient (``otter``) and one who left."""

    def __init__(self, srv: Server, store: Store) -> None:
        self.srv = srv
        self.store = store
        op = Operator(store, key=srv.key)
        created = op.create_space("run")
        self.space = created.id
        self.join_key = created.join_key
        self.lynx, j = trusted.join(store, self.space, "lynx", pid=None)
        self.lynx_token = j.token
        self.otter, j = trusted.join(store, self.space, "otter", pid=None)
        self.otter_token = j.token
        self.gone, j = trusted.join(store, self.space, "gone", pid=None)
        self.gone_token = j.token
        self.gone.leave()
        self.operator = op
        self.lynx.claim_key("held-by-lynx", 3600)  # a key someone else holds
        self.other = op.create_space("run").id  # "@other": a space a case may stop

    def who(self, op: Operation) -> tuple[Any, str]:
        """The library handle a case runs as, and its secret."""
        if op.caller == "operator":
            return self.operator, self.srv.key
        if op.caller == "joiner":
            return Joiner(self.store), ""  # its credential is a field of its input
        return (self.lynx, self.lynx_token) if op is SEND else (self.otter, self.otter_token)


@pytest.fixture(scope="module")
def world(srv: Server, store: Store) -> World:
    return World(srv, store)


Outcome = tuple[Any, ...]


def refused(exc: errors.BrokerError) -> Outcome:
    return ("refused", exc.code, exc.fields.get("field"), exc.message)


def succeeded(result: Any) -> Outcome:
    if isinstance(result, int) or (isinstance(result, dict) and list(result) == ["count"]):
        return ("ok", "count")  # a plain count: answered as {"count": n} on the wire
    if isinstance(result, list):  # a list: its length varies, its items' shape does not
        return ("ok", "list", sorted({str(succeeded(r)[1:]) for r in result}))
    if isinstance(result, str):  # a name (the tools granted)
        return ("ok", "text", result)
    if result is None or result == {"ok": True}:  # done: nothing to say (Done on HTTP and MCP)
        return ("ok", "done")
    data = result if isinstance(result, dict) else to_dict(result)
    if "not_reached" in data:  # a send's outcome: who it reached, and why not the others
        return ("ok", data["kind"], sorted(data["reached"]),
                sorted((n["address"], n["reason"]) for n in data["not_reached"]))  # fmt: skip
    return ("ok", sorted(data))  # a lease: its shape (which messages depends on the order)


def by_method(handle: Any, op: Operation, case: dict[str, Any]) -> Any:
    """The handle's method called with ``case`` (named values as ``**settings``)."""
    named = case.get(op.spread or "") or {}
    if not isinstance(named, dict):  # what no method could pass
        return handle.call(op, case)
    args = {k: v for k, v in case.items() if k != op.spread}
    return getattr(handle, op.method)(**args, **named)


def by_library(w: World, op: Operation, case: dict[str, Any]) -> Outcome:
    handle, _ = w.who(op)
    try:
        if set(case) <= op.input.NAMES:
            return succeeded(by_method(handle, op, case))
        return succeeded(handle.call(op, op.input.parse(case)))  # what no method could pass
    except errors.NotDelivered as exc:
        return ("not_delivered", succeeded(exc.fields["result"]))
    except errors.BrokerError as exc:
        return refused(exc)


def by_remote(w: World, op: Operation, case: dict[str, Any]) -> Outcome:
    _, secret = w.who(op)
    conn = Connection(w.srv.base)
    try:
        handle: Any = (
            RemoteAgent(conn, secret)
            if op.caller == "agent"
            else RemoteJoiner(conn)
            if op.caller == "joiner"
            else RemoteOperator(conn, secret)
        )
        if set(case) <= op.input.NAMES:
            return succeeded(by_method(handle, op, case))
        return succeeded(handle.call(op, op.input.parse(case)))
    except errors.NotDelivered as exc:
        return ("not_delivered", succeeded(exc.fields["result"]))
    except errors.BrokerError as exc:
        return refused(exc)
    finally:
        conn.close()


def by_http(w: World, op: Operation, case: dict[str, Any]) -> Outcome:
    assert op.http is not None
    _, secret = w.who(op)
    body = dict(case)
    path = op.http.path
    for name in op.path_fields:  # /turn/{turn_id}/seen
        path = path.replace("{" + name + "}", quote(str(body.pop(name)), safe=""))
    if op.caller == "agent":
        path = f"/api/spaces/{w.space}/agent{path}"
    elif "space" in op.input.NAMES:
        path = f"/api/spaces/{body.pop('space')}{path}"
    else:
        path = "/api" + path
    with w.srv.client(secret or None) as c:
        if op.http.method == "GET":  # the fields as a query string carries them
            query = {k: str(v).lower() if isinstance(v, bool) else v for k, v in body.items()}
            r = c.request("GET", path, params=query)
        else:
            r = c.request(op.http.method, path, content=json.dumps(body))
    data = r.json()
    if r.status_code == op.http.status:
        return succeeded(data)
    if data["error"] == "not_delivered":
        return ("not_delivered", succeeded(data["result"]))
    return ("refused", data["error"], data.get("field"), data["message"])


async def _mcp(w: World, op: Operation, case: dict[str, Any]) -> Outcome:
    _, secret = w.who(op)
    headers = {"Authorization": f"Bearer {secret}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60, read=120)) as http,
        streamable_http_client(w.srv.base + "/mcp/", http_client=http) as (read, write),
        ClientSession(read, write) as client,
    ):
        await client.initialize()
        result = await Session(client, Path(os.devnull)).call(op.mcp or "", **case)
    if not result.is_error:
        if op.result.startswith("list["):  # the text is the plain list; MCP wraps the structure
            assert result.structured_content == {"result": json.loads(text(result))}
            return succeeded(json.loads(text(result)))
        return succeeded(result.structured_content)
    data = result.structured_content or {}
    assert text(result).startswith(f"{data.get('error')}: ")
    if data.get("error") == "not_delivered":
        return ("not_delivered", succeeded(data["result"]))
    return ("refused", data.get("error"), data.get("field"), data.get("message"))


def by_mcp(w: World, op: Operation, case: dict[str, Any]) -> Outcome:
    return asyncio.run(_mcp(w, op, case))


def _cli_params(op: Operation) -> tuple[dict[str, str], list[str]]:
    """The command's flag for each field it has an option for, and the fields
    it takes by position, in order (read from the command itself)."""
    assert op.cli is not None
    group_name, name = op.cli.split()
    group = main.get_command(click.Context(main), group_name)
    assert isinstance(group, click.Group)
    command = group.commands[name]
    flags: dict[str, str] = {}
    for p in command.params:
        if isinstance(p, click.Option):
            for f in op.input.FIELDS:
                if p.name == f.name or f.name in getattr(p, "fields", ()):
                    flags.setdefault(f.name, max(p.opts, key=len))
    arguments = [f.name for f in _in_place(op) if f.name not in flags]
    return flags, arguments


def _in_place(op: Operation) -> list[Any]:
    """The fields in the order the library method takes them (its positional ones
    first: RUN_ID QUERY, though a search's record declares its space last)."""
    last = len(op.positional)
    return sorted(
        op.input.FIELDS,
        key=lambda f: op.positional.index(f.name) if f.name in op.positional else last,
    )


def by_cli(w: World, op: Operation, case: dict[str, Any]) -> Outcome:
    """The CLI's answer, its flags' names turned back into the fields' (the
    CLI names the flag the user typed: ``bad --to (value 2)`` is ``bad to.1``)."""
    assert op.cli is not None
    argv = [*op.cli.split(), "--json", "--url", w.store.url, *CLI_EXTRA.get(op, [])]
    flags, arguments = _cli_params(op)
    words: list[str] = []
    for f in _in_place(op):
        if f.name not in case:
            continue
        value = case[f.name]
        if isinstance(value, dict):  # KEY=VALUE words: as arguments, or each a --setting
            pairs = [f"{k}={v}" for k, v in value.items()]
            if f.name in arguments:
                words += pairs
            else:
                argv += [x for pair in pairs for x in (flags[f.name], pair)]
        elif f.name in arguments:  # by position: the body's words, a list's items, one word
            words += [str(v) for v in (value if isinstance(value, list) else [value])]
        elif isinstance(value, bool):
            argv += [flags[f.name]] if value else []
        elif isinstance(f, fields.Items):  # each item one JSON object
            argv += [x for v in value for x in (flags[f.name], json.dumps(v))]
        else:
            for v in value if isinstance(value, list) else [value]:
                argv += [flags[f.name], str(v)]
    env = {"BROKER_OPERATOR_KEY": w.srv.key}
    if op.caller == "agent":
        handle, secret = w.who(op)
        env |= {"BROKER_SPACE": w.space, "BROKER_AS": handle.address, "BROKER_TOKEN": secret}
    res = CliRunner().invoke(main, [*argv, *words], env=env)
    if res.exit_code == 0 and op.result.startswith("list["):  # JSON Lines: one item a line
        return succeeded([json.loads(line) for line in res.stdout.splitlines()])
    if res.exit_code == 0:
        lines = res.stdout.splitlines()
        if op.result.startswith("list["):
            return succeeded([json.loads(line) for line in lines])
        return succeeded(json.loads(res.stdout))
    if res.exit_code == errors.NotDelivered.exit_code:  # S8: the outcome is printed, exit 1
        return ("not_delivered", succeeded(json.loads(res.stdout)))
    line = res.stderr.strip().splitlines()[-1]
    found = re.fullmatch(r"broker: (\w+): (.*)", line)
    assert found is not None, res.stderr
    code, message = found.groups()
    for name, flag in flags.items():  # the flag the user typed, back to the field's name
        message = re.sub(rf"^bad {re.escape(flag)} \(value (\d+)\)",
                         lambda m, n=name: f"bad {n}.{int(m[1]) - 1}", message)  # fmt: skip
        message = re.sub(rf"^bad {re.escape(flag)}\b", f"bad {name}", message)
    field = re.match(r"bad ([a-z_]+)", message)
    return ("refused", code, field[1] if field else None, message)


CLI_ARGS = {PARTICIPANT: ("address",)}
CLI_EXTRA = {ROTATE_JOIN_KEY: ["--rotate"], STOP_SPACE: ["--yes"], ARCHIVE_SPACE: ["--yes"]}
SHOWN = {"cli"}  # `space show` and `space set` print the space with its usage: not the result

SURFACES = {"http": by_http, "mcp": by_mcp, "remote": by_remote, "cli": by_cli}

# (operation, input, surfaces that cannot carry it and why)
CASES: list[tuple[Operation, dict[str, Any], set[str]]] = [
    # to as one name or a list, everywhere
    (SEND, {"to": "otter", "text": "one name"}, set()),
    (SEND, {"to": ["otter", "gone"], "text": "a list"}, set()),
    (
        SEND,
        {
            "to": ["otter"],
            "text": "fields",
            "thread": "t-1",
            "importance": "high",
            "ack_required": True,
        },
        set(),
    ),  # fmt: skip
    (SEND, {"to": "zed", "text": "nobody"}, set()),
    (SEND, {"to": [], "text": "x"}, {"cli"}),  # the CLI's --to is required: click says so
    (SEND, {"to": ["otter", " "], "text": "x"}, set()),
    (SEND, {"to": "otter", "text": "   "}, {"cli"}),  # the CLI refuses an empty TEXT itself
    (SEND, {"to": "otter", "text": "x", "reply_to": "abc"}, set()),
    (SEND, {"to": "otter", "text": "x", "thread": "a b"}, set()),
    (SEND, {"to": "otter", "text": "x", "idempotency_key": "k" * 201}, set()),
    (SEND, {"to": "otter", "text": "x", "importance": "urgent"}, {"cli"}),  # a click choice
    # what only a JSON or Python caller can send
    (SEND, {"to": "otter", "text": 5}, {"cli"}),
    (SEND, {"to": "otter", "text": "x", "ack_required": "yes"}, {"cli"}),
    (SEND, {"to": "otter", "text": "x", "sender": "otter"}, {"cli"}),  # S10
    # many sends in one transaction: each item a send's input, a refusal naming the item
    (
        SEND_MANY,
        {"items": [{"to": "lynx", "text": "one"}, {"to": ["lynx", "zed"], "text": "2"}]},
        set(),
    ),
    (SEND_MANY, {"items": [{"to": "zed", "text": "nobody"}]}, set()),  # logged, not raised (S8)
    (SEND_MANY, {"items": []}, {"cli"}),  # the CLI's --item is required: click says so
    (SEND_MANY, {"items": [{"to": "lynx", "text": "ok"}, {"to": "lynx", "text": "  "}]}, set()),
    (SEND_MANY, {"items": [{"to": "lynx", "text": "x", "sender": "otter"}]}, set()),  # S10
    (
        SEND_MANY,
        {"items": [{"to": "lynx", "text": "x"}, {"to": "bad address!", "text": "y"}]},
        set(),
    ),
    (SEND_MANY, {"items": [{"to": ["lynx", " "], "text": "x"}]}, set()),
    (SEND_MANY, {"items": [{"to": "lynx", "text": 5}]}, set()),
    (SEND_MANY, {"items": [{"text": "x"}]}, set()),
    (SEND_MANY, {"items": ["x"]}, set()),
    (SEND_MANY, {"items": "x"}, {"cli"}),
    (SEND_MANY, {"items": [{"to": "lynx", "text": "x"}] * 1001}, set()),
    (OPERATOR_SEND, {"space": "", "text": "x"}, {"cli", "http", "remote"}),  # no path segment
    (OPERATOR_SEND, {"text": "from the human", "to": "otter"}, set()),
    (OPERATOR_SEND, {"text": "to the left one", "to": ["gone"]}, set()),  # S8's exception
    (OPERATOR_SEND, {"text": "x", "to": ["parent"]}, set()),
    (OPERATOR_SEND, {"text": "x", "urgent": "yes"}, {"cli"}),
    (CLAIM, {"limit": 1, "lease": 30}, set()),
    (CLAIM, {"limit": 0}, {"cli"}),  # the CLI's --limit type states the range itself
    (CLAIM, {"lease": 0}, set()),
    (CLAIM, {"wait": -1}, set()),
    (CLAIM, {"owner": "a\u0007b"}, set()),
    (CLAIM, {"limit": True}, {"cli"}),
    # settling a lease: the token, the ids (one id or a list), the evidence
    (ACK, {"lease_token": ""}, set()),
    (ACK, {"lease_token": "t" * 101}, set()),
    (ACK, {"lease_token": "no-such-lease"}, set()),  # well-formed, held by nobody
    (ACK, {"lease_token": "no-such-lease", "ids": "01JAAAAAAAAAAAAAAAAAAAAAAA"}, set()),
    (ACK, {"lease_token": "no-such-lease", "ids": []}, {"cli"}),  # no words: the whole lease
    (ACK, {"lease_token": "t", "ids": ["x" * 101]}, set()),
    (ACK, {"lease_token": 5}, {"cli"}),
    (RELEASE, {"lease_token": "t", "error": "e" * 8001}, set()),
    (RELEASE, {"lease_token": "no-such-lease", "ids": ["a", "b"], "error": "why"}, set()),
    (EXTEND, {"lease_token": "t", "seconds": 0}, set()),
    (EXTEND, {"lease_token": "no-such-lease", "seconds": 30}, set()),
    (QUARANTINE, {"lease_token": "t", "message_id": "m", "reason": "   "}, set()),
    (QUARANTINE, {"lease_token": "no-such-lease", "message_id": "m", "reason": "bad"}, set()),
    (ACK_AND_CLAIM, {"lease_token": "t", "limit": 0}, set()),
    (ACK_AND_CLAIM, {"lease_token": "no-such-lease"}, set()),
    # turns
    (NEXT_TURN, {"wait": -1}, set()),
    (NEXT_TURN, {"limit": 0}, {"cli"}),  # the CLI's --limit type states the range itself
    (NEXT_TURN, {"lease": 30, "limit": 5}, set()),
    (NEXT_TURN, {"sender": "lynx"}, {"cli"}),  # S10
    (SEEN, {"turn_id": "x" * 101}, set()),
    (SEEN, {"turn_id": "01JAAAAAAAAAAAAAAAAAAAAAAA"}, set()),  # nobody's turn
    # board keys (S22): board claim --wait is served too (a long-poll on the key's doorbell)
    (CLAIM_KEY, {"key": "surfaces-key", "ttl": 30}, set()),  # then re-granted to its holder
    (CLAIM_KEY, {"key": ""}, set()),
    (CLAIM_KEY, {"key": "a/../b"}, set()),
    (CLAIM_KEY, {"key": "k", "ttl": 0}, set()),
    (CLAIM_KEY, {"key": "k", "wait": -1}, set()),
    (CLAIM_KEY, {"key": "held-by-lynx"}, set()),
    (CLAIM_KEY, {"key": "held-by-lynx", "wait": 0.2}, set()),  # waited, still held
    (RELEASE_KEY, {"key": "no-such-key", "fence": 5}, set()),
    (RELEASE_KEY, {"key": "k", "fence": True}, {"cli"}),
    (RENEW_KEY, {"key": "no-such-key", "fence": 5, "ttl": 0}, set()),
    (RENEW_KEY, {"key": "no-such-key", "fence": 5}, set()),
    # path reservations (S37): lists are plain lists everywhere (JSON Lines in the CLI)
    (RESERVE, {"patterns": "docs/surfaces/**", "ttl": 30}, set()),
    (RESERVE, {"patterns": ["docs/a/**", "docs/b/*.md"], "shared": True}, set()),
    (RESERVE, {"patterns": []}, {"cli"}),  # no words: click says PATH... is missing
    (RESERVE, {"patterns": ["../x"]}, set()),
    (UNRESERVE, {"fence": 999_999}, set()),
    (RENEW_RESERVATION, {"fence": 999_999, "ttl": 30}, set()),
    (CHECK_PATHS, {"paths": ["docs/surfaces/a.md", "README"]}, set()),
    (CHECK_PATHS, {"paths": "src/app.py"}, set()),
    (CHECK_PATHS, {"paths": []}, {"cli"}),
    (RETRACT, {"directive_id": "01JAAAAAAAAAAAAAAAAAAAAAAA"}, set()),  # not granted (S24)
    (RETRACT, {"directive_id": 7}, {"cli"}),
    # posts, directives and reading the board (S21, S23)
    (POST, {"text": "on the channel"}, set()),
    (POST, {"text": "for lynx", "addressed_to": "lynx"}, set()),
    (POST, {"text": "for two", "addressed_to": ["lynx", "zed"]}, set()),
    (POST, {"text": "x", "addressed_to": ["broadcast"]}, set()),
    (POST, {"text": "x", "addressed_to": ["lynx", " "]}, set()),
    (POST, {"text": "   "}, {"cli"}),  # the CLI refuses an empty TEXT itself
    (POST, {"text": "x", "idempotency_key": ""}, set()),
    (POST, {"text": 5}, {"cli"}),
    (POST, {"text": "x", "to": ["lynx"]}, {"cli"}),  # S10: a post's addressees are addressed_to
    (DIRECTIVE, {"to": "lynx", "text": "x"}, set()),  # not granted (S24)
    (DIRECTIVE, {"to": [], "text": "x"}, {"cli"}),  # the CLI's --to is required: click says so
    (DIRECTIVE, {"to": "lynx", "text": 5}, {"cli"}),
    (BOARD_READ, {}, {"mcp"}),  # MCP answers the entries with the cursor to pass next time
    (BOARD_READ, {"limit": 2, "after": "01J0000000000000000000000Z"}, set()),
    (BOARD_READ, {"limit": 0}, {"cli"}),  # the CLI's --limit type states the range itself
    (BOARD_READ, {"limit": 1001}, {"cli"}),
    (BOARD_READ, {"after": 7}, {"cli", "http"}),  # a query string is text
    # the participant itself
    (ME, {}, set()),
    (ME, {"address": "lynx"}, set()),  # nobody reads another's row as its own (S10)
    (GRANTED, {}, set()),
    (HISTORY, {}, set()),
    (SET_STATUS, {"status": "idle"}, set()),
    (SET_STATUS, {"status": "sleeping"}, set()),
    # a message's status, the contact policy (S38)
    (MESSAGE_STATUS, {"message_id": "01JAAAAAAAAAAAAAAAAAAAAAAA"}, set()),  # not one it sent
    (MESSAGE_STATUS, {"message_id": ""}, {"http", "remote"}),  # no path segment
    # search (S36): the filter of who sent is `from` on the wire and the CLI, written_by to a tool
    (SEARCH, {"query": "fields"}, {"mcp"}),  # MCP answers {"hits": [...]}
    (SEARCH, {"query": "fields", "sender": "lynx", "kinds": ["direct"], "limit": 5}, {"mcp"}),
    (SEARCH, {"query": ""}, set()),
    (SEARCH, {"query": '"open'}, set()),
    (SEARCH, {"query": "x", "limit": 0}, {"cli"}),  # the CLI's --limit type states the range
    (SEARCH, {"query": "x", "since": "garbage"}, {"cli"}),  # the CLI's --since also takes an age
    (SEARCH, {"query": "x", "kinds": ["moon"]}, set()),
    (SEARCH, {"query": "x", "sender": 5}, {"cli", "http"}),  # a query string is text
    (POLICY, {}, set()),
    (SET_POLICY, {"policy": "open"}, set()),
    (SET_POLICY, {"policy": "listed", "allow": "lynx"}, set()),
    (SET_POLICY, {"policy": "sometimes"}, set()),
    (SET_POLICY, {"policy": "open", "allow": [7]}, set()),
    (SET_POLICY, {"policy": "open"}, set()),  # open again: lynx sends to otter above
    # spaces: created, listed, shown, their limits changed (one record of settings), stopped
    (CREATE_SPACE, {"kind": "session", "settings": {"inbox_cap": 8, "lease_seconds": 45}}, set()),
    (CREATE_SPACE, {"kind": "moon"}, {"cli"}),  # a click choice
    (CREATE_SPACE, {"settings": {"nosuch": 1}}, set()),
    (CREATE_SPACE, {"settings": {"lease_seconds": 1e12}}, set()),
    (CREATE_SPACE, {"settings": {"inbox_cap": True}}, {"cli"}),  # the CLI reads text
    (CREATE_SPACE, {"settings": {"inbox_cap": None}}, {"cli"}),
    (CREATE_SPACE, {"settings": ["inbox_cap"]}, {"cli"}),
    (SPACES, {"state": "running"}, set()),
    (SPACES, {"state": "moon"}, {"cli"}),
    (GET_SPACE, {}, set()),
    (GET_SPACE, {"space": "nosuch"}, set()),
    (GET_SPACE, {"space": "a b"}, {"http", "remote"}),  # a path segment, not a run id
    (SPACE_USAGE, {"top": 3}, SHOWN),
    (SPACE_USAGE, {"top": 0}, {"cli"}),  # the CLI's --top type states the range itself
    (SPACE_USAGE, {"top": "3"}, {"cli", "http", "remote"}),  # a query string is text
    (SPACE_USAGE, {"space": "nosuch"}, set()),
    (SET_SPACE, {"settings": {"inbox_cap": 300}}, SHOWN),
    (SET_SPACE, {"settings": {"inbox_cap": 0}}, set()),
    (SET_SPACE, {"settings": {"body_max_bytes": 1.5}}, set()),
    (SET_SPACE, {"settings": {}}, set()),
    (SET_SPACE, {"settings": {"nosuch": 1}}, set()),
    (ROTATE_JOIN_KEY, {"space": "@other"}, set()),
    (ROTATE_JOIN_KEY, {"space": "nosuch"}, set()),
    (STOP_SPACE, {"space": "@other"}, set()),
    (STOP_SPACE, {"space": "nosuch"}, set()),
    (ARCHIVE_SPACE, {"space": "@other"}, set()),
    (ARCHIVE_SPACE, {"space": "nosuch"}, set()),
    # participants, the queue, the board
    (PARTICIPANTS, {}, {"mcp"}),  # MCP answers {"participants": [...]}
    (PARTICIPANTS, {"include_left": False}, {"mcp"}),
    (PARTICIPANTS, {"space": "a" * 201}, set()),
    (PARTICIPANTS, {"include_left": "yes"}, {"http"}),  # a query string is text
    (PARTICIPANTS, {"space": "nosuch"}, set()),
    (PARTICIPANT, {"address": "otter"}, set()),
    (PARTICIPANT, {"address": "zed"}, set()),
    (PARTICIPANT, {"space": "nosuch", "address": "otter"}, set()),
    (QUARANTINED, {}, set()),
    (QUARANTINED, {"space": "nosuch"}, set()),
    (QUEUE_STATS, {}, set()),
    (ACTIVITY, {}, set()),
    (CLAIMS, {}, set()),
    (OPERATOR_RETRACT, {"directive_id": "01J0000000000000000000000Z"}, set()),
    (OPERATOR_RETRACT, {"directive_id": 5}, set()),
    (BOARD_VIEW, {}, set()),
    (BOARD_VIEW, {"limit": 0}, set()),
    (BOARD_VIEW, {"limit": 1001}, set()),
    (BOARD_VIEW, {"after": "01J0000000000000000000000Z"}, set()),
    (OPERATOR_RELEASE_KEY, {"key": "nosuch"}, set()),
    (OPERATOR_RELEASE_KEY, {"key": "a b"}, set()),
    (OPERATOR_RELEASE_KEY, {"key": "k", "fence": 0}, set()),
    (OPERATOR_RELEASE_KEY, {"key": "k", "reason": "a\u009bb"}, set()),
    (RELEASE_RESERVATION, {"fence": 999}, set()),
    (RELEASE_RESERVATION, {"fence": 0}, set()),
    (RELEASE_RESERVATION, {"fence": "1"}, set()),
    (PRUNE, {"dry_run": True}, set()),
    (PRUNE, {"older_than": -1}, set()),
    (PRUNE, {"check_pid": "yes"}, set()),
    (RESERVATIONS, {}, set()),
    (CLAIM_JOURNAL, {}, set()),
    (CLAIM_JOURNAL, {"key": "a b"}, set()),
    (REQUEUE, {"ids": ["01J0000000000000000000000Z"]}, set()),
    (REQUEUE, {"ids": []}, set()),
    (REQUEUE, {"ids": [5]}, set()),
    (OPERATOR_CHECK_PATHS, {"paths": "src/app.py"}, set()),
    (OPERATOR_CHECK_PATHS, {"paths": []}, set()),
    (OPERATOR_CHECK_PATHS, {"paths": ["/etc/passwd"]}, set()),
    # messages and transcripts
    (TRANSCRIPT, {"address": "otter"}, set()),
    (TRANSCRIPT, {"address": "zed"}, set()),
    (THREADS, {}, set()),
    # the operator's read of the log: one cursor and one count (a declared rule), a page
    (MESSAGES, {}, {"mcp"}),  # MCP answers the page with the cursor to pass next time
    (MESSAGES, {"kinds": "direct", "limit": 2}, {"mcp"}),
    (
        MESSAGES,
        {"kinds": ["direct", "operator"], "sender": "lynx", "to": "otter", "tail": 3},
        {"mcp"},
    ),
    (MESSAGES, {"after_seq": 1, "limit": 1, "thread": "t-1"}, {"mcp"}),
    (MESSAGES, {"after": "01J0000000000000000000000Z", "after_seq": 1}, set()),
    (MESSAGES, {"limit": 3, "tail": 3}, set()),
    (MESSAGES, {"kinds": ["moon"]}, set()),
    (MESSAGES, {"limit": 0}, set()),
    (MESSAGES, {"limit": 10_001}, set()),
    (MESSAGES, {"after_seq": -1}, set()),
    (MESSAGES, {"after": "01J0000000000000000000000Z"}, set()),  # no such message
    (MESSAGES, {"since": "garbage"}, set()),
    (MESSAGES, {"sender": ""}, set()),
    (MESSAGES, {"tail": True}, {"http"}),  # a query string is text
    (MESSAGES, {"space": "nosuch"}, set()),
    (OPERATOR_SEARCH, {"query": "fields"}, set()),
    (OPERATOR_SEARCH, {"query": "fields", "sender": "lynx", "kinds": "direct", "limit": 5}, set()),
    (OPERATOR_SEARCH, {"query": "x", "since": "garbage"}, {"cli"}),  # --since takes an age too
    (OPERATOR_SEARCH, {"query": "x", "to": "a" * 401}, set()),
    (OPERATOR_SEARCH, {"space": "nosuch", "query": "x"}, set()),
    (OPERATOR_MESSAGE_STATUS, {"message_id": "01J0000000000000000000000Z"}, set()),
    (OPERATOR_MESSAGE_STATUS, {"message_id": ""}, {"http", "remote"}),  # no path segment
    # a joiner: the credential is a secret field, never quoted back (broker join is by hand)
    (JOIN, {"codename": "newcomer", "join_key": "not-the-key"}, set()),
    (JOIN, {"codename": "newcomer"}, set()),
    (JOIN, {"codename": "newcomer", "join_key": 5}, set()),
    (JOIN, {"codename": "newcomer", "join_key": "k" * 401}, set()),
    (JOIN, {"codename": "new\u0007comer", "join_key": "k"}, set()),
    (JOIN, {"codename": "newcomer", "join_key": "k", "sender": "lead"}, set()),  # S10
    (JOIN, {"codename": "newcomer", "join_key": "k", "parent_token": "t"}, set()),
    (JOIN, {"codename": "otter", "token": "not-its-token"}, set()),
    # the operator joins a participant on an agent's behalf (participants.join, no process)
    (ADMIT, {"codename": "admitted-{surface}", "role": "scout", "tools": ["msg.send"]}, set()),
    (ADMIT, {"codename": "otter"}, set()),  # a live holder, without its token (S27)
    (ADMIT, {"codename": "otter", "token": "not-its-token"}, set()),
    (ADMIT, {"codename": ""}, set()),
    (ADMIT, {"codename": "new\u0007comer"}, set()),
    (ADMIT, {"codename": "newcomer", "archetype": "wizard"}, set()),
    (ADMIT, {"codename": "newcomer", "tools": ["no.such"]}, set()),
    (ADMIT, {"codename": "newcomer", "messaging": False, "tools": ["msg.send"]}, set()),
    (ADMIT, {"codename": "newcomer", "lead": "yes"}, set()),
    (ADMIT, {"codename": "newcomer", "pid": 5}, set()),  # a served join records no process
    (ADMIT, {"codename": "newcomer", "sender": "lead"}, set()),  # S10
    (ADMIT, {"space": "nosuch", "codename": "newcomer"}, set()),
    # the teammate runtime's bookkeeping, by the turn's id
    (TURN_HISTORY, {"turn_id": "abc"}, set()),
    (TURN_HISTORY, {"turn_id": "0" * 26}, set()),
    (TURN_HISTORY_UNDO, {"turn_id": "0" * 26}, set()),
    (TURN_QUARANTINE, {"turn_id": "0" * 26, "reason": "it broke"}, set()),
    (TURN_QUARANTINE, {"turn_id": "0" * 26, "reason": "  "}, set()),
]


def each(case: dict[str, Any], surface: str) -> dict[str, Any]:
    """The case as ``surface`` runs it: a codename naming ``{surface}`` is its own
    on each (a join that succeeds makes its address live: a second is another)."""
    name = case.get("codename")
    if isinstance(name, str) and "{surface}" in name:
        return {**case, "codename": name.replace("{surface}", surface)}
    return case


@pytest.mark.parametrize(
    ("op", "case", "skip"), CASES, ids=[f"{op.name}-{n}" for n, (op, _, _) in enumerate(CASES)]
)
def test_the_same_input_gets_the_same_answer_on_every_surface(
    world: World, op: Operation, case: dict[str, Any], skip: set[str]
) -> None:
    if op.caller != "agent" and "space" in op.input.NAMES and "space" not in case:
        case = {"space": world.space, **case}
    if case.get("space") == "@other":
        case = {**case, "space": world.other}
    want = by_library(world, op, each(case, "library"))
    for name, surface in SURFACES.items():
        if name in skip or (name == "mcp" and op.mcp is None) or (name == "cli" and not op.cli):
            continue
        if name == "cli" and op.caller == "operator" and not case.get("space"):
            continue  # an empty RUN_ID is no argument on a command line
        got = surface(world, op, each(case, name))
        if name == "cli" and got[0] == "refused":  # its one line shows no field apart
            got, want_here = got[:2] + got[3:], want[:2] + want[3:]
        else:
            want_here = want
        assert got == want_here, name


def test_every_write_over_http_and_mcp_goes_through_the_group_committer(world: World) -> None:
    """One writer for the whole server: the HTTP API's and MCP's writes are jobs
    of the server's group committer (``/healthz`` counts them)."""
    before = httpx.get(world.srv.base + "/healthz").json()["writes"]
    by_http(world, SEND, {"to": "otter", "text": "over http"})
    by_mcp(world, SEND, {"to": "otter", "text": "over mcp"})
    by_mcp(world, OPERATOR_SEND, {"space": world.space, "text": "operator over mcp"})
    after = httpx.get(world.srv.base + "/healthz").json()["writes"]
    assert after - before == 3


def test_an_unknown_tool_names_only_the_tools_the_caller_holds(world: World) -> None:
    async def call() -> str:
        headers = {"Authorization": f"Bearer {world.lynx_token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60, read=120)) as http,
            streamable_http_client(world.srv.base + "/mcp/", http_client=http) as (r, wr),
            ClientSession(r, wr) as client,
        ):
            await client.initialize()
            listed = {t.name for t in (await client.list_tools()).tools}
            said = text(await client.call_tool("no_such_tool", {}))
            named = set(re.findall(r"\b[a-z]+_[a-z_]+\b", said.split("your tools are ", 1)[1]))
            assert named == listed
            return said

    said = asyncio.run(call())
    assert "board_directive" not in said and "board_retract" not in said  # not granted (S24)


def test_me_after_leaving_answers_on_every_surface(world: World) -> None:
    """S4: a participant that left still reads its own row (status ``left``),
    on every surface; anything else with its token is refused."""
    left = copy.copy(world)
    left.who = lambda op: (world.gone, world.gone_token)  # type: ignore[method-assign]
    want = by_library(left, ME, {})
    assert want[0] == "ok" and world.gone.me().status == "left"
    for name, surface in SURFACES.items():
        if (name == "mcp" and ME.mcp is None) or (name == "cli" and not ME.cli):
            continue
        if name == "remote":  # told its space and address: /api/me refuses a left token
            conn = Connection(world.srv.base)
            try:
                remote = RemoteAgent(conn, world.gone_token, world.space, "gone")
                assert succeeded(remote.me()) == want
                with pytest.raises(errors.ParticipantLeft):
                    remote.granted()
            finally:
                conn.close()
            continue
        assert surface(left, ME, {}) == want, name
        assert surface(left, GRANTED, {})[:2] == ("refused", "participant_left"), name
