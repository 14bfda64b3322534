"""A swarm across hosts (issue 27's acceptance): PostgreSQL, ``broker serve`` on
it, and agent processes on "another host" that hold only the server's URL and
a secret.

The other host is a network namespace (``ip netns``) joined to this one by a
veth pair: its processes have their own loopback, so the PostgreSQL server on
127.0.0.1:5432 is out of their reach (the test checks it), and the only way to
the broker is ``BROKER_URL=http://10.x.y.1:PORT``. Each agent process gets an
empty environment but for ``PATH``, its own empty ``BROKER_HOME``, ``BROKER_URL``
and one secret (the space's join key, then its own token): no database URL, no
key file. They join, send, claim and run as teammates under ``broker agent
run``; the operator, from yet another ``BROKER_HOME`` with the operator key
from the environment (``BROKER_OPERATOR_KEY``), stops the space, and the
teammate ends.

Needs root and ``ip``: otherwise it skips with a loud reason (in CI, which
runs as root, it fails instead). It is marked ``soak`` (it takes about 20 s
on a loaded machine): ``python -m pytest -m soak tests/frontends/remote/test_multihost.py``;
``.ci/run`` runs it. Namespaces are removed on every exit path:
the fixture's ``finally``, and a sweep at the start of namespaces left by a
test process that was killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pgtest import database, operator_key

PREFIX = "bmh"  # namespace and link names: bmh<pid>-<hex>, at most 15 characters
# Marked soak: on a loaded two-core machine it takes 19-26 s (a PostgreSQL-backed
# server and a dozen broker processes); .ci/run runs it as root after the suite.
pytestmark = [pytest.mark.timeout(240), pytest.mark.soak]


def _why_not() -> str | None:
    if sys.platform != "linux":
        return "network namespaces are Linux's"
    if os.geteuid() != 0:
        return "not root: `ip netns add` needs CAP_SYS_ADMIN (CI runs this test as root)"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def _sweep() -> None:
    """Namespaces a killed test process left behind (its pid is in the name)."""
    listed = _ip("netns", "list", check=False).stdout
    for name in re.findall(rf"^({PREFIX}(\d+)x[0-9a-f]+)", listed, re.M):
        ns, pid = name
        if not Path(f"/proc/{pid}").exists():
            _remove(ns)


def _die_with_parent() -> None:
    """In the child: SIGKILL when the test process dies (PR_SET_PDEATHSIG), so a
    killed test leaves no server or agent behind (the namespace goes at the next
    start, by the sweep)."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)


def _remove(ns: str) -> None:
    pids = _ip("netns", "pids", ns, check=False).stdout.split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)
    _ip("netns", "del", ns, check=False)  # its veth end goes with it, and so the pair


@dataclass
class Host:
    """The other host: a namespace, and the address this host has on its link."""

    ns: str
    server_ip: str


@pytest.fixture
def other_host() -> Iterator[Host]:
    why = _why_not()
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(f"the multi-host test must run in CI: {why}", pytrace=False)
        pytest.skip(f"NO NETWORK NAMESPACE, MULTI-HOST TEST NOT RUN: {why}")
    _sweep()
    tag = f"{os.getpid()}x{secrets.token_hex(2)}"[-10:]
    ns, host_end, ns_end = f"{PREFIX}{tag}", f"bh{tag}", f"bn{tag}"
    net = f"10.{200 + secrets.randbelow(50)}.{secrets.randbelow(250)}"
    try:
        _ip("netns", "add", ns)
        _ip("link", "add", host_end, "type", "veth", "peer", "name", ns_end, "netns", ns)
        _ip("addr", "add", f"{net}.1/30", "dev", host_end)
        _ip("link", "set", host_end, "up")
        _ip("-n", ns, "addr", "add", f"{net}.2/30", "dev", ns_end)
        _ip("-n", ns, "link", "set", ns_end, "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        yield Host(ns, f"{net}.1")
    finally:
        _remove(ns)
        _ip("link", "del", host_end, check=False)  # gone with the namespace, normally
    assert ns not in _ip("netns", "list").stdout


def _env(home: Path, **extra: str) -> dict[str, str]:
    """An environment with nothing of this one's but PATH: its own BROKER_HOME."""
    home.mkdir(parents=True, exist_ok=True)
    return {"PATH": os.environ["PATH"], "HOME": str(home), "BROKER_HOME": str(home), **extra}


BROKER = [sys.executable, "-m", "broker"]


class Swarm:
    """The server on this host, and commands run on either host."""

    def __init__(self, tmp: Path, host: Host, pg_url: str, key: str) -> None:
        self.tmp, self.host, self.key = tmp, host, key
        self.log = open(tmp / "serve.log", "w+b")  # noqa: SIM115 - closed in stop()
        # The server's host has the store's URL and the key (from the environment).
        env = _env(tmp / "server-home", BROKER_URL=pg_url, BROKER_OPERATOR_KEY=key)
        self.server = subprocess.Popen(
            [*BROKER, "serve", "--host", host.server_ip, "--port", "0", "--allow-remote",
             "--grace", "5", "--json"],
            stdout=subprocess.PIPE, stderr=self.log, env=env, preexec_fn=_die_with_parent,
        )  # fmt: skip
        assert self.server.stdout is not None
        line = self.server.stdout.readline()  # --json: where it listens, once
        if not line:
            self.stop()
            raise RuntimeError(f"broker serve did not start: {self.output()}")
        self.url = next(u for u in json.loads(line)["urls"] if u.startswith("http://"))
        assert self.url.startswith(f"http://{host.server_ip}:")
        self.procs: list[subprocess.Popen[str]] = []

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def there(self, home: str, *args: str, **secrets_: str) -> list[str]:
        """A command on the other host: only PATH, its own BROKER_HOME, the
        server's URL and the secrets given."""
        env = _env(self.tmp / home, BROKER_URL=self.url, **secrets_)
        prefix = ["ip", "netns", "exec", self.host.ns, "env", "-i"]
        return [*prefix, *(f"{k}={v}" for k, v in env.items()), *args]

    def run_there(self, home: str, *args: str, **secrets_: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.there(home, *BROKER, *args, **secrets_), capture_output=True, text=True,
            timeout=60, preexec_fn=_die_with_parent,
        )  # fmt: skip

    def operator(self, home: str, *args: str, url: str | None = None) -> Any:
        """An operator command on this host, from its own BROKER_HOME, with the
        operator key from the environment (no key file anywhere it looks)."""
        env = _env(self.tmp / home, BROKER_URL=url or self.url, BROKER_OPERATOR_KEY=self.key)
        done = subprocess.run([*BROKER, *args], capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 0, (args, done.stderr)
        if "--json" not in args:
            return done.stdout
        rows = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
        return rows[0] if len(rows) == 1 and args[:2] != ("dir", "list") else rows

    def wait_idle(self, sid: str, address: str, run: subprocess.Popen[str]) -> None:
        """Until the teammate has joined and waits for a turn (asked of the
        server over HTTP with the operator key: no process per look)."""
        import httpx

        deadline = time.monotonic() + 60
        with httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.key}"}) as c:
            while time.monotonic() < deadline:
                rows = c.get(f"/api/spaces/{sid}/participants").json()
                if any(r["address"] == address and r["status"] == "idle" for r in rows):
                    return
                assert run.poll() is None, run.communicate()
                time.sleep(0.1)
        raise AssertionError(f"{address} never went idle")

    def stop(self) -> None:
        for proc in [*self.procs, self.server]:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.log.close()


def _ok(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, (done.args[-6:], done.stderr)
    return json.loads(done.stdout) if done.stdout.strip().startswith("{") else done.stdout


# The teammate's command: it reports what it was given (the names of its
# BROKER_* variables and the URL), calls `broker` itself with that identity,
# and answers the lead's task on stdout.
TEAMMATE = r"""
import json, os, subprocess, sys
turn = json.load(sys.stdin)
names = sorted(k for k in os.environ if k.startswith("BROKER_"))
task = turn["items"][0]["body"]
subprocess.run([sys.executable, "-m", "broker", "msg", "send", "--to", "lynx",
                "the command itself reached the broker"], check=True, capture_output=True)
print(json.dumps({"to": "lynx", "text": json.dumps({"task": task, "env": names,
                                                     "url": os.environ["BROKER_URL"]})}))
"""


def test_a_swarm_on_another_host_joins_sends_claims_runs_teammates_and_is_stopped(
    other_host: Host, tmp_path: Path
) -> None:
    started = time.monotonic()
    key = operator_key()
    with database(home=tmp_path / "server-home") as pg_url:
        swarm = Swarm(tmp_path, other_host, pg_url, key)
        try:
            _walk(swarm, pg_url)
        finally:
            swarm.stop()
    assert time.monotonic() - started < 120


def _walk(swarm: Swarm, pg_url: str) -> None:
    ns = swarm.host.ns
    # The other host cannot reach the database: only the broker's URL.
    probe = subprocess.run(
        ["ip", "netns", "exec", ns, sys.executable, "-c",
         "import socket; socket.create_connection(('127.0.0.1', 5432), timeout=2)"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert probe.returncode != 0 and "refused" in probe.stderr.lower()

    # The operator makes a space through the server, from a BROKER_HOME of its own.
    space = swarm.operator("op-a", "space", "create", "--kind", "run", "--json")
    sid, join_key = space["id"], space["join_key"]

    # Agents there join with the join key alone (client mode: no database, no key file).
    lynx = _ok(swarm.run_there("lynx", "join", sid, "lynx", "--json", BROKER_JOIN_KEY=join_key))
    otter = _ok(swarm.run_there("otter", "join", sid, "otter", BROKER_JOIN_KEY=join_key))
    assert lynx["address"] == "lynx" and lynx["space_id"] == sid
    otter_token = re.search(r"^token:\s+(\S+)$", otter, re.M)
    assert otter_token is not None and "export BROKER_SPACE=" in otter
    otter_token_s = otter_token.group(1)
    # A wrong join key: refused, one line, the key not echoed, nobody joined.
    wrong = swarm.run_there("eve", "join", sid, "eve", BROKER_JOIN_KEY="not-" + join_key)
    assert wrong.returncode == 4 and wrong.stderr.startswith("broker: auth_failed: ")
    assert join_key not in wrong.stderr and len(wrong.stderr.splitlines()) == 1
    # No identity at all: a usage mistake, exit 2.
    bare = swarm.run_there("eve", "msg", "send", "--to", "otter", "hi")
    assert bare.returncode == 2 and bare.stderr.startswith("broker: usage: no identity")

    # They send and claim with their tokens alone.
    sent = _ok(swarm.run_there("lynx", "msg", "send", "--to", "otter", "hello from afar",
                               "--json", BROKER_TOKEN=lynx["token"]))  # fmt: skip
    assert sent["reached"] == ["otter"]
    lease = _ok(swarm.run_there("otter", "inbox", "claim", "--json", BROKER_TOKEN=otter_token_s))
    assert [d["body"] for d in lease["deliveries"]] == ["hello from afar"]
    assert [d["sender"] for d in lease["deliveries"]] == ["lynx"]

    # A teammate there, under `agent run`, joined with the join key.
    script = swarm.tmp / "teammate.py"
    script.write_text(TEAMMATE)
    run = subprocess.Popen(
        swarm.there("worker", *BROKER, "agent", "run", sid, "worker", "--",
                    sys.executable, str(script), BROKER_JOIN_KEY=join_key),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_die_with_parent,
    )  # fmt: skip
    swarm.procs.append(run)
    swarm.wait_idle(sid, "worker", run)
    _ok(swarm.run_there("lynx", "msg", "send", "--to", "worker", "task 1",
                        BROKER_TOKEN=lynx["token"]))  # fmt: skip
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + 60
    while len(got) < 2 and time.monotonic() < deadline:
        claimed = _ok(swarm.run_there("lynx", "inbox", "claim", "--limit", "5", "--wait", "10",
                                      "--json", BROKER_TOKEN=lynx["token"]))  # fmt: skip
        got += [d for d in claimed["deliveries"] if d["sender"] == "worker"]
    assert sorted(d["body"] for d in got)[0] == "the command itself reached the broker"
    report = json.loads(next(d["body"] for d in got if d["body"].startswith("{")))
    # S39: exactly its identity and the server's URL; nothing else of ours.
    assert report == {
        "task": "task 1",
        "env": ["BROKER_AS", "BROKER_SPACE", "BROKER_TOKEN", "BROKER_URL"],
        "url": swarm.url,
    }
    # The turn's bookkeeping went through the server (history first, ack second):
    # the worker's history holds the task, appended by the store from the turn.
    import psycopg

    with psycopg.connect(pg_url.replace("+psycopg", "")) as conn:
        kept = conn.execute(
            "SELECT h.body, h.sender FROM history h JOIN participants p "
            "ON p.id = h.participant_id WHERE p.space_id = %s AND p.address = 'worker'",
            (sid,),
        ).fetchall()
    assert kept == [("task 1", "lynx")]

    # The operator, from another BROKER_HOME with the key from the environment,
    # stops the space: the teammate ends, and the agents' calls are refused.
    swarm.operator("op-b", "space", "stop", sid, "--yes")
    out, err = run.communicate(timeout=60)
    assert run.returncode == 0, err
    assert "worker shutdown" in out
    late = swarm.run_there("lynx", "msg", "send", "--to", "otter", "x", BROKER_TOKEN=lynx["token"])
    assert late.returncode != 0 and "space_not_running" in late.stderr
    # The operator reaches the store itself too, from a third BROKER_HOME: the key
    # from the environment, no key file.
    shown = swarm.operator("op-c", "space", "show", sid, "--json", url=pg_url)
    assert shown["state"] == "stopped"
    rows = swarm.operator("op-c", "dir", "list", sid, "--all", "--json", url=pg_url)
    statuses = {r["address"]: r["status"] for r in rows}
    assert statuses == {"lynx": "left", "otter": "left", "worker": "left"}  # the stop says so

    # Nothing was written on the other host: its BROKER_HOMEs are empty.
    for home in ("lynx", "otter", "eve", "worker"):
        assert list((swarm.tmp / home).iterdir()) == [], home
    for home in ("op-a", "op-b", "op-c"):  # and no key file for the operator either
        assert not [p for p in (swarm.tmp / home).rglob("*") if "key" in p.name], home
