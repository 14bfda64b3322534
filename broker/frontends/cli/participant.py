"""broker join / leave (S2-S5, S25): the one way in and the one way out.

A participant's row is also its directory entry (role, archetype, task), so
joining is registering and leaving is unregistering.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from broker.frontends.cli._common import (
    as_agent,
    emit_json,
    json_option,
    main,
    server,
    store,
    whole_option,
)
from broker.frontends.cli._output import emit, safe
from broker.vocab import ARCHETYPES

if TYPE_CHECKING:
    from broker.api.handles import Agent
    from broker.model.records import Joined


@main.command()
@click.argument("run_id")
@click.argument("codename")
@click.option("--agent", "agent_name", metavar="NAME", help="Agent name (role:NAME reaches it).")
@click.option(
    "--run-id", "own_run_id", metavar="ID", help="Its own run id (default: the codename)."
)
@click.option("--step", metavar="NAME", help="Workflow step (step:NAME reaches it).")
@click.option("--parent", metavar="ADDR", help="Address of the run that launched this one.")
@click.option("--role", metavar="TEXT", help="Directory: short role description.")
@click.option(
    "--archetype", type=click.Choice([*ARCHETYPES, ""]), help="Directory: the kind of agent."
)
@click.option("--task", metavar="TEXT", help="Directory: one-line task.")
@whole_option(
    "--pid",
    1,
    2**31 - 1,
    None,
    "An ancestor's pid (e.g. $$ of the agent's shell, which runs the agent): the address "
    "stays live while it runs, and `broker dir prune` records it as left once it is gone.",
)
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
    help="Grant only these tools (repeatable; board.directive and board.retract only by name).",
)
@click.option(
    "--join-key",
    metavar="SECRET",
    help="The space's join key (default: BROKER_JOIN_KEY); `space create` prints it.",
)
@click.option(
    "--parent-token",
    metavar="SECRET",
    help="Join as a child of the participant whose token this is (instead of a join key).",
)
@click.option(
    "--token",
    "holder_token",
    envvar="BROKER_TOKEN",
    metavar="SECRET",
    help="Continue an address that has joined before (a retry, a restart, a re-join "
    "after leaving): its last token. Enough on its own; the join key cannot.",
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
    pid: int | None,
    lead: bool,
    messaging: str,
    tools: tuple[str, ...],
    join_key: str | None,
    parent_token: str | None,
    holder_token: str | None,
    as_json: bool,
) -> None:
    """Join space RUN_ID as CODENAME (and register in its directory); prints
    the address and a secret token, shown once.

    A new address joins with the space's join key (--join-key or
    BROKER_JOIN_KEY) or, for a child, its parent's token (--parent-token): the
    child's grant is at most the parent's. An address that has joined before
    (a retried run: CODENAME with an @N attempt, a restart, a re-join after
    leaving) keeps its inbox, and is continued only with its last token
    (--token or BROKER_TOKEN), its recorded parent's token or the operator
    key; the join key admits new addresses only. A re-join keeps the step,
    parent, role, archetype and task it does not name; '' clears one.

    In client mode (BROKER_URL names a server) the same join goes over HTTP
    with the credential alone: no database file, no key file."""
    import os

    from broker.api.handles import Agent

    if not join_key and not parent_token:
        join_key = os.environ.get("BROKER_JOIN_KEY") or None
    given: dict[str, Any] = {
        "join_key": join_key,
        "parent_token": parent_token,
        "token": holder_token or None,
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
    conn = server()
    if conn is not None:  # client mode: the joiner's operation, the credential in its body
        from broker.frontends.remote import RemoteJoiner

        if pid is not None:
            raise click.UsageError(
                "--pid: a served join records no process (the participant is live by its "
                "heartbeat); leave it out in client mode"
            )
        joiner: Any = RemoteJoiner(conn)  # its methods are derived from the table
        joined = joiner.join(run_id, codename, **given)
        _show(joined, as_json)
        return
    _, joined = Agent.join(
        store(),
        run_id,
        codename,
        **given,
        pid=pid,  # not this process (it exits at once): an ancestor, checked by the join
    )
    _show(joined, as_json)


def _show(joined: Joined, as_json: bool) -> None:
    """A join's answer, the same from the file and from a server."""
    import shlex

    if as_json:
        emit_json(joined)
        return
    address = safe(joined.address)
    click.echo(f"address: {address}")
    click.echo(f"token:   {joined.token}")
    click.echo(
        f"export BROKER_SPACE={joined.space_id} BROKER_AS={safe(shlex.quote(joined.address))} "
        f"BROKER_TOKEN={joined.token}"
    )


@main.command()
@as_agent
@json_option
def leave(me: Agent, as_json: bool) -> None:
    """Leave your space (and its directory); recorded in the participants journal."""
    me.leave()
    emit({"address": me.address, "status": "left"}, as_json, f"{safe(me.address)} left")
