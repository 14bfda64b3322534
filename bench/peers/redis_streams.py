"""Redis Streams on the local server: XADD / XREADGROUP / XACK, as the Redis docs show.

One stream per run with one consumer group; a claim is ``XREADGROUP GROUP g c
COUNT 1 STREAMS key >`` and an ack ``XACK``. A batch send is 100 XADD in one
non-transactional pipeline (one round trip), a batch claim ``COUNT 100`` and
one XACK of all ids. Durability is whatever the server is configured for (the
report records ``appendonly`` and ``save``): by default a local Redis keeps
acked messages only in memory, a weaker promise than the broker's commit.
If the server is not reachable the rows are reported as skipped.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.peers import Unavailable

DEFAULT_URL = "redis://127.0.0.1:6379/0"
GROUP = "g"


def redis_url() -> str:
    return os.environ.get("BENCH_REDIS_URL", DEFAULT_URL)


def connect(url: str | None = None) -> Any:
    """A connected client, or ``Unavailable`` with the reason."""
    try:
        import redis
    except ImportError as exc:
        raise Unavailable(f"redis-py not installed: {exc}") from None
    client = redis.Redis.from_url(url or redis_url(), socket_connect_timeout=1.0)
    try:
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure means: not reachable here
        raise Unavailable(f"Redis not reachable at {url or redis_url()}: {exc}") from None
    return client


def server_info(url: str | None = None) -> dict[str, Any]:
    try:
        client = connect(url)
    except Unavailable as exc:
        return {"reachable": False, "reason": str(exc)}
    info = client.info("server")
    out: dict[str, Any] = {"reachable": True, "version": info.get("redis_version")}
    for key in ("appendonly", "appendfsync", "save"):
        try:
            out[key] = client.config_get(key).get(key)
        except Exception:  # noqa: BLE001 - CONFIG may be disabled
            out[key] = None
    client.close()
    return out


class RedisStreams:
    system = "redis"
    how = (
        "redis-py on 127.0.0.1:6379: XADD key * body; XREADGROUP GROUP g c COUNT 1 "
        "STREAMS key > then XACK key g id (one round trip each; server durability as configured)"
    )
    batch_how = "100 XADD in one pipeline(transaction=False); XREADGROUP COUNT 100 then one XACK"

    def __init__(self, folder: Path) -> None:
        self.r = connect()
        self.key = f"bench:{uuid.uuid4().hex}"
        self.r.xgroup_create(self.key, GROUP, id="0", mkstream=True)

    def put(self, text: str) -> None:
        self.r.xadd(self.key, {"b": text})

    def put_many(self, texts: list[str]) -> None:
        pipe = self.r.pipeline(transaction=False)
        for text in texts:
            pipe.xadd(self.key, {"b": text})
        pipe.execute()

    def preload(self, texts: list[str]) -> None:
        for i in range(0, len(texts), 1000):
            self.put_many(texts[i : i + 1000])

    def claim_ack(self) -> list[str]:
        return self.claim_ack_many(1)

    def claim_ack_many(self, k: int) -> list[str]:
        got = self.r.xreadgroup(GROUP, "c", {self.key: ">"}, count=k)
        if not got:
            return []
        entries = got[0][1]
        if not entries:
            return []
        self.r.xack(self.key, GROUP, *[e[0] for e in entries])
        return [e[1][b"b"].decode() for e in entries]

    def ack_and_claim(self, prev: list[bytes], k: int = 1) -> list[tuple[bytes, str]]:
        """XACK the previous ids and XREADGROUP the next in one pipelined round trip."""
        pipe = self.r.pipeline(transaction=False)
        if prev:
            pipe.xack(self.key, GROUP, *prev)
        pipe.xreadgroup(GROUP, "c", {self.key: ">"}, count=k)
        res = pipe.execute()
        got = res[-1]
        if not got or not got[0][1]:
            return []
        return [(e[0], e[1][b"b"].decode()) for e in got[0][1]]

    def close(self) -> None:
        try:
            self.r.delete(self.key)
        finally:
            self.r.close()


# --- a server of the bench's own ---------------------------------------------------------
@contextlib.contextmanager
def own_server(folder: Path) -> Iterator[tuple[str | None, str]]:
    """Start ``redis-server`` on a free loopback port for one scenario (or one
    test module); yields (its URL, how it runs), or (None, why not) when no
    server binary is here or none started. The server keeps everything in
    memory (``save ""``, ``appendonly no``: the Redis defaults for persistence
    off) and is killed and reaped on exit. A port taken between the probe and
    the server's bind makes it exit at once: another port, three times."""
    binary = shutil.which("redis-server")
    if binary is None:
        yield None, "redis-server not installed"
        return
    why = "redis-server exited at start three times (ports taken?)"
    for _ in range(3):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        proc = subprocess.Popen(
            [
                binary,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(folder),
                "--protected-mode",
                "yes",
                "--loglevel",
                "warning",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"redis://127.0.0.1:{port}/0"
        deadline = time.monotonic() + 30.0  # a loaded machine (the test suite) starts it late
        try:
            while proc.poll() is None:
                try:
                    connect(url).close()
                except Unavailable:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.02)
                    continue
                yield url, f"own redis-server on 127.0.0.1:{port} (save '', appendonly no)"
                return
            if proc.poll() is None:  # running, and not answering: another port will not help
                why = f"redis-server did not answer on port {port} in 30 s"
                break
        finally:
            proc.kill()
            proc.wait()
    yield None, why


class SwarmStreams:
    """One stream per agent with one consumer group: XADD to a neighbour's
    stream; XREADGROUP COUNT n (BLOCK when waiting) on one's own, then XACK."""

    how = (
        "redis-py: XADD swarm:<i> * b TEXT to the neighbour's stream; XREADGROUP GROUP g c "
        "COUNT 32 [BLOCK ms] STREAMS swarm:<me> > then XACK of the ids (one round trip each)"
    )

    def __init__(self, url: str, run: str, procs: int) -> None:
        self.url = url
        self.keys = [f"swarm:{run}:{i}" for i in range(procs)]

    def create(self) -> None:
        r = connect(self.url)
        try:
            for key in self.keys:
                r.xgroup_create(key, GROUP, id="0", mkstream=True)
        finally:
            r.close()

    def open(self) -> Any:
        return connect(self.url)

    def drop(self) -> None:
        r = connect(self.url)
        try:
            r.delete(*self.keys)
        finally:
            r.close()
