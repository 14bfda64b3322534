"""broker agent run: any-language teammates (S26)."""

from __future__ import annotations

import os
import signal
import threading

import click

from broker.cli._common import emit_json, json_option, main, store

ARCHETYPES = ["specialist", "surveyor", "researcher", "planner", "interfacer"]


@main.group()
def agent() -> None:
    """Run a process as a teammate of a space."""


@agent.command("run", context_settings={"ignore_unknown_options": True})
@click.argument("run_id")
@click.argument("name")
@click.option("--role", help="Directory role.")
@click.option("--archetype", type=click.Choice(ARCHETYPES), default="specialist", show_default=True)
@click.option("--task", help="Directory task.")
@click.option("--agent", "agent_name", help="Agent name for role:NAME addressing.")
@click.option("--parent", default="lead", show_default=True, help="Who launched it (its `parent`).")
@click.option("--lease", type=float, help="Seconds a turn may stay unconfirmed before redelivery.")
@click.option("--max-turns", type=int, help="Exit after this many turns.")
@click.option(
    "--idle-exit", type=float, metavar="SECONDS", help="Exit after this long without a turn."
)
@json_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(
    run_id: str,
    name: str,
    role: str | None,
    archetype: str,
    task: str | None,
    agent_name: str | None,
    parent: str,
    lease: float | None,
    max_turns: int | None,
    idle_exit: float | None,
    as_json: bool,
    command: tuple[str, ...],
) -> None:
    """Join (or re-join) RUN_ID as NAME and run COMMAND once per turn.

    The turn arrives as JSON on COMMAND's stdin. Each stdout line of the form
    {"to": ..., "text": ...} is sent as NAME; other lines together are one reply
    to the lead. A non-zero exit quarantines the turn's messages, marks NAME
    failed and tells the lead. BROKER_SPACE/BROKER_AS/BROKER_TOKEN are set for
    COMMAND so it can call `broker` itself. Write `--` before COMMAND.
    """
    from broker import errors, participants, runtime
    from broker.client import Agent
    from broker.messages import parse_input
    from broker.models import JoinInput
    from broker.records import Turn

    s = store()
    env_token = os.environ.get("BROKER_TOKEN")
    if env_token and os.environ.get("BROKER_AS") == name:
        me = Agent.connect(s, run_id, name, env_token)  # spawned with an identity: keep it
        token = env_token
    else:
        fields = {
            "codename": name,
            "agent": agent_name,
            "role": role,
            "archetype": archetype,
            "task": task,
            "parent": parent,
            "pid": os.getpid(),
        }
        joined = participants.join(s, run_id, parse_input(JoinInput, fields))
        me = Agent.connect(s, joined.space_id, joined.address, joined.token)
        token = joined.token
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    handler = runtime.command_handler(list(command))

    def with_token(ctx: runtime.TeammateContext, turn: Turn) -> None:
        ctx.extra["token"] = token
        handler(ctx, turn)

    status = runtime.serve(
        me, with_token, stop=stop, lease=lease, max_turns=max_turns, idle_exit=idle_exit
    )
    if as_json:
        emit_json({"address": me.address, "status": status})
    else:
        click.echo(f"{me.address} {status}")
    if status == "failed":
        raise click.exceptions.Exit(errors.HandlerFailed.exit_code)
