"""``broker serve``: the store over HTTP, SSE and a web console (spec §Served mode)."""

from __future__ import annotations

import contextlib
import gc
import ipaddress
import os
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from broker import errors
from broker.frontends.cli._common import SECONDS, json_option, main, store, whole_option
from broker.frontends.cli._output import emit_json


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# sun_path holds 108 bytes on Linux (104 on the BSDs and macOS), the last a NUL.
DEFAULT_WORKERS = 1  # docs/served.md: why
UNIX_PATH_MAX = 107 if sys.platform.startswith("linux") else 103
FULL_COLLECTION_EVERY = 100  # the cyclic collector's third threshold (see tune_interpreter)
SWITCH_INTERVAL_S = 0.001  # how long another thread may hold the interpreter (tune_interpreter)


def _unix_socket(path: Path) -> socket.socket:
    """Bind the Unix socket 0600 (the umask covers the moment between bind and chmod)."""
    size = len(os.fsencode(path))
    if size > UNIX_PATH_MAX:
        raise errors.InvalidInput(
            f"cannot listen on {path}: the path is {size} bytes, and a Unix socket's path "
            f"takes at most {UNIX_PATH_MAX}; give a shorter --socket",
            field="socket",
        )
    if path.exists() or path.is_symlink():
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(path))
        except OSError:
            if not path.is_socket():
                raise errors.InvalidInput(f"{path} exists and is not a socket") from None
            path.unlink()  # a server that died left it
        else:
            raise errors.Conflict(f"a server is already listening on {path}")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(str(path))
    except OSError as exc:
        sock.close()
        raise errors.InvalidInput(
            f"cannot listen on {path}: {exc.strerror or exc}", field="socket"
        ) from None
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(1024)
    return sock


def _default_socket(s: Any, no_tcp: bool) -> Path | None:
    """The store's own socket: beside a SQLite database, or for a PostgreSQL
    store in BROKER_HOME beside its key file (the folder made 0700 if need be).
    A path too long for a socket is no reason to refuse to serve over TCP: the
    server then listens on TCP alone, and says so."""
    path = Path(s.socket_path())
    size = len(os.fsencode(path))
    if size > UNIX_PATH_MAX and not no_tcp:
        click.echo(
            f"broker serve: no Unix socket: its place {path} is {size} bytes, over the "
            f"{UNIX_PATH_MAX} a socket's path takes (give a shorter --socket to have one)",
            err=True,
        )
        return None
    if not path.parent.exists():
        try:
            path.parent.mkdir(parents=True, mode=0o700)
        except FileExistsError:
            pass  # another process made it meanwhile
        except OSError as exc:
            raise errors.StoreError(
                f"cannot make the folder {path.parent} for the socket: {exc.strerror}"
            ) from None
        else:
            os.chmod(path.parent, 0o700)  # mkdir's mode is filtered by the umask
    return path


def _tcp_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted sockets inherit it: a response's head and body are two writes,
    # and Nagle + the client's delayed ACK would hold the body ~40 ms.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise errors.InvalidInput(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(1024)
    return sock


@main.command()
@click.option(
    "--socket",
    "socket_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Unix socket to listen on, 0600 (default: broker.sock beside a SQLite database; "
    "for PostgreSQL, pg-HOST-PORT-DB.sock in BROKER_HOME).",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="TCP address; anything but loopback needs --allow-remote.",
)
@whole_option("--port", 0, 65535, 8787, "TCP port (0: pick a free one).")
@click.option("--no-tcp", is_flag=True, help="Listen on the Unix socket only.")
@click.option(
    "--allow-remote",
    is_flag=True,
    help="Allow a non-loopback --host. Put TLS in front (a reverse proxy): "
    "tokens travel in every request.",
)
# Tuning for the SSE tests (hidden): seconds between keep-alive comments, and
# how long a stream's client may stall before the server drops it.
@click.option("--keepalive", type=SECONDS, metavar="SECONDS", default=15.0, hidden=True)
@click.option("--stall-timeout", type=SECONDS, metavar="SECONDS", default=10.0, hidden=True)
@whole_option("--max-batch", 1, 4096, 64, None, hidden=True)
# Seconds a request's head, and its body, may take to arrive (slow clients are cut off).
@click.option("--header-timeout", type=SECONDS, metavar="SECONDS", default=10.0, hidden=True)
@click.option("--body-timeout", type=SECONDS, metavar="SECONDS", default=30.0, hidden=True)
@click.option(
    "--grace",
    type=SECONDS,
    metavar="SECONDS",
    default=30.0,
    show_default=True,
    help="Seconds (at most 600) to let in-flight requests finish on SIGTERM.",
)
@whole_option(
    "--max-waits-per-agent",
    1,
    10_000,
    4,
    "Long-polls (claim or turn with a wait, MCP inbox_next) one participant may park "
    "at once; the next is 429 too_many_waits.",
)
@whole_option(
    "--max-waits-per-space",
    1,
    1_000_000,
    1024,
    "Long-polls all participants of one space may park at once (429 past it).",
)
@whole_option(
    "--fd-reserve",
    64,
    1_000_000,
    None,
    "Open files kept for the operator and the server's own files (default: a "
    "quarter of the fd limit); past the rest, agents get 503 server_busy.",
)
@whole_option(
    "--workers",
    1,
    64,
    DEFAULT_WORKERS,
    "Server processes accepting on the same listeners (pre-fork), each with its "
    "own store handle and group committer; the wait caps are split between them "
    "(docs/served.md).",
)
@click.option("--quiet", is_flag=True, help="No access log lines.")
@json_option
def serve(
    socket_path: str | None,
    host: str,
    port: int,
    no_tcp: bool,
    allow_remote: bool,
    keepalive: float,
    stall_timeout: float,
    max_batch: int,
    header_timeout: float,
    body_timeout: float,
    grace: float,
    max_waits_per_agent: int,
    max_waits_per_space: int,
    fd_reserve: int | None,
    workers: int,
    quiet: bool,
    as_json: bool,
) -> None:
    """Serve the store: HTTP API, SSE log streams and the web console.

    Operators authenticate with the operator key, agents with their token
    (both as 'Authorization: Bearer ...'). Clients: BROKER_URL=http://HOST:PORT
    or BROKER_URL=unix:///path/to/broker.sock. With --json, where it listens
    is printed once on stdout as one JSON object (scripts read the port
    picked by --port 0 from it).
    """
    try:
        import uvicorn  # noqa: F401 - said here, once, when the extra is missing

        from broker.frontends.http.app import Options
        from broker.frontends.http.budget import raise_limit
    except ImportError as exc:
        raise errors.BrokerError(
            f"broker serve needs the 'serve' extra: pip install 'swarm-broker[serve]' ({exc.name})"
        ) from None
    for name, value, low, high in (
        ("--grace", grace, 0.0, 600.0),
        ("--keepalive", keepalive, 0.05, 300.0),
        ("--stall-timeout", stall_timeout, 0.05, 600.0),
        ("--header-timeout", header_timeout, 0.05, 600.0),
        ("--body-timeout", body_timeout, 0.05, 3600.0),
    ):
        if not low <= value <= high:
            raise errors.InvalidInput(f"bad {name} {value:g}: from {low:g} to {high:g} seconds")
    if not no_tcp and not allow_remote and not _loopback(host):
        raise errors.InvalidInput(
            f"--host {host} is not loopback: pass --allow-remote (and put TLS in front)"
        )
    # Up to the hard fd limit the operator set (ulimit -n, LimitNOFILE): the
    # budget of S41 is taken from it (broker.frontends.http.budget).
    raise_limit()
    s = store(create=True)  # the server owns its store: it makes a new one
    sock_path = Path(socket_path) if socket_path else _default_socket(s, no_tcp)
    sockets = [_unix_socket(sock_path)] if sock_path is not None else []
    if not no_tcp:
        sockets.append(_tcp_socket(host, port))
    options = Options(
        keepalive_s=keepalive,
        stall_s=stall_timeout,
        max_batch=max_batch,
        header_timeout_s=header_timeout,
        body_timeout_s=body_timeout,
        # S41 across processes: each worker holds its share of a cap (rounded
        # up), so N workers together park at most N x share (docs/served.md).
        waits_per_agent=-(-max_waits_per_agent // workers),
        waits_per_space=-(-max_waits_per_space // workers),
        fd_reserve=fd_reserve,
        worker_header=workers > 1,
    )
    where = [f"unix://{sock_path}"] if sock_path is not None else []
    if not no_tcp:
        bound = sockets[-1].getsockname()
        where.append(f"http://{'[' + host + ']' if ':' in host else host}:{bound[1]}")
    display = s.display

    def announce() -> None:
        more = f", {workers} workers" if workers > 1 else ""
        click.echo(f"broker serve: {' '.join(where)} (store {display}{more})", err=True)
        if as_json:
            more_json = {"workers": workers} if workers > 1 else {}
            emit_json({"urls": where, "store": display, **more_json})

    try:
        if workers == 1:
            _serve_one(s, options, sockets, quiet, grace, announce)
        else:
            # No store handle, thread or connection crosses a fork: each worker
            # opens its own.
            _forget_store()
            _Master(workers, lambda ready: _worker(options, sockets, quiet, grace, ready)).run(
                announce
            )
    finally:
        for sock in sockets:
            sock.close()
        if sock_path is not None:
            with contextlib.suppress(OSError):
                sock_path.unlink()


def _forget_store() -> None:
    root = click.get_current_context().find_root()
    obj = root.obj if isinstance(root.obj, dict) else {}
    opened = obj.pop("store", None)
    if opened is not None:
        opened.close()


def _worker(
    options: Any, sockets: list[socket.socket], quiet: bool, grace: float, ready: int
) -> None:
    """One forked worker: its own store, app, committer and doorbell; it writes
    a byte to ``ready`` once it is about to accept."""

    def said() -> None:
        with contextlib.suppress(OSError):
            os.write(ready, b"1")
            os.close(ready)

    _serve_one(store(create=True), options, sockets, quiet, grace, said)


def _serve_one(
    s: Any,
    options: Any,
    sockets: list[socket.socket],
    quiet: bool,
    grace: float,
    announce: Callable[[], None],
) -> None:
    """Serve on ``sockets`` in this process until SIGTERM (one worker's life)."""
    import uvicorn

    from broker.api import aio
    from broker.frontends.http.app import create_app, log_to_stderr
    from broker.frontends.http.deadlines import protocol

    # PostgreSQL's connection budget (S41): one connection for each thread that
    # may hold one at once (request workers, asyncio workers, the group
    # committer, the parked waits' keeper) and a spare; its LISTEN connection
    # comes on top.
    s.size_pool(options.workers + aio.WORKERS + 3)
    app = create_app(s, options, mcp=_mcp_app(s))
    if not quiet:
        log_to_stderr()
    config = uvicorn.Config(
        app,
        log_config=None,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=round(grace),
        timeout_keep_alive=30,
        http=protocol(options.header_timeout_s, options.body_timeout_s, app.state.broker.lane),
    )
    server = _Server(config, app)
    profile = _profiler()
    try:
        server.run(sockets, announce)
    finally:
        if profile is not None:
            profile()


class _Master:
    """The pre-fork master: the listeners are bound (by the caller) before the
    workers are forked, so every worker accepts on the same sockets and the
    kernel hands each connection to one of them. The master serves nothing: it
    restarts a worker that dies (at most one restart a second), and on SIGTERM
    or SIGINT passes SIGTERM to every worker (each stops gracefully, as a lone
    server does), waits for them all, and exits 0. It announces the listeners
    once every first worker is ready to accept (a client that starts on the
    announcement finds them serving)."""

    RESTART_PAUSE_S = 1.0
    READY_S = 120.0  # a loaded machine starts a worker slowly

    def __init__(self, n: int, work: Callable[[int], None]) -> None:
        self.n = n
        self.work = work
        self.pids: dict[int, float] = {}  # pid -> when it started
        self.stopping = False

    def spawn(self) -> int:
        """Fork one worker; the read end of its readiness pipe."""
        import time

        ready_r, ready_w = os.pipe()
        # Signals wait while the worker forks: it must not run the master's
        # handler (which would stop its siblings) before it has its own.
        stops = {signal.SIGTERM, signal.SIGINT}
        signal.pthread_sigmask(signal.SIG_BLOCK, stops)
        pid = os.fork()
        if pid == 0:  # the worker: serve, then leave without the master's cleanup
            code = 1
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)
                os.close(ready_r)
                self.work(ready_w)
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException:  # noqa: BLE001 - said on stderr, then the worker ends
                import traceback

                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        self.pids[pid] = time.monotonic()
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)
        os.close(ready_w)
        return ready_r

    def stop(self, sig: int, frame: Any) -> None:
        self.stopping = True
        for pid in list(self.pids):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def run(self, announce: Callable[[], None]) -> None:
        import time

        previous = {sig: signal.signal(sig, self.stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            pipes = [self.spawn() for _ in range(self.n)]
            for fd in pipes:
                _wait_ready(fd, self.READY_S)
            announce()
            while self.pids:
                try:
                    pid, status = os.wait()
                except ChildProcessError:
                    break
                started = self.pids.pop(pid, None)
                if started is None or self.stopping:
                    continue
                click.echo(
                    f"broker serve: worker {pid} ended ({_how(status)}); starting another",
                    err=True,
                )
                if time.monotonic() - started < self.RESTART_PAUSE_S:
                    time.sleep(self.RESTART_PAUSE_S)  # a worker that dies at once: no spin
                if not self.stopping:
                    os.close(self.spawn())
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _wait_ready(fd: int, timeout: float) -> None:
    """Until the worker says it is ready, ends (EOF), or ``timeout`` passes."""
    import select

    try:
        readable, _, _ = select.select([fd], [], [], timeout)
        if readable:
            os.read(fd, 1)
    except InterruptedError:
        pass
    finally:
        os.close(fd)


def _how(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit {os.waitstatus_to_exitcode(status)}"


def _profiler() -> Callable[[], None] | None:
    """``BROKER_SERVE_PROFILE=PATH``: cProfile this server process (its event
    loop thread) and write the stats to PATH.<pid> when it stops (for the bench:
    where a request's time goes)."""
    target = os.environ.get("BROKER_SERVE_PROFILE")
    if not target:
        return None
    import cProfile

    prof = cProfile.Profile()
    prof.enable()

    def done() -> None:
        prof.disable()
        prof.dump_stats(f"{target}.{os.getpid()}")

    return done


def _mcp_app(s: Any) -> Any:
    """The streamable-HTTP MCP app mounted at /mcp, when broker.frontends.mcp provides it."""
    try:
        from broker.frontends import mcp
    except ImportError:
        return None
    http_app = getattr(mcp, "http_app", None)
    return http_app(s) if http_app is not None else None


def tune_interpreter() -> None:
    """The server process's interpreter, set once the app is loaded: the
    cyclic collector out of the way of the event loop, and the loop given the
    interpreter back soon when another thread holds it."""
    # What is loaded by now (the modules, the app: ~90,000 objects) lives as
    # long as the process. Out of the cyclic collector's sight, a full
    # collection no longer walks it: with a thousand long-polls parked one
    # took ~90 ms, a pause every request then in flight waits out (a woken
    # claim's answer among them), ~25 ms of it for these objects alone.
    gc.collect()
    gc.freeze()
    # What the collector still walks is mostly the parked waits' objects
    # (~165 a wait), all of them in each full collection: with a thousand
    # agents re-polling every 10 s, 80-140 ms each, that every request
    # then in flight waited out. A full collection at most every 100
    # collections of the middle generation instead of 10 (the young ones,
    # which free almost all of a request's cycles, run as before; a full
    # one found at most ~2,000 objects to free): in a server's life with
    # 30 s of that churn, 1 full collection instead of 7-8, the slowest
    # operator request 55-90 ms instead of 218-223
    # (bench/results/2026-12-04-stop45-lean-server).
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTION_EVERY)
    # The event loop answers every request; the server's other threads (the
    # worker pool's reads, a console view's reading, the keeper's rounds)
    # run Python in bulk, and one that holds the interpreter keeps it for up
    # to the switch interval before the loop gets it back: 5 ms by default.
    # With a console open on a space of a thousand participants (a ~25 ms
    # reading a second or so), sends at 50 a second had a p99 of 10.5-12.2 ms
    # at 5 ms and 4.8-5.1 ms at 1 ms, the server's CPU the same
    # (bench/results/2026-12-05-stop47-keeper). The library never sets it:
    # this process is the broker's own.
    sys.setswitchinterval(SWITCH_INTERVAL_S)


class _Server:
    """uvicorn's server, told first on SIGTERM so SSE streams end with their
    resume point instead of holding the graceful shutdown open."""

    def __init__(self, config: Any, app: Any) -> None:
        import asyncio

        import uvicorn

        state = app.state.broker

        class Server(uvicorn.Server):
            stop: asyncio.Event | None = None

            def handle_exit(self, sig: int, frame: Any) -> None:
                state.shutdown()
                super().handle_exit(sig, frame)
                stop = self.stop
                if stop is not None:  # the main loop's tick wakes now, not within a second
                    with contextlib.suppress(RuntimeError):  # its loop has already ended
                        asyncio.get_running_loop().call_soon_threadsafe(stop.set)

            async def main_loop(self) -> None:
                # uvicorn's own loop ticks ten times a second to see whether to
                # stop and to date its answers (once a second): an idle server,
                # a thousand long-polls parked, woke for nothing 10 times a
                # second (an idle uvicorn: 0.6-0.7 % of a core on the
                # development VM, 0.3-0.5 % with this loop). One tick a
                # second, woken at once to stop.
                self.stop = asyncio.Event()
                while not await self.on_tick(0):  # 0: a whole second each time, date it
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.stop.wait(), 1.0)

        self.server = Server(config)

    def run(self, sockets: list[socket.socket], announce: Callable[[], None]) -> None:
        # A SIGTERM before uvicorn installs its own handlers (right after the
        # announcement, say) asks the same graceful stop. uvicorn re-raises the
        # signal it caught once it has shut down: this handler takes that too,
        # so a SIGTERM handled gracefully is a clean exit (0), not a kill.
        previous = signal.signal(signal.SIGTERM, self._early_stop)
        tune_interpreter()
        try:
            announce()
            self.server.run(sockets=sockets)
        finally:
            signal.signal(signal.SIGTERM, previous)

    def _early_stop(self, sig: int, frame: Any) -> None:
        self.server.should_exit = True
