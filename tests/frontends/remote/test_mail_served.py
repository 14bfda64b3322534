"""Mail features in served mode: the same CLI commands through a real ``broker
serve`` process (client mode: BROKER_URL + a secret), S35, S36, S38."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trusted
from served import Server

from broker import Store


@pytest.fixture
def srv(tmp_path: Path) -> Iterator[Server]:
    server = Server(tmp_path / "home")
    try:
        yield server
    finally:
        server.stop()


def test_S35_S36_S38_client_mode_threads_search_policy_and_status(srv: Server) -> None:
    store = Store(srv.url)
    with srv.operator() as c:
        sid = c.post("/api/spaces", json={"kind": "session"}).json()["id"]
    _, lynx = trusted.join(store, sid, "s/lynx")
    otter, _ = trusted.join(store, sid, "s/otter")
    store.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
    env.update(BROKER_URL=srv.base, HOME=str(srv.home.parent / "nohome"))

    def run(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "broker", *args], capture_output=True,
                              text=True, env={**env, **extra}, timeout=60)  # fmt: skip

    me = {"BROKER_TOKEN": lynx.token}
    op = {"BROKER_OPERATOR_KEY": srv.key}
    r = run("msg", "send", "--to", "otter", "--thread", "tok", "--ack-required", "--json",
            "the tokenizer is fixed", **me)  # fmt: skip
    assert r.returncode == 0, r.stderr
    sent = json.loads(r.stdout)["id"]
    r = run("msg", "search", "tokenizer", "--json", **me)
    assert r.returncode == 0, r.stderr
    (hit,) = [json.loads(x) for x in r.stdout.splitlines()]
    assert (hit["id"], hit["thread"]) == (sent, "tok") and "[tokenizer]" in hit["snippet"]
    r = run("msg", "search", '"open', **me)
    assert r.returncode == 2 and r.stderr.startswith("broker: invalid_input: ")
    r = run("msg", "status", sent, "--json", **me)
    assert json.loads(r.stdout)["not_seen"] == ["otter"], r.stderr
    r = run("msg", "policy", "closed", **me)
    assert (r.returncode, r.stdout) == (0, "closed\n"), r.stderr
    assert (
        run("msg", "policy", "--json", **me).stdout.strip() == '{"policy": "closed", "allow": []}'
    )
    r = run("message", "threads", sid, "--json", **op)
    assert [json.loads(x)["thread"] for x in r.stdout.splitlines()] == ["tok"], r.stderr
    r = run("message", "search", sid, "tokenizer", "--json", **op)
    assert [json.loads(x)["id"] for x in r.stdout.splitlines()] == [sent], r.stderr
    r = run("message", "status", sid, sent, **op)
    assert "seen by 0 of 1" in r.stdout, r.stderr
    r = run("message", "list", sid, "--thread", "tok", "--json", **op)
    assert [json.loads(x)["id"] for x in r.stdout.splitlines()] == [sent], r.stderr
    assert otter.address == "otter"
