"""S37 in served mode: the same reservations through ``broker serve`` (HTTP),
with the client-mode CLI (only a secret) and the served-mode handles."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import trusted

from broker import Store, errors
from broker.frontends.remote import RemoteAgent, RemoteOperator, connect
from tests.served import Server, serving

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from serving(tmp_path_factory, "serve")


def test_S37_served_reserve_check_release_renew_and_the_operator_view(srv: Server) -> None:
    with srv.operator() as c:
        sid = c.post("/api/spaces", json={"kind": "workflow"}).json()["id"]
    store = Store(srv.url)
    try:
        _, lynx_j = trusted.join(store, sid, "lynx")
        _, otter_j = trusted.join(store, sid, "otter")
    finally:
        store.close()
    conn = connect(srv.base)
    try:
        lynx = RemoteAgent.connect(conn, sid, "lynx", lynx_j.token)
        otter = RemoteAgent.connect(conn, sid, "otter", otter_j.token)
        [g] = lynx.reserve("src/**", ttl=60, reason="rewrite")
        assert (g.fence, g.pattern, g.mode, g.reason) == (1, "src/**", "exclusive", "rewrite")
        with pytest.raises(errors.Conflict) as exc:
            otter.reserve(["src/a/*.py"])
        assert exc.value.fields["holder"] == "lynx"
        with pytest.raises(errors.InvalidInput):
            otter.reserve("../x")
        [check] = otter.check_paths(["src/a/b.py"])
        assert check.blocked and check.held_by[0].holder == "lynx"
        assert lynx.renew_reservation(g.fence, 120).fence == g.fence
        op = RemoteOperator(conn, srv.key)
        assert [r.pattern for r in op.reservations(sid)] == ["src/**"]
        assert op.check_paths(sid, ["src/x"])[0].blocked
        assert lynx.release_reservation(g.fence).event == "released"
        with pytest.raises(errors.LeaseLost):
            lynx.release_reservation(g.fence)
        assert op.reservations(sid) == []
    finally:
        conn.close()

    # The client-mode CLI: only a secret and the server's URL.
    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
    env.update(BROKER_URL=srv.base, BROKER_TOKEN=otter_j.token)

    def run(*args: str) -> Any:
        return subprocess.run(
            [sys.executable, "-m", "broker", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )

    r = run("board", "reserve", "docs/**", "--shared", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["mode"] == "shared"
    r = run("board", "check", "docs/a.md", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["held_by"][0]["holder"] == "otter"


def test_S22_S37_served_operator_ends_anyones_hold_over_http_and_the_remote_handle(
    srv: Server,
) -> None:
    with srv.operator() as c:
        sid = c.post("/api/spaces", json={"kind": "workflow"}).json()["id"]
    store = Store(srv.url)
    try:
        otter, _ = trusted.join(store, sid, "otter")
        [g] = otter.reserve("src/**", ttl=86400)
        k = otter.claim_key("deploy", ttl=86400)
    finally:
        store.close()
    with srv.operator() as c:
        r = c.post(f"/api/spaces/{sid}/reservations/release", json={"fence": g.fence, "who": 1})
        assert r.status_code == 422 and r.json()["error"] == "invalid_input"
        r = c.post(f"/api/spaces/{sid}/claims/release", json={"key": "deploy", "reason": "\x85"})
        assert r.status_code == 422 and r.json()["field"] == "reason"
    conn = connect(srv.base)
    try:
        op = RemoteOperator(conn, srv.key)
        ended = op.release_reservation(sid, g.fence, reason="handover")
        assert (ended.key, ended.owner, ended.reason) == (
            "path src/**",
            "otter",
            "operator: handover",
        )
        with pytest.raises(errors.LeaseLost):
            op.release_reservation(sid, g.fence)
        freed = op.release_key(sid, "deploy", fence=k.fence)
        assert (freed.event, freed.owner, freed.reason) == ("released", "otter", "operator")
        assert op.reservations(sid) == [] and op.claims(sid) == []
    finally:
        conn.close()


def test_S41_served_holds_full_is_429_with_retry_after_and_the_clients_holds_full(
    srv: Server,
) -> None:
    with srv.operator() as c:
        sid = c.post("/api/spaces", json={"kind": "workflow", "settings": {"holds_cap": 1}})
        assert sid.status_code in (200, 201), sid.text
        sid = sid.json()["id"]
    store = Store(srv.url)
    try:
        _, lynx_j = trusted.join(store, sid, "lynx")
    finally:
        store.close()
    with srv.client(lynx_j.token) as c:
        first = c.post(f"/api/runs/{sid}/agent/board/claim", json={"key": "a"})
        assert first.status_code == 200, first.text
        full = c.post(f"/api/runs/{sid}/agent/board/claim", json={"key": "b"})
    assert full.status_code == 429 and full.headers["Retry-After"] == "1"
    assert full.json()["error"] == "holds_full" and full.json()["setting"] == "holds_cap"
    conn = connect(srv.base)
    try:
        lynx = RemoteAgent.connect(conn, sid, "lynx", lynx_j.token)
        with pytest.raises(errors.HoldsFull):
            lynx.reserve("src/**")
    finally:
        conn.close()
