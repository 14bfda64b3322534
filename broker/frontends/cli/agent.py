"""broker agent run: any-language teammates (S26)."""

from __future__ import annotations

import os
import signal
import threading
from typing import TYPE_CHECKING, Any

import click

from broker.exits import EXIT_INTERRUPTED
from broker.frontends.cli._common import (
    COUNT,
    json_option,
    main,
    server,
    store,
    ttl_option,
    wait_option,
)
from broker.frontends.cli._output import emit, safe
from broker.vocab import ARCHETYPES

if TYPE_CHECKING:
    from broker.model.records import Turn


@main.group()
def agent() -> None:
    """Run a process as a teammate of a space (operator)."""


@agent.command("run", context_settings={"ignore_unknown_options": True})
@click.argument("run_id")
@click.argument("name")
@click.option("--role", metavar="TEXT", help="Directory role.")
@click.option(
    "--archetype",
    type=click.Choice([*ARCHETYPES, ""]),
    help="Directory: the kind of agent (a first join: specialist unless given).",
)
@click.option("--task", metavar="TEXT", help="Directory task.")
@click.option("--agent", "agent_name", metavar="NAME", help="Agent name (role:NAME reaches it).")
@click.option("--parent", metavar="ADDR", help="Who launched it (a first join: lead unless given).")
@click.option(
    "--token",
    "last_token",
    envvar="BROKER_TOKEN",
    metavar="SECRET",
    help="NAME's last token: continue NAME while its holder is still live (a second "
    "copy of an agent never cuts off the first without it).",
)
@ttl_option("How long a turn may stay unconfirmed before it is redelivered.")
@click.option("--max-turns", type=COUNT, metavar="N", help="Exit after this many turns.")
@wait_option("Exit after waiting this long for a turn (default: wait for ever).", None)
@click.option("--quiet", "-q", is_flag=True, help="No line per turn on stderr.")
@click.option(
    "--env",
    "passed",
    multiple=True,
    metavar="NAME",
    help="Hand the variable NAME of this environment on to COMMAND (repeatable; "
    "never a BROKER_* one).",
)
@json_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(
    run_id: str,
    name: str,
    role: str | None,
    archetype: str | None,
    task: str | None,
    agent_name: str | None,
    parent: str | None,
    last_token: str | None,
    ttl: float | None,
    max_turns: int | None,
    wait: float | None,
    quiet: bool,
    passed: tuple[str, ...],
    as_json: bool,
    command: tuple[str, ...],
) -> None:
    """Join (or re-join) RUN_ID as NAME and run COMMAND once per turn.

    The turn arrives as JSON on COMMAND's stdin. Each stdout line of the form
    {"to": ..., "text": ...} (optionally the other fields of msg send by their
    JSON names: thread, idempotency_key, ...; any other is refused) is sent as
    NAME; other lines together are one reply to the lead. The turn's output
    is sent as one batch: a refused line, or a non-zero exit, sends none of
    it, quarantines the turn's messages, marks NAME failed and tells the lead
    (exit 7); the reason is shown here too. COMMAND's stderr is shown as it
    comes, and one line per turn says how it ended (--quiet: not those).
    COMMAND's environment is NAME's identity (BROKER_SPACE, BROKER_AS,
    BROKER_TOKEN) and the store's BROKER_URL (in client mode: the server's),
    so it can call `broker` itself,
    with PATH, HOME and the locale, and the variables named by --env: never
    the operator key or a join key (S39). Write `--` before COMMAND.

    NAME joins with the operator key; if NAME has joined before, that
    continues it (S40) once its holder is gone (left, failed, its process
    exited), or while it is live with --token. A re-join keeps the role,
    archetype, task and parent it had unless they are given.

    In client mode (BROKER_URL names a server) the teammate runs through the
    server: NAME joins with BROKER_OPERATOR_KEY if it is set, else with the
    space's join key (--join-key is not an option: BROKER_JOIN_KEY) or its
    last token; with BROKER_AS=NAME and BROKER_TOKEN it continues as it is.
    """
    from broker import errors
    from broker.api.handles import Agent, Operator, check_env_names, joined_before
    from broker.teammates import commands, runtime

    runtime.check_options(ttl, wait)  # bad input joins nobody
    check_env_names(passed, None)
    env_token = os.environ.get("BROKER_TOKEN")
    me: Any
    conn = server()
    if conn is not None:  # client mode: the teammate runs through the remote client
        me, token = _served_identity(
            conn, run_id, name, last_token, agent_name, role, archetype, task, parent
        )
    elif env_token and os.environ.get("BROKER_AS") == name:
        me = Agent.connect(store(), run_id, name, env_token)  # spawned with an identity: keep it
        token = env_token
    else:
        s = store()
        # An operator command: it joins NAME on the agent's behalf with the
        # operator key (S27, S40), found as every operator command finds it (S29).
        op = Operator(s, via="cli")
        if (archetype is None or parent is None) and not joined_before(op, run_id, name):
            archetype = archetype if archetype is not None else "specialist"
            parent = parent if parent is not None else "lead"
        me, joined = op.join(
            run_id,
            name,
            token=last_token,
            agent=agent_name,
            role=role,
            archetype=archetype,
            task=task,
            parent=parent,
            pid=os.getpid(),  # this process serves the turns: prune may watch it
        )
        token = joined.token
    stop = threading.Event()
    interrupted = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        if signum == signal.SIGINT:
            interrupted.set()
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    who = safe(me.address)

    def show_stderr(line: str) -> None:
        click.echo(f"{who}| {safe(line)}", err=True)

    def show_note(note: str) -> None:
        click.echo(f"{who}: {safe(note)}", err=True)

    handler = commands.command_handler(
        list(command), on_stderr=show_stderr, on_note=show_note, passed=passed
    )

    def with_token(ctx: runtime.TeammateContext, turn: Turn) -> None:
        ctx.extra["token"] = token
        try:
            handler(ctx, turn)
        except Exception as exc:
            # The reason the lead is told, here too (escaped: it quotes the command's output).
            show_note(f"turn {turn.id} failed: {runtime.failure_reason(exc)}")
            raise

    def log_turn(turn: Turn, outcome: str, seconds: float) -> None:
        if not quiet:
            n = len(turn.items)
            click.echo(
                f"{who}: turn {turn.id}: {n} item{'' if n == 1 else 's'}, "
                f"{outcome} in {seconds:.2f} s",
                err=True,
            )

    status = runtime.serve(
        me,
        with_token,
        stop=stop,
        lease=ttl,
        max_turns=max_turns,
        idle_exit=wait,
        on_turn=log_turn,
    )
    emit({"address": me.address, "status": status}, as_json, f"{who} {status}")
    if status == "failed":
        raise click.exceptions.Exit(errors.HandlerFailed.exit_code)
    if interrupted.is_set():
        raise click.exceptions.Exit(EXIT_INTERRUPTED)


def _served_identity(
    conn: Any,
    run_id: str,
    name: str,
    last_token: str | None,
    agent_name: str | None,
    role: str | None,
    archetype: str | None,
    task: str | None,
    parent: str | None,
) -> tuple[Any, str]:
    """The teammate NAME on a server (client mode), and its token: its own
    identity kept (BROKER_AS=NAME, BROKER_TOKEN), or joined with the operator
    key (BROKER_OPERATOR_KEY) or the space's join key (BROKER_JOIN_KEY). A
    served join records no process: the teammate is live by its heartbeat."""
    from broker.api.handles import joined_before
    from broker.frontends.remote import RemoteAgent, RemoteJoiner, RemoteOperator

    env_token = os.environ.get("BROKER_TOKEN")
    if env_token and os.environ.get("BROKER_AS") == name:
        return RemoteAgent.from_token(conn, env_token), env_token  # the server says who
    fields: dict[str, Any] = {
        "agent": agent_name, "role": role, "archetype": archetype, "task": task, "parent": parent
    }  # fmt: skip
    if os.environ.get("BROKER_OPERATOR_KEY"):
        op: Any = RemoteOperator(conn)
        if (archetype is None or parent is None) and not joined_before(op, run_id, name):
            fields["archetype"] = archetype if archetype is not None else "specialist"
            fields["parent"] = parent if parent is not None else "lead"
        me, joined = op.join(run_id, name, token=last_token, **fields)
        return me, joined.token
    join_key = os.environ.get("BROKER_JOIN_KEY") or None
    if not join_key and not last_token:
        raise click.UsageError(
            "agent run against a server needs a credential to join NAME: BROKER_JOIN_KEY (the "
            "space's join key), BROKER_OPERATOR_KEY, or NAME's last token (--token; with "
            "BROKER_AS=NAME, BROKER_TOKEN)"
        )
    if not last_token:  # a first join (the join key admits new addresses only)
        fields["archetype"] = archetype if archetype is not None else "specialist"
        fields["parent"] = parent if parent is not None else "lead"
    joiner: Any = RemoteJoiner(conn)  # its methods are derived from the table
    joined = joiner.join(
        run_id, name, join_key=None if last_token else join_key, token=last_token, **fields
    )
    return RemoteAgent(conn, joined.token, joined.space_id, joined.address), joined.token
