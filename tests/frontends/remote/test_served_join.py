"""Every agent command in client mode (issue 27): ``broker join`` with the join
key over HTTP (the joiner's ``space.join``), ``broker agent run`` against a
server (the teammate runtime through the remote client, its turn bookkeeping
by the turn's id: ``history.append``, ``history.undo``, ``turn.quarantine``),
and a missing identity as a usage mistake.

Real processes: a ``broker serve`` on a SQLite store (tests/served.py) and CLI
processes with only ``PATH``, an empty ``BROKER_HOME``, ``BROKER_URL`` and the
secret they are given. The multi-host walk on PostgreSQL, across network
namespaces, is tests/frontends/remote/test_multihost.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trusted

from broker import Agent, Operator, Store, errors
from broker.frontends.remote import Connection, RemoteAgent
from tests.served import Server, serving, store_of

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from serving(tmp_path_factory, "served-join")


@pytest.fixture(scope="module")
def served(srv: Server) -> Iterator[Store]:
    yield from store_of(srv)


@pytest.fixture
def run_space(srv: Server, served: Store) -> tuple[str, str]:
    """A new run space of the served store: its id and join key."""
    created = Operator(served, key=srv.key).create_space("run")
    return created.id, created.join_key


def remote(srv: Server, home: Path, *args: str, **secrets: str) -> subprocess.CompletedProcess[str]:
    """``broker ARGS`` in client mode: PATH, its own empty BROKER_HOME, the
    server's URL and the secrets given; nothing else."""
    home.mkdir(parents=True, exist_ok=True)
    env = {"PATH": os.environ["PATH"], "BROKER_HOME": str(home), "BROKER_URL": srv.base, **secrets}
    return subprocess.run(
        [sys.executable, "-m", "broker", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def one_line(done: subprocess.CompletedProcess[str], code: int) -> str:
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr, done.stderr
    return done.stderr.strip()


def everyone(served: Store, key: str, sid: str) -> list[tuple[str, str]]:
    return sorted(
        (p.address, p.status)
        for p in Operator(served, key=key).participants(sid, include_left=True)
    )


# --- broker join in client mode ---------------------------------------------------------------
def test_S27_broker_join_over_http_prints_what_a_join_on_the_file_prints(
    srv: Server, served: Store, run_space: tuple[str, str], tmp_path: Path
) -> None:
    sid, join_key = run_space
    home = tmp_path / "lynx"
    done = remote(srv, home, "join", sid, "lynx", "--role", "reviewer", BROKER_JOIN_KEY=join_key)
    assert done.returncode == 0, done.stderr
    address, token, export = done.stdout.splitlines()
    assert address == "address: lynx"
    secret = token.removeprefix("token:").strip()
    assert export == f"export BROKER_SPACE={sid} BROKER_AS=lynx BROKER_TOKEN={secret}"
    # The token is the participant's: the server knows it by it alone.
    conn = Connection(srv.base)
    try:
        me = RemoteAgent.from_token(conn, secret).me()
    finally:
        conn.close()
    assert (me.address, me.role, me.status) == ("lynx", "reviewer", "running")
    # --json, and --join-key on the command line
    data = json.loads(
        remote(srv, home, "join", sid, "otter", "--json", "--join-key", join_key).stdout
    )
    assert sorted(data) == ["address", "participant_id", "space_id", "token"]
    assert (data["space_id"], data["address"]) == (sid, "otter")
    assert list(home.iterdir()) == []  # client mode writes nothing where it runs


def test_S27_a_refused_served_join_writes_nothing_and_never_shows_the_secret(
    srv: Server, served: Store, run_space: tuple[str, str], tmp_path: Path
) -> None:
    sid, join_key = run_space
    before = everyone(served, srv.key, sid)
    wrong = "not-the-key-" + join_key
    said = one_line(remote(srv, tmp_path, "join", sid, "eve", BROKER_JOIN_KEY=wrong), 4)
    assert said.startswith("broker: auth_failed: the join key given is not the join key")
    assert wrong not in said
    said = one_line(remote(srv, tmp_path, "join", sid, "eve"), 4)
    assert "joining needs a credential" in said
    said = one_line(remote(srv, tmp_path, "join", sid, "eve", "--pid", "1",
                           BROKER_JOIN_KEY=join_key), 2)  # fmt: skip
    assert said.startswith("broker: usage: --pid: a served join records no process")
    # Over HTTP: a secret of the wrong kind or length is refused without quoting it.
    long_key = "s3cr3t" * 70
    with srv.client() as c:
        for body, field, why in (
            ({"codename": "eve", "join_key": long_key}, "join_key", "at most 400 characters"),
            ({"codename": "eve", "token": ["s3cr3t"]}, "token", "text, not a list"),
            ({"codename": "eve", "parent_token": 12345}, "parent_token", "text, not a number"),
        ):
            r = c.post(f"/api/runs/{sid}/join", json=body)
            assert r.status_code == 422, r.text
            assert r.json()["field"] == field and why in r.json()["message"]
            assert "s3cr3t" not in r.text and "12345" not in r.text
        # A space of another collection is not found.
        r = c.post(f"/api/sessions/{sid}/join", json={"codename": "eve", "join_key": join_key})
        assert r.status_code == 404 and r.json()["error"] == "space_not_found"
    assert everyone(served, srv.key, sid) == before
    assert join_key not in srv.output() and long_key not in srv.output()


def test_S40_a_served_join_continues_an_address_with_its_last_token_only(
    srv: Server, served: Store, run_space: tuple[str, str], tmp_path: Path
) -> None:
    sid, join_key = run_space
    first = json.loads(
        remote(srv, tmp_path, "join", sid, "lynx", "--json", BROKER_JOIN_KEY=join_key).stdout
    )
    again = remote(srv, tmp_path, "join", sid, "lynx", BROKER_JOIN_KEY=join_key)
    assert again.returncode != 0  # the join key admits new addresses only
    assert first["token"] not in again.stderr
    cont = remote(srv, tmp_path, "join", sid, "lynx", "--json", BROKER_TOKEN=first["token"])
    assert cont.returncode == 0, cont.stderr
    second = json.loads(cont.stdout)
    assert second["address"] == "lynx" and second["token"] != first["token"]
    stale = remote(srv, tmp_path, "msg", "send", "--to", "lynx", "x", BROKER_TOKEN=first["token"])
    assert one_line(stale, 4).startswith("broker: auth_failed: token refused")


# --- a missing identity -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "args", [("msg", "send", "--to", "lynx", "hi"), ("inbox", "claim"), ("leave",)]
)
def test_a_missing_identity_in_client_mode_is_a_usage_mistake(
    srv: Server, tmp_path: Path, args: tuple[str, ...]
) -> None:
    said = one_line(remote(srv, tmp_path, *args), 2)
    assert said.startswith("broker: usage: no identity: set BROKER_TOKEN")
    # A wrong one is not a usage mistake: the server refuses it.
    said = one_line(remote(srv, tmp_path, *args, BROKER_TOKEN="wrong"), 4)
    assert said.startswith("broker: auth_failed: ")


# --- broker agent run against a server --------------------------------------------------------
# A teammate's command: it reports its BROKER_* names and the URL it was given
# for the first task, and fails on a task that says so.
COMMAND = r"""
import json, os, sys
turn = json.load(sys.stdin)
body = turn["items"][0]["body"]
if body == "fail":
    print("cannot do that", file=sys.stderr)
    sys.exit(3)
names = sorted(k for k in os.environ if k.startswith("BROKER_"))
print(json.dumps({"to": "lead", "text": json.dumps([body, names, os.environ["BROKER_URL"]])}))
"""


def test_S26_agent_run_against_a_server_runs_its_turns_through_the_remote_client(
    srv: Server, served: Store, run_space: tuple[str, str], tmp_path: Path
) -> None:
    sid, join_key = run_space
    lead, _ = trusted.join(served, sid, "boss", lead=True, pid=None)
    script = tmp_path / "mate.py"
    script.write_text(COMMAND)
    home = tmp_path / "mate"
    home.mkdir()
    env = {"PATH": os.environ["PATH"], "BROKER_HOME": str(home), "BROKER_URL": srv.base,
           "BROKER_JOIN_KEY": join_key}  # fmt: skip
    run = subprocess.Popen(
        [sys.executable, "-m", "broker", "agent", "run", sid, "mate", "--role", "helper",
         "--", sys.executable, str(script)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        _wait_status(srv, sid, "mate", "idle", run)
        lead.send("mate", "task 1")
        lease = lead.claim(wait=60)
        body, names, url = json.loads(lease.deliveries[0].body)
        lead.ack(lease.lease_token)
        assert body == "task 1" and url == srv.base
        assert names == ["BROKER_AS", "BROKER_SPACE", "BROKER_TOKEN", "BROKER_URL"]  # S39
        failing = lead.send("mate", "fail").id
        out, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == errors.HandlerFailed.exit_code, err
    assert "mate failed" in out and "command exited 3: cannot do that" in err
    op = Operator(served, key=srv.key)
    mate = op.participant(sid, "mate")
    assert (mate.status, mate.role, mate.archetype, mate.parent) == (
        "failed", "helper", "specialist", "lead",
    )  # fmt: skip
    # The failed turn's message is quarantined with the reason, through the server.
    held = [q for q in op.quarantined(sid) if q.recipient == "mate"]
    assert [q.id for q in held] == [failing] and "command exited 3" in (held[0].reason or "")
    # The lead is told; the history holds both tasks (appended by the server from
    # each turn before its handler ran: history first, ack second).
    told = lead.claim(wait=30)
    assert any("teammate mate failed" in d.body for d in told.deliveries)
    with served.read() as t:
        kept = t.all(
            "SELECT h.body FROM history h JOIN participants p ON p.id = h.participant_id "
            "WHERE p.space_id = ? AND p.address = 'mate'",
            (sid,),
        )
    assert [r[0] for r in kept] == ["task 1", "fail"]
    assert list(home.iterdir()) == []


def test_S40_agent_run_against_a_server_joins_with_the_operator_key_or_keeps_its_identity(
    srv: Server, served: Store, run_space: tuple[str, str], tmp_path: Path
) -> None:
    """The other two ways in: the operator key (BROKER_OPERATOR_KEY, as the
    runtime on the operator's host), and an identity the agent holds already
    (BROKER_AS=NAME with its BROKER_TOKEN: no key of any kind)."""
    sid, join_key = run_space
    lead, _ = trusted.join(served, sid, "boss", lead=True, pid=None)
    script = tmp_path / "echo.py"
    script.write_text(
        "import json, sys\n"
        "turn = json.load(sys.stdin)\n"
        "print('echo: ' + turn['items'][0]['body'])\n"
    )
    joined = json.loads(
        remote(srv, tmp_path / "j", "join", sid, "kept", "--json", BROKER_JOIN_KEY=join_key).stdout
    )
    for name, secrets in (
        ("opjoined", {"BROKER_OPERATOR_KEY": srv.key}),
        ("kept", {"BROKER_AS": "kept", "BROKER_TOKEN": joined["token"]}),
    ):
        home = tmp_path / name
        home.mkdir()
        env = {"PATH": os.environ["PATH"], "BROKER_HOME": str(home), "BROKER_URL": srv.base,
               **secrets}  # fmt: skip
        run = subprocess.Popen(
            [sys.executable, "-m", "broker", "agent", "run", sid, name, "--max-turns", "1",
             "--json", "--", sys.executable, str(script)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        try:
            _wait_status(srv, sid, name, "idle", run)
            lead.send(name, f"hello {name}")
            out, err = run.communicate(timeout=120)
        finally:
            if run.poll() is None:
                run.kill()
                run.communicate()
        assert run.returncode == 0, err
        assert json.loads(out) == {"address": name, "status": "shutdown"}
        lease = lead.claim(wait=30)
        assert [d.body for d in lease.deliveries] == [f"echo: hello {name}"]
        lead.ack(lease.lease_token)
        assert list(home.iterdir()) == []
    mates = {p.address: p for p in Operator(served, key=srv.key).participants(sid)}
    assert (mates["opjoined"].archetype, mates["opjoined"].parent) == ("specialist", "lead")
    # The kept identity was not joined again: its token still works.
    conn = Connection(srv.base)
    try:
        assert RemoteAgent.from_token(conn, joined["token"]).me().address == "kept"
    finally:
        conn.close()


def test_agent_run_against_a_server_without_a_credential_is_a_usage_mistake(
    srv: Server, served: Store, run_space: tuple[str, str], tmp_path: Path
) -> None:
    sid, _ = run_space
    said = one_line(remote(srv, tmp_path, "agent", "run", sid, "mate", "--", "true"), 2)
    assert said.startswith("broker: usage: agent run against a server needs a credential")
    assert everyone(served, srv.key, sid) == []


def _wait_status(
    srv: Server, sid: str, address: str, status: str, run: subprocess.Popen[str]
) -> None:
    import time

    deadline = time.monotonic() + 60
    with srv.operator() as c:
        while time.monotonic() < deadline:
            rows = c.get(f"/api/spaces/{sid}/participants").json()
            if any(r["address"] == address and r["status"] == status for r in rows):
                return
            assert run.poll() is None, run.communicate()
            time.sleep(0.05)
    raise AssertionError(f"{address} never went {status}")


# --- the turn's bookkeeping by its id (the library; the routes are the table's) --------------
def test_S16_a_turn_is_appended_to_history_by_its_id_once_and_undone_by_its_id(
    store: Store, join: Any
) -> None:
    lead, mate = join("lead", lead=True), join("mate")
    lead.send("mate", "one")
    lead.send("mate", "two")
    lead.directive("mate", "stand by")  # re-shown each turn: never history
    turn = mate.next_turn()
    assert turn.id is not None and len(turn.items) == 3
    kept = mate.append_turn_history(turn.id)
    assert [e.body for e in mate.history()] == ["one", "two"]
    assert kept.turn_id == turn.id and len(kept.message_ids) == 2
    assert mate.append_turn_history(turn.id).message_ids == []  # once per message id
    assert [(e.sender, e.kind) for e in mate.history()] == [("lead", "direct")] * 2
    assert sorted(mate.undo_turn_history(turn.id).message_ids) == sorted(kept.message_ids)
    assert mate.history() == []
    assert mate.append_turn_history(turn.id).message_ids == kept.message_ids
    # Another participant's turn is not found, and writes nothing.
    with pytest.raises(errors.NotFound):
        lead.append_turn_history(turn.id)
    with pytest.raises(errors.NotFound):
        lead.quarantine_turn_input(turn.id, "not mine")
    assert len(mate.history()) == 2


def test_S26_a_failed_turn_is_quarantined_by_its_id(store: Store, join: Any) -> None:
    lead, mate = join("lead", lead=True), join("mate")
    sent = lead.send("mate", "poison").id
    lead.send("broadcast", "to all")  # a broadcast is no inbox row: it stays as it is
    turn = mate.next_turn()
    assert turn.id is not None
    moved = mate.quarantine_turn_input(turn.id, "the model choked on it")
    assert moved.message_ids == [sent]
    held = Operator(store).quarantined(mate.space_id)
    assert [(q.id, q.reason) for q in held] == [(sent, "the model choked on it")]
    with pytest.raises(errors.InvalidInput, match="a quarantine needs a reason"):
        mate.quarantine_turn_input(turn.id, "   ")
    assert mate.quarantine_turn_input(turn.id, "again").message_ids == []  # already aside


def test_agent_methods_by_turn_id_match_their_declarations(store: Store, join: Any) -> None:
    """The served teammate uses exactly these (a RemoteAgent has them, derived)."""
    for name in ("append_turn_history", "undo_turn_history", "quarantine_turn_input"):
        assert getattr(Agent, name).__operation__ is getattr(RemoteAgent, name).__operation__


def test_S27_a_secret_field_is_never_shown_by_its_record_or_its_refusals() -> None:
    from broker.model.inputs import SpaceJoinInput

    inp = SpaceJoinInput.parse({"space": "run_x", "codename": "lynx", "join_key": "hush-hush"})
    assert "hush-hush" not in repr(inp) and "join_key=***" in repr(inp)
    assert "token=None" in repr(inp)  # not given: nothing to hide
    for bad in ("hush" * 101, 12345, ["hush"], "hush\x00"):
        with pytest.raises(errors.InvalidInput) as refused:
            SpaceJoinInput.parse({"space": "run_x", "codename": "lynx", "join_key": bad})
        assert refused.value.fields["field"] == "join_key"
        assert "hush" not in refused.value.message and "12345" not in refused.value.message
