"""broker join / leave (S2-S5)."""

from __future__ import annotations

import click

from broker.cli._common import agent, emit_json, identity_options, json_option, main, store


@main.command()
@click.argument("run_id")
@click.argument("codename")
@click.option("--agent", "agent_name", help="Agent name (role:NAME addresses match it).")
@click.option(
    "--run-id", "own_run_id", help="The participant's own run id (default: the codename)."
)
@click.option("--step", help="Workflow step (step:NAME addresses match it).")
@click.option("--parent", help="Address of the run that launched this one.")
@click.option("--role", help="Directory: short role description.")
@click.option(
    "--archetype",
    type=click.Choice(["specialist", "surveyor", "researcher", "planner", "interfacer"]),
)
@click.option("--task", help="Directory: one-line task.")
@click.option("--lead", is_flag=True, help="Join as the lead (address 'lead').")
@click.option(
    "--messaging",
    type=click.Choice(["on", "off"]),
    default="on",
    show_default=True,
    help="off = receive-only (inherited by children).",
)
@click.option(
    "--tool",
    "tools",
    multiple=True,
    metavar="NAME",
    help="Grant only these messaging tools (repeatable).",
)
@json_option
def join(
    run_id: str,
    codename: str,
    agent_name: str | None,
    own_run_id: str | None,
    step: str | None,
    parent: str | None,
    role: str | None,
    archetype: str | None,
    task: str | None,
    lead: bool,
    messaging: str,
    tools: tuple[str, ...],
    as_json: bool,
) -> None:
    """Join space RUN_ID as CODENAME; prints the address and a secret token (shown once).

    A retried run (CODENAME with an @N attempt) re-joins with the same address
    and keeps its inbox."""
    from broker import participants
    from broker.messages import parse_input
    from broker.models import JoinInput

    fields = {
        "codename": codename,
        "agent": agent_name,
        "run_id": own_run_id,
        "step": step,
        "parent": parent,
        "role": role,
        "archetype": archetype,
        "task": task,
        "lead": lead,
        "messaging": messaging == "on",
        "tools": list(tools) if tools else None,
    }
    joined = participants.join(store(), run_id, parse_input(JoinInput, fields))
    if as_json:
        emit_json({"address": joined.address, "token": joined.token, "space": joined.space_id})
    else:
        click.echo(f"address: {joined.address}")
        click.echo(f"token:   {joined.token}")
        click.echo(
            f"export BROKER_SPACE={joined.space_id} BROKER_AS='{joined.address}' BROKER_TOKEN={joined.token}"
        )


@main.command()
@identity_options
@json_option
def leave(space: str | None, as_: str | None, token: str | None, as_json: bool) -> None:
    """Leave your space (recorded in the participants journal)."""
    me = agent(space, as_, token)
    me.leave()
    if as_json:
        emit_json({"address": me.address, "status": "left"})
    else:
        click.echo(f"{me.address} left")
