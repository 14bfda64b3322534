"""Shared CLI plumbing: the group, the store, identity options, errors.

Two audiences, one rule (README, "The CLI's vocabulary"): a command named
after an agent tool (``msg send``, ``board post|read|claim|release|renew|
directive|retract``, ``inbox ...``, and ``leave``) acts as the participant
given by --space/--as/--token (or BROKER_SPACE/BROKER_AS/BROKER_TOKEN); every
other command is the operator's and names its space with a positional RUN_ID.

Errors: a ``BrokerError`` is one line ``broker: <code>: <message>`` on stderr
and its exit code; a usage mistake is one line and exit 2; a file system
error one line and exit 10; anything unexpected one line and exit 70
(``BROKER_DEBUG=1`` shows the traceback); Ctrl-C exits 130. Never a traceback
otherwise.
"""

from __future__ import annotations

import functools
import math
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from broker import __version__, errors
from broker.exits import EXIT_INTERNAL, EXIT_OS, EXIT_PIPE, EXIT_USAGE, interrupted, is_interrupt
from broker.frontends.cli._output import emit_json, emit_json_lines, keyvals, safe, table
from broker.vocab import ascii_digits

if TYPE_CHECKING:
    from broker.api.handles import Agent, Operator, Store

__all__ = [
    "COMMANDS",
    "Whole",
    "agent",
    "as_agent",
    "confirm",
    "emit_json",
    "emit_json_lines",
    "identity_options",
    "is_terminal",
    "json_option",
    "keyvals",
    "main",
    "operator",
    "store",
    "table",
    "text_arg",
    "whole_option",
]

# broker uses no pydantic plugins; looking for them (entry points through
# importlib.metadata) costs ~25 ms on every CLI call, which is an agent's tool call.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

F = TypeVar("F", bound=Callable[..., Any])
R = TypeVar("R")


# Top-level command -> the module that defines it. Modules load on first use,
# so `broker msg send` imports only what sending needs (an agent calls the CLI
# per tool call; start-up time is its latency).
COMMANDS = {
    "agent": "agent",
    "agentiflow": "message",
    "backup": "ops",
    "board": "board",
    "db": "store",
    "demo": "demo",
    "dir": "directory",
    "doctor": "ops",
    "export": "export",
    "guard": "guard",
    "import": "export",
    "inbox": "inbox",
    "join": "participant",
    "key": "store",
    "leave": "participant",
    "mcp": "mcp",
    "message": "message",
    "migrate-store": "store",
    "msg": "message",
    "queue": "inbox",
    "serve": "serve",
    "space": "space",
    "transcript": "inbox",
    "vacuum": "ops",
}


# --- the command classes ------------------------------------------------------------------
def _set_url(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value:
        root = ctx.find_root()
        root.obj = {**(root.obj if isinstance(root.obj, dict) else {}), "url": value}


class BrokerCommand(click.Command):
    """Every command takes ``--url`` too, after the subcommand as well as before.

    A refusal of a value names the option the user typed: the library names
    its parameter (``field=``, S33: ``lease``, ``reply_to``), and the message
    is reworded with the flag that fed it (``--ttl``, ``--reply-to``): an
    option whose name is the field, or that lists it in ``fields``."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except errors.InvalidInput as exc:
            _name_the_flag(self, exc)
            raise

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.append(
            click.Option(
                ["--url"],
                metavar="URL",
                expose_value=False,
                callback=_set_url,
                help="Database URL (default: BROKER_URL, else the file in BROKER_HOME).",
            )
        )


class LibraryOption(click.Option):
    """An option that feeds library parameters of other names (``fields``):
    ``--ttl`` is ``lease`` to ``Agent.claim``, ``seconds`` to ``Agent.extend``."""

    def __init__(self, *args: Any, fields: Sequence[str] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields = tuple(fields)


def _name_the_flag(command: click.Command, exc: errors.InvalidInput) -> None:
    import re

    field = exc.fields.get("field")
    if not isinstance(field, str):
        return
    flags = [
        max(p.opts, key=len)
        for p in command.params
        if isinstance(p, click.Option) and (p.name == field or field in getattr(p, "fields", ()))
    ]
    if not flags:
        return

    def flag(found: re.Match[str]) -> str:  # "bad to.2:" names the third --to
        nth = found.group(2)
        return found.group(1) + flags[0] + (f" (value {int(nth) + 1})" if nth else "")

    said = re.sub(
        rf"^((?:item \d+: )?(?:bad )?){re.escape(field)}(?:\.(\d+))?(?=[ :]|$)", flag, exc.message
    )
    exc.message = said
    exc.args = (said,)


class BrokerSubGroup(click.Group):
    command_class = BrokerCommand
    # Subgroups of subgroups are BrokerSubGroups too.
    group_class: type[click.Group] | type[type] | None = type


class BrokerGroup(BrokerSubGroup):
    """The top-level ``broker`` group: loads command modules lazily (with
    "did you mean" over every command, loaded or not) and maps every failure
    to one line on stderr and a documented exit code."""

    group_class = BrokerSubGroup

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(COMMANDS) | set(self.commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            import importlib

            importlib.import_module(f"broker.frontends.cli.{COMMANDS[cmd_name]}")
        return self.commands.get(cmd_name)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0]
        if self.get_command(ctx, name) is None and not name.startswith("-"):
            raise click.exceptions.NoSuchCommand(
                name, possibilities=self.list_commands(ctx), ctx=ctx
            )
        return super().resolve_command(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            from broker import envvars

            # A mistyped BROKER_* value is refused by every command; but the
            # git guard's BROKER_GUARD=off lets a commit through, whatever else.
            command = [*getattr(ctx, "_protected_args", ()), *ctx.args][:1]
            if not _guard_off(command):
                envvars.check()
            return super().invoke(ctx)
        except errors.BrokerError as exc:  # a refusal, not a bug: BROKER_DEBUG shows no traceback
            _die(exc.code, exc.message, exc.exit_code)
        except BrokenPipeError:
            _quiet_pipe()
        except OSError as exc:
            _debug()
            where = f": {exc.filename}" if exc.filename else ""
            _die("os_error", f"{exc.strerror or exc}{where}", EXIT_OS)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as exc:  # noqa: BLE001 - the one place unexpected errors become a line
            if is_interrupt(exc):
                interrupted()  # a Ctrl-C in disguise, not a bug
            _debug()
            _die(
                "internal_error",
                f"{type(exc).__name__}: {exc} (a bug; BROKER_DEBUG=1 shows the traceback)",
                EXIT_INTERNAL,
            )

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> NoReturn:
        """Run the command line; always exits (with the documented codes)."""
        try:
            self._run(args, prog_name, complete_var, **extra)
        except KeyboardInterrupt:
            # Ctrl-C between the handlers of ``_run`` (while it reports another
            # error, say) still exits 130 quietly: an uncaught KeyboardInterrupt
            # would print a traceback and kill the process by SIGINT.
            interrupted()

    def _run(
        self,
        args: Sequence[str] | None,
        prog_name: str | None,
        complete_var: str | None,
        **extra: Any,
    ) -> NoReturn:
        try:
            argv = list(sys.argv[1:] if args is None else args)
            _check_text(argv)
            result = super().main(argv, prog_name, complete_var, False, **extra)
        except click.exceptions.Exit as exc:  # ctx.exit() on the way out
            sys.exit(exc.exit_code)
        except click.exceptions.NoArgsIsHelpError as exc:  # `broker`, `broker space`
            click.echo(exc.ctx.get_help() if exc.ctx is not None else exc.format_message())
            sys.exit(0)
        except click.ClickException as exc:  # usage mistakes: one line, exit 2
            message = " ".join(exc.format_message().split())
            ctx = getattr(exc, "ctx", None)
            hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            # A value the command cannot take is invalid input (S33), the same
            # code the library gives; a flag or command that does not exist is usage.
            code = "invalid_input" if isinstance(exc, click.BadParameter) else "usage"
            click.echo(f"broker: {code}: {safe(message)}{hint}", err=True)
            sys.exit(exc.exit_code)
        except click.Abort:  # click's word for Ctrl-C (KeyboardInterrupt: see ``main``)
            interrupted()
        except BrokenPipeError:
            _quiet_pipe()
        sys.exit(result if isinstance(result, int) else 0)


def _debug() -> None:
    from broker import envvars

    try:
        debug = envvars.switch("BROKER_DEBUG", False)
    except errors.InvalidInput:  # that is the error being reported (envvars.check)
        debug = False
    if debug:
        import traceback

        traceback.print_exc()


def _die(code: str, message: str, exit_code: int) -> NoReturn:
    # The message may quote agent text (an address, a key): escaped (S31).
    click.echo(f"broker: {code}: {safe(message)}", err=True)
    sys.exit(exit_code)


def _quiet_pipe() -> NoReturn:
    # `broker message list | head`: the reader is gone; say nothing more.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(EXIT_PIPE)


def _guard_off(command: list[str]) -> bool:
    """``broker guard`` with ``BROKER_GUARD=off``: the git guard's override lets
    a commit through whatever else is set (S37), so no other BROKER_* value is
    checked before it runs."""
    from broker import envvars

    if command != ["guard"]:
        return False
    try:
        return not envvars.switch("BROKER_GUARD", True)
    except errors.InvalidInput:
        return False  # a junk BROKER_GUARD is refused like any other variable


def _check_text(argv: list[str]) -> None:
    """Arguments and BROKER_* variables are text: invalid UTF-8 (which Python
    hands over as lone surrogates) and NUL (which no C string, path or
    process argument can carry) are refused before anything runs (S33)."""
    named = [(f"argument {i}", arg) for i, arg in enumerate(argv, 1)]
    if not _guard_off(argv[:1]):  # the override lets a commit through, whatever else is set
        named += [(k, v) for k, v in os.environ.items() if k.startswith("BROKER_")]
    for name, value in named:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            _die("invalid_input", f"{name} is not valid UTF-8 text", EXIT_USAGE)
        if "\x00" in value:
            _die("invalid_input", f"{name} contains a NUL character", EXIT_USAGE)


@click.group(
    cls=BrokerGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.option(
    "--url",
    envvar="BROKER_URL",
    default=None,
    metavar="URL",
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
    Agent commands (msg, board post|read|claim|..., inbox, leave) act as the
    participant in --space/--as/--token or BROKER_SPACE/BROKER_AS/BROKER_TOKEN;
    every other command is the operator's and takes the space as RUN_ID.
    """
    ctx.obj = {"url": url}


# --- the store, or the server (client mode) ---------------------------------------------
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
        from broker.frontends.remote import Connection

        obj["server"] = Connection(url)
        root.obj = obj
    return obj["server"]


def needs_file(ctx: click.Context) -> None:
    """A command that runs on the database file itself refuses client mode in one line."""
    if server(ctx) is not None:
        raise errors.InvalidInput(
            f"'{ctx.command_path}' needs the database file: not available in client mode "
            "(BROKER_URL names a server)"
        )


def store(ctx: click.Context | None = None, *, create: bool = False, migrate: bool = True) -> Store:
    """The store for this invocation, opened on first use.

    Only the commands that make something new (``space create``, ``db
    upgrade``, ``demo``, ``import``) pass ``create=True``; every other command
    on a missing database says so in one line and creates no file.
    ``migrate=False``: leave the schema as it is (``db current``, ``db upgrade``).
    In client mode there is no file to open: the command says so."""
    ctx = ctx or click.get_current_context()
    needs_file(ctx)
    root = ctx.find_root()
    obj = root.obj if isinstance(root.obj, dict) else {}
    if "store" not in obj:
        from broker.api.handles import Store

        try:
            opened = Store(obj.get("url"), migrate=migrate, create=create)
        except errors.InvalidInput as exc:
            from broker.api.handles import with_server_urls

            with_server_urls(exc)
            raise
        obj["store"] = opened
        root.obj = obj
        root.call_on_close(opened.close)  # in-process callers (tests) open many
    return obj["store"]  # type: ignore[no-any-return]


def operator() -> Operator:
    """The operator surface for an operator command: the library's, or the
    server's in client mode (the same methods over HTTP)."""
    root = click.get_current_context().find_root()
    if not isinstance(root.obj, dict) or "operator" not in root.obj:
        conn = server()
        if conn is not None:
            from broker.frontends.remote import RemoteOperator

            handle: Any = RemoteOperator(conn)
        else:
            from broker.api.handles import Operator

            handle = Operator(store(), via="cli")
        root.obj = {**(root.obj if isinstance(root.obj, dict) else {}), "operator": handle}
    return root.obj["operator"]  # type: ignore[no-any-return]


# --- options --------------------------------------------------------------------------------
def json_option(fn: F) -> F:
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        help="Print JSON: one object, or one object per line for a list.",
    )(fn)


def identity_options(fn: F) -> F:
    """--space/--as/--token, from the environment by default (S10): the
    sender is derived from these, never given."""
    fn = click.option(
        "--token",
        "token",
        envvar="BROKER_TOKEN",
        metavar="SECRET",
        help="Your secret token from join [env BROKER_TOKEN].",
    )(fn)
    fn = click.option(
        "--as", "as_", envvar="BROKER_AS", metavar="ADDRESS", help="Your address [env BROKER_AS]."
    )(fn)
    fn = click.option(
        "--space", envvar="BROKER_SPACE", metavar="RUN_ID", help="Your space [env BROKER_SPACE]."
    )(fn)
    return fn


def agent(space: str | None, as_: str | None, token: str | None) -> Agent:
    """Authenticate the caller; the sender is always derived from this (S10).
    No identity (no token; in file mode, no space or no address either) is a
    usage mistake, exit 2; a wrong one is ``auth_failed``."""
    conn = server()
    if not token:
        raise click.UsageError(
            "no identity: set BROKER_TOKEN (the token `broker join` printed) or pass --token"
        )
    if conn is not None:  # client mode: the token alone; the server derives who calls
        from broker.frontends.remote import RemoteAgent

        return RemoteAgent.connect(conn, space, as_, token)  # type: ignore[return-value]
    if not space:
        raise click.UsageError("no identity: set BROKER_SPACE (your space) or pass --space")
    if not as_:
        raise click.UsageError("no identity: set BROKER_AS (your address) or pass --as")
    from broker.api.handles import (
        Agent,  # not the Operator: broker.api.handles loads it on first use
    )

    return Agent.connect(store(), space, as_, token, transient=True)  # one call: S32


def as_agent(fn: Callable[..., R]) -> Callable[..., R]:
    """An agent's command: --space/--as/--token (``identity_options``), and
    the command is handed the participant they name, authenticated
    (``agent``), as ``me``. Under ``from_operation``, which reads the
    command's fields first."""

    @identity_options
    @functools.wraps(fn)
    def command(*, space: str | None, as_: str | None, token: str | None, **kwargs: Any) -> R:
        return fn(me=agent(space, as_, token), **kwargs)

    return command


class Seconds(click.ParamType[float, Any]):
    """A number of seconds (``nan`` and ``inf`` are none). Its bounds are the
    command's own, stated once, by the library (or the command) that knows
    them: a refusal there names this option (``BrokerCommand``)."""

    name = "seconds"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, float):
            return value
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = math.nan
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        return number


SECONDS = Seconds()


class Whole(click.IntRange):
    """A whole number from ``low`` to ``high``: one message, with the range,
    for both mistakes (click says "'nan' is not a valid integer range.", or
    "0 is not in the range 1<=x<=...")."""

    name = "whole number"

    def __init__(self, low: int, high: int) -> None:
        super().__init__(low, high)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        # Typed text is ASCII digits (an optional '-'): int() also reads '٣',
        # ' 3' and '1_000', numbers nobody typed as such.
        if isinstance(value, str) and not ascii_digits(value.removeprefix("-")):
            self.fail(f"{value!r} is not a whole number from {self.min} to {self.max}", param, ctx)
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter:
            self.fail(f"{value!r} is not a whole number from {self.min} to {self.max}", param, ctx)


# Counts and ids that reach SQLite: inside its 64-bit integers, never an overflow.
COUNT = Whole(1, 1_000_000)


def whole_option(
    flag: str, low: int, high: int, default: int | None, help_text: str | None, **more: Any
) -> Callable[[F], F]:
    """``flag N``: a whole number from ``low`` to ``high`` (``Whole``), its
    default shown when it has one; ``more`` is the rest of ``click.option``'s
    (``metavar``, ``hidden``)."""
    return click.option(
        flag,
        type=Whole(low, high),
        default=default,
        show_default=default is not None,
        help=help_text,
        **more,
    )


def ttl_option(help_text: str, default: float | None = None) -> Callable[[F], F]:
    """``--ttl SECONDS``: the one spelling of every lifetime (a lease, a claim,
    an extension). ``--wait SECONDS`` is the other duration: how long a
    command blocks for something to arrive."""
    return click.option(
        "--ttl",
        cls=LibraryOption,
        fields=("ttl", "lease", "seconds"),  # the lifetime's name in each library call
        type=SECONDS,
        default=default,
        show_default=default is not None,
        metavar="SECONDS",
        help=help_text,
    )


def wait_option(help_text: str, default: float | None = 0.0) -> Callable[[F], F]:
    return click.option(
        "--wait",
        cls=LibraryOption,
        fields=("wait", "idle_exit"),  # idle_exit: runtime.serve's name for it
        type=SECONDS,
        default=default,
        show_default=default is not None,
        metavar="SECONDS",
        help=help_text,
    )


def confirm(question: str, yes: bool) -> None:
    """Destructive operator commands ask first: ``--yes`` answers for
    scripts; without a terminal to ask on, the command refuses (exit 2)."""
    if yes:
        return
    if not is_terminal(sys.stdin):
        raise errors.InvalidInput(f"{question} Nothing changed: pass --yes to confirm.")
    if not click.confirm(question, default=False, err=True):
        raise errors.InvalidInput("not confirmed: nothing changed")


def yes_option(fn: F) -> F:
    return click.option(
        "--yes", "-y", is_flag=True, help="Do not ask for confirmation (for scripts)."
    )(fn)


def is_terminal(stream: Any) -> bool:
    """Whether ``stream`` (sys.stdin, sys.stderr) is a terminal; a closed
    one (``<&-``, ``2>&-``: Python makes it None) is not."""
    return stream is not None and stream.isatty()


def text_arg(words: Sequence[str]) -> str:
    """A message body from the arguments, or from stdin for '-' (UTF-8)."""
    text = " ".join(words)
    if text == "-":
        if sys.stdin is None:  # `<&-`: no stdin at all, not an empty one
            raise errors.InvalidInput("'-' reads the text from stdin, but stdin is closed")
        data = sys.stdin.buffer.read()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise errors.InvalidInput(
                f"stdin is not valid UTF-8 text (byte {data[exc.start]:#04x} at {exc.start})"
            ) from None
    if not text.strip():
        raise errors.InvalidInput("message text is empty")
    return text
