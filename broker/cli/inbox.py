"""`broker inbox ...` (an agent's queue and turns), `broker queue ...` (the
operator's quarantine), `broker transcript` (S13-S20)."""

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
    operator,
    table,
)
from broker.records import to_dict

lease_option = click.option(
    "--lease", "lease", required=True, metavar="TOKEN", help="The lease token from the claim."
)


@main.group()
def inbox() -> None:
    """Your inbox as a queue: claim, ack, release, extend, quarantine; turns.

    Identity from --space/--as/--token or BROKER_SPACE/BROKER_AS/BROKER_TOKEN.
    Delivery is at-least-once: de-duplicate by message id."""


@inbox.command("claim")
@click.option("--limit", default=1, show_default=True, help="Claim up to N messages.")
@click.option(
    "--lease", "lease", type=float, metavar="SECONDS", help="Lease length (default: the space's)."
)
@click.option(
    "--wait", default=0.0, metavar="SECONDS", help="Block up to SECONDS for a message to arrive."
)
@identity_options
@json_option
def claim(
    limit: int,
    lease: float | None,
    wait: float,
    space: str | None,
    as_: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """Claim the oldest messages of your inbox under a lease (ack them when done)."""
    got = agent(space, as_, token).claim(limit=limit, lease=lease, wait=wait)
    messages = [to_dict(d) for d in got.deliveries]
    if as_json:
        emit_json(
            {
                "lease": got.token,
                "owner": got.owner,
                "expires_at": got.expires_at,
                "messages": messages,
            }
        )
        return
    if not messages:
        click.echo("(no message)")
        return
    click.echo(f"lease {got.token} until {got.expires_at}")
    for m in messages:
        click.echo(
            f"{m['id']} {m['kind']}{' URGENT' if m['urgent'] else ''} from {m['sender']} "
            f"(delivery {m['deliveries']}): {m['body']}"
        )


def _emit(as_json: bool, data: dict[str, Any], line: str) -> None:
    if as_json:
        emit_json(data)
    else:
        click.echo(line)


@inbox.command("ack")
@lease_option
@identity_options
@json_option
@click.argument("ids", nargs=-1)
def ack(
    lease: str,
    space: str | None,
    as_: str | None,
    token: str | None,
    as_json: bool,
    ids: tuple[str, ...],
) -> None:
    """Ack message IDS of a lease (none: the whole lease). A repeat acks 0."""
    n = agent(space, as_, token).ack(lease, list(ids) or None)
    _emit(as_json, {"acked": n}, f"acked {n}")


@inbox.command("release")
@lease_option
@click.option("--error", metavar="TEXT", help="Why: kept as evidence on the delivery.")
@identity_options
@json_option
@click.argument("ids", nargs=-1)
def release(
    lease: str,
    error: str | None,
    space: str | None,
    as_: str | None,
    token: str | None,
    as_json: bool,
    ids: tuple[str, ...],
) -> None:
    """Give message IDS (none: the whole lease) back to the inbox for replay."""
    n = agent(space, as_, token).release(lease, list(ids) or None, error=error)
    _emit(as_json, {"released": n}, f"released {n}")


@inbox.command("extend")
@lease_option
@click.option(
    "--seconds",
    type=float,
    metavar="SECONDS",
    help="New lease length from now (default: the space's).",
)
@identity_options
@json_option
@click.argument("ids", nargs=-1)
def extend(
    lease: str,
    seconds: float | None,
    space: str | None,
    as_: str | None,
    token: str | None,
    as_json: bool,
    ids: tuple[str, ...],
) -> None:
    """Extend a lease (or only message IDS of it) to SECONDS from now."""
    expires = agent(space, as_, token).extend(lease, seconds, list(ids) or None)
    _emit(as_json, {"expires_at": expires}, f"lease {lease} until {expires}")


@inbox.command("quarantine")
@lease_option
@click.option("--reason", required=True, metavar="TEXT", help="Why the message is set aside.")
@identity_options
@json_option
@click.argument("message_id", metavar="ID")
def quarantine(
    lease: str,
    reason: str,
    space: str | None,
    as_: str | None,
    token: str | None,
    as_json: bool,
    message_id: str,
) -> None:
    """Set message ID aside with a reason; the rest of the queue goes on."""
    agent(space, as_, token).quarantine(lease, message_id, reason)
    _emit(as_json, {"quarantined": message_id}, f"quarantined {message_id}")


@inbox.command("next")
@click.option(
    "--wait", default=0.0, metavar="SECONDS", help="Block up to SECONDS for something new."
)
@click.option("--lease", type=float, metavar="SECONDS", help="Redeliver if not confirmed in time.")
@click.option("--limit", type=int, help="At most N inbox messages (default: all).")
@identity_options
@json_option
def next_(
    wait: float,
    lease: float | None,
    limit: int | None,
    space: str | None,
    as_: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """Your next turn: what to show the model, framed, in delivery order.

    Confirm it with `broker inbox seen TURN` once the model call returned."""
    turn = agent(space, as_, token).next_turn(wait=wait, lease=lease, limit=limit)
    if as_json:
        emit_json(to_dict(turn))
        return
    if turn.id is None and not turn.items:
        click.echo("(nothing new)")
        return
    if turn.id is not None:
        click.echo(f"turn {turn.id} (confirm with: broker inbox seen {turn.id})")
    else:
        click.echo("(nothing new; standing directives:)")
    for item in turn.items:
        click.echo("")
        click.echo(item.content)


@inbox.command("seen")
@identity_options
@json_option
@click.argument("turn_id", metavar="TURN")
def seen(
    space: str | None, as_: str | None, token: str | None, as_json: bool, turn_id: str
) -> None:
    """Confirm TURN: ack its messages, advance the broadcast cursor, log a receipt."""
    result = agent(space, as_, token).seen(turn_id)
    _emit(
        as_json,
        to_dict(result),
        f"turn {turn_id} seen: {len(result.message_ids)} messages, receipt {result.receipt_id}",
    )


@main.group()
def queue() -> None:
    """Operator view of the inbox queues: quarantined deliveries, requeue."""


@queue.command("quarantined")
@click.argument("run_id")
@json_option
def quarantined(run_id: str, as_json: bool) -> None:
    """List the quarantined deliveries of RUN_ID with their evidence."""
    items = operator().quarantined(run_id)
    if as_json:
        emit_json([to_dict(i) for i in items])
        return
    table(
        [
            (i.delivery_id, i.id, i.recipient, i.sender, i.deliveries, i.reason, i.last_error)
            for i in items
        ],
        ["delivery", "message", "inbox", "from", "deliveries", "reason", "last error"],
    )


@queue.command("requeue")
@click.argument("run_id")
@click.argument("ids", nargs=-1, required=True, metavar="ID...")
@json_option
def requeue(run_id: str, ids: tuple[str, ...], as_json: bool) -> None:
    """Put quarantined deliveries (delivery or message ids) back to ready."""
    n = operator().requeue(run_id, list(ids))
    _emit(as_json, {"requeued": n}, f"requeued {n}")


@main.command("transcript")
@click.argument("run_id")
@click.argument("address")
@json_option
def transcript(run_id: str, address: str, as_json: bool) -> None:
    """Rebuild ADDRESS's transcript in RUN_ID, turn by turn: what the model was
    shown (received, injected), what it sent, notices."""
    records = operator().transcript(run_id, address)
    if as_json:
        emit_json(records)
        return
    if not records:
        click.echo("(empty)")
        return
    for rec in records:
        if rec.turn_id is None:
            click.echo("== before the first turn")
        else:
            keyvals(
                [
                    ("== turn", rec.turn_id),
                    ("at", rec.at_utc),
                    (
                        "state",
                        f"{rec.state} at {rec.seen_at_utc}" if rec.seen_at_utc else rec.state,
                    ),
                ]
            )
        for e in rec.injected:
            click.echo(f"-- injected #{e.position} ({e.kind} {e.message_id})")
            click.echo(e.content)
        for e in rec.sent:
            click.echo(f"-- sent {e.kind} {e.message_id} at {e.at_utc}: {e.content}")
        for e in rec.notices:
            click.echo(f"-- notice {e.kind} at {e.at_utc}: {e.content}")
