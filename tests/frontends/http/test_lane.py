"""The lean lane (spec §Served mode): an agent's declared write on a remembered
token is answered from the HTTP protocol, without the ASGI app, and answered
exactly as the app answers it; whatever the lane does not take reaches the app
as it came. On a real server process over real sockets."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from broker import Store
from tests.frontends.http.test_server_edges import (
    _whole,
    agent_path,
    held,
    host_port,
    join,
    new_space,
)
from tests.served import Server, serving, store_of

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from serving(tmp_path_factory, "lane")


@pytest.fixture(scope="module")
def store(srv: Server) -> Iterator[Store]:
    yield from store_of(srv)


def lean_count(srv: Server) -> int:
    return int(httpx.get(srv.base + "/healthz", timeout=10).json()["lean"])


def request(path: str, token: str, body: dict[str, Any], *extra: bytes) -> bytes:
    data = json.dumps(body).encode()
    head = [
        b"POST " + path.encode() + b" HTTP/1.1",
        b"Host: x",
        b"Authorization: Bearer " + token.encode(),
        b"Content-Type: application/json",
        b"Content-Length: " + str(len(data)).encode(),
        *extra,
    ]
    return b"\r\n".join(head) + b"\r\n\r\n" + data


def exchange(srv: Server, *requests: bytes, answers: int) -> list[tuple[bytes, bytes]]:
    """``requests`` written at once on one connection (pipelined); the
    ``answers`` read back, each as (head without its date line, body)."""
    with socket.create_connection(host_port(srv)) as s:
        s.sendall(b"".join(requests))
        s.settimeout(10)
        out = b""
        while _whole(out) < answers and (chunk := s.recv(65536)):
            out += chunk
    found = []
    while (end := out.find(b"\r\n\r\n")) >= 0:
        head = out[:end]
        size = int(next(
            line.split(b":")[1] for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        ))  # fmt: skip
        lines = [line for line in head.split(b"\r\n") if not line.lower().startswith(b"date:")]
        found.append((b"\r\n".join(lines), out[end + 4 : end + 4 + size]))
        out = out[end + 4 + size :]
    return found


def one_by_one(srv: Server, *requests: bytes) -> list[tuple[bytes, bytes]]:
    """``requests`` on one kept-alive connection, each written once the answer
    before it is read (none pipelined); their answers as ``exchange`` has them."""
    found = []
    with socket.create_connection(host_port(srv)) as s:
        s.settimeout(10)
        out = b""
        for req in requests:
            s.sendall(req)
            while _whole(out) < 1 and (chunk := s.recv(65536)):
                out += chunk
            end = out.find(b"\r\n\r\n")
            head = out[:end]
            size = int(next(
                line.split(b":")[1] for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            ))  # fmt: skip
            found.append((head, out[end + 4 : end + 4 + size]))
            out = out[end + 4 + size :]
    return found


VOLATILE = frozenset(
    {"id", "message_id", "thread_id", "seq", "created_at", "at", "lease_token", "expires_at"}
)


def ids(body: bytes) -> Any:
    """``body`` read, with what the log made for each message and lease masked (its id,
    place and time): two sends' refusals are then the same."""

    def masked(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: "*" if k in VOLATILE else masked(v) for k, v in value.items()}
        if isinstance(value, list):
            return [masked(v) for v in value]
        return value

    return masked(json.loads(body))


def remembered(srv: Server, sid: str, codename: str) -> str:
    """A new agent's token, after one call that the server remembers it by."""
    token = join(srv, sid, codename)
    with srv.client(token) as c:
        assert c.post(agent_path(sid, "/inbox/claim"), json={}).status_code == 200
    return token


def test_the_lane_answers_an_agents_writes_on_a_remembered_token(srv: Server) -> None:
    sid = new_space(srv)
    ivy, wren = remembered(srv, sid, "ivy"), remembered(srv, sid, "wren")
    before = lean_count(srv)
    with srv.client(ivy) as c:
        r = c.post(agent_path(sid, "/send"), json={"to": "wren", "text": "hello"})
        assert r.status_code == 200 and r.json()["reached"] == ["wren"], r.text
    with srv.client(wren) as c:
        lease = c.post(agent_path(sid, "/inbox/claim"), json={"limit": 5}).json()
        assert [d["body"] for d in lease["deliveries"]] == ["hello"], lease
        r = c.post(agent_path(sid, "/inbox/ack"), json={"lease_token": lease["lease_token"]})
        assert r.status_code == 200 and r.json() == {"count": 1}, r.text
    assert lean_count(srv) - before == 3  # send, claim, ack: all three by the lane


def test_a_lean_answer_is_the_apps_answer_byte_for_byte(srv: Server) -> None:
    """The same request through the lane and through the app (a forwarded
    request never takes the lane): the same status, headers and body."""
    sid = new_space(srv)
    ivy = remembered(srv, sid, "ivy")
    app_way = b"X-Forwarded-For: 127.0.0.1"
    cases = [  # (path, body, whether the lane takes it)
        (agent_path(sid, "/inbox/ack"), {"lease_token": "nosuchlease"}, 1),  # the library's
        (agent_path(sid, "/inbox/ack"), {"lease_token": 5}, 0),  # the input record's (422)
        (agent_path(sid, "/inbox/claim"), {"limit": 0}, 0),  # a bound (422)
        (agent_path(sid, "/send"), {"to": "nobody", "text": "x"}, 1),  # reached nobody (S8)
        (agent_path(sid, "/inbox/extend"), {"lease_token": "gone", "seconds": 5}, 1),
        (agent_path(sid, "/inbox/release"), {"lease_token": "gone"}, 1),
        (agent_path(sid, "/inbox/claim"), {"wait": 0.2}, 0),  # it may wait: a long-poll
    ]
    for path, body, taken in cases:
        before = lean_count(srv)
        [(head_a, body_a)] = exchange(srv, request(path, ivy, body, app_way), answers=1)
        [(head_l, body_l)] = exchange(srv, request(path, ivy, body), answers=1)
        assert head_l == head_a and ids(body_l) == ids(body_a), (path, body, body_l, body_a)
        assert lean_count(srv) - before == taken, (path, body)
    before = lean_count(srv)
    [(head_a, body_a)] = exchange(
        srv, request(agent_path(sid, "/inbox/claim"), ivy, {}, app_way), answers=1
    )
    [(head_l, body_l)] = exchange(srv, request(agent_path(sid, "/inbox/claim"), ivy, {}), answers=1)
    assert head_l == head_a, (head_l, head_a)
    assert json.loads(body_l).keys() == json.loads(body_a).keys()
    assert lean_count(srv) - before == 1


def test_a_remembered_token_that_no_longer_holds_is_refused_as_the_app_refuses_it(
    srv: Server, store: Store
) -> None:
    from broker import Agent

    sid = new_space(srv)
    ivy = remembered(srv, sid, "ivy")
    Agent.from_token(store, ivy).leave()  # another process, on the store itself
    path = agent_path(sid, "/inbox/claim")
    [lean] = exchange(srv, request(path, ivy, {}), answers=1)  # forgets the token
    [app] = exchange(srv, request(path, ivy, {}, b"X-Forwarded-For: 127.0.0.1"), answers=1)
    assert lean == app and lean[0].startswith(b"HTTP/1.1 409 "), (lean, app)
    assert json.loads(lean[1])["error"] == "participant_left"


def test_pipelined_requests_are_answered_in_order_whichever_way_each_takes(srv: Server) -> None:
    sid = new_space(srv)
    ivy, wren = remembered(srv, sid, "ivy"), remembered(srv, sid, "wren")
    send = [
        request(agent_path(sid, "/send"), ivy, {"to": "wren", "text": f"m{i}"}) for i in range(3)
    ]
    health = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    answers = exchange(srv, send[0], health, send[1], send[2], health, answers=5)
    assert [a[0].split(b"\r\n")[0] for a in answers] == [b"HTTP/1.1 200 OK"] * 5, answers
    assert [("reached" in json.loads(b)) for _, b in answers] == [True, False, True, True, False]
    with srv.client(wren) as c:
        got = c.post(agent_path(sid, "/inbox/claim"), json={"limit": 10}).json()["deliveries"]
    assert [d["body"] for d in got] == ["m0", "m1", "m2"]  # sent in the order they came


def test_one_connection_answers_each_request_as_its_own_token_and_path_say(srv: Server) -> None:
    """The protocol remembers the lane's call of a connection's last request
    (a kept-alive agent repeats a few). A request that names another path,
    another token, or a token that holds no longer, on the same connection,
    is answered as its own, never as the one before it."""
    sid = new_space(srv)
    ivy, wren = remembered(srv, sid, "ivy"), remembered(srv, sid, "wren")
    to_wren = request(agent_path(sid, "/send"), ivy, {"to": "wren", "text": "a"})
    to_ivy = request(agent_path(sid, "/send"), wren, {"to": "ivy", "text": "b"})
    claim = request(agent_path(sid, "/inbox/claim"), ivy, {"limit": 5})
    forged = request(agent_path(sid, "/inbox/claim"), ivy[:-4] + "AAAA", {"limit": 5})
    before = lean_count(srv)
    answers = one_by_one(srv, to_wren, to_wren, to_ivy, claim, forged, claim)
    assert [a[0].split(b"\r\n")[0] for a in answers] == [
        *[b"HTTP/1.1 200 OK"] * 4,
        b"HTTP/1.1 401 Unauthorized",
        b"HTTP/1.1 200 OK",
    ], answers
    bodies = [json.loads(b) for _, b in answers]
    assert [b.get("reached") for b in bodies[:3]] == [["wren"], ["wren"], ["ivy"]]
    assert [d["body"] for d in bodies[3]["deliveries"]] == ["b"]  # ivy's inbox: wren's send
    assert bodies[4]["error"] == "auth_failed" and bodies[5]["deliveries"] == []
    assert lean_count(srv) - before == 5  # the forged token's went to the app
    with srv.client(wren) as c:
        got = c.post(agent_path(sid, "/inbox/claim"), json={"limit": 5}).json()["deliveries"]
    assert [d["body"] for d in got] == ["a", "a"]


def test_a_request_that_expects_100_continue_goes_to_the_app(srv: Server) -> None:
    """The protocol reads each header once (its own count and uvicorn's own
    reading of it, in one call). A request that asks for ``100-continue``,
    whatever the case of its header, is the app's to answer (the lane does
    not send the interim answer); one with trailing blanks on its headers
    is the lane's, as uvicorn reads them without the blanks."""
    sid = new_space(srv)
    ivy = remembered(srv, sid, "ivy")
    path = agent_path(sid, "/inbox/claim")
    before = lean_count(srv)
    with socket.create_connection(host_port(srv)) as s:
        s.settimeout(10)
        s.sendall(request(path, ivy, {}, b"EXPECT: 100-Continue"))
        out = b""
        while b"200 OK" not in out and (chunk := s.recv(65536)):
            out += chunk
    assert out.startswith(b"HTTP/1.1 100 Continue\r\n") and b"HTTP/1.1 200 OK" in out, out
    assert lean_count(srv) == before  # the app's
    data = b"{}"
    blanks = (
        b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x  \r\n"
        b"Authorization: Bearer " + ivy.encode() + b" \t\r\n"
        b"Content-Length: 2 \r\n\r\n" + data
    )
    [(head, body)] = one_by_one(srv, blanks)
    assert head.startswith(b"HTTP/1.1 200 OK") and "deliveries" in json.loads(body), head
    assert lean_count(srv) == before + 1  # the lane's


def test_a_lean_request_asking_to_close_gets_its_answer_then_the_connection_closes(
    srv: Server,
) -> None:
    sid = new_space(srv)
    ivy = remembered(srv, sid, "ivy")
    with socket.create_connection(host_port(srv)) as s:
        s.sendall(request(agent_path(sid, "/inbox/claim"), ivy, {}, b"Connection: close"))
        s.settimeout(10)
        out = b""
        while chunk := s.recv(65536):  # ends when the server closes
            out += chunk
    assert out.startswith(b"HTTP/1.1 200 ") and b"connection: close" in out.lower(), out


def test_a_write_whose_client_left_is_committed_and_the_server_stays_whole(srv: Server) -> None:
    sid = new_space(srv)
    ivy, wren = remembered(srv, sid, "ivy"), remembered(srv, sid, "wren")
    for i in range(20):  # the client hangs up at once, before the answer
        with socket.create_connection(host_port(srv)) as s:
            s.sendall(request(agent_path(sid, "/send"), ivy, {"to": "wren", "text": f"gone{i}"}))
    deadline = time.monotonic() + 10
    got: list[str] = []
    with srv.client(wren) as c:
        while len(got) < 20 and time.monotonic() < deadline:
            lease = c.post(agent_path(sid, "/inbox/claim"), json={"limit": 50}).json()
            got += [d["body"] for d in lease["deliveries"]]
    assert sorted(got) == sorted(f"gone{i}" for i in range(20))
    out = srv.output()
    assert "Traceback" not in out and '"status": 500' not in out, out[-3000:]


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = Server(tmp_path_factory.mktemp("lanequick") / "home", "--body-timeout", "2")
    try:
        yield server
    finally:
        server.stop()


def test_a_slow_body_on_the_lane_is_the_apps_408_and_closed(quick: Server) -> None:
    sid = new_space(quick)
    ivy = remembered(quick, sid, "ivy")
    path = agent_path(sid, "/inbox/claim").encode()
    head = b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + ivy.encode()
    out, took = held(quick, head + b"\r\nContent-Length: 10\r\n\r\n{", b" ", 15, 0.5)
    assert out.startswith(b"HTTP/1.1 408 ") and b"request_timeout" in out, out
    assert b"connection: close" in out.lower() and 1.5 < took < 6, (took, out)
    body = out.split(b"\r\n\r\n", 1)[1]
    assert json.loads(body) == {
        "error": "request_timeout",
        "message": "the request body did not arrive within 2 s",
    }


def test_the_lane_writes_the_access_line_the_app_writes(quick: Server) -> None:
    sid = new_space(quick)
    ivy = remembered(quick, sid, "ivy")
    path = agent_path(sid, "/inbox/claim")
    exchange(quick, request(path, ivy, {}), answers=1)
    exchange(quick, request(path, ivy, {}, b"X-Forwarded-For: 127.0.0.1"), answers=1)
    lines = [json.loads(x) for x in quick.output().splitlines() if x.startswith("{") and path in x]
    lean, app = lines[-2], lines[-1]
    assert lean.keys() == app.keys() == {"ts", "method", "path", "status", "bytes", "ms", "client"}
    assert (lean["method"], lean["path"], lean["status"]) == ("POST", path, 200)
    assert lean["bytes"] == app["bytes"] and lean["client"].startswith("127.0.0.1:")


def test_a_kept_alive_connection_holds_one_requests_objects_however_many_it_sends(
    tmp_path: Path,
) -> None:
    """The lane's requests on one connection are let go as each is answered: a
    long-lived agent's connection does not grow the server's memory, nor the
    cyclic collector's walk, with every request it has made. A real uvicorn
    server in this process (so what its protocol still holds can be counted),
    on a real socket and store."""
    import asyncio
    import gc
    import threading

    import uvicorn

    from broker import Operator
    from broker.frontends.http import deadlines
    from broker.frontends.http.app import create_app
    from tests.conftest import open_store

    store = open_store(f"sqlite:///{tmp_path / 'lane.db'}")
    op = Operator(store)
    sid = op.create_space("session").id
    token = op.join(sid, "ivy")[1].token
    app = create_app(store)
    lane = app.state.broker.lane
    config = uvicorn.Config(
        app, log_config=None, access_log=False, lifespan="on",
        http=deadlines.protocol(10.0, 30.0, lane),
    )  # fmt: skip
    server = uvicorn.Server(config)
    listener = socket.create_server(("127.0.0.1", 0))
    runner = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[listener])))
    runner.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline and runner.is_alive(), "the server did not start"
            time.sleep(0.01)
        claim = request(agent_path(sid, "/inbox/claim"), token, {"limit": 5})
        sends = 200
        with socket.create_connection(listener.getsockname()) as s:
            s.settimeout(10)
            for _ in range(sends + 1):  # the first teaches the lane the token
                s.sendall(claim)
                out = b""
                while _whole(out) < 1:
                    chunk = s.recv(65536)
                    assert chunk, "the server closed the connection"
                    out += chunk
                assert out.startswith(b"HTTP/1.1 200"), out
            assert lane.taken == sends  # every one after the first by the lane
            gc.collect()
            kept = [o for o in gc.get_objects() if type(o) is deadlines._Lean]
            assert len(kept) <= 1, f"{len(kept)} of {sends} lean requests still held"
    finally:
        server.should_exit = True
        runner.join(30)
        listener.close()
        store.close()
