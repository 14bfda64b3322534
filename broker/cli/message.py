"""Agent-side `broker msg send`, operator-side `broker message send|list|participants`."""

from __future__ import annotations

from typing import Any

import click

from broker import errors
from broker.cli._common import (
    agent,
    emit_json,
    emit_json_lines,
    identity_options,
    json_option,
    main,
    operator,
    server,
    store,
    table,
    text_arg,
)
from broker.records import SendResult, to_dict


def print_result(result: SendResult | dict[str, Any], as_json: bool) -> None:
    data = to_dict(result) if isinstance(result, SendResult) else dict(result)
    if not data.get("duplicate"):
        data.pop("duplicate", None)
    if as_json:
        emit_json(data)
        return
    reached = data["reached"]
    line = f"{data['id']} seq {data['seq']}"
    if reached:
        line += f": delivered to {', '.join(reached)}"
    click.echo(line + (" (duplicate: nothing new written)" if data.get("duplicate") else ""))
    for nr in data["not_reached"]:
        click.echo(f"not delivered to {nr['address']}: {nr['reason']}")


def run_send(fn, as_json: bool) -> None:  # type: ignore[no-untyped-def]
    """Print the outcome; a send that reached nobody prints it too, then exits 1 (S8)."""
    try:
        result = fn()
    except errors.NotDelivered as exc:
        print_result(exc.fields["result"], as_json)
        raise click.exceptions.Exit(exc.exit_code) from None
    print_result(result, as_json)


@main.group()
def msg() -> None:
    """Agent messaging (identity from --space/--as/--token or BROKER_*)."""


@msg.command("send")
@click.option(
    "--to",
    "to",
    multiple=True,
    required=True,
    metavar="ADDR",
    help="Address, role:NAME, step:NAME, parent, lead, operator or broadcast (repeatable).",
)
@click.option(
    "--idempotency-key",
    help="A repeat with the same key returns the first result and writes nothing.",
)
@identity_options
@json_option
@click.argument("text", nargs=-1, required=True)
def msg_send(
    to: tuple[str, ...],
    idempotency_key: str | None,
    space: str | None,
    as_: str | None,
    token: str | None,
    as_json: bool,
    text: tuple[str, ...],
) -> None:
    """Send TEXT ('-' reads stdin). Exits 1 if it reached nobody."""
    me = agent(space, as_, token)
    body = text_arg(text)
    run_send(lambda: me.send(list(to), body, idempotency_key=idempotency_key), as_json)


@main.group()
def message() -> None:
    """Operator messaging: send to any participant, read the log."""


@message.command("send")
@click.argument("run_id")
@click.option(
    "--to",
    "to",
    multiple=True,
    metavar="ADDR",
    help="Recipient (default: an agentiflow's lead, else broadcast). Repeatable.",
)
@click.option("--urgent", is_flag=True, help="Deliver ahead of everything else, marked URGENT:.")
@click.option("--idempotency-key", help="A repeat with the same key returns the first result.")
@json_option
@click.argument("text", nargs=-1, required=True)
def message_send(
    run_id: str,
    to: tuple[str, ...],
    urgent: bool,
    idempotency_key: str | None,
    as_json: bool,
    text: tuple[str, ...],
) -> None:
    """Send TEXT to RUN_ID as the operator. Exits 1 if it reached nobody."""
    op = operator("cli")
    body = text_arg(text)
    run_send(
        lambda: op.send(
            run_id, body, to=list(to) or None, urgent=urgent, idempotency_key=idempotency_key
        ),
        as_json,
    )


def _kinds(value: str | None) -> list[str]:
    from broker.vocab import MESSAGE_KINDS

    if not value:
        return []
    kinds = [k.strip() for k in value.split(",") if k.strip()]
    for k in kinds:
        if k not in MESSAGE_KINDS:
            raise errors.InvalidInput(f"unknown kind {k!r}: use {', '.join(MESSAGE_KINDS)}")
    return kinds


def _print_entries(entries: list, as_json: bool) -> None:  # type: ignore[type-arg]
    if as_json:
        emit_json_lines(entries)
        return
    for e in entries:
        outcome = ""
        if e.reached:
            outcome = f" -> {', '.join(e.reached)}"
        if e.not_reached:
            outcome += (
                " [not reached: "
                + ", ".join(f"{n.address}: {n.reason}" for n in e.not_reached)
                + "]"
            )
        flag = " URGENT" if e.urgent else ""
        click.echo(f"#{e.seq} {e.created_at_utc} {e.kind}{flag} {e.sender}{outcome}: {e.body}")


@message.command("list")
@click.argument("run_id")
@click.option("--after", "after", metavar="MSG_ID", help="Only messages after this one.")
@click.option(
    "--kind", "kind", metavar="KINDS", help="Comma-separated kinds, e.g. direct,operator."
)
@click.option("--follow", is_flag=True, help="Keep printing new messages until the space stops.")
@json_option
def message_list(
    run_id: str, after: str | None, kind: str | None, follow: bool, as_json: bool
) -> None:
    """Print the log of RUN_ID (JSON: one object per line)."""
    kinds = _kinds(kind)
    entries = operator().log(run_id, after=after, kinds=kinds)
    _print_entries(entries, as_json)
    if follow and server() is not None:  # client mode: the server's SSE stream
        start = entries[-1].seq if entries else None
        for batch in operator().follow(run_id, after_seq=start, kinds=kinds):
            _print_entries(batch, as_json)
    elif follow:
        from broker.follow import follow_log

        last_seq = entries[-1].seq if entries else None
        for batch in follow_log(store(), run_id, after=after, after_seq=last_seq, kinds=kinds):
            _print_entries(batch, as_json)


@message.command("participants")
@click.argument("run_id")
@json_option
def message_participants(run_id: str, as_json: bool) -> None:
    """List the participants of RUN_ID with their status."""
    items = operator().participants(run_id)
    if as_json:
        emit_json(items)
        return
    table(
        [
            (
                p.address,
                p.agent,
                p.status,
                p.step,
                p.parent,
                "lead" if p.is_lead else "",
                "on" if p.messaging else "off",
                p.last_seen_utc,
            )
            for p in items
        ],
        ["address", "agent", "status", "step", "parent", "lead", "messaging", "last seen"],
    )
