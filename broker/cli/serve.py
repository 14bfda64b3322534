"""``broker serve``: the store over HTTP, SSE and a web console (spec §Served mode)."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import socket
from pathlib import Path
from typing import Any

import click

from broker import errors
from broker.cli._common import main, store


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _unix_socket(path: Path) -> socket.socket:
    """Bind the Unix socket 0600 (the umask covers the moment between bind and chmod)."""
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
        raise errors.InvalidInput(f"cannot listen on {path}: {exc.strerror}") from None
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(1024)
    return sock


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
    help="Unix socket to listen on (default: broker.sock beside the database, 0600).",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="TCP address; anything but loopback needs --allow-remote.",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8787,
    show_default=True,
    help="TCP port (0: pick a free one).",
)
@click.option("--no-tcp", is_flag=True, help="Listen on the Unix socket only.")
@click.option(
    "--allow-remote",
    is_flag=True,
    help="Allow a non-loopback --host. Put TLS in front (a reverse proxy): "
    "tokens travel in every request.",
)
@click.option("--keepalive", type=click.FloatRange(0.05, 300), default=15.0, hidden=True)
@click.option("--stall-timeout", type=click.FloatRange(0.05, 600), default=10.0, hidden=True)
@click.option("--max-batch", type=click.IntRange(1, 4096), default=64, hidden=True)
@click.option(
    "--grace",
    type=click.FloatRange(0, 600),
    default=30.0,
    show_default=True,
    help="Seconds to let in-flight requests finish on SIGTERM.",
)
@click.option("--quiet", is_flag=True, help="No access log lines.")
def serve(
    socket_path: str | None,
    host: str,
    port: int,
    no_tcp: bool,
    allow_remote: bool,
    keepalive: float,
    stall_timeout: float,
    max_batch: int,
    grace: float,
    quiet: bool,
) -> None:
    """Serve the store: HTTP API, SSE log streams and the web console.

    Operators authenticate with the operator key, agents with their token
    (both as 'Authorization: Bearer ...'). Clients: BROKER_URL=http://HOST:PORT
    or BROKER_URL=unix:///path/to/broker.sock.
    """
    try:
        import uvicorn

        from broker.server.app import Options, create_app, log_to_stderr
    except ImportError as exc:
        raise errors.BrokerError(
            f"broker serve needs the 'serve' extra: pip install 'swarm-broker[serve]' ({exc.name})"
        ) from None
    if not no_tcp and not allow_remote and not _loopback(host):
        raise errors.InvalidInput(
            f"--host {host} is not loopback: pass --allow-remote (and put TLS in front)"
        )
    s = store(create=True)  # the server owns its store: it makes a new one
    sock_path = Path(socket_path) if socket_path else Path(s.path).parent / "broker.sock"
    sockets = [_unix_socket(sock_path)]
    if not no_tcp:
        sockets.append(_tcp_socket(host, port))
    options = Options(keepalive_s=keepalive, stall_s=stall_timeout, max_batch=max_batch)
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
    )
    server = _Server(config, app)
    where = [f"unix://{sock_path}"]
    if not no_tcp:
        bound = sockets[1].getsockname()
        where.append(f"http://{'[' + host + ']' if ':' in host else host}:{bound[1]}")
    click.echo(f"broker serve: {' '.join(where)} (store {s.path})", err=True)
    try:
        server.run(sockets=sockets)
    finally:
        for sock in sockets:
            sock.close()
        with contextlib.suppress(OSError):
            sock_path.unlink()


def _mcp_app(s: Any) -> Any:
    """The streamable-HTTP MCP app mounted at /mcp, when broker.mcp provides it."""
    try:
        from broker import mcp
    except ImportError:
        return None
    http_app = getattr(mcp, "http_app", None)
    return http_app(s) if http_app is not None else None


class _Server:
    """uvicorn's server, told first on SIGTERM so SSE streams end with their
    resume point instead of holding the graceful shutdown open."""

    def __init__(self, config: Any, app: Any) -> None:
        import uvicorn

        state = app.state.broker

        class Server(uvicorn.Server):
            def handle_exit(self, sig: int, frame: Any) -> None:
                state.shutdown()
                super().handle_exit(sig, frame)

        self.server = Server(config)

    def run(self, sockets: list[socket.socket]) -> None:
        # uvicorn re-raises the signal it caught once it has shut down; a
        # SIGTERM that was handled gracefully is a clean exit (0), not a kill.
        previous = signal.signal(signal.SIGTERM, lambda *_: None)
        try:
            self.server.run(sockets=sockets)
        finally:
            signal.signal(signal.SIGTERM, previous)
