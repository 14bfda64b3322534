"""A warm pytest for mutation runs: imports the test run's third-party modules
once, then forks a child per request that runs ``pytest.main`` from there.

    python scripts/mutation_forkserver.py SOCKET MAP.json

Starting pytest with this project's plugins and dependencies (hypothesis,
schemathesis, SQLAlchemy, pydantic, click ...) costs ~3 s per process, more
than most mutants take to be killed. The server imports the modules listed
under ``preload`` in the map (scripts/mutation_map.py: everything the test
selection imported except the broker and the tests), never the broker itself,
so each forked child imports the broker fresh from disk: the mutant mutmut
has just written.

Protocol, one request per connection on the Unix socket: the client
(scripts/mutation_runner.py) sends a JSON list of pytest arguments and a
newline; the server answers ``pid\\n`` once the child runs (the child leads a
new session, so the client can kill the whole group on a timeout), then
``exit code\\n`` when it ends.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path


def _preload(names: list[str]) -> None:
    for name in names:
        # Best effort: a module that fails to import here just imports in the child.
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    leaked = [m for m in sys.modules if m == "broker" or m.startswith("broker.")]
    if leaked:
        raise SystemExit(f"mutation forkserver: preloading imported the broker ({leaked[0]})")


def _child(args: list[str]) -> None:
    os.setsid()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    code = 1
    try:
        import pytest

        code = int(pytest.main(args))
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def serve(path: str, preload: list[str]) -> None:
    _preload(preload)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(4)
    print(f"mutation forkserver: ready on {path}", flush=True)
    while True:
        conn, _ = server.accept()
        with conn:
            request = conn.makefile("rb").readline()
            try:
                args = json.loads(request)
            except ValueError:
                continue
            start = time.monotonic()
            pid = os.fork()
            if pid == 0:
                server.close()
                conn.close()
                _child(args)
            with contextlib.suppress(OSError):
                conn.sendall(f"{pid}\n".encode())
            _, status = os.waitpid(pid, 0)
            code = os.waitstatus_to_exitcode(status)
            print(
                f"mutation forkserver: exit {code} after {time.monotonic() - start:.1f} s",
                flush=True,
            )
            with contextlib.suppress(OSError):
                conn.sendall(f"{code}\n".encode())


if __name__ == "__main__":
    mapping = json.loads(Path(sys.argv[2]).read_text())
    serve(sys.argv[1], mapping.get("preload", []))
