"""The console's live views and operator calls over real HTTP (spec §Served
mode): ``GET .../state/stream`` and ``GET /api/spaces/stream`` send a whole
reading at once and after each change (rung by the doorbells, never polled),
``GET .../activity`` and ``POST .../board/retract`` are the library's
``Operator.activity`` and ``Operator.retract``, refusals are one JSON line.
A real ``broker serve`` process, real clients (httpx, ``RemoteOperator``)."""

from __future__ import annotations

import contextlib
import json
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import trusted

from broker import Operator, Store
from broker.frontends.http import live
from broker.frontends.remote import Connection, RemoteOperator
from broker.model.records import to_dict
from tests.served import Server, serving, store_of

pytestmark = pytest.mark.timeout(300)
WAIT_S = 30.0  # how long a test waits for an event it expects (a bound, not a measure)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from serving(tmp_path_factory, "views")


@pytest.fixture(scope="module")
def store(srv: Server) -> Iterator[Store]:
    yield from store_of(srv)


class Events:
    """An SSE stream read on a thread: ``next(pred)`` waits for the first event
    (name, data) that ``pred`` accepts, skipping the others."""

    def __init__(self, srv: Server, path: str, secret: str | None = None) -> None:
        self.items: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.client = srv.client(secret or srv.key, timeout=httpx.Timeout(WAIT_S, read=None))
        self.status = 0
        self._sock: socket.socket | None = None
        self._open = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(path,), daemon=True)
        self._thread.start()
        assert self._open.wait(WAIT_S), "the stream did not open"

    def _read(self, path: str) -> None:
        try:
            with self.client.stream("GET", path) as r:
                self.status = r.status_code
                self._sock = r.extensions["network_stream"].get_extra_info("socket")
                self._open.set()
                name = ""
                for line in r.iter_lines():
                    if line.startswith("event:"):
                        name = line[6:].strip()
                    elif line.startswith("data:"):
                        self.items.put((name, json.loads(line[5:])))
        except (httpx.HTTPError, RuntimeError):
            pass  # closed by the test
        finally:
            self._open.set()
            self.items.put(("closed", None))

    def next(self, pred: Callable[[str, Any], bool]) -> tuple[str, Any]:
        deadline = time.monotonic() + WAIT_S
        while True:
            name, data = self.items.get(timeout=max(deadline - time.monotonic(), 0.01))
            if pred(name, data) or name == "closed":
                return name, data

    def close(self) -> None:
        # The reader is blocked in a read of a stream that sends nothing until
        # the next change or keep-alive (seconds): shutting the socket down ends
        # that read at once, where closing the client would leave it waiting.
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(WAIT_S)
        assert not self._thread.is_alive(), "the stream's reader did not end"
        self.client.close()


@pytest.fixture
def events(srv: Server) -> Iterator[Callable[..., Events]]:
    opened: list[Events] = []

    def open_events(path: str, secret: str | None = None) -> Events:
        e = Events(srv, path, secret)
        opened.append(e)
        return e

    yield open_events
    for e in opened:
        e.close()


def state_of(name: str, data: Any) -> bool:
    return name == "state"


def test_S22_state_stream_sends_a_reading_at_once_and_after_each_change(
    srv: Server, store: Store, events: Callable[..., Events]
) -> None:
    op = Operator(store)
    sid = op.create_space("workflow").id
    lead, _ = trusted.join(store, sid, "heron", lead=True)
    stream = events(f"/api/runs/{sid}/state/stream")
    assert stream.status == 200
    _, first = stream.next(state_of)
    assert first["space"]["id"] == sid and first["claims"] == []
    assert [p["address"] for p in first["participants"]] == ["lead"]
    assert first["activity"]["inboxes"][0]["address"] == "lead"
    # each change brings a new reading: a claim, a join, a reservation
    lead.claim_key("src/app.py", 600)
    _, data = stream.next(lambda n, d: n == "state" and d["claims"] != [])
    assert [(c["key"], c["holder"]) for c in data["claims"]] == [("src/app.py", "lead")]
    lynx, _ = trusted.join(store, sid, "lynx")
    _, data = stream.next(lambda n, d: n == "state" and len(d["participants"]) == 2)
    lynx.reserve(["docs/**"], ttl=1.0)
    _, data = stream.next(lambda n, d: n == "state" and d["reservations"] != [])
    assert data["reservations"][0]["pattern"] == "docs/**"
    # a reservation that runs out commits nothing: the watcher wakes at its expiry
    _, data = stream.next(lambda n, d: n == "state" and d["reservations"] == [])
    assert [c["key"] for c in data["claims"]] == ["src/app.py"]
    # a send moves the queues
    lead.send("lynx", "hello")
    _, data = stream.next(
        lambda n, d: (
            n == "state"
            and any(i["address"] == "lynx" and i["waiting"] == 1 for i in d["activity"]["inboxes"])
        )
    )
    assert data["activity"]["sent_last_minute"] == 1
    # stopping the space: its participants left, their holds released
    op.stop_space(sid)
    _, data = stream.next(lambda n, d: n == "state" and d["space"]["state"] == "stopped")
    assert {p["status"] for p in data["participants"]} == {"left"}
    assert data["claims"] == []


def test_S22_a_costly_view_is_read_less_often_and_a_cheap_one_no_less() -> None:
    """A watcher reads its view at most four times a second, and a costly view
    (a space of a thousand participants: ~25 ms a reading) less often, so
    that its readings take at most ``READ_SHARE`` of the time: four a second
    cost a busy server an eighth of its one core. Simulated over a minute of
    commits ringing every 10 ms, for readings of 1 ms to 100 ms."""
    for read_s in (0.001, 0.005, 0.025, 0.1):
        now, starts = 0.0, []
        while now < 60.0:
            starts.append(now)
            now += read_s  # the reading
            rung = now + 0.01  # the next commit after it
            now = rung + live.pause(read_s, rung - starts[-1])
        gaps = {round(b - a, 6) for a, b in zip(starts, starts[1:], strict=False)}
        assert min(gaps) >= live.MIN_GAP_S  # never more than four a second
        share = read_s * len(starts) / now
        assert share <= live.READ_SHARE + 1e-9, (read_s, share)
        if read_s / live.READ_SHARE <= live.MIN_GAP_S:
            assert max(gaps) == pytest.approx(live.MIN_GAP_S)  # a cheap view: as before
        else:
            assert max(gaps) == pytest.approx(read_s / live.READ_SHARE)
    # rung long after its last reading: only the burst's settling
    assert live.pause(0.025, 10.0) == live.SETTLE_S


def test_S1_spaces_stream_follows_spaces_created_stopped_and_archived(
    store: Store, events: Callable[..., Events]
) -> None:
    op = Operator(store)
    before = op.create_space("session").id
    stream = events("/api/spaces/stream")
    name, data = stream.next(lambda n, d: n == "spaces")
    assert before in [s["id"] for s in data]
    made = op.create_space("agentiflow").id
    _, data = stream.next(lambda n, d: n == "spaces" and made in [s["id"] for s in d])
    op.stop_space(before)
    _, data = stream.next(
        lambda n, d: n == "spaces" and {s["id"]: s["state"] for s in d}[before] == "stopped"
    )
    op.archive_space(before)
    _, data = stream.next(
        lambda n, d: n == "spaces" and {s["id"]: s["state"] for s in d}[before] == "archived"
    )
    assert [to_dict(s) for s in op.spaces()] == data


def test_S29_view_streams_are_the_operators_and_refuse_what_is_not_a_space(
    srv: Server, store: Store
) -> None:
    sid = Operator(store).create_space("session").id
    _, joined = trusted.join(store, sid, "lynx")
    for path in (f"/api/sessions/{sid}/state/stream", "/api/spaces/stream"):
        with srv.client(joined.token) as c:
            r = c.get(path)
            assert r.status_code == 403, r.text
            assert r.json()["error"] == "forbidden"
        with srv.client() as c:
            assert c.get(path).status_code == 401
    with srv.operator() as c:
        r = c.get("/api/sessions/ses_nosuchspace/state/stream")
        assert (r.status_code, r.json()["error"]) == (404, "space_not_found")
        r = c.get(f"/api/runs/{sid}/state/stream")  # a session is no run
        assert r.status_code == 404
        r = c.head(f"/api/sessions/{sid}/state/stream")
        assert r.status_code == 405


def test_S9_served_retract_lifts_anyones_directive_with_one_line_refusals(
    srv: Server, store: Store
) -> None:
    sid = Operator(store).create_space("workflow").id
    lead, lead_joined = trusted.join(store, sid, "heron", lead=True)
    trusted.join(store, sid, "lynx", agent="coder")
    d = lead.directive("role:coder", "Freeze the API.")
    path = f"/api/runs/{sid}/board/retract"
    with srv.client(lead_joined.token) as c:  # an agent's token: not the operator
        assert c.post(path, json={"directive_id": d.id}).status_code == 403
    with srv.operator() as c:
        for body, field in (({}, "directive_id"), ({"directive_id": d.id, "sender": "x"}, "sender"),
                            ({"directive_id": 5}, "directive_id")):  # fmt: skip
            r = c.post(path, json=body)
            assert (r.status_code, r.json()["error"], r.json()["field"]) == (
                422,
                "invalid_input",
                field,
            )
        assert Operator(store).log(sid)[-1].id == d.id  # nothing written
        r = c.post(path, json={"directive_id": d.id})
        assert r.status_code == 200, r.text
        assert r.json()["kind"] == "retract"
        r = c.post(path, json={"directive_id": d.id})
        assert (r.status_code, r.json()["error"]) == (409, "already_retracted")
    row = Operator(store).log(sid)[-1]
    assert (row.sender, row.ref, row.via) == ("operator", d.id, "cp")


def test_served_remote_operator_activity_and_retract_are_the_librarys(
    srv: Server, store: Store
) -> None:
    op = Operator(store)
    remote = RemoteOperator(Connection(srv.base), srv.key)
    sid = op.create_space("workflow").id
    lead, _ = trusted.join(store, sid, "heron", lead=True)
    lynx, _ = trusted.join(store, sid, "lynx", agent="coder")
    lead.send("lynx", "one")
    lead.send("lynx", "two")
    lynx.claim(limit=1, lease=600)
    mine, theirs = remote.activity(sid), op.activity(sid)
    assert mine.inboxes == theirs.inboxes and mine.sent_last_minute == theirs.sent_last_minute
    assert [(i.address, i.waiting, i.in_flight) for i in mine.inboxes] == [
        ("lead", 0, 0), ("lynx", 1, 1)
    ]  # fmt: skip
    d = lead.directive("role:coder", "Freeze the API.")
    lifted = remote.retract(sid, d.id)
    assert op.log(sid)[-1].id == lifted.id
    assert [b.in_force for b in op.board(sid) if b.id == d.id] == [False]
