"""``broker serve`` at its edges (spec §Served mode, S33): what a hostile or
careless client sends, on a real server process over real sockets."""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from broker import Store
from tests.served import Server, serving, store_of

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from serving(tmp_path_factory, "edges")


@pytest.fixture(scope="module")
def store(srv: Server) -> Iterator[Store]:
    yield from store_of(srv)


def new_space(srv: Server, **settings: Any) -> str:
    with srv.operator() as c:
        r = c.post("/api/spaces", json={"kind": "session", "settings": settings})
        assert r.status_code == 201, r.text
        return str(r.json()["id"])


def join(srv: Server, sid: str, codename: str) -> str:
    with srv.operator() as c:
        r = c.post(f"/api/sessions/{sid}/participants", json={"codename": codename})
        assert r.status_code == 201, r.text
        return str(r.json()["token"])


def agent_path(sid: str, rest: str) -> str:
    return f"/api/sessions/{sid}/agent{rest}"


def log_of(srv: Server, sid: str) -> list[dict[str, Any]]:
    with srv.operator() as c:
        r = c.get(f"/api/sessions/{sid}/messages")
        assert r.status_code == 200, r.text
        return list(r.json())


def assert_refused(r: httpx.Response, status: int, code: str, field: str | None = None) -> None:
    assert (r.status_code, r.json()["error"]) == (status, code), r.text
    if field is not None:
        assert r.json()["field"] == field, r.text


def assert_no_server_error(srv: Server) -> None:
    out = srv.output()
    assert "Traceback" not in out and '"status": 500' not in out, out[-3000:]


def host_port(srv: Server) -> tuple[str, int]:
    host, port = srv.base.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


# --- request bodies ------------------------------------------------------------------------
def test_S33_a_chunked_body_over_the_cap_is_413_before_auth_and_the_connection_survives(
    srv: Server,
) -> None:
    sid = new_space(srv)
    big = b'{"text":"' + b"a" * (5 * 1024 * 1024) + b'"}'

    def chunks() -> Iterator[bytes]:  # no Content-Length: chunked
        for i in range(0, len(big), 65536):
            yield big[i : i + 65536]

    with srv.client() as c:  # no credential at all
        r = c.post(f"/api/sessions/{sid}/messages", content=chunks())
        assert_refused(r, 413, "body_too_large")
        assert c.get("/healthz").status_code == 200  # the same keep-alive connection
    token = join(srv, sid, "lynx")
    with srv.client(token) as c:
        r = c.post("/mcp/", content=chunks(), headers={"accept": "application/json"})
        assert_refused(r, 413, "body_too_large")
    assert [e for e in log_of(srv, sid) if e["kind"] == "operator"] == []  # nothing written
    assert_no_server_error(srv)


def test_S33_a_request_body_of_exactly_the_cap_is_taken_and_one_byte_more_is_413(
    srv: Server,
) -> None:
    """The cap is inclusive: cap-1 and cap bytes reach the app, cap+1 does not,
    with a Content-Length and chunked alike."""
    from broker.frontends.http.app import Options

    cap = Options().max_body  # what `broker serve` runs with
    sid = new_space(srv)
    token = join(srv, sid, "lynx")
    join(srv, sid, "otter")

    def body(size: int, text: str) -> bytes:
        head = json.dumps({"to": ["otter"], "text": text}).encode()
        return head + b" " * (size - len(head))  # JSON may end in white space

    def chunked(data: bytes) -> Iterator[bytes]:
        for i in range(0, len(data), 65536):
            yield data[i : i + 65536]

    sent = []
    with srv.client(token) as c:
        for how in ("length", "chunked"):
            for size in (cap - 1, cap, cap + 1):
                text = f"{how} {size}"
                data = body(size, text)
                assert len(data) == size
                content: Any = data if how == "length" else chunked(data)
                r = c.post(
                    agent_path(sid, "/send"),
                    content=content,
                    headers={"content-type": "application/json"},
                )
                if size > cap:
                    assert_refused(r, 413, "body_too_large")
                else:
                    assert r.status_code == 200, (how, size, r.text)
                    sent.append(text)
    assert [e["body"] for e in log_of(srv, sid) if e["kind"] == "direct"] == sent
    assert len(sent) == 4
    assert_no_server_error(srv)


def test_S33_a_content_length_one_byte_over_the_cap_is_413_before_any_byte_of_the_body(
    srv: Server,
) -> None:
    """The declared length is judged first, inclusively: a Content-Length of
    cap + 1 is answered 413 at once, without waiting for (or reading) a body
    that never comes; a Content-Length of exactly the cap is waited for."""
    from broker.frontends.http.app import Options

    cap = Options().max_body
    sid = new_space(srv)
    token = join(srv, sid, "lynx")

    def head(length: int) -> bytes:
        return (
            f"POST {agent_path(sid, '/send')} HTTP/1.1\r\nHost: broker\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n"
        ).encode()

    over = raw_exchange(srv, head(cap + 1), wait=3.0, answers=1)
    assert over.startswith(b"HTTP/1.1 413"), over[:200]
    assert b"body_too_large" in over
    assert raw_exchange(srv, head(cap), wait=1.0) == b""  # still waiting for the body
    assert_no_server_error(srv)


def test_S10_a_message_of_exactly_body_max_bytes_is_sent_and_one_byte_more_is_413(
    srv: Server,
) -> None:
    """The space's message cap counts UTF-8 bytes, inclusive: 99 and 100 bytes
    go, 101 is refused and writes nothing."""
    sid = new_space(srv, body_max_bytes=100)
    token = join(srv, sid, "lynx")
    join(srv, sid, "otter")
    with srv.client(token) as c:
        for text, ok in (("é" * 49 + "x", True), ("é" * 50, True), ("é" * 50 + "x", False)):
            r = c.post(agent_path(sid, "/send"), json={"to": ["otter"], "text": text})
            if ok:
                assert r.status_code == 200, r.text
            else:
                assert_refused(r, 413, "body_too_large", "text")
    bodies = [e["body"] for e in log_of(srv, sid) if e["kind"] == "direct"]
    assert bodies == ["é" * 49 + "x", "é" * 50]
    # At the largest cap a space can set, one character more is 413 as well (not 422).
    cap = 1024 * 1024
    sid = new_space(srv, body_max_bytes=cap)
    token = join(srv, sid, "lynx")
    join(srv, sid, "otter")
    with srv.client(token) as c:
        for text, ok in (("a" * cap, True), ("a" * (cap + 1), False), ("b" * cap + "é", False)):
            r = c.post(agent_path(sid, "/send"), json={"to": ["otter"], "text": text})
            if ok:
                assert r.status_code == 200, r.text
            else:
                assert_refused(r, 413, "body_too_large", "text")
                assert r.json()["size"] == len(text.encode()), r.text
    assert [len(e["body"]) for e in log_of(srv, sid) if e["kind"] == "direct"] == [cap]


def test_S33_numbers_in_headers_and_queries_are_ascii_digits_or_422(srv: Server) -> None:
    sid = new_space(srv)
    with srv.operator() as op:
        for value in ["²", "³", "٣", "+3", "1_0"]:
            header = value.encode("latin-1" if value in "²³" else "utf-8")  # '²' is byte 0xB2
            r = op.get(f"/api/sessions/{sid}/messages/stream", headers={"Last-Event-ID": header})
            assert_refused(r, 422, "invalid_input", "Last-Event-ID")
            r = op.get(f"/api/sessions/{sid}/messages", params={"after_seq": value})
            assert_refused(r, 422, "invalid_input", "after_seq")
        r = op.get(f"/api/sessions/{sid}/messages", params={"after_seq": "0", "limit": "3"})
        assert r.status_code == 200, r.text
    assert_no_server_error(srv)


# --- MCP over HTTP, raw (the JSON-RPC the SDK's clients send) ---------------------------------
MCP_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
    "MCP-Protocol-Version": "2025-11-25",
}


def rpc_body(r: httpx.Response) -> Any:
    """The JSON-RPC message of a response (plain JSON, or the first SSE ``data:``)."""
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        for line in r.text.splitlines():
            if line.startswith("data:"):
                return json.loads(line[5:])
        raise AssertionError(f"no data in {r.text!r}")
    return r.json()


def mcp_open(srv: Server, secret: str) -> str:
    """An initialized MCP session for ``secret``: its id."""
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}}}  # fmt: skip
    with srv.client(secret, timeout=30) as c:
        r = c.post("/mcp/", json=init, headers=MCP_HEADERS)
        assert r.status_code == 200, r.text
        sid = r.headers["mcp-session-id"]
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        c.post("/mcp/", json=note, headers={**MCP_HEADERS, "mcp-session-id": sid})
    return str(sid)


def mcp(
    srv: Server, secret: str, session: str, method: str, params: dict[str, Any], *,
    raw: bytes | None = None,
) -> httpx.Response:  # fmt: skip
    payload = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
    with srv.client(secret, timeout=30) as c:
        return c.post(
            "/mcp/",
            content=raw if raw is not None else json.dumps(payload).encode(),
            headers={**MCP_HEADERS, "mcp-session-id": session},
        )


# --- stale credentials ---------------------------------------------------------------------
def test_S10_a_left_or_replaced_token_is_refused_on_every_request_api_me_included(
    srv: Server, store: Store
) -> None:
    from broker import Agent

    sid = new_space(srv)
    old = join(srv, sid, "ghost")
    with srv.client(old) as c:
        assert c.get("/api/me").status_code == 200  # a server that caches would keep this
        Agent.from_token(store, old).leave()  # another process leaves, on the store itself
        assert_refused(c.get("/api/me"), 409, "participant_left")
        new = join(srv, sid, "ghost")  # the address again, with a new token
        for path in ["/api/me", agent_path(sid, "/me"), agent_path(sid, "/board")]:
            assert_refused(c.get(path), 401, "auth_failed")
        r = c.post(agent_path(sid, "/send"), json={"to": ["operator"], "text": "old token"})
        assert_refused(r, 401, "auth_failed")
    with srv.client(new) as c:
        assert c.get("/api/me").json()["address"] == "ghost"
    assert [e for e in log_of(srv, sid) if e["body"] == "old token"] == []


def _every_agent_operation(
    c: httpx.Client, sid: str, skip: tuple[str, ...] = ()
) -> dict[str, httpx.Response]:
    """Each declared agent operation on the HTTP API (but ``me``, which answers a
    participant that left, S4), called once: with no field (the ones that need
    none run, the others fail their input check) and a made-up id in the path."""
    from broker.api.operations import OPERATIONS

    out: dict[str, httpx.Response] = {}
    for op in OPERATIONS:
        if op.caller != "agent" or op.http is None or op.after_leave or op.name in skip:
            continue
        path = op.http.path
        for name in op.path_fields:
            path = path.replace("{" + name + "}", "x")
        if op.http.method == "GET":
            out[op.name] = c.get(agent_path(sid, path))
        else:
            out[op.name] = c.request(op.http.method, agent_path(sid, path), json={})
    return out


def test_S10_a_remembered_token_is_refused_by_every_operation_once_it_left_or_was_replaced(
    srv: Server, store: Store
) -> None:
    """The server remembers a declared operation's token once checked
    (credentials.py); each operation re-checks it in its own transaction, and a
    call that fails re-checks it first. So a leave or a re-join made by another
    process, on the store itself, is the answer of every operation at once,
    whatever its input, and nothing is written for the old token."""
    from broker import Agent

    sid = new_space(srv)
    old = join(srv, sid, "remembered")
    with srv.client(old) as c:
        before = _every_agent_operation(c, sid, skip=("participant.leave",))  # now remembered
        assert before["inbox.claim"].status_code == 200, before["inbox.claim"].text
        assert before["msg.send"].status_code == 422  # no field: its input check
        Agent.from_token(store, old).leave()
        for name, r in _every_agent_operation(c, sid).items():
            assert_refused(r, 409, "participant_left"), name
        join(srv, sid, "remembered")  # the address again: the old token is replaced
        assert_refused(c.get(agent_path(sid, "/board")), 401, "auth_failed")
        for name, r in _every_agent_operation(c, sid).items():
            assert (r.status_code, r.json()["error"]) == (401, "auth_failed"), (name, r.text)
    assert [e for e in log_of(srv, sid) if e["sender"] == "remembered"] == []  # nothing written


def test_S10_an_open_mcp_session_of_a_replaced_token_reads_nothing(
    srv: Server, store: Store
) -> None:
    from broker import Agent

    sid = new_space(srv)
    old = join(srv, sid, "leaver")
    session = mcp_open(srv, old)
    inbox = {"uri": "broker://inbox"}
    assert "waiting" in rpc_body(mcp(srv, old, session, "resources/read", inbox))["result"][
        "contents"][0]["text"]  # fmt: skip
    Agent.from_token(store, old).leave()
    for method, params in [("resources/read", inbox), ("resources/read", {"uri": "broker://board"}),
                           ("tools/list", {})]:  # fmt: skip
        error = rpc_body(mcp(srv, old, session, method, params))["error"]
        assert error["code"] == -32000, error  # the broker's refusal, not a crash
        assert error["message"].startswith("participant_left: "), error
        assert error["data"]["error"] == "participant_left", error
    new = join(srv, sid, "leaver")
    sender = join(srv, sid, "x")
    with srv.client(sender) as c:
        r = c.post(agent_path(sid, "/send"), json={"to": ["leaver"], "text": "for the new one"})
        assert r.status_code == 200, r.text
    r = mcp(srv, old, session, "resources/read", inbox)
    assert_refused(r, 401, "auth_failed")
    assert mcp_open(srv, new)  # the new holder is served
    assert_no_server_error(srv)


# --- long-polls whose client left ----------------------------------------------------------
@pytest.mark.parametrize("path", ["/inbox/claim", "/turn"])
def test_S20_a_long_poll_whose_client_left_takes_nothing(srv: Server, path: str) -> None:
    sid = new_space(srv)
    waiter, sender = join(srv, sid, "waiter"), join(srv, sid, "sender")
    with srv.client(waiter, timeout=1.0) as c, pytest.raises(httpx.ReadTimeout):
        c.post(agent_path(sid, path), json={"wait": 20, "lease": 300})  # gives up after 1 s
    time.sleep(0.5)  # the server sees the connection close
    with srv.client(sender) as c:
        r = c.post(agent_path(sid, "/send"), json={"to": ["waiter"], "text": "important"})
        assert r.status_code == 200, r.text
    time.sleep(0.5)  # a wait still parked would take it now
    with srv.operator() as op:
        queue = op.get(f"/api/sessions/{sid}/queue").json()
    assert (queue["ready"], queue["processing"]) == (1, 0), queue
    with srv.client(waiter) as c:
        r = c.post(agent_path(sid, path), json={})
        assert r.status_code == 200, r.text
        got = r.json()["deliveries"] if path == "/inbox/claim" else r.json()["items"]
        assert len(got) == 1 and "important" in json.dumps(got), r.text
    assert '"status": 499' in srv.output()  # the access log says the client left
    assert_no_server_error(srv)


# --- methods -------------------------------------------------------------------------------
def raw_exchange(srv: Server, request: bytes, wait: float = 0.5, answers: int = 0) -> bytes:
    """Send ``request`` on a fresh socket, read what comes within ``wait`` s, close;
    with ``answers``, stop as soon as that many whole answers came (each framed
    by its Content-Length: not for HEAD, whose answers have none), rather than
    waiting out ``wait`` on a live connection."""
    with socket.create_connection(host_port(srv)) as s:
        s.sendall(request)
        s.settimeout(wait)
        out = b""
        try:
            while not (answers and _whole(out) >= answers) and (chunk := s.recv(65536)):
                out += chunk
        except TimeoutError:
            pass
    return out


def _whole(out: bytes) -> int:
    """How many whole answers (head and Content-Length body) ``out`` holds."""
    count = 0
    while (end := out.find(b"\r\n\r\n")) >= 0:
        found = re.search(rb"(?im)^content-length:\s*(\d+)", out[:end])
        size = int(found.group(1)) if found else 0
        if len(out) < end + 4 + size:
            break
        out = out[end + 4 + size :]
        count += 1
    return count


def subscribers(srv: Server) -> int:
    with srv.client() as c:
        return int(c.get("/healthz").json()["subscribers"])


def test_S33_head_on_a_stream_is_405_and_holds_no_subscriber(srv: Server, store: Store) -> None:
    sid = new_space(srv)
    token = join(srv, sid, "lynx")
    before = subscribers(srv)
    stream = f"/api/sessions/{sid}/messages/stream"
    for _ in range(5):  # HEAD, then a second request on the same connection, then gone
        out = raw_exchange(srv, (
            f"HEAD {stream} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {srv.key}\r\n\r\n"
            # the second asks to close after it: the read ends there, not at a timeout
            "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").encode())  # fmt: skip
        assert out.startswith(b"HTTP/1.1 405 "), out[:200]
        assert b"\r\nallow: get\r\n" in out.lower(), out[:400]
        assert b"HTTP/1.1 200 " in out  # the connection went on to the next request
    out = raw_exchange(srv, f"HEAD /mcp/ HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}"
                            "\r\nConnection: close\r\n\r\n".encode())  # fmt: skip
    assert out.startswith(b"HTTP/1.1 405 ") and b"mcp-session-id" not in out.lower(), out[:400]
    time.sleep(0.5)
    assert subscribers(srv) == before
    with srv.operator() as op:
        r = op.delete("/api/spaces")
        assert_refused(r, 405, "method_not_allowed")
        assert set(r.headers["allow"].split(", ")) == {"GET", "HEAD", "POST"}
    assert_no_server_error(srv)


# --- JSON as sent: no repeated key, no conversion --------------------------------------------
def test_S33_a_repeated_json_key_is_422_naming_it_on_http_and_mcp(srv: Server) -> None:
    sid = new_space(srv)
    token = join(srv, sid, "lynx")
    join(srv, sid, "otter")
    raw = b'{"to":["otter"],"text":"cancel the deploy","text":"run the deploy"}'
    with srv.client(token) as c:
        r = c.post(agent_path(sid, "/send"), content=raw)
        assert_refused(r, 422, "invalid_input", "text")
        r = c.post(agent_path(sid, "/inbox/claim"), content=b'{"limit":1,"limit":2}')
        assert_refused(r, 422, "invalid_input", "limit")
    with srv.operator() as op:
        r = op.post(f"/api/sessions/{sid}/messages", content=b'{"text":"a","text":"b"}')
        assert_refused(r, 422, "invalid_input", "text")
    session = mcp_open(srv, token)
    call = (
        b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"msg_send",'
        b'"arguments":{"to":["otter"],"text":"cancel the deploy","text":"run the deploy"}}}'
    )
    r = mcp(srv, token, session, "", {}, raw=call)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["data"] == {
        "error": "invalid_input", "field": "text",
        "message": "the key 'text' is given twice in one object: send it once"}  # fmt: skip
    assert [e for e in log_of(srv, sid) if "deploy" in (e["body"] or "")] == []  # nothing written
    assert_no_server_error(srv)


def test_S33_wrong_json_types_are_422_not_converted_on_http_and_mcp(srv: Server) -> None:
    sid = new_space(srv)
    token = join(srv, sid, "lynx")
    with srv.client(token) as c:
        for body in [{"limit": True}, {"limit": "5"}, {"wait": "1"}, {"lease": False}]:
            r = c.post(agent_path(sid, "/inbox/claim"), json=body)
            assert_refused(r, 422, "invalid_input", next(iter(body)))
        r = c.post(agent_path(sid, "/send"), json={"to": ["operator"], "text": "x",
                                                   "ack_required": "yes"})  # fmt: skip
        assert_refused(r, 422, "invalid_input", "ack_required")
        r = c.post(agent_path(sid, "/send-many"), json={"items": [
            {"to": "operator", "text": "fine"}, {"to": "operator", "text": 5}]})  # fmt: skip
        assert_refused(r, 422, "invalid_input", "items[1].text")
        assert r.json()["item"] == 1
        r = c.post(agent_path(sid, "/inbox/claim"), json={"limit": 2, "wait": 0, "lease": 30})
        assert r.status_code == 200, r.text  # an integer where a float is wanted is a number
    with srv.operator() as op:
        r = op.post(f"/api/sessions/{sid}/messages", json={"text": "x", "urgent": "yes"})
        assert_refused(r, 422, "invalid_input", "urgent")
        for value in [True, "100", None]:
            r = op.patch(f"/api/sessions/{sid}/settings",
                         json={"settings": {"body_max_bytes": value}})  # fmt: skip
            assert_refused(r, 422, "invalid_input", "body_max_bytes")  # named as by the library
        r = op.post("/api/spaces", json={"kind": "session", "settings": {"inbox_cap": True}})
        assert_refused(r, 422, "invalid_input", "inbox_cap")
        assert op.get(f"/api/sessions/{sid}").json()["settings"] == {}  # nothing written
    assert [e for e in log_of(srv, sid) if e["sender"] == "operator"] == []
    session = mcp_open(srv, token)
    for name, args in [
        ("board_read", {"limit": "5"}),
        ("board_read", {"limit": True}),
        ("inbox_next", {"wait": "1"}),
        ("msg_send", {"to": ["operator"], "text": "x", "ack_required": 1}),
    ]:
        result = rpc_body(mcp(srv, token, session, "tools/call",
                              {"name": name, "arguments": args}))["result"]  # fmt: skip
        assert result["isError"] and result["structuredContent"]["error"] == "invalid_input"
        assert result["structuredContent"]["field"] == next(iter(args.keys() - {"to", "text"}))
    assert_no_server_error(srv)


def test_S33_since_is_an_iso_utc_time_or_422_on_every_served_route(srv: Server) -> None:
    sid = new_space(srv)
    token = join(srv, sid, "lynx")
    with srv.operator() as op:
        r = op.post(f"/api/sessions/{sid}/messages", json={"text": "hello there"})
        assert r.status_code == 200, r.text
        logged = log_of(srv, sid)[-1]["created_at_utc"]
    minute = logged[:16] + "Z"  # 2026-11-30T03:52Z: the row's own minute
    routes = [
        (srv.operator, f"/api/sessions/{sid}/messages", {}),
        (srv.operator, f"/api/sessions/{sid}/search", {"query": "hello"}),
        (lambda: srv.client(token), agent_path(sid, "/search"), {"query": "hello"}),
    ]
    for client, path, params in routes:
        with client() as c:
            for bad in ["garbage", "2026-13-01", "2026-11-30T25:00Z", "2026-11-30T03:52+25:00"]:
                r = c.get(path, params={**params, "since": bad})
                assert_refused(r, 422, "invalid_input", "since")
            r = c.get(path, params={**params, "since": minute})
            assert r.status_code == 200, (path, r.text)
            if path.endswith("/messages"):
                assert [e["body"] for e in r.json()] == ["hello there"], r.text
    session = mcp_open(srv, token)
    result = rpc_body(
        mcp(
            srv,
            token,
            session,
            "tools/call",
            {"name": "msg_search", "arguments": {"query": "hello", "since": "garbage"}},
        )
    )["result"]
    assert result["structuredContent"]["field"] == "since", result
    assert_no_server_error(srv)


# --- slow clients ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server with short head and body deadlines (1 s and 2 s)."""
    server = Server(tmp_path_factory.mktemp("quick") / "home",
                    "--header-timeout", "1", "--body-timeout", "2")  # fmt: skip
    try:
        yield server
    finally:
        server.stop()


def held(
    srv: Server, first: bytes, drip: bytes, seconds: float, every: float = 0.2
) -> tuple[bytes, float]:
    """Send ``first``, then ``drip`` ``every`` s: what the server answered and
    when it closed the connection (or ``seconds`` if it never did)."""
    started = time.monotonic()
    out = b""
    with socket.create_connection(host_port(srv)) as s:
        s.settimeout(every)
        s.sendall(first)
        while time.monotonic() - started < seconds:
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                try:
                    s.sendall(drip)
                except OSError:
                    break
                continue
            except OSError:
                break
            if not chunk:
                break
            out += chunk
    return out, time.monotonic() - started


def test_S33_a_slow_request_head_is_408_and_closed(quick: Server) -> None:
    big = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-a: " + b"a" * 70_000 + b"\r\n\r\n"
    with ThreadPoolExecutor(3) as pool:  # side by side: each deadline is the connection's own
        dripping = pool.submit(held, quick, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-a: ", b"a", 10)
        silent = pool.submit(held, quick, b"", b"", 10)  # connects and says nothing
        huge = pool.submit(held, quick, big, b"", 10)
        out, took = dripping.result()
        assert out.startswith(b"HTTP/1.1 408 ") and b"request_timeout" in out, out
        assert took < 4, took
        out, took = silent.result()
        assert took < 4 and out.startswith(b"HTTP/1.1 408 "), (took, out)
        out, took = huge.result()
        assert out.startswith(b"HTTP/1.1 431 ") and took < 4, (took, out[:200])
    with quick.client() as c:  # the server still answers everyone else
        assert c.get("/healthz").status_code == 200


def test_S33_a_slow_head_after_a_kept_alive_request_is_408_and_closed(quick: Server) -> None:
    """The head deadline of a kept-alive connection's next request counts from
    its first byte, whether that byte came in the same read as the request
    before it (a request that comes whole in one read arms no timer) or in a
    read of its own."""
    sid = new_space(quick)
    token = join(quick, sid, "lynx").encode()
    path = agent_path(sid, "/inbox/claim").encode()
    whole = (b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token
             + b"\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")  # fmt: skip
    begun = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-a: "
    with ThreadPoolExecutor(2) as pool:
        together = pool.submit(held, quick, whole + whole + begun, b"a", 10)
        apart = pool.submit(held, quick, whole, begun + b"a", 10, 0.3)  # the head drips
        for out, took in (together.result(), apart.result()):
            answers = out.split(b"HTTP/1.1 ")[1:]
            assert [a[:3] for a in answers[:-1]] == [b"200"] * (len(answers) - 1), out
            assert answers[-1].startswith(b"408 ") and b"request_timeout" in out, out
            assert took < 4, took
    assert_no_server_error(quick)


def test_S33_a_slow_request_body_is_408_and_closed(quick: Server) -> None:
    sid = new_space(quick)
    token = join(quick, sid, "lynx")
    path = agent_path(sid, "/inbox/claim").encode()
    head = b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token.encode()
    framings = [(b"\r\nContent-Length: 10\r\n\r\n{", b" "),
                (b"\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n{\r\n", b"1\r\n \r\n")]  # fmt: skip

    def long_poll() -> float:  # a long-poll outlives both deadlines
        with quick.client(token, timeout=30) as c:
            started = time.monotonic()
            r = c.post(agent_path(sid, "/inbox/claim"), json={"wait": 3.5})
            assert r.status_code == 200 and r.json()["deliveries"] == [], r.text
            return time.monotonic() - started

    # The three side by side: each deadline is the connection's own.
    with ThreadPoolExecutor(3) as pool:
        slow = [
            pool.submit(held, quick, head + framing, drip, 15, 0.5) for framing, drip in framings
        ]
        polled = pool.submit(long_poll)
        for out, took in (f.result() for f in slow):
            assert out.startswith(b"HTTP/1.1 408 ") and b"request_timeout" in out, out
            assert b"connection: close" in out.lower() and 1.5 < took < 6, (took, out)
        assert polled.result() > 3
    assert_no_server_error(quick)


# --- MCP sessions per credential -------------------------------------------------------------
def test_S33_one_credential_holds_a_bounded_number_of_mcp_sessions(srv: Server) -> None:
    from broker.frontends.mcp.http import MAX_SESSIONS

    sid = new_space(srv)
    token, other = join(srv, sid, "lynx"), join(srv, sid, "otter")
    sessions = [mcp_open(srv, token) for _ in range(MAX_SESSIONS)]
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}}}  # fmt: skip
    with srv.client(token) as c:
        r = c.post("/mcp/", json=init, headers=MCP_HEADERS)
        assert r.status_code == 503, r.text
        assert "mcp-session-id" not in r.headers
        assert r.json()["error"]["message"] == "Too many open sessions", r.text
        r = c.delete("/mcp/", headers={**MCP_HEADERS, "mcp-session-id": sessions[0]})
        assert r.status_code == 200, r.text
    assert mcp_open(srv, token)  # a session ended: room for one more
    assert mcp_open(srv, other)  # another credential has its own count
    r = mcp(srv, token, sessions[1], "tools/list", {})  # the open ones still answer
    assert "result" in rpc_body(r), r.text
    assert_no_server_error(srv)


# --- order and size of refusals ----------------------------------------------------------------
def test_S29_credentials_are_checked_before_the_body(srv: Server) -> None:
    sid = new_space(srv)
    token = join(srv, sid, "lynx")
    with srv.client() as c:
        r = c.post(agent_path(sid, "/send"), content=b"{not json")
        assert_refused(r, 401, "auth_failed")
        r = c.post(f"/api/sessions/{sid}/messages", json={"text": 5, "bogus": 1})
        assert_refused(r, 401, "auth_failed")
    with srv.client(token) as c:  # an agent token on an operator endpoint, bad body: 403
        r = c.post(f"/api/sessions/{sid}/messages", content=b"{not json")
        assert_refused(r, 403, "forbidden")


def test_S33_a_refusal_quotes_at_most_80_characters_of_the_input(srv: Server) -> None:
    sid = new_space(srv)
    token = join(srv, sid, "lynx")
    long = "t" * 5000
    with srv.client(token) as c:
        r = c.post(agent_path(sid, f"/turn/{long}/seen"))
        assert r.status_code in (404, 422), r.text
        assert len(r.text) < 800 and "t" * 80 not in r.json()["message"], r.text
        # the turn_id field's own bound: refused by its length, the input not quoted at all
        assert r.json()["message"] == "bad turn_id: at most 100 characters, not 5000", r.text
        r = c.post(agent_path(sid, "/send"), json={"to": ["operator"], "text": "x", long: 1})
        assert_refused(r, 422, "invalid_input")
        assert len(r.text) < 800, r.text
    session = mcp_open(srv, token)
    result = rpc_body(mcp(srv, token, session, "tools/call",
                          {"name": "inbox_seen", "arguments": {"turn_id": long[:200]}}))["result"]  # fmt: skip
    assert result["isError"] and "t" * 80 not in result["content"][0]["text"], result


# --- the documentation -------------------------------------------------------------------------
def test_served_docs_list_every_route_with_its_method() -> None:
    """Each endpoint of the route table is in docs/served.md's tables: its
    method and its path (below the space, or below ``/agent``) on one row."""
    import re
    from pathlib import Path

    from broker.frontends.http import operations as http_operations
    from broker.frontends.http import routes_agent, routes_operator

    doc = (Path(__file__).parents[3] / "docs" / "served.md").read_text()
    operator = doc.split("## Operator endpoints")[1].split("\n## ")[0]
    agent = doc.split("## Agent endpoints")[1].split("\n## ")[0]
    missing = []
    for ep in routes_operator.endpoints() + routes_agent.endpoints():
        section = agent if ep.auth == "agent" else operator  # /api/me heads the agent table
        tail = ep.path
        for prefix in (http_operations.AGENT, routes_operator.SPACE):
            if tail.startswith(prefix + "/"):
                tail = tail[len(prefix) :]
                break
        rows = [line for line in section.splitlines() if line.startswith("|")]
        pattern = re.compile(re.escape(tail) + r"(?=[`?, ]|$)")
        if not any(ep.method in row and pattern.search(row) for row in rows):
            missing.append(f"{ep.method} {ep.path}")
    assert missing == []
