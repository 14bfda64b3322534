"""broker dir ... (S25) and broker team status (S26)."""

from __future__ import annotations

from typing import Any

import click

from broker.cli._common import (
    agent,
    emit_json,
    identity_options,
    json_option,
    keyvals,
    main,
    store,
    table,
)

ARCHETYPES = ["specialist", "surveyor", "researcher", "planner", "interfacer"]


@main.group("dir")
def dir_() -> None:
    """The agent directory: who is registered and how to reach them."""


@dir_.command("register")
@click.argument("run_id")
@click.argument("agent_id")
@click.option("--role", required=True, help="Short role name, e.g. 'API integration specialist'.")
@click.option("--archetype", type=click.Choice(ARCHETYPES), required=True)
@click.option("--task", required=True, help="One-line description of the task.")
@click.option(
    "--agent", "agent_name", help="Agent name for role:NAME addressing (default: from the id)."
)
@click.option("--pid", type=int, help="Process to watch: prune removes the entry once it is gone.")
@json_option
def register(
    run_id: str,
    agent_id: str,
    role: str,
    archetype: str,
    task: str,
    agent_name: str | None,
    pid: int | None,
    as_json: bool,
) -> None:
    """Register AGENT_ID in space RUN_ID (joins it); prints the address and token."""
    from broker import directory

    joined = directory.register(
        store(),
        run_id,
        agent_id,
        role=role,
        archetype=archetype,
        task=task,
        agent=agent_name,
        pid=pid,
    )
    if as_json:
        emit_json({"address": joined.address, "token": joined.token, "space": joined.space_id})
    else:
        click.echo(f"address: {joined.address}")
        click.echo(f"token:   {joined.token}")


def _entry_row(p: Any) -> tuple[Any, ...]:
    return (p.address, p.role, p.archetype, p.task, p.status, p.waiting, p.last_seen_utc)


@dir_.command("list")
@click.argument("run_id")
@click.option("--all", "include_left", is_flag=True, help="Include entries that left.")
@json_option
def list_(run_id: str, include_left: bool, as_json: bool) -> None:
    """List the directory of RUN_ID."""
    from broker import directory

    items = directory.entries(store(), run_id, include_left=include_left)
    if as_json:
        emit_json(items)
    else:
        table(
            [_entry_row(p) for p in items],
            ["id", "role", "archetype", "task", "status", "waiting", "last seen"],
        )


@dir_.command("show")
@click.argument("run_id")
@click.argument("agent_id")
@json_option
def show(run_id: str, agent_id: str, as_json: bool) -> None:
    """Show one directory entry (the mail/dir/<id>.txt fields of spec §Mailbox layout, and more)."""
    from broker import directory

    p = directory.show(store(), run_id, agent_id)
    if as_json:
        emit_json(p)
    else:
        keyvals(
            [
                ("id", p.address),
                ("role", p.role),
                ("archetype", p.archetype),
                ("task", p.task),
                ("agent", p.agent),
                ("status", p.status),
                ("waiting", p.waiting),
                ("pid", p.pid),
                ("joined", p.joined_at_utc),
                ("last seen", p.last_seen_utc),
            ]
        )


@dir_.command("unregister")
@identity_options
@json_option
def unregister(space: str | None, as_: str | None, token: str | None, as_json: bool) -> None:
    """Unregister yourself when done (recorded as left)."""
    from broker import directory

    me = agent(space, as_, token)
    directory.unregister(store(), me.identity)
    emit_json({"address": me.address, "status": "left"}) if as_json else click.echo(
        f"{me.address} unregistered"
    )


@dir_.command("prune")
@click.argument("run_id")
@click.option(
    "--older-than", type=float, metavar="SECONDS", help="Heartbeat older than this is stale."
)
@click.option("--no-pid-check", is_flag=True, help="Do not remove entries whose process is gone.")
@json_option
def prune(run_id: str, older_than: float | None, no_pid_check: bool, as_json: bool) -> None:
    """Remove stale entries (recorded as left, reason prune)."""
    from broker import directory

    pruned = directory.prune(store(), run_id, older_than=older_than, check_pid=not no_pid_check)
    if as_json:
        emit_json(pruned)
    else:
        click.echo(
            f"pruned {len(pruned)}"
            + (": " + ", ".join(p.address for p in pruned) if pruned else "")
        )


@main.group()
def team() -> None:
    """Teammates: persistent workers a lead spawned."""


@team.command("status")
@click.argument("run_id")
@json_option
def status(run_id: str, as_json: bool) -> None:
    """States of the participants of RUN_ID: running / idle / failed / shutdown / left."""
    from broker import participants

    items = participants.list_participants(store(), run_id)
    if as_json:
        emit_json(
            [
                {
                    "address": p.address,
                    "agent": p.agent,
                    "role": p.role,
                    "status": p.status,
                    "waiting": p.waiting,
                    "last_seen_utc": p.last_seen_utc,
                }
                for p in items
            ]
        )
    else:
        table(
            [(p.address, p.agent, p.role, p.status, p.waiting, p.last_seen_utc) for p in items],
            ["address", "agent", "role", "status", "waiting", "last seen"],
        )
