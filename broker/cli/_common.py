"""Shared CLI plumbing: the group, the store, identity options, output, errors."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import click

from broker import __version__, errors

# broker uses no pydantic plugins; looking for them (entry points through
# importlib.metadata) costs ~25 ms on every CLI call, which is an agent's tool call.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

F = TypeVar("F", bound=Callable[..., Any])

EXIT_USAGE = 2


# Top-level command -> the module that defines it. Modules load on first use,
# so `broker msg send` imports only what sending needs (an agent calls the CLI
# per tool call; start-up time is its latency).
COMMANDS = {
    "agent": "agent",
    "backup": "ops",
    "board": "board",
    "db": "store",
    "demo": "demo",
    "dir": "directory",
    "doctor": "ops",
    "export": "export",
    "import": "export",
    "inbox": "inbox",
    "join": "participant",
    "leave": "participant",
    "mcp": "mcp",
    "message": "message",
    "msg": "message",
    "queue": "inbox",
    "serve": "serve",
    "space": "space",
    "team": "directory",
    "transcript": "inbox",
    "vacuum": "ops",
}


class BrokerGroup(click.Group):
    """Loads command modules lazily; turns BrokerErrors into one line and a
    stable exit code."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(COMMANDS) | set(self.commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            import importlib

            importlib.import_module(f"broker.cli.{COMMANDS[cmd_name]}")
        return self.commands.get(cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except errors.BrokerError as exc:
            click.echo(f"broker: {exc.code}: {exc.message}", err=True)
            ctx.exit(exc.exit_code)


@click.group(cls=BrokerGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--url",
    envvar="BROKER_URL",
    default=None,
    help="Database URL (default: the SQLite file in BROKER_HOME).",
)
# The version comes from the package itself, not from installed metadata (the
# distribution is "swarm-broker"): right for the code that runs, even from a
# checkout on PYTHONPATH, and no metadata scan on a CLI call.
@click.version_option(version=__version__, prog_name="broker")
@click.pass_context
def main(ctx: click.Context, url: str | None) -> None:
    """A transactional message broker for swarms of AI agents.

    Everything lives in one WAL-mode SQLite file (BROKER_HOME, or BROKER_URL).
    Agent commands take their identity from --space/--as/--token or
    BROKER_SPACE/BROKER_AS/BROKER_TOKEN.
    """
    ctx.obj = {"url": url}


def server(ctx: click.Context | None = None) -> Any:
    """Client mode: the connection to ``broker serve`` when BROKER_URL / --url
    names a server (http://, https://, unix://), else None."""
    ctx = ctx or click.get_current_context()
    root = ctx.find_root()
    obj = root.obj if isinstance(root.obj, dict) else {}
    url = obj.get("url")
    if not url or not url.startswith(("http://", "https://", "unix://")):
        return None
    if "server" not in obj:
        from broker.remote import Connection

        obj["server"] = Connection(url)
        root.obj = obj
    return obj["server"]


def operator(via: str = "cli") -> Any:
    """The operator handle: the library's, or the server's in client mode."""
    conn = server()
    if conn is not None:
        from broker.remote import RemoteOperator

        return RemoteOperator(conn)
    from broker.client import Operator

    return Operator(store(), via=via)  # type: ignore[arg-type]


def store(ctx: click.Context | None = None) -> Any:
    """The store for this invocation, opened on first use."""
    ctx = ctx or click.get_current_context()
    if server(ctx) is not None:
        raise errors.InvalidInput(
            f"'{ctx.command_path}' needs the database file: not available in client mode "
            "(BROKER_URL names a server)"
        )
    from broker.db import Store

    root = ctx.find_root()
    obj = root.obj if isinstance(root.obj, dict) else {}
    if "store" not in obj:
        obj["store"] = Store(obj.get("url"))
        root.obj = obj
    return obj["store"]


def json_option(fn: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")(
        fn
    )


def identity_options_with(token_flag: str, token_name: str) -> Callable[[F], F]:
    """--space/--as and the secret token under ``token_flag``, from the
    environment by default (S10): the sender is derived from these, never given."""

    def decorate(fn: F) -> F:
        fn = click.option(
            token_flag,
            token_name,
            envvar="BROKER_TOKEN",
            metavar="SECRET",
            help="Your secret token from join [env BROKER_TOKEN].",
        )(fn)
        fn = click.option(
            "--as",
            "as_",
            envvar="BROKER_AS",
            metavar="ADDRESS",
            help="Your address [env BROKER_AS].",
        )(fn)
        fn = click.option(
            "--space",
            envvar="BROKER_SPACE",
            metavar="RUN_ID",
            help="Your space [env BROKER_SPACE].",
        )(fn)
        return fn

    return decorate


identity_options = identity_options_with("--token", "token")


def agent(space: str | None, as_: str | None, token: str | None) -> Any:
    """Authenticate the caller; the sender is always derived from this (S10)."""
    conn = server()
    if conn is not None:  # client mode: the token alone; the server derives who calls
        from broker.remote import RemoteAgent

        return RemoteAgent.connect(conn, space, as_, token)
    from broker.client import Agent

    if not space:
        raise errors.AuthError("no space: pass --space or set BROKER_SPACE")
    return Agent.connect(store(), space, as_ or "", token, transient=True)  # one call: S32


def to_jsonable(data: Any) -> Any:
    if hasattr(type(data), "__dataclass_fields__"):  # a record (broker.records)
        from broker.records import to_dict

        return to_dict(data)
    if hasattr(data, "model_dump"):  # a pydantic model (not imported here: start-up time)
        return data.model_dump(mode="json", by_alias=True)
    if isinstance(data, list | tuple):
        return [to_jsonable(d) for d in data]
    if isinstance(data, dict):
        return {k: to_jsonable(v) for k, v in data.items()}
    return data


def emit_json(data: Any) -> None:
    click.echo(json.dumps(to_jsonable(data), ensure_ascii=False))


def emit_json_lines(items: Iterable[Any]) -> None:
    for item in items:
        click.echo(json.dumps(to_jsonable(item), ensure_ascii=False))


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> None:
    """A plain aligned table for humans; ``--json`` is for machines."""
    if not rows:
        click.echo("(none)")
        return
    cells = [[("" if c is None else str(c)) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    click.echo("  ".join(h.upper().ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    for r in cells:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def keyvals(pairs: Sequence[tuple[str, Any]]) -> None:
    width = max(len(k) for k, _ in pairs)
    for k, v in pairs:
        click.echo(f"{k.ljust(width)}  {'' if v is None else v}")


def fail(message: str, code: int = 1) -> None:
    click.echo(f"broker: {message}", err=True)
    sys.exit(code)


def text_arg(words: Sequence[str]) -> str:
    text = " ".join(words)
    if text == "-":
        text = sys.stdin.read()
    if not text.strip():
        raise errors.InvalidInput("message text is empty")
    return text
