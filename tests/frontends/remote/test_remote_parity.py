"""Served mode's client (spec §Served mode): ``broker.frontends.remote``'s RemoteAgent and
RemoteOperator are ``Agent`` and ``Operator`` over HTTP.

One test compares the signatures of every public method of the library's
handles with their remote twins (parameter names, kinds and defaults), with
an explicit list of what a served client cannot offer and why. The others run
the remote twins against a real ``broker serve`` process and compare their
answers with the library's on the same store (the filters of ``log`` and
``follow``, the directory, the board, the queue), and the client-mode CLI
(``BROKER_URL`` + a secret only) with the new filters.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import trusted

from broker import Agent, Operator, Store, errors
from broker.frontends.remote import Connection, RemoteAgent, RemoteOperator
from broker.model.records import Joined
from tests.served import Server, serving, store_of

pytestmark = pytest.mark.timeout(300)

# What a served client cannot offer, and why (the lead adds to this list only
# with a reason; an entry whose method came to be served fails the test).
NOT_SERVED = {
    # An agent joins with the operator's say-so in served mode (RemoteOperator.join);
    # a self-join over HTTP needs trust's join credentials and an endpoint for them.
    "Agent.join",
    # The teammates runtime's turn bookkeeping: it runs beside the store and hands
    # its agents only BROKER_URL + a token. Serving append_history would mean
    # writing history rows from a client-sent Turn (its senders and bodies).
    "Agent.quarantine_turn",
    "Agent.append_history",
    "Agent.undo_history",
    # Operations on the database file itself: run them on the server's host.
    "Operator.doctor",  # file modes, pragmas, WAL size of the file
    "Operator.backup",  # writes a copy of the file to a path on that host
    "Operator.vacuum",  # rewrites the file under its writer lock
    "Operator.export_space",  # writes JSONL files under a folder on that host
    "Operator.export_mailbox",
    "Operator.import_dir",  # reads files from a folder on that host
    "Operator.purge_space",  # exports to a folder on that host, then deletes
    "Operator.migrate_store",  # opens another store from that host
    # The key a handle proved on the store (`broker key show`, where the key file
    # is); a RemoteOperator's key is the one it presents, checked per request.
    "Operator.key",
}
# Parameters no served call takes: a served call is its own transaction (the
# server group-commits it with its neighbours), so ``tx`` has no meaning there.
IN_PROCESS_ONLY = {"tx"}
# Names only the remote twins have, and why.
REMOTE_ONLY: set[str] = set()


def _public(cls: type) -> set[str]:
    return {n for n in dir(cls) if not n.startswith("_")}


def _shape(fn: Any, *, drop_first: bool) -> list[tuple[str, Any, Any]]:
    params = list(inspect.signature(fn).parameters.values())
    if drop_first:
        params = params[1:]  # the store of a classmethod; the remote one takes a Connection
    return [(p.name, p.kind, p.default) for p in params if p.name not in IN_PROCESS_ONLY]


@pytest.mark.parametrize(
    ("sync_cls", "remote_cls"), [(Agent, RemoteAgent), (Operator, RemoteOperator)]
)
def test_served_remote_twins_have_the_library_methods_with_the_same_parameters(
    sync_cls: type, remote_cls: type
) -> None:
    """spec §Served mode: the client surface is the library's, minus NOT_SERVED."""
    sync_names, remote_names = _public(sync_cls), _public(remote_cls)
    not_served = {n.split(".")[1] for n in NOT_SERVED if n.startswith(sync_cls.__name__ + ".")}
    assert not_served <= sync_names, "NOT_SERVED names a method the library lacks"
    assert not (not_served & remote_names), "NOT_SERVED names a method that is served now"
    remote_only = {n.split(".")[1] for n in REMOTE_ONLY if n.startswith(remote_cls.__name__ + ".")}
    assert remote_names - sync_names == remote_only
    missing = sync_names - not_served - remote_names
    assert not missing, f"{remote_cls.__name__} lacks {sorted(missing)}"
    for name in sorted(sync_names - not_served):
        sync_attr = inspect.getattr_static(sync_cls, name)
        remote_attr = inspect.getattr_static(remote_cls, name)
        where = f"{remote_cls.__name__}.{name}"
        assert type(remote_attr) is type(sync_attr), where  # property, classmethod, function
        if isinstance(sync_attr, property):
            continue
        if not callable(sync_attr) and not isinstance(sync_attr, classmethod | staticmethod):
            continue
        is_cls = isinstance(sync_attr, classmethod)
        sync_shape = _shape(getattr(sync_cls, name), drop_first=is_cls)
        remote_shape = _shape(getattr(remote_cls, name), drop_first=is_cls)
        assert remote_shape == sync_shape, where
        if is_cls:
            first = next(iter(inspect.signature(getattr(remote_cls, name)).parameters))
            assert first == "conn", where


# --- against a real server ------------------------------------------------------------------
@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from serving(tmp_path_factory, "parity")


@pytest.fixture(scope="module")
def store(srv: Server) -> Iterator[Store]:
    yield from store_of(srv)


@pytest.fixture(params=["unix", "http"])
def conn(srv: Server, request: pytest.FixtureRequest) -> Iterator[Connection]:
    c = Connection(f"unix://{srv.socket}" if request.param == "unix" else srv.base)
    yield c
    c.close()


def join(store: Store, space: str, codename: str) -> tuple[Agent, Joined]:
    """The one place these tests join: with the operator key (tests/trusted.py)."""
    return trusted.join(store, space, codename)


class Swarm:
    """A space with lynx, otter and one that left, traffic between them, a
    board post and a held key."""

    def __init__(self, store: Store) -> None:
        op = Operator(store)
        self.space = op.create_space("session").id
        self.lynx, _ = join(store, self.space, "lynx")
        self.otter, _ = join(store, self.space, "otter")
        self.gone, _ = join(store, self.space, "gone")
        for n in range(7):
            self.lynx.send("otter", f"lynx to otter {n}")
            self.otter.send("lynx", f"otter to lynx {n}")
        self.lynx.post("on the board")
        self.lynx.claim_key("src/app.py", 3600)
        self.gone.leave()
        op.send(self.space, "from the operator", to=["lynx"])


@pytest.fixture(scope="module")
def swarm(store: Store) -> Swarm:
    return Swarm(store)


def _ids(entries: list[Any]) -> list[str]:
    return [e.id for e in entries]


FILTERS: list[dict[str, Any]] = [
    {},
    {"sender": "lynx"},
    {"to": "lynx"},
    {"sender": "otter", "tail": 3},
    {"kinds": ["post"]},
    {"kinds": ["direct", "operator"], "limit": 4},
    {"after": 5, "sender": "lynx"},
    {"since": "2000-01-01T00:00:00Z", "tail": 2},
    {"since": "2999-01-01T00:00:00Z"},
    {"tail": 1},
]


@pytest.mark.parametrize("query", FILTERS, ids=lambda q: ",".join(q) or "all")
def test_served_remote_log_filters_answer_what_the_library_answers(
    store: Store, swarm: Swarm, conn: Connection, srv: Server, query: dict[str, Any]
) -> None:
    """Operator.log's filters (after as a seq or an id, kinds, sender, to, since,
    limit, tail) go to the server and come back as the library's rows."""
    local = Operator(store).log(swarm.space, **query)
    remote = RemoteOperator(conn, srv.key).log(swarm.space, **query)
    assert _ids(remote) == _ids(local) and remote == local
    if query.get("after") is not None:  # the same cursor as a message id
        cursor = Operator(store).log(swarm.space)[query["after"] - 1].id
        by_id = RemoteOperator(conn, srv.key).log(swarm.space, **{**query, "after": cursor})
        assert _ids(by_id) == _ids(local)


def test_served_remote_log_pages_through_long_logs_and_keeps_the_filters(
    store: Store, conn: Connection, srv: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    from broker.frontends.remote import operator as remote_operator

    sw = Swarm(store)
    monkeypatch.setattr(remote_operator, "PAGE", 3)  # many pages out of a short log
    op, rop = Operator(store), RemoteOperator(conn, srv.key)
    assert rop.log(sw.space) == op.log(sw.space)
    assert rop.log(sw.space, sender="otter") == op.log(sw.space, sender="otter")
    assert rop.log(sw.space, sender="lynx", limit=5) == op.log(sw.space, sender="lynx", limit=5)


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"limit": 2, "tail": 2}, "limit and tail exclude each other"),
        ({"tail": 0}, "bad tail 0: a whole number from 1"),
        ({"limit": True}, "bad limit True: a whole number, not bool"),
        ({"after": -1}, "bad cursor -1: a message id or a seq"),
    ],
)
def test_S33_served_remote_log_refuses_what_the_library_refuses(
    store: Store, swarm: Swarm, conn: Connection, srv: Server, query: dict[str, Any], message: str
) -> None:
    with pytest.raises(errors.InvalidInput) as local:
        Operator(store).log(swarm.space, **query)
    with pytest.raises(errors.InvalidInput) as remote:
        RemoteOperator(conn, srv.key).log(swarm.space, **query)
    assert remote.value.message == local.value.message == message


def test_S33_served_log_query_refuses_two_cursors_and_bad_filters(
    srv: Server, swarm: Swarm
) -> None:
    """The input record's checks (messages.list): one line, 422, nothing else."""
    path = f"/api/sessions/{swarm.space}/messages"
    with srv.operator() as c:
        for params, words in (
            ({"after": "x", "after_seq": 1}, "exclude each other"),
            ({"limit": 3, "tail": 3}, "limit and tail exclude each other"),
            ({"tail": "many"}, "bad tail 'many': a whole number"),
            ({"sender": ""}, "bad sender: not empty"),  # its input record's words
        ):
            r = c.get(path, params=params)
            assert (r.status_code, r.json()["error"]) == (422, "invalid_input"), params
            assert words in r.json()["message"]
        r = c.get(f"/api/sessions/{swarm.space}/participants", params={"include_left": "yes"})
        assert r.status_code == 422 and "true or false" in r.json()["message"]


def test_served_remote_follow_takes_the_cursor_and_filters_of_the_library(
    store: Store, conn: Connection, srv: Server
) -> None:
    """follow(after=seq|id, sender=...) yields what the library's follow yields,
    then ends with the space (S7)."""
    sw = Swarm(store)
    Operator(store).stop_space(sw.space)
    op, rop = Operator(store), RemoteOperator(conn, srv.key)
    third = op.log(sw.space)[2]
    for query in (
        {},
        {"after": third.seq},
        {"after": third.id},
        {"sender": "otter"},
        {"to": "lynx", "kinds": ["direct"]},
        {"after": op.log(sw.space, tail=1)[0].id},  # the newest row: nothing after it
    ):
        local = [e for batch in op.follow(sw.space, **query) for e in batch]
        remote = [e for batch in rop.follow(sw.space, **query) for e in batch]
        assert _ids(remote) == _ids(local), query
    with pytest.raises(errors.MessageNotFound):
        next(iter(rop.follow(sw.space, after="msg_nosuch")))
    with pytest.raises(errors.InvalidInput):
        next(iter(rop.follow(sw.space, idle_timeout=float("nan"))))


def test_served_remote_follow_idle_timeout_is_not_reset_by_keep_alives(
    store: Store, conn: Connection, srv: Server
) -> None:
    """A running, quiet space: the follow ends after idle_timeout although the
    server keeps the stream alive (its keep-alives are not news)."""
    sw = Swarm(store)
    rop = RemoteOperator(conn, srv.key)
    newest = Operator(store).log(sw.space, tail=1)[0].seq
    assert list(rop.follow(sw.space, after=newest, idle_timeout=0.5)) == []


def test_served_remote_directory_board_and_queue_answer_what_the_library_answers(
    store: Store, swarm: Swarm, conn: Connection, srv: Server
) -> None:
    op, rop = Operator(store), RemoteOperator(conn, srv.key)
    sid = swarm.space
    assert rop.participants(sid) == op.participants(sid)
    assert rop.participants(sid, include_left=False) == op.participants(sid, include_left=False)
    assert "gone" in {p.address for p in rop.participants(sid)}
    assert "gone" not in {p.address for p in rop.participants(sid, include_left=False)}
    assert rop.participant(sid, "otter") == op.participant(sid, "otter")
    with pytest.raises(errors.NotFound):
        rop.participant(sid, "nobody")
    assert rop.board(sid) == op.board(sid) and [e.body for e in rop.board(sid)] == ["on the board"]
    assert rop.board(sid, limit=1) == op.board(sid, limit=1)
    assert rop.queue_stats(sid) == op.queue_stats(sid)
    # prune: a dry run lists and writes nothing (nobody here is stale by age alone)
    assert rop.prune(sid, older_than=0, check_pid=False, dry_run=True) == op.prune(
        sid, older_than=0, check_pid=False, dry_run=True
    )


def test_served_remote_agent_batches_acks_and_claims_and_sets_its_status(
    store: Store, conn: Connection, srv: Server
) -> None:
    sw = Swarm(store)
    lynx_token = join(store, sw.space, "lynx2")[1].token
    otter = join(store, sw.space, "otter2")[0]
    me = RemoteAgent.connect(conn, sw.space, "lynx2", lynx_token)
    results = me.send_many(
        [{"to": "otter2", "text": "one"}, {"to": ["otter2"], "text": "two", "idempotency_key": "k"}]
    )
    assert [r.reached for r in results] == [["otter2"], ["otter2"]]
    with pytest.raises(errors.InvalidInput, match=r"^bad items\[1\]\.text: "):
        me.send_many([{"to": "otter2", "text": "fine"}, {"to": "otter2", "text": ""}])
    otter.send("lynx2", "first")
    otter.send("lynx2", "second")
    first = me.claim()
    assert [d.body for d in first.deliveries] == ["first"]
    second = me.ack_and_claim(first.lease_token)
    assert [d.body for d in second.deliveries] == ["second"]
    assert me.ack(second.lease_token) == 1
    me.set_status("idle")
    assert Operator(store).participant(sw.space, "lynx2").status == "idle"
    with pytest.raises(errors.InvalidInput):
        me.set_status("asleep")
    assert me.history() == Agent.from_token(store, lynx_token).history()
    who = RemoteAgent.from_token(conn, lynx_token)
    assert (who.space_id, who.address) == (sw.space, "lynx2")


# --- the client-mode CLI -------------------------------------------------------------------
@pytest.mark.parametrize("scheme", ["unix", "http"])
def test_served_client_mode_cli_lists_the_log_with_the_library_filters(
    srv: Server, store: Store, swarm: Swarm, scheme: str
) -> None:
    """`broker message list RUN_ID --tail 5 --from lynx` etc. through the server
    give what they give on the file."""
    url = f"unix://{srv.socket}" if scheme == "unix" else srv.base
    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
    served = {**env, "BROKER_URL": url, "BROKER_OPERATOR_KEY": srv.key}
    on_file = {**env, "BROKER_URL": srv.url}

    def run(env: dict[str, str], *args: str) -> list[dict[str, Any]]:
        r = subprocess.run([sys.executable, "-m", "broker", *args, "--json"],
                           capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
        assert r.returncode == 0, r.stderr
        return [json.loads(line) for line in r.stdout.splitlines()]

    sid = swarm.space
    for args in (
        ["message", "list", sid, "--tail", "5", "--from", "lynx"],
        ["message", "list", sid, "--to", "otter", "--limit", "3"],
        ["message", "list", sid, "--after", "4", "--from", "otter"],
        ["message", "list", sid, "--since", "2000-01-01T00:00:00Z", "--tail", "2"],
        ["dir", "list", sid],
        ["dir", "show", sid, "otter"],
        ["board", "view", sid],
        ["board", "claims", sid],
        ["board", "journal", sid],
    ):
        got = run(served, *args)
        assert got == run(on_file, *args), args
        assert got, args  # something to compare
    tail = run(served, "message", "list", sid, "--tail", "5", "--from", "lynx")
    assert len(tail) == 5 and {e["sender"] for e in tail} == {"lynx"}


def test_S35_served_operator_send_takes_the_mail_fields_of_the_library(
    store: Store, conn: Connection, srv: Server
) -> None:
    """The operator's HTTP send carries thread, reply_to, importance and
    ack_required as ``Operator.send`` does, and refuses them alike (S33)."""
    op, rop = Operator(store), RemoteOperator(conn, srv.key)
    sid = op.create_space("session").id
    join(store, sid, "lynx")
    first = rop.send(sid, "plan", to=["lynx"], thread="plan", importance="high",
                     ack_required=True)  # fmt: skip
    reply = rop.send(sid, "more", to=["lynx"], reply_to=first.id)
    by_id = {e.id: e for e in op.log(sid)}
    a, b = by_id[first.id], by_id[reply.id]
    assert (a.via, a.thread, a.importance, a.ack_required) == ("cp", "plan", "high", True)
    assert (b.thread, b.reply_to) == ("plan", first.id)
    assert rop.status(sid, first.id) == op.status(sid, first.id)
    before = len(op.log(sid))
    with pytest.raises(errors.InvalidInput) as refused:
        rop.send(sid, "x", to=["lynx"], reply_to="abc")
    assert refused.value.fields.get("field") == "reply_to"
    assert "a message id (26 letters and digits)" in refused.value.message
    assert len(op.log(sid)) == before
