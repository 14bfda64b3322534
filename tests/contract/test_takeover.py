"""S40 on both backends: the join key admits newcomers only, served liveness
outlasts a model call, and a re-join keeps the directory fields it does not name.

The attacker holds what a hostile agent of the swarm holds: the space's join
key and its own token. Its victim has history (mail waiting for it, a secret
it sent); whether the victim left, failed, went silent or lost its process,
the attacker's re-join of the victim's address is refused, writes nothing,
and the victim's mail and search stay the victim's.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trusted
from conftest import Clock, Result, open_store
from served import READY, clean_env

from broker import Agent, Operator, Store, errors
from broker.interchange.export import export_space
from broker.interchange.importer import import_dir
from broker.spaces import participants
from broker.store import keys

Cli = Callable[..., Result]
SECRET = "prod db password is s3cr3t"
TABLES = ("participants", "participant_events", "messages", "deliveries", "transcript")


def rows(store: Store) -> dict[str, int]:
    """Rows of the tables a join writes: what a refused one must leave as it was."""
    with store.read() as t:
        return {name: int(t.one(f"SELECT count(*) FROM {name}")[0]) for name in TABLES}


def refused(error: type[errors.BrokerError], call: Callable[[], object]) -> str:
    with pytest.raises(error) as info:
        call()
    return info.value.message


@pytest.fixture
def clocked(clocked_url: str, clock: Clock) -> Iterator[Store]:
    s = open_store(clocked_url, clock=clock)
    yield s
    s.close()


# --- the join key admits newcomers only --------------------------------------------------------
@pytest.mark.parametrize("gone", ["left", "failed", "stale", "killed"])
def test_S40_a_join_key_holder_cannot_take_an_address_with_history(
    clocked: Store, clock: Clock, gone: str
) -> None:
    store = clocked
    made = Operator(store).create_space("workflow")  # live_seconds 3600
    space, key = made.id, made.join_key
    otter, _ = Agent.join(store, space, "flow/otter", join_key=key)
    if gone == "killed":  # its process recorded, and dead
        victim, first, _ = trusted.in_a_gone_process(
            store,
            lambda s: Agent.join(s, space, "flow/victim", join_key=key, step="s1")[1],
        )
    else:  # a CLI or served join: no process, live by its heartbeat
        victim, first = Agent.join(store, space, "flow/victim", join_key=key, pid=None, step="s1")
    victim.send("otter", SECRET)
    otter.send("victim", "deploy notes for the victim")
    if gone == "left":
        victim.leave()
    elif gone == "failed":
        victim.set_status("failed")
    elif gone == "stale":
        clock.advance(3600)  # silent for live_seconds: gone by its heartbeat
    mallory, own = Agent.join(store, space, "flow/mallory", join_key=key, pid=None)
    before = rows(store)
    for token in (None, own.token):  # its own token is no better than none
        message = refused(
            errors.Forbidden,
            lambda t=token: Agent.join(store, space, "flow/victim@2", join_key=key, token=t),
        )
        wrong = " (the token given is not its last token)" if token else ""
        assert message == (
            f"victim has joined this space before{wrong}: continuing it needs its last token "
            "(--token) or the operator key; the join key admits new addresses only"
        )
    assert rows(store) == before
    # The victim's mail and what it said stay its own.
    assert mallory.search("s3cr3t") == [] and mallory.claim().deliveries == []
    with store.read() as t:
        held = t.one(
            "SELECT d.state FROM deliveries d JOIN participants p ON p.rowid = d.recipient_no "
            "WHERE p.address = 'victim'"
        )[0]
    assert held == "ready"
    # Its last token continues it, inbox and history intact; the old token is spent.
    again, joined = Agent.join(store, space, "flow/victim@2", token=first.token)
    assert joined.participant_id == first.participant_id
    assert [d.body for d in again.claim().deliveries] == ["deploy notes for the victim"]
    assert [(h.sender, h.to) for h in again.search("s3cr3t")] == [("victim", ["otter"])]
    with pytest.raises(errors.AuthError):
        Agent.connect(store, space, "victim", first.token)
    assert participants.get(store, space, "victim").step == "s1"


@pytest.mark.parametrize("who", ["last token", "parent token", "operator key"])
def test_S40_an_address_with_history_is_continued_by_its_token_its_parent_or_the_operator(
    store: Store, who: str
) -> None:
    made = Operator(store).create_space("agentiflow")
    space, key = made.id, made.join_key
    lead, lead_joined = Agent.join(store, space, "flow/heron", join_key=key, lead=True)
    kid, first = Agent.join(store, space, "flow/heron>lynx#1", parent_token=lead_joined.token)
    lead.send("lynx#1", "your task")
    kid.leave()
    credential: dict[str, Any] = {
        "last token": {"token": first.token},
        "parent token": {"parent_token": lead_joined.token},
        "operator key": {"operator_key": keys.presented(store)},
    }[who]
    again, joined = Agent.join(store, space, "flow/heron>lynx#1@2", **credential)
    assert (joined.address, joined.participant_id) == ("lynx#1", first.participant_id)
    assert [d.body for d in again.claim().deliveries] == ["your task"]
    me = participants.get(store, space, "lynx#1")
    assert (me.status, me.parent) == ("running", "lead")


def test_S40_a_parent_that_joined_in_the_same_instant_as_its_child_continues_it(
    clocked: Store,
) -> None:
    """The parent must have been in the space when the child first joined:
    joining at the very same time (the clock stands still here) counts."""
    made = Operator(clocked).create_space("agentiflow")
    lead, lead_joined = Agent.join(
        clocked, made.id, "flow/heron", join_key=made.join_key, lead=True
    )
    kid, first = Agent.join(clocked, made.id, "flow/heron>lynx#1", parent_token=lead_joined.token)
    assert participants.get(clocked, made.id, "lead").joined_at_utc == (
        participants.get(clocked, made.id, "lynx#1").joined_at_utc
    )
    kid.leave()
    _, again = Agent.join(clocked, made.id, "flow/heron>lynx#1@2", parent_token=lead_joined.token)
    assert (again.address, again.participant_id) == ("lynx#1", first.participant_id)


def test_S40_a_newcomer_on_a_recorded_parents_address_is_not_that_parent(store: Store) -> None:
    """A child names a parent that had not joined yet; a join-key holder that
    takes that address later cannot use its own token to continue the child."""
    made = Operator(store).create_space("workflow")
    space, key = made.id, made.join_key
    kid, first = Agent.join(store, space, "flow/kid", join_key=key, parent="planner")
    kid.leave()
    _, squatter = Agent.join(store, space, "flow/planner", join_key=key)
    _, stranger = Agent.join(store, space, "flow/stranger", join_key=key)
    before = rows(store)
    for token in (squatter.token, stranger.token):
        assert refused(
            errors.Forbidden,
            lambda t=token: Agent.join(store, space, "flow/kid@2", parent_token=t),
        ) == (
            "kid has joined this space before: continuing it needs its last token (--token), "
            "the token of its parent planner (--parent-token) or the operator key; the join "
            "key admits new addresses only"
        )
    assert rows(store) == before
    assert participants.get(store, space, "kid").status == "left"


def test_S40_a_token_continues_only_its_own_address(store: Store) -> None:
    made = Operator(store).create_space("workflow")
    space, key = made.id, made.join_key
    _, lynx = Agent.join(store, space, "flow/lynx", join_key=key, pid=None)
    before = rows(store)
    assert refused(
        errors.AuthError, lambda: Agent.join(store, space, "flow/new", token=lynx.token)
    ) == (
        f"new has not joined space {space} before, and a token continues only its own address: "
        "a new address needs the join key, the operator key or a parent's token"
    )
    assert rows(store) == before
    # Alone, its own token continues it even while it is live (a retry).
    _, again = Agent.join(store, space, "flow/lynx@2", token=lynx.token)
    assert again.participant_id == lynx.participant_id


def test_S40_an_imported_address_is_continued_with_the_operator_key_not_the_join_key(
    store: Store, clocked_url: str, tmp_path: Path
) -> None:
    space = Operator(store).create_space("workflow").id
    _, first, _ = trusted.join_gone(store, space, "flow/lynx", step="build")
    otter, _ = trusted.join(store, space, "flow/otter")
    otter.send("lynx", "kept across the import")
    export_space(store, space, tmp_path / "out")
    other = open_store(clocked_url)
    try:
        import_dir(other, tmp_path / "out")
        key = Operator(other).rotate_join_key(space).join_key
        before = rows(other)
        assert "join key admits new addresses only" in refused(
            errors.Forbidden, lambda: Agent.join(other, space, "flow/lynx@2", join_key=key)
        )
        assert rows(other) == before
        again, joined = Agent.join(other, space, "flow/lynx@2", operator_key=keys.presented(other))
        assert joined.participant_id == first.participant_id
        assert [d.body for d in again.claim().deliveries] == ["kept across the import"]
        assert participants.get(other, space, "lynx").step == "build"
    finally:
        other.close()


# --- a re-join keeps the directory fields it does not name --------------------------------------
FIELDS = {"step": "s1", "role": "log surveyor", "archetype": "surveyor", "task": "scan logs"}


def _fields(store: Store, space: str, address: str) -> dict[str, Any]:
    p = participants.get(store, space, address)
    return {"parent": p.parent, **{name: getattr(p, name) for name in FIELDS}}


def test_S40_a_library_rejoin_keeps_the_fields_it_does_not_name_and_empty_clears(
    store: Store,
) -> None:
    made = Operator(store).create_space("workflow")
    space, key = made.id, made.join_key
    boss, _ = Agent.join(store, space, "flow/boss", join_key=key)
    _, first = Agent.join(store, space, "flow/lynx", join_key=key, parent="boss", **FIELDS)
    me, again = Agent.join(store, space, "flow/lynx@2", token=first.token)
    assert _fields(store, space, "lynx") == {"parent": "boss", **FIELDS}
    # `parent` still reaches its parent, and `step:s1` still reaches it.
    assert me.send("parent", "done").reached == ["boss"]
    assert boss.send("step:s1", "next step").reached == ["lynx"]
    _, last = Agent.join(store, space, "flow/lynx@3", token=again.token, role="", parent="")
    assert _fields(store, space, "lynx") == {**FIELDS, "parent": None, "role": None}
    Agent.join(store, space, "flow/lynx@4", token=last.token, archetype="", step="s2")
    assert _fields(store, space, "lynx") == {
        **FIELDS,
        "parent": None,
        "role": None,
        "archetype": None,
        "step": "s2",
    }


def test_S40_a_cli_rejoin_keeps_the_fields_it_does_not_name_and_empty_clears(
    cli: Cli, store: Store
) -> None:
    made = Operator(store).create_space("workflow")
    space = made.id
    Agent.join(store, space, "flow/boss", join_key=made.join_key)
    first = cli(
        "join", space, "flow/lynx", "--json", "--parent", "boss", "--step", "s1",
        "--role", "log surveyor", "--archetype", "surveyor", "--task", "scan logs",
        "--join-key", made.join_key,
    )  # fmt: skip
    assert first.code == 0, first.err
    token = first.json()["token"]
    # A restart holding only its identity: no join key, its last token.
    alone = {"BROKER_TOKEN": token, "BROKER_JOIN_KEY": ""}
    again = cli("join", space, "flow/lynx@2", "--json", env=alone)
    assert again.code == 0, again.err
    assert _fields(store, space, "lynx") == {"parent": "boss", **FIELDS}
    cleared = cli(
        "join", space, "flow/lynx@3", "--role", "", "--archetype", "", "--task", "",
        "--token", again.json()["token"], env={"BROKER_JOIN_KEY": ""},
    )  # fmt: skip
    assert cleared.code == 0, cleared.err
    assert _fields(store, space, "lynx") == {
        "parent": "boss",
        "step": "s1",
        "role": None,
        "archetype": None,
        "task": None,
    }


def test_S40_agent_run_rejoins_with_the_operator_key_and_keeps_its_fields(
    cli: Cli, store: Store
) -> None:
    made = Operator(store).create_space("workflow")
    space = made.id
    Agent.join(store, space, "flow/boss", join_key=made.join_key)
    run = ("agent", "run", space, "worker", "--wait", "0.2", "--quiet")
    first = cli(
        *run, "--role", "builder", "--archetype", "researcher", "--parent", "boss", "--", "true"
    )
    assert first.code == 0, first.err
    assert _fields(store, space, "worker")["archetype"] == "researcher"
    # Its process has exited: the operator key continues it, and what it does
    # not repeat stays (not --archetype specialist, not --parent lead).
    again = cli(*run, "--task", "ship it", "--", "true")
    assert again.code == 0, again.err
    assert _fields(store, space, "worker") == {
        "parent": "boss",
        "step": None,
        "role": "builder",
        "archetype": "researcher",
        "task": "ship it",
    }
    # A first join still gets the documented defaults.
    assert cli("agent", "run", space, "helper", "--wait", "0.2", "--", "true").code == 0
    helper = _fields(store, space, "helper")
    assert (helper["parent"], helper["archetype"]) == ("lead", "specialist")


def test_S40_a_restarted_lead_respawns_a_live_teammate_with_its_kept_token(store: Store) -> None:
    from broker.teammates.runtime import Team

    op = Operator(store)
    space = op.create_space("agentiflow").id
    lead, _ = op.join(space, "flow/heron", lead=True)
    first = Team(op, lead)
    mate = first.spawn_teammate("worker", "builder", "build it", lambda ctx, turn: None)
    assert first.shutdown() == []
    kept = mate.token
    # Its worker came back (another process of the old team): live by its heartbeat.
    Agent.connect(store, space, "worker", kept).set_status("idle")
    second = Team(op, lead)
    try:
        message = refused(
            errors.Conflict,
            lambda: second.spawn_teammate("worker", "builder", "again", lambda c, t: None),
        )
        assert "worker is held by 'worker' (its heartbeat is fresh)" in message
        again = second.spawn_teammate("worker", "builder", "again", lambda c, t: None, token=kept)
        assert again.participant_id == mate.participant_id
    finally:
        assert second.shutdown() == []


# --- served: liveness outlasts a model call -------------------------------------------------------
@contextmanager
def broker_serve(home: Path, db_url: str) -> Iterator[tuple[str, str]]:
    """``broker serve`` on the test's store (either backend): its base URL and
    the operator key."""
    env = clean_env(home, BROKER_URL=db_url)
    if db_url.startswith("postgresql"):
        import pgtest

        env["BROKER_OPERATOR_KEY"] = key = pgtest.operator_key()
    else:
        key = (home / "broker.db.operator-key").read_text().strip()
    log = home.parent / "serve.log"
    sock = home.parent / "serve.sock"  # a PostgreSQL store has no folder to put it beside
    with open(log, "w+b") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "broker", "serve", "--port", "0", "--socket", str(sock)],
            stdout=out,
            stderr=out,
            env=env,
        )
        try:
            deadline = time.monotonic() + 90
            while not (found := READY.search(log.read_text(errors="replace"))):
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.02)
            yield "http://" + found.group(2), key
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def test_S40_a_served_agent_in_a_long_model_call_keeps_its_address(
    store: Store, db_url: str, tmp_path: Path
) -> None:
    """Its lease is 0.2 s; its model call takes longer. Before S40 its
    address was free a lease after its last call, and the operator's join (or
    anyone's) took it; now it is live for live_seconds, and its token works on."""
    with broker_serve(tmp_path / "home", db_url) as (base, key):
        op = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        made = op.post("/api/spaces", json={"kind": "session", "settings": {"lease_seconds": 0.2}})
        assert made.status_code == 201, made.text
        sid = made.json()["id"]
        people = f"/api/sessions/{sid}/participants"
        joined = op.post(people, json={"codename": "flow/lynx", "step": "s1", "role": "coder"})
        assert joined.status_code == 201, joined.text
        token = joined.json()["token"]
        me = httpx.Client(
            base_url=f"{base}/api/sessions/{sid}/agent",
            headers={"Authorization": f"Bearer {token}"},
            timeout=60,
        )
        assert me.post("/turn", json={}).status_code == 200
        time.sleep(0.8)  # the model call: four leases without a broker call
        taken = op.post(people, json={"codename": "flow/lynx@2"})
        assert taken.status_code == 409, taken.text
        assert "its heartbeat is fresh" in taken.json()["message"]
        sent = me.post("/send", json={"to": ["operator"], "text": "the model answered"})
        assert sent.status_code == 200, sent.text
        # A re-join with its token keeps what it does not name; "" clears one.
        again = op.post(people, json={"codename": "flow/lynx@2", "token": token, "role": ""})
        assert again.status_code == 201, again.text
        lynx = op.get(f"{people}/lynx").json()
        assert (lynx["step"], lynx["role"]) == ("s1", None)
        # Left, it is not live: the operator key continues it (never the join key).
        renewed = httpx.Client(
            base_url=f"{base}/api/sessions/{sid}/agent",
            headers={"Authorization": f"Bearer {again.json()['token']}"},
        )
        assert renewed.post("/leave").status_code == 200
        assert op.post(people, json={"codename": "flow/lynx@3"}).status_code == 201
        for client in (op, me, renewed):
            client.close()
