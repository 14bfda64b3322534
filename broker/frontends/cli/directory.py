"""broker dir list|show|prune (S25, S26): the operator's view of who is in a space.

The directory is the participants themselves (a participant's row carries its
role, archetype and task), so this is the one listing of participants and
teammates; agents get in with `broker join` and out with `broker leave`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from broker.api.operations import PARTICIPANT
from broker.frontends.cli._common import (
    SECONDS,
    confirm,
    emit_json,
    emit_json_lines,
    json_option,
    keyvals,
    main,
    operator,
    table,
    yes_option,
)
from broker.frontends.cli._output import safe, when
from broker.frontends.cli.options import from_operation

if TYPE_CHECKING:
    from broker.model.records import Participant


@main.group("dir")
def dir_() -> None:
    """The directory of a space: who is in it, their state, how to reach them (operator)."""


@dir_.command("list")
@click.argument("run_id")
@click.option("--all", "include_left", is_flag=True, help="Include those that left.")
@json_option
def list_(run_id: str, include_left: bool, as_json: bool) -> None:
    """List the participants of RUN_ID: address, agent, role, status
    (running / idle / failed / shutdown / left), waiting deliveries, parent,
    last seen (UTC). Everything else: `dir show` or --json."""
    items = operator().participants(run_id, include_left=include_left)
    if as_json:
        emit_json_lines(items)
        return
    table(
        [
            (
                p.address,
                p.agent,
                p.role,
                p.status,
                p.waiting,
                p.parent,
                when(p.last_seen_utc),
            )
            for p in items
        ],
        ["address", "agent", "role", "status", "waiting", "parent", "last seen"],
        shrink=(2,),  # the role: the only free text; addresses and names stay whole
    )


@dir_.command("show")
@from_operation(PARTICIPANT, arguments=("space", "address"))
@json_option
def show(args: dict[str, Any], as_json: bool) -> None:
    """Show one participant of RUN_ID: its directory entry (the mail/dir/<id>.txt
    fields of spec §Mailbox layout) and everything else known about it."""
    p = operator().participant(**args)
    if as_json:
        emit_json(p)
        return
    keyvals(
        [
            ("address", p.address),
            ("codename", p.codename),
            ("agent", p.agent),
            ("run id", p.run_id),
            ("step", p.step),
            ("parent", p.parent),
            ("lead", "yes" if p.is_lead else "no"),
            ("role", p.role),
            ("archetype", p.archetype),
            ("task", p.task),
            ("status", p.status),
            ("messaging", ("on" if p.messaging else "off (receive-only)")),
            ("tools", ", ".join(p.tools) if p.tools else "(default set)"),
            ("tool grant", _tool_grant(p)),
            ("waiting", p.waiting),
            ("pid", p.pid),
            ("joined", when(p.joined_at_utc)),
            ("left", when(p.left_at_utc)),
            ("last seen", when(p.last_seen_utc)),
        ]
    )


def _tool_grant(p: Participant) -> str:
    """Its ``tool_grant`` (S24) and the tools it gives, a lead's authority included:
    ``ambient:messaging_default: board.claim, ...``."""
    from broker.api.handles import granted_tools

    if p.tool_grant is None:
        return "none: messaging off (receive-only)"
    granted = granted_tools(p.messaging, p.tools, p.is_lead)
    return f"{p.tool_grant}: {', '.join(sorted(granted)) or 'no tool'}"


@dir_.command("prune")
@click.argument("run_id")
@click.option(
    "--older-than",
    type=SECONDS,
    metavar="SECONDS",
    help="Also prune those whose last sign of life is older than this (an age, not a lifetime).",
)
@click.option("--no-pid-check", is_flag=True, help="Keep those whose registered process is gone.")
@click.option("--dry-run", is_flag=True, help="Only list who would be pruned; change nothing.")
@yes_option
@json_option
def prune(
    run_id: str,
    older_than: float | None,
    no_pid_check: bool,
    dry_run: bool,
    yes: bool,
    as_json: bool,
) -> None:
    """Record stale participants of RUN_ID as left (reason prune): their
    registered process is gone, or (--older-than) they were not seen for that
    long. Lists them and asks first (--yes for scripts)."""
    op = operator()
    check_pid = not no_pid_check
    stale = op.prune(run_id, older_than=older_than, check_pid=check_pid, dry_run=True)
    if stale and not dry_run:
        names = ", ".join(safe(p.address) for p in stale)
        n = len(stale)
        confirm(f"Record {n} participant{'' if n == 1 else 's'} as left: {names}?", yes)
        stale = op.prune(run_id, older_than=older_than, check_pid=check_pid)
    if as_json:
        emit_json_lines(stale)
        return
    verb = "would prune" if dry_run else "pruned"
    names = ": " + ", ".join(safe(p.address) for p in stale) if stale else ""
    click.echo(f"{verb} {len(stale)}{names}")
