"""``broker serve`` over real HTTP (spec §Served mode): a real server process,
real clients (httpx) on loopback TCP and on the Unix socket."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trusted

from broker import Agent, Store, errors
from broker.delivery import wake
from tests.served import Server, clean_env, serving, store_of

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from serving(tmp_path_factory, "serve")


@pytest.fixture(scope="module")
def store(srv: Server) -> Iterator[Store]:
    yield from store_of(srv)


def new_space(srv: Server, kind: str = "session", **settings: Any) -> str:
    with srv.operator() as c:
        r = c.post("/api/spaces", json={"kind": kind, "settings": settings})
        assert r.status_code == 201, r.text
        return str(r.json()["id"])


def join(store: Store, space: str, codename: str, **fields: Any) -> tuple[Agent, str]:
    agent, joined = trusted.join(store, space, codename, **fields)
    return agent, joined.token


def coll(space: str) -> str:
    return {"ses": "sessions", "run": "runs", "af": "agentiflows"}[space.split("_")[0]]


def agent_path(space: str, rest: str) -> str:
    return f"/api/{coll(space)}/{space}/agent{rest}"


def log_of(srv: Server, space: str) -> list[dict[str, Any]]:
    with srv.operator() as c:
        r = c.get(f"/api/{coll(space)}/{space}/messages")
        assert r.status_code == 200, r.text
        return list(r.json())


# --- the surface ---------------------------------------------------------------------------
def test_served_health_openapi_console_and_socket_mode(srv: Server) -> None:
    with srv.client(unix=True) as c:
        health = c.get("/healthz").json()
        assert health["status"] == "ok"
        doc = c.get("/openapi.json").json()
        assert doc["openapi"].startswith("3.1")
        assert "/api/{kind}/{id}/messages" in doc["paths"]
        assert set(doc["paths"]["/api/{kind}/{id}/messages"]) == {"get", "post"}
        assert doc["components"]["schemas"]["LogEntry"]["properties"]["sender"]
        page = c.get("/")
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        assert "script-src 'self'" in page.headers["content-security-policy"]
    mode = stat.S_IMODE(os.stat(srv.socket).st_mode)
    assert mode == 0o600, oct(mode)


@pytest.mark.parametrize("unix", [False, True], ids=["loopback", "unix"])
def test_seed_message_endpoints_list_and_send_via_cp(srv: Server, store: Store, unix: bool) -> None:
    sid = new_space(srv)
    _, t1 = join(store, sid, "lynx")
    join(store, sid, "otter")
    with srv.operator(unix=unix) as op, srv.client(t1, unix=unix) as lynx:
        assert lynx.post(agent_path(sid, "/send"), json={"to": ["otter"], "text": "one"}).is_success
        r = op.post(
            f"/api/sessions/{sid}/messages", json={"to": ["lynx"], "text": "two", "urgent": True}
        )
        assert r.status_code == 200, r.text
        assert r.json()["reached"] == ["lynx"]
        entries = op.get(f"/api/sessions/{sid}/messages").json()
        assert [(e["kind"], e["sender"], e["via"]) for e in entries] == [
            ("direct", "lynx", None),
            ("operator", "operator", "cp"),
        ]
        assert entries[1]["urgent"] is True
        first = entries[0]["id"]
        assert [
            e["body"]
            for e in op.get(f"/api/sessions/{sid}/messages", params={"after": first}).json()
        ] == ["two"]
        assert len(op.get(f"/api/sessions/{sid}/messages", params={"limit": 1}).json()) == 1
        only = op.get(f"/api/sessions/{sid}/messages", params={"kind": "operator"}).json()
        assert [e["kind"] for e in only] == ["operator"]
        # the compact id and the any-kind collection reach the same space
        compact = sid.split("_", 1)[1]
        assert len(op.get(f"/api/spaces/{compact}/messages").json()) == 2
        # the wrong collection for the space's kind is not found
        r = op.get(f"/api/runs/{sid}/messages")
        assert r.status_code == 404 and r.json()["error"] == "space_not_found"
        r = op.get("/api/sessions/ses_nosuchspace/messages")
        assert r.status_code == 404 and r.json()["error"] == "space_not_found"


def test_S29_operator_endpoints_need_the_operator_key(srv: Server, store: Store) -> None:
    sid = new_space(srv)
    _, token = join(store, sid, "lynx")
    calls = [
        ("GET", "/api/spaces", None),
        ("POST", "/api/spaces", {"kind": "session"}),
        ("GET", f"/api/sessions/{sid}", None),
        ("GET", f"/api/sessions/{sid}/messages", None),
        ("POST", f"/api/sessions/{sid}/messages", {"text": "I am the operator"}),
        ("GET", f"/api/sessions/{sid}/participants", None),
        ("GET", f"/api/sessions/{sid}/board", None),
        ("GET", f"/api/sessions/{sid}/claims", None),
        ("GET", f"/api/sessions/{sid}/claims/journal", None),
        ("GET", f"/api/sessions/{sid}/quarantine", None),
        ("POST", f"/api/sessions/{sid}/quarantine/requeue", {"ids": ["x"]}),
        ("POST", f"/api/sessions/{sid}/stop", None),
        ("GET", f"/api/sessions/{sid}/messages/stream", None),
    ]
    before = log_of(srv, sid)
    for secret, status, code in [
        (None, 401, "auth_failed"),
        ("not-the-key", 401, "auth_failed"),
        (token, 403, "forbidden"),
    ]:
        with srv.client(secret) as c:
            for method, path, body in calls:
                r = c.request(method, path, json=body)
                assert (r.status_code, r.json()["error"]) == (status, code), (method, path, r.text)
                if status == 401:
                    assert r.headers["www-authenticate"].startswith("Bearer")
    assert log_of(srv, sid) == before  # nothing written
    with srv.operator() as op:
        assert op.get(f"/api/sessions/{sid}").json()["state"] == "running"


def test_S10_agent_endpoints_derive_the_sender_and_refuse_other_spaces(
    srv: Server, store: Store
) -> None:
    sid, other = new_space(srv), new_space(srv)
    _, token = join(store, sid, "lynx")
    join(store, sid, "otter")
    join(store, other, "otter")
    with srv.client(token) as lynx:
        # a sender field is refused, naming the field; nothing written
        r = lynx.post(
            agent_path(sid, "/send"), json={"to": ["otter"], "text": "x", "sender": "operator"}
        )
        assert (r.status_code, r.json()["error"]) == (422, "invalid_input")
        assert "sender" in r.json()["message"]
        # the token of another space: 401, like a wrong token
        r = lynx.post(agent_path(other, "/send"), json={"to": ["otter"], "text": "x"})
        assert (r.status_code, r.json()["error"]) == (401, "auth_failed")
        # the operator key is no agent token
        with srv.operator() as op:
            r = op.post(agent_path(sid, "/send"), json={"to": ["otter"], "text": "x"})
            assert r.status_code == 403
        r = lynx.post(agent_path(sid, "/send"), json={"to": ["otter"], "text": "hello"})
        assert r.status_code == 200, r.text
        assert lynx.get("/api/me").json() == {"space_id": sid, "address": "lynx"}
    with srv.client("wrong-token") as bad:
        r = bad.post(agent_path(sid, "/send"), json={"to": ["otter"], "text": "x"})
        assert (r.status_code, r.json()["error"]) == (401, "auth_failed")
    assert [(e["sender"], e["body"]) for e in log_of(srv, sid)] == [("lynx", "hello")]
    assert log_of(srv, other) == []


def test_every_agent_operation_and_its_errors(srv: Server, store: Store) -> None:
    sid = new_space(srv, "workflow")
    _, t_lead = join(store, sid, "heron", tools=["board.*", "msg.send"])
    _, t_w = join(store, sid, "lynx")
    with srv.client(t_lead) as lead, srv.client(t_w) as w, srv.operator() as op:
        p = lambda rest: agent_path(sid, rest)  # noqa: E731
        assert lead.post(p("/send"), json={"to": ["lynx"], "text": "task 1"}).status_code == 200
        assert lead.post(p("/post"), json={"text": "channel note"}).json()["kind"] == "post"
        d = lead.post(p("/directive"), json={"to": ["lynx"], "text": "be brief"})
        assert d.status_code == 200, d.text
        r = w.post(p("/directive"), json={"to": ["heron"], "text": "obey me"})
        assert (r.status_code, r.json()["error"]) == (403, "tool_unavailable")
        r = w.post(p("/retract"), json={"directive_id": d.json()["id"]})
        assert r.status_code in (403, 409)
        # the queue: claim, extend, release, claim again, ack
        lease = w.post(p("/inbox/claim"), json={"limit": 5}).json()
        assert [x["body"] for x in lease["deliveries"]] == ["task 1"]
        tok = lease["lease_token"]
        assert (
            "expires_at"
            in w.post(p("/inbox/extend"), json={"lease_token": tok, "seconds": 60}).json()
        )
        assert w.post(p("/inbox/release"), json={"lease_token": tok, "error": "later"}).json() == {
            "count": 1
        }
        r = w.post(p("/inbox/ack"), json={"lease_token": tok})
        assert (r.status_code, r.json()["error"]) == (409, "lease_lost")
        lease = w.post(p("/inbox/claim"), json={}).json()
        assert w.post(p("/inbox/ack"), json={"lease_token": lease["lease_token"]}).json() == {
            "count": 1
        }
        # quarantine, then the operator requeues it
        lead.post(p("/send"), json={"to": ["lynx"], "text": "poison"})
        lease = w.post(p("/inbox/claim"), json={}).json()
        mid = lease["deliveries"][0]["id"]
        q = w.post(
            p("/inbox/quarantine"),
            json={"lease_token": lease["lease_token"], "message_id": mid, "reason": "bad"},
        )
        assert q.json() == {"ok": True}
        held = op.get(f"/api/runs/{sid}/quarantine").json()
        assert [(h["id"], h["reason"]) for h in held] == [(mid, "bad")]
        assert op.post(f"/api/runs/{sid}/quarantine/requeue", json={"ids": [mid]}).json() == {
            "count": 1
        }
        # turns: the directive and the requeued message, then seen
        turn = w.post(p("/turn"), json={}).json()
        assert {i["group"] for i in turn["items"]} >= {"directive", "message"}
        seen = w.post(p(f"/turn/{turn['id']}/seen"))
        assert seen.status_code == 200 and seen.json()["turn_id"] == turn["id"]
        r = w.post(p("/turn/nosuchturn/seen"))
        assert r.status_code in (404, 409, 422), r.text
        # the board: read, claim a key, renew, release; the operator sees claims and journal
        board = w.get(p("/board")).json()
        assert [b["kind"] for b in board] == ["post", "directive"]
        grant = w.post(p("/board/claim"), json={"key": "src/app.py", "ttl": 60}).json()
        r = lead.post(p("/board/claim"), json={"key": "src/app.py"})
        assert (r.status_code, r.json()["error"]) == (409, "claim_held")
        assert op.get(f"/api/runs/{sid}/claims").json()[0]["holder"] == "lynx"
        renewed = w.post(
            p("/board/renew"), json={"key": "src/app.py", "fence": grant["fence"], "ttl": 30}
        ).json()
        r = w.post(p("/board/release"), json={"key": "src/app.py", "fence": renewed["fence"]})
        assert r.json()["event"] == "released"
        journal = op.get(f"/api/runs/{sid}/claims/journal", params={"key": "src/app.py"}).json()
        assert [j["event"] for j in journal] == ["claimed", "renewed", "released"]
        r = w.post(p("/board/claim"), json={"key": "../etc"})
        assert r.status_code == 422
        # the operator's views
        people = {x["address"]: x for x in op.get(f"/api/runs/{sid}/participants").json()}
        assert set(people) == {"heron", "lynx"} and people["lynx"]["status"] in ("running", "idle")
        transcript = op.get(f"/api/runs/{sid}/participants/lynx/transcript").json()
        assert transcript and transcript[-1]["received"]
        assert [e["kind"] for e in op.get(f"/api/runs/{sid}/board").json()] == ["post", "directive"]
        # leaving: the token acts no more
        assert w.post(p("/leave")).json() == {"ok": True}
        r = w.post(p("/send"), json={"to": ["heron"], "text": "x"})
        assert (r.status_code, r.json()["error"]) == (409, "participant_left")


def test_S8_reaching_nobody_is_logged_then_refused_409(srv: Server, store: Store) -> None:
    sid = new_space(srv)
    _, token = join(store, sid, "lynx")
    with srv.client(token) as c:
        r = c.post(agent_path(sid, "/send"), json={"to": ["ghost"], "text": "anyone?"})
    assert (r.status_code, r.json()["error"]) == (409, "not_delivered")
    assert r.json()["result"]["not_reached"] == [
        {"address": "ghost", "reason": "no_live_participant"}
    ]
    assert [e["body"] for e in log_of(srv, sid)] == ["anyone?"]


def test_S1_a_stopped_space_is_409(srv: Server, store: Store) -> None:
    sid = new_space(srv)
    _, token = join(store, sid, "lynx")
    with srv.operator() as op, srv.client(token) as c:
        assert op.post(f"/api/sessions/{sid}/stop").json()["state"] == "stopped"
        r = op.post(f"/api/sessions/{sid}/messages", json={"text": "still there?"})
        assert (r.status_code, r.json()["error"]) == (409, "space_not_running")
        r = c.post(agent_path(sid, "/send"), json={"to": ["lynx"], "text": "x"})
        assert (r.status_code, r.json()["error"]) == (409, "space_not_running")
        assert op.post(f"/api/sessions/{sid}/archive").json()["state"] == "archived"
        r = op.post(f"/api/sessions/{sid}/stop")
        assert r.status_code == 409


def test_S33_bad_input_is_422_or_413_never_500(srv: Server, store: Store) -> None:
    sid = new_space(srv, body_max_bytes=100)
    _, token = join(store, sid, "lynx")
    join(store, sid, "otter")
    send = agent_path(sid, "/send")
    with srv.client(token) as c:
        r = c.post(send, json={"to": ["otter"], "text": "x" * 101})
        assert (r.status_code, r.json()["error"]) == (413, "body_too_large")
        r = c.post(send, json={"to": ["otter"], "text": "x" * 100})
        assert r.status_code == 200
        r = c.post(
            send, content=b"x" * (5 * 1024 * 1024), headers={"content-type": "application/json"}
        )
        assert (r.status_code, r.json()["error"]) == (413, "body_too_large")
        for raw in [b"{", b"[]", b'{"to": "otter"}', b'{"to": [], "text": "x"}',
                    b'{"to": ["otter"], "text": "   "}', b'{"to": ["otter"], "text": 5}',
                    b'{"to": ["otter"], "text": "\\ud800"}', b'"\\u0000"',
                    b'{"to": ["otter"], "text": "a\\u0000b"}',  # S33: NUL, on both backends
                    b'{"to": ["otter"], "text": "hi", "ack_required": "yes"}']:  # fmt: skip
            r = c.post(send, content=raw, headers={"content-type": "application/json"})
            assert (r.status_code, r.json()["error"]) == (422, "invalid_input"), (raw, r.text)
        for body in [{"wait": -1}, {"wait": 1e9}, {"limit": 0}, {"lease": 0}, {"limit": "many"}]:
            r = c.post(agent_path(sid, "/inbox/claim"), json=body)
            assert (r.status_code, r.json()["error"]) == (422, "invalid_input"), (body, r.text)
        r = c.post(agent_path(sid, "/inbox/claim"), content=b'{"wait": NaN}')
        assert r.status_code == 422
    with srv.operator() as op:
        for params in [
            {"limit": "x"},
            {"limit": 0},
            {"after_seq": -1},
            {"kind": "nope"},
            {"bogus": 1},
        ]:
            r = op.get(f"/api/sessions/{sid}/messages", params=params)
            assert (r.status_code, r.json()["error"]) == (422, "invalid_input"), (params, r.text)
        r = op.post("/api/spaces", json={"kind": "session", "settings": {"inbox_cap": -1}})
        assert r.status_code == 422
        r = op.get(f"/api/sessions/{sid}/messages/stream", headers={"Last-Event-ID": "x"})
        assert r.status_code == 422
        assert op.get("/api/nope/x/messages").status_code == 404
        assert op.delete("/api/spaces").status_code == 405


# --- waiting, group commit -----------------------------------------------------------------
def test_S20_a_long_poll_claim_wakes_on_a_send_from_another_process(
    srv: Server, store: Store
) -> None:
    sid = new_space(srv)
    _, t_w = join(store, sid, "lynx")
    sender, _ = join(store, sid, "otter")
    got: dict[str, Any] = {}
    started = threading.Event()

    def poll() -> None:
        with srv.client(t_w, timeout=60) as c:
            started.set()
            got["r"] = c.post(agent_path(sid, "/inbox/claim"), json={"wait": 30})

    t = threading.Thread(target=poll)
    t.start()
    started.wait()
    subprocess.run(
        [sys.executable, "-c", f"from broker import Store, Operator\n"
         f"s = Store({srv.url!r})\n"
         f"Operator(s).join({sid!r}, 'heron')[0].send('lynx', 'wake up')"],
        check=True, env=clean_env(srv.home),
    )  # fmt: skip
    t.join(40)
    assert not t.is_alive()
    assert got["r"].status_code == 200, got["r"].text
    assert [d["body"] for d in got["r"].json()["deliveries"]] == ["wake up"]


@pytest.mark.parametrize("path", ["/inbox/claim", "/turn"])
def test_S20_a_woken_long_poll_takes_its_mail_through_the_group_committer(
    srv: Server, store: Store, path: str
) -> None:
    """The claim (or turn) a ring wakes is a write of the server like any other:
    a job of its group committer (shared with its neighbours' transaction), not a
    transaction of its own on a worker thread that waits for the writer lock."""
    sid = new_space(srv)
    waiter, t_w = join(store, sid, "lynx")
    sender, _ = join(store, sid, "otter")
    base = httpx.get(srv.base + "/healthz").json()["waiting"]
    got: dict[str, Any] = {}

    def poll() -> None:
        with srv.client(t_w, timeout=60) as c:
            got["r"] = c.post(agent_path(sid, path), json={"wait": 30})

    t = threading.Thread(target=poll)
    t.start()
    while (before := httpx.get(srv.base + "/healthz").json())["waiting"] <= base:
        assert t.is_alive(), srv.output()[-3000:]
        time.sleep(0.02)
    sender.send("lynx", "wake up")  # this process's write: none of the server's jobs
    t.join(40)
    assert not t.is_alive()
    after = httpx.get(srv.base + "/healthz").json()
    assert got["r"].status_code == 200, got["r"].text
    found = got["r"].json()["deliveries" if path == "/inbox/claim" else "items"]
    assert "wake up" in json.dumps(found), got["r"].text
    assert after["writes"] - before["writes"] >= 1, (before, after)
    # Its doorbell, closed off the event loop after the answer, leaves nothing behind.
    key = wake.participant_key(waiter.identity.participant_id)
    folder = Path(wake.root_path(store)) / key
    for _ in range(500):
        if not folder.exists():
            break
        time.sleep(0.02)
    assert not folder.exists(), sorted(os.listdir(folder))


def test_served_group_commit_gives_each_request_its_own_outcome(srv: Server, store: Store) -> None:
    sid = new_space(srv)
    tokens = [join(store, sid, f"w{i}")[1] for i in range(8)]
    before = httpx.get(srv.base + "/healthz").json()
    barrier = threading.Barrier(len(tokens))
    results: list[tuple[int, int, str]] = []
    lock = threading.Lock()

    def client(i: int) -> None:
        with srv.client(tokens[i]) as c:
            barrier.wait()
            for n in range(40):
                to = "ghost" if n == 7 else f"w{(i + 1) % len(tokens)}"
                r = c.post(agent_path(sid, "/send"), json={"to": [to], "text": f"{i}:{n}"})
                with lock:
                    results.append((i, r.status_code, r.json().get("error", "")))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(tokens))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    after = httpx.get(srv.base + "/healthz").json()
    assert sorted({(s, e) for _, s, e in results}) == [(200, ""), (409, "not_delivered")]
    assert sum(1 for _, s, _ in results if s == 409) == len(tokens)
    entries = log_of(srv, sid)
    assert len(entries) == len(tokens) * 40  # every send logged once, misses included
    assert [e["seq"] for e in entries] == list(range(1, len(entries) + 1))
    writes = after["writes"] - before["writes"]
    transactions = after["transactions"] - before["transactions"]
    assert writes == len(tokens) * 40
    on_loop = after["on_loop"] - before["on_loop"]
    print(f"group commit: {writes} writes in {transactions} transactions, {on_loop} on the loop")
    assert transactions < writes  # concurrent writes shared transactions
    # SQLite: the loop runs a batch itself when the writer lock is free (no
    # other process writes here); PostgreSQL's always go to the writer thread.
    assert (0 < on_loop <= transactions) if store.dialect == "sqlite" else on_loop == 0
    # A message that reached nobody keeps its writes: no batch ran again.
    assert after["careful"] == before["careful"]


# --- SSE ----------------------------------------------------------------------------------
def _events(lines: Iterator[str]) -> Iterator[tuple[str, str, str]]:
    event, ident, data = "message", "", ""
    for line in lines:
        if line == "":
            if data:
                yield event, ident, data
            event, ident, data = "message", "", ""
        elif line.startswith("event: "):
            event = line[7:]
        elif line.startswith("id: "):
            ident = line[4:]
        elif line.startswith("data: "):
            data = line[6:]


def test_sse_resumes_after_a_dropped_connection_nothing_missed_or_repeated(
    srv: Server, store: Store
) -> None:
    sid = new_space(srv)
    lynx, _ = join(store, sid, "lynx")
    join(store, sid, "otter")
    total = 10_000
    seqs: list[int] = []
    writing = threading.Thread(
        target=lambda: [
            lynx.send_many([{"to": "otter", "text": f"m{i + k}"} for k in range(100)])
            for i in range(0, total, 100)
        ]
    )
    writing.start()
    pos, drops = 0, 0
    try:
        while len(seqs) < total:
            with srv.operator() as op, op.stream(
                "GET", f"/api/sessions/{sid}/messages/stream",
                headers={"Last-Event-ID": str(pos)}, timeout=60,
            ) as r:  # fmt: skip
                assert r.status_code == 200
                for event, ident, data in _events(r.iter_lines()):
                    assert event == "message"
                    entry = json.loads(data)
                    assert int(ident) == entry["seq"]
                    seqs.append(entry["seq"])
                    pos = entry["seq"]
                    if len(seqs) in (1234, 5000, 7777):  # drop the connection mid-stream
                        drops += 1
                        break
                    if len(seqs) == total:
                        break
    finally:
        writing.join()
    assert drops == 3
    assert seqs == list(range(1, total + 1))


def test_sse_stalled_subscriber_never_blocks_writers_and_is_cut_with_its_resume_point(
    tmp_path: Path,
) -> None:
    sends = 50
    srv = Server(tmp_path / "home", "--stall-timeout", "2", "--keepalive", "0.2")
    stalled = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        store = Store(srv.url)
        sid = new_space(srv, inbox_cap=10_000)
        lynx, token = join(store, sid, "lynx")
        join(store, sid, "otter")
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.connect(srv.socket)
        stalled.sendall(
            f"GET /api/sessions/{sid}/messages/stream HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Bearer {srv.key}\r\n\r\n".encode()
        )  # ...and never reads
        # ~1.3 MB of events for the subscriber that reads none, in few sends
        # (a send's round trip, not its size, is what costs here)
        body = "x" * 26_000
        with srv.client(token) as c:
            for i in range(sends):
                r = c.post(agent_path(sid, "/send"), json={"to": ["otter"], "text": f"{i}{body}"})
                assert r.status_code == 200
        # every write committed while the subscriber was stalled; it is cut off
        # after the stall timeout, and the server logs its resume point
        deadline = __import__("time").monotonic() + 30
        while "cut off after seq" not in srv.output():
            assert __import__("time").monotonic() < deadline, srv.output()[-2000:]
            threading.Event().wait(0.1)
        assert len(log_of(srv, sid)) == sends
        line = next(x for x in srv.output().splitlines() if "cut off after seq" in x)
        resume = int(line.split("cut off after seq ")[1].split(":")[0])
        assert 0 <= resume < sends
        store.close()
    finally:
        stalled.close()
        srv.stop()


def test_served_sigterm_ends_streams_with_a_resume_point_and_finishes_in_flight(
    tmp_path: Path,
) -> None:
    srv = Server(tmp_path / "home")
    try:
        store = Store(srv.url)
        sid = new_space(srv)
        lynx, token = join(store, sid, "lynx")
        join(store, sid, "otter")
        lynx.send("otter", "before the shutdown")
        events: list[tuple[str, str]] = []
        opened = threading.Event()

        def listen() -> None:
            with (
                srv.operator() as op,
                op.stream("GET", f"/api/sessions/{sid}/messages/stream", timeout=30) as r,
            ):
                for event, _, data in _events(r.iter_lines()):
                    events.append((event, data))
                    opened.set()

        polled: dict[str, Any] = {}
        polling = threading.Event()

        def long_poll() -> None:
            with srv.client(token, timeout=60) as c:
                polling.set()
                polled["r"] = c.post(agent_path(sid, "/inbox/claim"), json={"wait": 50})

        views: dict[str, list[str]] = {}

        def watch(path: str) -> None:  # the console's live views end the same way
            with srv.operator() as op, op.stream("GET", path, timeout=30) as r:
                for event, _, _ in _events(r.iter_lines()):
                    views.setdefault(path, []).append(event)

        t = threading.Thread(target=listen)
        t.start()
        p = threading.Thread(target=long_poll)
        p.start()
        watchers = [
            threading.Thread(target=watch, args=(path,))
            for path in (f"/api/sessions/{sid}/state/stream", "/api/spaces/stream")
        ]
        for w in watchers:
            w.start()
        assert opened.wait(20) and polling.wait(20)
        while len(views) < 2 and t.is_alive():  # each view has sent its first reading
            threading.Event().wait(0.01)
        with httpx.Client(transport=httpx.HTTPTransport(uds=srv.socket)) as h:
            while h.get("http://x/healthz").json()["waiting"] < 1:  # the long poll is parked
                threading.Event().wait(0.01)
        code = srv.terminate(30)
        t.join(30)
        p.join(30)
        for w in watchers:
            w.join(30)
        assert code == 0
        for path, reading in ((f"/api/sessions/{sid}/state/stream", "state"),
                              ("/api/spaces/stream", "spaces")):  # fmt: skip
            assert views[path][-1] == "shutdown" and set(views[path][:-1]) == {reading}, views
        # the parked long-poll finished with what was there (nothing), not an error
        assert polled["r"].status_code == 200 and polled["r"].json()["deliveries"] == []
        assert events[0][0] == "message"
        assert events[-1][0] == "shutdown"
        assert json.loads(events[-1][1]) == {"resume_after": 1}
        store.close()
    finally:
        srv.stop()


# --- the process: logs, listeners, client mode ----------------------------------------------
def test_served_access_log_is_one_json_line_per_request_without_secrets(
    srv: Server, store: Store
) -> None:
    sid = new_space(srv)
    _, token = join(store, sid, "lynx")
    with srv.client(token) as c:
        c.get("/api/me")
    lines = [json.loads(x) for x in srv.output().splitlines() if x.startswith("{")]
    assert lines and all({"method", "path", "status", "ms"} <= set(x) for x in lines)
    assert any(x["path"] == "/api/me" and x["status"] == 200 for x in lines)
    assert srv.key not in srv.output() and token not in srv.output()


def test_serve_json_prints_where_it_listens_once(tmp_path: Path) -> None:
    srv = Server(tmp_path / "home", "--json", "--quiet")
    try:
        deadline = time.monotonic() + 30  # stdout's line follows stderr's announcement
        while "{" not in srv.output() and time.monotonic() < deadline:
            time.sleep(0.02)
        lines = [json.loads(x) for x in srv.output().splitlines() if x.startswith("{")]
        assert lines == [
            {
                "urls": [f"unix://{srv.socket}", srv.base],
                "store": str(tmp_path / "home" / "broker.db"),
            }
        ]
    finally:
        assert srv.terminate() == 0


def test_serve_refuses_bad_durations_in_one_line(tmp_path: Path) -> None:
    for argv in (["--grace", "601"], ["--grace", "nan"], ["--keepalive", "0"]):
        proc = subprocess.run(
            [sys.executable, "-m", "broker", "serve", "--port", "0", *argv],
            capture_output=True, text=True, env=clean_env(tmp_path / "home"), timeout=60,
        )  # fmt: skip
        assert proc.returncode == 2, (argv, proc.stderr)
        assert len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr, argv


def test_serve_refuses_a_non_loopback_bind_without_allow_remote(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "broker", "serve", "--host", "0.0.0.0"],
        capture_output=True, text=True, env=clean_env(tmp_path / "home"), timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "--allow-remote" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("scheme", ["unix", "http"])
def test_client_mode_cli_goes_through_the_server_with_only_a_secret(
    srv: Server, store: Store, scheme: str
) -> None:
    sid = new_space(srv)
    _, token = join(store, sid, "lynx")
    join(store, sid, "otter")
    url = f"unix://{srv.socket}" if scheme == "unix" else srv.base
    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
    env.update(BROKER_URL=url, BROKER_TOKEN=token, HOME=str(srv.home.parent / "nohome"))

    def run(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "broker", *args], capture_output=True,
                              text=True, env={**env, **extra}, timeout=60)  # fmt: skip

    r = run("msg", "send", "--to", "otter", "hello over", scheme)
    assert r.returncode == 0, r.stderr
    r = run("msg", "send", "--to", "ghost", "nobody")
    assert r.returncode == 1 and "not delivered to ghost: no_live_participant" in r.stdout
    r = run("msg", "send", "--to", "otter", "x", BROKER_TOKEN="bad")
    assert (r.returncode, r.stderr.strip()) == (
        4,
        f"broker: auth_failed: {errors.TOKEN_REFUSED}",
    )
    r = run("message", "list", sid, "--json")
    assert r.returncode == 4 and "operator key required" in r.stderr
    r = run("message", "list", sid, "--json", BROKER_OPERATOR_KEY=srv.key)
    assert r.returncode == 0, r.stderr
    assert [json.loads(x)["body"] for x in r.stdout.splitlines()][:1] == [f"hello over {scheme}"]
    r = run(
        "message", "send", sid, "--to", "lynx", "from the operator", BROKER_OPERATOR_KEY=srv.key
    )
    assert r.returncode == 0, r.stderr
    assert log_of(srv, sid)[-1]["via"] == "cp"
    # the client path imports no sqlite3, SQLAlchemy or pydantic; an agent's
    # call neither the operator's handle nor the records only other calls return
    probe = ("import sys\nfrom broker.frontends.cli import main\ntry:\n main(['msg','send','--to','otter','probe'])\n"
             "except SystemExit as e:\n assert e.code in (0, None), e.code\n"
             "bad = [m for m in sys.modules if m.split('.')[0] in ('sqlite3','_sqlite3','sqlalchemy','pydantic','broker.db')]\n"
             "bad += [m for m in ('broker.frontends.remote.operator','broker.model.records.spaces','broker.store.maintenance') if m in sys.modules]\n"
             "assert not bad, bad\nprint('clean')")  # fmt: skip
    r = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=60
    )
    assert r.stdout.strip().endswith("clean"), r.stderr


# --- the boundaries -----------------------------------------------------------------------
ROOT = Path(__file__).resolve().parents[3]
PUBLIC = {"broker.api.handles", "broker.api.aio", "broker.model.records", "broker.errors",
          # the operation table, its format and its input records (each operation
          # declared once)
          "broker.api.operations", "broker.api.declaration", "broker.model.inputs", "broker.model.fields",
          "broker.vocab"}  # fmt: skip


def _imports(path: Path) -> set[str]:
    import ast

    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:  # `from broker.api import handles` imports broker.api.handles
                where = ROOT / Path(*f"{node.module}.{a.name}".split("."))
                sub = where.with_suffix(".py").exists() or (where / "__init__.py").exists()
                out.add(f"{node.module}.{a.name}" if sub else node.module)
    return {m for m in out if m == "broker" or m.startswith("broker.")}


def test_served_front_end_imports_only_the_public_library() -> None:
    """spec §Module layout: the server is a front end over broker.api.handles / broker.api.aio."""
    files = [
        *(ROOT / "broker" / "frontends" / "http").glob("*.py"),
        ROOT / "broker" / "frontends" / "cli" / "serve.py",
    ]
    assert len(files) >= 10
    for path in files:
        extra = {
            m
            for m in _imports(path)
            if m not in PUBLIC and not m.startswith("broker.frontends.http")
        }
        extra -= {
            "broker",
            "broker.__version__",
            "broker.frontends.cli._common",
            "broker.frontends.cli._output",
            "broker.frontends.mcp",
        }
        assert not extra, f"{path.name} imports {sorted(extra)}"


def test_client_mode_transport_imports_no_store_code() -> None:
    """Client mode carries only a secret: broker.frontends.remote needs no database code."""
    files = sorted((ROOT / "broker" / "frontends" / "remote").glob("*.py"))
    assert len(files) >= 4
    for path in files:
        extra = {m for m in _imports(path) if not m.startswith("broker.frontends.remote")}
        # broker.vocab: the fixed vocabularies and bounds, plain data with no imports.
        allowed = {"broker", "broker.errors", "broker.model.records", "broker.model.typecheck", "broker.vocab",
                   # the operation table, its format and its input records: plain Python,
                   # no store code
                   "broker.api.operations", "broker.api.declaration", "broker.model.fields"}  # fmt: skip
        assert extra <= allowed, path.name


def test_served_mcp_is_mounted_at_slash_mcp_with_the_bearer_identity(
    srv: Server, store: Store
) -> None:
    """spec §Served mode: streamable-HTTP MCP at /mcp, identity from the Bearer token."""
    mcp = pytest.importorskip("mcp")
    streamable = pytest.importorskip("mcp.client.streamable_http")
    httpx2 = pytest.importorskip("httpx2")
    import asyncio

    sid = new_space(srv)
    _, token = join(store, sid, "lynx")
    join(store, sid, "otter")

    async def main() -> tuple[set[str], Any]:
        client = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
        async with (
            client,
            streamable.streamable_http_client(srv.base + "/mcp/", http_client=client) as (r, w, *_),
            mcp.ClientSession(r, w) as session,
        ):
            await session.initialize()
            tools = {t.name for t in (await session.list_tools()).tools}
            sent = await session.call_tool("msg_send", {"to": ["otter"], "text": "over /mcp"})
            return tools, sent

    tools, sent = asyncio.run(main())
    assert "msg_send" in tools and "board_directive" not in tools
    assert not sent.is_error
    assert [(e["sender"], e["body"]) for e in log_of(srv, sid)] == [("lynx", "over /mcp")]


def test_S33_a_bad_query_parameter_is_422_naming_the_field(srv: Server, store: Store) -> None:
    sid = new_space(srv, "workflow")
    _, token = join(store, sid, "lynx")
    board = agent_path(sid, "/board")
    with srv.client(token) as c:
        cases = [
            ({"limit": "0"}, "bad limit 0: 1 to 1000", "limit"),
            ({"limit": "ten"}, "bad limit 'ten': a whole number", "limit"),
            (
                [("limit", "5"), ("limit", "6")],
                "query parameter 'limit' given more than once",
                "limit",
            ),
            ({"colour": "red"}, "unknown field 'colour': this tool does not take it", "colour"),
            ({"after": "a\x00b"}, "bad after: not valid text (a NUL (U+0000) character)", "after"),
        ]
        for params, message, field in cases:
            r = c.get(board, params=params)
            assert r.status_code == 422, r.text
            assert r.json() == {"error": "invalid_input", "message": message, "field": field}
