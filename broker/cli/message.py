"""`broker msg send` (the agent tool msg.send) and `broker message send|list`
(the operator's voice and the operator's read of the log)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from broker import errors
from broker.cli._common import (
    COUNT,
    agent,
    emit_json,
    emit_json_lines,
    identity_options,
    json_option,
    main,
    operator,
    text_arg,
)
from broker.cli._output import safe, to_jsonable

if TYPE_CHECKING:
    from broker.records import LogEntry, SendResult


def print_result(result: SendResult | dict[str, Any], as_json: bool) -> None:
    """A send's outcome: who it reached, and why not for each it did not (S7).
    ``result`` is the record, or its dict as ``NotDelivered`` carries it."""
    data = result if isinstance(result, dict) else to_jsonable(result)
    if as_json:
        emit_json(data)
        return
    line = f"{data['id']} seq {data['seq']}"
    if data["reached"]:
        line += f": delivered to {safe(', '.join(data['reached']))}"
    click.echo(line + (" (duplicate: nothing new written)" if data.get("duplicate") else ""))
    for nr in data["not_reached"]:
        click.echo(f"not delivered to {safe(nr['address'])}: {safe(nr['reason'])}")


def run_send(fn: Callable[[], SendResult], as_json: bool) -> None:
    """Print the outcome; a send that reached nobody prints it too, then exits 1 (S8)."""
    try:
        result = fn()
    except errors.NotDelivered as exc:
        print_result(exc.fields["result"], as_json)
        raise click.exceptions.Exit(exc.exit_code) from None
    print_result(result, as_json)


TO_HELP = "Address, role:NAME, step:NAME, parent, lead, operator or broadcast (repeatable)."


@main.group()
def msg() -> None:
    """Agent messaging: the msg.send tool (identity from --space/--as/--token)."""


@msg.command("send")
@click.option("--to", "to", multiple=True, required=True, metavar="ADDR", help=TO_HELP)
@click.option(
    "--idempotency-key",
    metavar="KEY",
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
    """Send TEXT as yourself ('-' reads stdin). Exits 1 if it reached nobody."""
    body = text_arg(text)
    me = agent(space, as_, token)
    run_send(lambda: me.send(list(to), body, idempotency_key=idempotency_key), as_json)


@main.group()
def message() -> None:
    """The operator's messages: send to any participant, read the log."""


@message.command("send")
@click.argument("run_id")
@click.option(
    "--to",
    "to",
    multiple=True,
    metavar="ADDR",
    help="Recipient (default: an agentiflow's lead, else broadcast). Repeatable.",
)
@click.option("--urgent", is_flag=True, help="Shown ahead of everything else, marked URGENT:.")
@click.option(
    "--idempotency-key", metavar="KEY", help="A repeat with the same key returns the first result."
)
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
    """Send TEXT to RUN_ID as the operator ('-' reads stdin). Exits 1 if it
    reached nobody."""
    body = text_arg(text)
    op = operator()
    run_send(
        lambda: op.send(
            run_id, body, to=list(to) or None, urgent=urgent, idempotency_key=idempotency_key
        ),
        as_json,
    )


def _kinds(value: str | None) -> list[str] | None:
    from broker.vocab import MESSAGE_KINDS

    if not value:
        return None
    kinds = [k.strip() for k in value.split(",") if k.strip()]
    for k in kinds:
        if k not in MESSAGE_KINDS:
            raise errors.InvalidInput(f"unknown kind {k!r}: use {', '.join(MESSAGE_KINDS)}")
    return kinds


def _after(value: str | None) -> str | int | None:
    """--after: a seq (as `message list` shows it, with or without '#') or a message id."""
    if value is None:
        return None
    digits = value.removeprefix("#")
    if digits.isdigit() and len(digits) < 19:
        return int(digits)
    return value


_AGO = r"(\d+(?:\.\d+)?)([smhd])"
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_ISO = r"\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?)?Z?"


def _since(value: str | None) -> str | None:
    """--since: a UTC time (2026-11-30, 2026-11-30T03:52:00Z) or an age (90s, 10m, 2h, 1d)."""
    if value is None:
        return None
    from datetime import UTC, datetime, timedelta

    ago = re.fullmatch(_AGO, value.strip())
    if ago:
        seconds = float(ago.group(1)) * _UNIT[ago.group(2)]
        if seconds > 100 * 365 * 86400:
            raise errors.InvalidInput(f"bad --since {value!r}: at most 100 years ago")
        moment = datetime.now(UTC) - timedelta(seconds=seconds)
    elif re.fullmatch(_ISO, value.strip()):
        try:
            moment = datetime.fromisoformat(value.strip().replace(" ", "T").removesuffix("Z"))
        except ValueError:
            raise errors.InvalidInput(f"bad --since {value!r}: not a date") from None
        moment = moment.replace(tzinfo=UTC)
    else:
        raise errors.InvalidInput(
            f"bad --since {value!r}: a UTC time (2026-11-30T03:52:00Z) or an age (10m, 2h, 1d)"
        )
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _print_entries(entries: list[LogEntry], as_json: bool) -> None:
    if as_json:
        emit_json_lines(entries)
        return
    lines = []
    for e in entries:
        outcome = f" -> {safe(', '.join(e.reached))}" if e.reached else ""
        if e.not_reached:
            misses = ", ".join(f"{safe(n.address)}: {n.reason}" for n in e.not_reached)
            outcome += f" [not reached: {misses}]"
        flag = " URGENT" if e.urgent else ""
        stamp = e.created_at_utc[:19].replace("T", " ")
        lines.append(
            f"#{e.seq} {e.id} {stamp} {e.kind}{flag} {safe(e.sender)}{outcome}: {safe(e.body)}"
        )
    if lines:
        click.echo("\n".join(lines))


@message.command("list")
@click.argument("run_id")
@click.option(
    "--after", metavar="SEQ|ID", help="Only messages after this one: its seq (#12 or 12) or id."
)
@click.option("--kind", metavar="KINDS", help="Comma-separated kinds, e.g. direct,operator.")
@click.option("--from", "sender", metavar="ADDR", help="Only messages this participant sent.")
@click.option(
    "--to", "to", metavar="ADDR", help="Only messages addressed to ADDR or that reached it."
)
@click.option("--since", metavar="WHEN", help="Only messages since a UTC time or an age (10m, 2h).")
@click.option("--limit", type=COUNT, metavar="N", help="The first N matching messages.")
@click.option("--tail", type=COUNT, metavar="N", help="The last N matching messages.")
@click.option(
    "--follow", is_flag=True, help="Then keep printing new messages until the space stops."
)
@json_option
def message_list(
    run_id: str,
    after: str | None,
    kind: str | None,
    sender: str | None,
    to: str | None,
    since: str | None,
    limit: int | None,
    tail: int | None,
    follow: bool,
    as_json: bool,
) -> None:
    """Print the log of RUN_ID, oldest first: '#SEQ ID TIME KIND SENDER -> REACHED: BODY'
    (--json: one object per line)."""
    if limit is not None and tail is not None:
        raise errors.InvalidInput("--limit and --tail exclude each other")
    filters: dict[str, Any] = {
        "kinds": _kinds(kind),
        "sender": sender,
        "to": to,
        "since": _since(since),
    }
    op = operator()
    entries = op.log(run_id, after=_after(after), limit=limit, tail=tail, **filters)
    _print_entries(entries, as_json)
    if follow:
        last: str | int | None = entries[-1].seq if entries else _after(after)
        if limit is not None:  # the first N were shown: what follows is what is new
            newest = op.log(run_id, tail=1)
            last = newest[0].seq if newest else last
        for batch in op.follow(run_id, after=last, **filters):
            _print_entries(batch, as_json)
