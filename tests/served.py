"""A real ``broker serve`` process for tests: start, find its URLs, stop it.

Every test that uses it stops it in a ``finally`` (SIGTERM, then SIGKILL if it
does not exit) and reaps it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from broker import Store

READY = re.compile(r"broker serve: unix://(\S+) http://(\S+)")


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
    env["BROKER_HOME"] = str(home)
    env.update(extra)
    return env


class Server:
    """``python -m broker serve --port 0`` on a store in ``home``."""

    def __init__(self, home: Path, *args: str, max_fds: int | None = None) -> None:
        """``max_fds``: the server process's RLIMIT_NOFILE, soft and hard (S41
        tests make exhaustion reachable with a few hundred descriptors)."""
        self.home = home
        self.log = home.parent / f"serve-{os.getpid()}-{time.monotonic_ns()}.log"
        home.mkdir(parents=True, exist_ok=True)
        if not (home / "broker.db").exists():
            # What serving a new store makes first (schema, operator key file),
            # copied from the session's migrated template: a server then starts
            # without running the migrations (about 0.8 s of CPU of its 2.4).
            # Tests of a store's first open make it themselves (tests/unit/store).
            import spacegen

            spacegen.copy_template(home / "broker.db")
        self._log = open(self.log, "w+b")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "broker", "serve", "--port", "0", *args],
            stdout=self._log,
            stderr=self._log,
            env=clean_env(home),
            preexec_fn=None if max_fds is None else _limit_fds(max_fds),
        )
        self.socket = ""
        self.base = ""
        deadline = time.monotonic() + 90  # a loaded machine (a parallel suite) starts slowly
        while time.monotonic() < deadline:
            found = READY.search(self.log.read_text(errors="replace"))
            if found:
                self.socket, self.base = found.group(1), "http://" + found.group(2)
                break
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker serve exited: {self.log.read_text()}")
            time.sleep(0.02)
        else:
            self.stop()
            raise RuntimeError(f"broker serve did not start: {self.log.read_text()}")
        self.key = (home / "broker.db.operator-key").read_text().strip()
        self.url = f"sqlite:///{home / 'broker.db'}"

    def client(self, secret: str | None = None, *, unix: bool = False, **kw: Any) -> httpx.Client:
        headers = {"Authorization": f"Bearer {secret}"} if secret else {}
        if unix:
            transport = httpx.HTTPTransport(uds=self.socket)
            return httpx.Client(
                base_url="http://broker", transport=transport, headers=headers, **kw
            )
        return httpx.Client(base_url=self.base, headers=headers, **kw)

    def operator(self, *, unix: bool = False) -> httpx.Client:
        return self.client(self.key, unix=unix)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def terminate(self, timeout: float = 30) -> int:
        """SIGTERM and wait: the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def stop(self) -> None:
        try:
            self.terminate(10)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._log.close()
            self.log.unlink(missing_ok=True)


def _limit_fds(n: int) -> Any:
    def limit() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))

    return limit


def serving(factory: Any, name: str) -> Iterator[Server]:
    """A server for one test module, stopped after it: ``yield from`` it in the
    module's ``srv`` fixture (``factory`` is pytest's ``tmp_path_factory``)."""
    server = Server(factory.mktemp(name) / "home")
    try:
        yield server
    finally:
        server.stop()


def store_of(srv: Server) -> Iterator[Store]:
    """The served store, opened directly (to set up and to check what was written)."""
    s = Store(srv.url)
    try:
        yield s
    finally:
        s.close()
