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
from broker.remote import RemoteAgent, RemoteOperator, connect
from tests.served import Server

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = Server(tmp_path_factory.mktemp("serve") / "home")
    try:
        yield server
    finally:
        server.stop()


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
