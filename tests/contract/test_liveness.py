"""S27, S32: who keeps an address live, with real processes and real waits.

A participant blocked in a wait (``inbox next --wait``, ``claim``/``next_turn``
with ``wait``, their asyncio twins, a served long-poll) keeps its heartbeat
fresh for as long as it waits, so nobody can continue its address without its
token meanwhile, not even the operator (the join key never can, S40); once its
process is killed the beats stop and the operator can continue the address
``live_seconds`` later. A join may record as its process only the joining
process or one of its ancestors.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import trusted
from conftest import Result
from served import Server, clean_env, serving

from broker import Operator, Store, errors
from broker.api.aio import AsyncAgent
from broker.ids import parse_ts
from broker.spaces import participants
from broker.store.sqlite import Tx

pytestmark = pytest.mark.timeout(300)

# The spaces' lease_seconds and live_seconds here: a heartbeat's liveness window.
# 2 s, the smallest with room to spare: a waiter beats every third of the
# window but never more often than once a second (HEARTBEAT_S), so its
# heartbeat is at most ~1 s old and stays fresh with a second to spare.
LEASE = 2.0
# Past the window: a heartbeat that nothing refreshed since is this much older
# than the window (what only a beat keeps fresh).
MARGIN = 1.0
Cli = Callable[..., Result]


def _env(tmp_path: Path, db_url: str, **extra: str) -> dict[str, str]:
    """The environment the ``cli`` fixture gives its commands, for a process
    that runs in the background."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
    env.update(BROKER_HOME=str(tmp_path / "home"), BROKER_URL=db_url)
    if db_url.startswith("postgresql"):
        import pgtest

        env["BROKER_OPERATOR_KEY"] = pgtest.operator_key()
    return {**env, **extra}


def _holder(store: Store, space: str, address: str) -> tuple[str, str]:
    row = participants.get(store, space, address)
    return row.codename, row.status


def _join_key(store: Store, space: str) -> participants.Credential:
    return participants.Credential(join_key=Operator(store).rotate_join_key(space).join_key)


def _operator_key(store: Store) -> participants.Credential:
    """The credential that may continue an address once its holder is gone (S40)."""
    return trusted.credential(store)


def _retake(
    store: Store, space: str, codename: str, key: participants.Credential, **kw: Any
) -> Any:
    from broker.model.inputs import JoinInput

    return participants.join(
        store, space, JoinInput.parse({"codename": codename, **kw}), credential=key
    )


def _seen(store: Store, space: str, address: str) -> datetime:
    return parse_ts(participants.get(store, space, address).last_seen_utc)


def _seen_after(store: Store, space: str, address: str, before: datetime) -> datetime:
    """The heartbeat of ``address`` once it is newer than ``before`` (within 60 s):
    a waiter's own first call, or its beat, has landed."""
    deadline = time.monotonic() + 60
    while (seen := _seen(store, space, address)) <= before:
        assert time.monotonic() < deadline, f"{address}: no heartbeat after {before} in 60 s"
        time.sleep(0.05)
    return seen


def _taken_back_within(seconds: float, take: Callable[[], Any]) -> Any:
    """``take()`` until it stops being a conflict, at most ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return take()
        except errors.Conflict:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.fixture
def lead_space(cli: Cli) -> str:
    made = cli(
        "space", "create", "--kind", "agentiflow", "--setting", f"lease_seconds={LEASE:g}",
        "--setting", f"live_seconds={LEASE:g}", "--json",
    )  # fmt: skip
    assert made.code == 0, made.err
    return str(made.json()["id"])


def test_S27_a_lead_blocked_in_inbox_next_wait_keeps_its_address_until_it_is_killed(
    cli: Cli, store: Store, lead_space: str, tmp_path: Path, db_url: str
) -> None:
    space = lead_space
    token = cli("join", space, "flow/boss", "--lead", "--json").json()["token"]
    env = _env(tmp_path, db_url, BROKER_SPACE=space, BROKER_AS="lead", BROKER_TOKEN=token)
    cmd = [sys.executable, "-m", "broker", "inbox", "next", "--wait", "120"]
    joined = _seen(store, space, "lead")
    waiter = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        # Its own first call landed, so it waits now; a window and a margin later
        # that call (and its join) are stale: only its beats keep it live.
        called = _seen_after(store, space, "lead", joined)
        time.sleep(LEASE + MARGIN)
        usurper = cli("join", space, "flow/usurper", "--lead")  # the join key: never (S40)
        assert usurper.code == 4 and "forbidden" in usurper.err, usurper.err
        with pytest.raises(errors.Conflict) as info:  # the operator: not while it waits
            _retake(store, space, "flow/usurper", _operator_key(store), lead=True)
        assert info.value.message == (
            "lead is held by 'flow/boss' (its heartbeat is fresh): a re-join "
            f"presents its token (--token), or waits until it has left or its heartbeat is "
            f"older than {LEASE:g} s"
        )
        assert _holder(store, space, "lead") == ("flow/boss", "running")  # nothing written
        assert _seen(store, space, "lead") > called  # it beat meanwhile
        assert cli("message", "send", space, "to the lead").code == 0
        out, err = waiter.communicate(timeout=60)
        assert waiter.returncode == 0, err  # not auth_failed: it still holds its address
        assert "to the lead" in out
        turn = out.split()[1]  # "turn <id> (confirm with: broker inbox seen <id>)"
        me = {"BROKER_SPACE": space, "BROKER_AS": "lead", "BROKER_TOKEN": token}
        assert cli("inbox", "seen", turn, env=me).code == 0
        # Waiting again, then killed: the beats stop, and a lease later the address
        # can be taken back (S32), not before.
        before = _seen(store, space, "lead")
        waiter = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _seen_after(store, space, "lead", before)  # its first call: it waits now
        key = _operator_key(store)
        with pytest.raises(errors.Conflict):
            _retake(store, space, "flow/usurper", key, lead=True)
        assert waiter.poll() is None  # still waiting
        waiter.send_signal(signal.SIGKILL)
        waiter.wait()
        killed = time.monotonic()
        with pytest.raises(errors.Conflict):  # its last beat is fresh yet
            _retake(store, space, "flow/usurper", key, lead=True)
        taken = _taken_back_within(
            LEASE + 5, lambda: _retake(store, space, "flow/usurper", key, lead=True)
        )
        assert taken.address == "lead" and time.monotonic() - killed < LEASE + 5
        assert _holder(store, space, "lead") == ("flow/usurper", "running")
    finally:
        if waiter.poll() is None:
            waiter.kill()
        waiter.communicate()


WAYS = ("claim", "next_turn", "async claim", "async next_turn")


def test_S27_a_heartbeat_rolled_back_is_still_due_at_the_next_write(store: Store) -> None:
    """A write refreshes its caller's heartbeat at most once a second a process;
    one whose transaction rolls back (a group commit's pass run again, a
    caller's own transaction that fails) did not refresh it, so the next
    write does, at once, rather than a second later."""
    from broker.spaces import auth

    op = Operator(store)
    space = op.create_space("workflow").id
    agent, joined = op.join(space, "flow/w")
    before = _seen(store, space, joined.address)
    time.sleep(0.01)  # the next beat's time differs from the join's
    auth._beats.clear()
    with pytest.raises(RuntimeError), store.write() as t:
        auth.caller(t, agent.identity, store.now_ts())  # beats, then rolls back
        raise RuntimeError("the caller's own work failed")
    assert _seen(store, space, joined.address) == before
    assert auth.beat_due(store, agent.identity, store.now_ts())
    with store.write() as t:
        auth.caller(t, agent.identity, store.now_ts())
    assert _seen(store, space, joined.address) > before
    assert not auth.beat_due(store, agent.identity, store.now_ts())  # once a second


def test_S27_a_round_of_parked_callers_beats_is_one_statement_refusing_each_alone(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The keeper beats its parked callers in rounds, each round ONE statement
    (``auth.heartbeats``: a thousand parked long-polls' beats held the writer
    lock, and the event loop's requests, for ~10 ms a round as a statement
    each). In one round, a caller that left and one whose token was replaced
    are refused (missing from the answer, nothing written for them), and the
    callers beside them are beaten with the limits their waits sleep by."""
    from broker.spaces import auth

    op = Operator(store)
    space = op.create_space("workflow", live_seconds=30).id
    live, _ = op.join(space, "flow/live")
    gone, _ = op.join(space, "flow/gone")
    stale, first = trusted.join(store, space, "flow/stale")
    trusted.join(store, space, "flow/stale", token=first.token)  # a new token replaces it
    participants.leave(store, gone.identity)
    before = {a: _seen(store, space, a) for a in ("live", "gone", "stale")}
    time.sleep(0.01)  # the beat's time differs from the joins'
    statements: list[str] = []

    def noting(run: Callable[..., Any]) -> Callable[..., Any]:
        def noted(tx: Tx, sql: Any, *a: Any) -> Any:
            statements.append(str(sql).split(None, 1)[0])
            return run(tx, sql, *a)

        return noted

    with store.write() as t:
        for name in ("execute", "defer", "many", "one", "all", "rows", "row"):
            monkeypatch.setattr(Tx, name, noting(getattr(Tx, name)))
        found = auth.beat_many(t, [live.identity, gone.identity, stale.identity], store.now_ts())
        monkeypatch.undo()
    assert statements == ["UPDATE"]
    assert list(found) == [live.identity.participant_id]
    assert found[live.identity.participant_id].limits.live_seconds == 30
    assert _seen(store, space, "live") > before["live"]
    assert _seen(store, space, "gone") == before["gone"]
    assert _seen(store, space, "stale") == before["stale"]
    assert not auth.beat_due(store, live.identity, store.now_ts())  # beaten: not due again
    with pytest.raises(errors.AuthError):
        stale.claim()  # its own re-check says why


def test_S27_a_library_call_that_waits_keeps_its_caller_live(store: Store) -> None:
    """Every way a library caller waits, side by side: four participants of one
    space, each blocked in one of them (its own thread), through one liveness
    window together rather than one window each; then a message ends each wait."""
    op = Operator(store)
    space = op.create_space("workflow", lease_seconds=LEASE, live_seconds=LEASE).id
    # No process recorded: each is live by its heartbeat alone.
    agents = {how: op.join(space, f"flow/w{i}")[0] for i, how in enumerate(WAYS)}
    sender = op.join(space, "flow/sender")[0]
    key = _operator_key(store)
    joined = {i: _seen(store, space, f"w{i}") for i in range(len(WAYS))}
    waited: dict[str, Any] = {}

    def wait(how: str) -> None:
        agent = agents[how]
        if how.startswith("async"):
            twin = AsyncAgent.wrap(agent)
            call = twin.claim if how == "async claim" else twin.next_turn
            waited[how] = asyncio.run(call(wait=60))  # type: ignore[operator]
        else:
            waited[how] = getattr(agent, how)(wait=60)

    threads = [threading.Thread(target=wait, args=(how,)) for how in WAYS]
    for thread in threads:
        thread.start()
    try:
        # Each one's heartbeat moved on (its call, or its first beat): it waits
        # now. A window and a margin later only its beats keep it live.
        called = {i: _seen_after(store, space, f"w{i}", joined[i]) for i in joined}
        time.sleep(LEASE + MARGIN)
        for i, how in enumerate(WAYS):
            before = participants.get(store, space, f"w{i}")
            with pytest.raises(errors.Conflict) as info:
                _retake(store, space, f"flow/w{i}@2", key)
            assert "(its heartbeat is fresh)" in info.value.message, how
            after = participants.get(store, space, f"w{i}").codename
            assert after == before.codename == f"flow/w{i}", how
            assert parse_ts(before.last_seen_utc) > called[i], how  # it beat meanwhile
        for i in range(len(WAYS)):
            sender.send(f"w{i}", f"wake w{i}")
    finally:
        for thread in threads:
            thread.join(60)
    # Each wait ended as waits do, with the message that woke it, not with auth_failed.
    assert sorted(waited) == sorted(WAYS)
    for i, how in enumerate(WAYS):
        got = waited[how]
        bodies = (
            [d.body for d in got.deliveries]
            if "claim" in how
            else [item.body for item in got.items]
        )
        assert bodies == [f"wake w{i}"], how
    # Nobody waits now: live_seconds later the operator may continue each.
    for i, how in enumerate(WAYS):
        taken = _taken_back_within(
            LEASE + 5, lambda i=i: _retake(store, space, f"flow/w{i}@2", key)
        )
        assert taken.address == f"w{i}", how


# --- served: the server waits on the client's behalf ----------------------------------------
@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from serving(tmp_path_factory, "serve")


POLL = """
import sys, httpx
base, token, path = sys.argv[1:4]
httpx.post(base + path, json={"wait": 120}, headers={"Authorization": "Bearer " + token}, timeout=200)
"""


def test_S27_a_served_long_poll_keeps_its_caller_live_and_a_killed_client_does_not(
    srv: Server,
) -> None:
    with srv.operator() as op:
        made = op.post(
            "/api/spaces",
            json={"kind": "session", "settings": {"lease_seconds": LEASE, "live_seconds": LEASE}},
        )
        assert made.status_code == 201, made.text
        sid = made.json()["id"]
        people = f"/api/sessions/{sid}/participants"
        # A served join records no process (the server cannot tell whose it is).
        refused = op.post(people, json={"codename": "flow/lynx", "pid": os.getpid()})
        assert refused.status_code == 422 and refused.json()["field"] == "pid", refused.text
        token = op.post(people, json={"codename": "flow/lynx"}).json()["token"]
        store = Store(srv.url)
        joined = _seen(store, sid, "lynx")
        poll = subprocess.Popen(
            [sys.executable, "-c", POLL, srv.base, token, f"/api/sessions/{sid}/agent/inbox/claim"],
            env=clean_env(srv.home),
        )
        try:
            # The server has called or beaten for it (it waits now); a window and
            # a margin later only the server's beats keep it live.
            called = _seen_after(store, sid, "lynx", joined)
            time.sleep(LEASE + MARGIN)
            r = op.post(people, json={"codename": "flow/lynx@2"})
            assert r.status_code == 409, r.text
            assert "(its heartbeat is fresh)" in r.json()["message"]
            assert _seen(store, sid, "lynx") > called  # the server beat meanwhile
            poll.send_signal(signal.SIGKILL)
            poll.wait()
            killed = time.monotonic()
            # The server sees its client gone and stops beating for it.
            deadline = killed + LEASE + 10
            while (r := op.post(people, json={"codename": "flow/lynx@2"})).status_code == 409:
                assert time.monotonic() < deadline, r.text
                time.sleep(0.3)
            assert r.status_code == 201, r.text
            assert r.json()["address"] == "lynx"
        finally:
            store.close()
            if poll.poll() is None:
                poll.kill()
            poll.wait()
    with httpx.Client(base_url=srv.base) as c:  # the old token now: S10's one message
        r = c.post(
            f"/api/sessions/{sid}/agent/inbox/claim",
            json={},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert r.status_code == 401 and r.json()["message"] == errors.TOKEN_REFUSED


# --- S27: a join records only its own process --------------------------------------------------
def test_S27_a_join_may_record_only_its_own_process_or_an_ancestor(cli: Cli, store: Store) -> None:
    op = Operator(store)
    space = op.create_space("agentiflow").id
    key = _join_key(store, space)
    secret = str(key.join_key)
    sibling = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with store.read() as t:
            before = t.one("SELECT COUNT(*) FROM participants")[0]
        for pid, why in [
            (1, "process 1 never exits"),
            (sibling.pid, f"process {sibling.pid} is not one of them"),
        ]:
            with pytest.raises(errors.InvalidInput) as info:
                _retake(store, space, "flow/squatter", key, lead=True, pid=pid)
            assert info.value.fields == {"field": "pid"}
            assert info.value.message == (
                f"pid {pid} refused: a join records only the joining process or one of its "
                f"ancestors (that process keeps the address live while it runs), and {why}"
            )
        squat = cli("join", space, "flow/squatter", "--lead", "--pid", "1", "--join-key", secret)
        assert squat.code == 2 and squat.err.startswith("broker: invalid_input: --pid 1 refused")
        with store.read() as t:
            assert t.one("SELECT COUNT(*) FROM participants")[0] == before  # nothing written
        # Its own process and its parent may be recorded: the CLI's parent is this test.
        assert _retake(store, space, "flow/me", key, pid=os.getpid()).address == "me"
        assert _retake(store, space, "flow/up", key, pid=os.getppid()).address == "up"
        joined = cli(
            "join", space, "flow/boss", "--lead", "--pid", str(os.getpid()), "--join-key", secret
        )
        assert joined.code == 0, joined.err
        assert participants.get(store, space, "lead").pid == os.getpid()
    finally:
        sibling.kill()
        sibling.wait()


def test_S27_a_join_pid_above_2_31_minus_1_is_a_bad_pid_and_the_largest_is_only_not_its_own(
    store: Store,
) -> None:
    """The declared input takes any 64-bit pid; the join's own bound is the
    kernel's (at most 2**31 - 1), named in one exact line. The largest pid
    passes that bound and is refused only as a process that is not its own."""
    space = Operator(store).create_space("workflow").id
    key = _join_key(store, space)
    top = 2**31 - 1
    with store.read() as t:
        before = t.one("SELECT COUNT(*) FROM participants")[0]
    for pid, message in [
        (top + 1, f"bad pid {top + 1}: a process id, 1 to {top}"),
        (
            top,
            f"pid {top} refused: a join records only the joining process or one of its "
            f"ancestors (that process keeps the address live while it runs), and "
            f"process {top} is not one of them",
        ),
    ]:
        with pytest.raises(errors.InvalidInput) as info:
            _retake(store, space, "squatter", key, pid=pid)
        assert (info.value.message, info.value.fields) == (message, {"field": "pid"})
    with store.read() as t:
        assert t.one("SELECT COUNT(*) FROM participants")[0] == before  # nothing written


def test_S27_a_waiter_beats_every_third_of_live_seconds_between_1_and_10_s() -> None:
    from broker.spaces import auth
    from broker.store.settings import Limits

    every = {live: auth.beat_every(Limits(live_seconds=live)) for live in (1, 3, 12, 30, 3600)}
    assert every == {1: 1.0, 3: 1.0, 12: 4.0, 30: 10.0, 3600: 10.0}
