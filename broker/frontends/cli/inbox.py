"""`broker inbox ...` (an agent's queue and turns), `broker queue ...` (the
operator's quarantine), `broker transcript` (S13-S20)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from broker.api.operations import (
    ACK,
    CLAIM,
    EXTEND,
    NEXT_TURN,
    QUARANTINE,
    QUARANTINED,
    RELEASE,
    SEEN,
)
from broker.frontends.cli._common import as_agent, json_option, main, operator
from broker.frontends.cli._output import (
    block,
    emit,
    emit_json,
    emit_json_lines,
    keyvals,
    safe,
    table,
    when,
)
from broker.frontends.cli.options import from_operation

if TYPE_CHECKING:
    from broker.api.handles import Agent
    from broker.model.records import TurnRecord


@main.group()
def inbox() -> None:
    """Your inbox as a queue (claim, ack, release, extend, quarantine) and as
    turns (next, seen). Identity from --space/--as/--token or BROKER_*.
    Delivery is at-least-once: de-duplicate by message id."""


@inbox.command("claim")
@from_operation(CLAIM, flags={"lease": "--ttl"})
@as_agent
@json_option
def claim(args: dict[str, Any], me: Agent, as_json: bool) -> None:
    """Claim the oldest messages of your inbox under a lease; ack them with its
    --lease-token when done."""
    got = me.claim(**args)
    if as_json:
        if got.deliveries:
            emit_json(got)
        else:  # nothing was claimed: there is no lease to present
            emit_json(
                {"lease_token": None, "owner": got.owner, "expires_at": None, "deliveries": []}
            )
        return
    if not got.deliveries:
        click.echo("(no message)")
        return
    lines = [f"lease token {got.lease_token} until {got.expires_at}"]
    for d in got.deliveries:
        urgent = " URGENT" if d.urgent else ""
        lines.append(f"{d.id} {d.kind}{urgent} from {safe(d.sender)} (delivery {d.deliveries}):")
        lines.append(block(d.body, indent="  "))
    click.echo("\n".join(lines))


@inbox.command("ack")
@from_operation(ACK, arguments=("ids",))
@as_agent
@json_option
def ack(args: dict[str, Any], me: Agent, as_json: bool) -> None:
    """Ack message IDs of a lease (none: the whole lease). A repeat acks 0."""
    n = me.ack(**args)
    emit({"acked": n}, as_json, f"acked {n}")


@inbox.command("release")
@from_operation(RELEASE, arguments=("ids",))
@as_agent
@json_option
def release(args: dict[str, Any], me: Agent, as_json: bool) -> None:
    """Give message IDs (none: the whole lease) back to the inbox for replay."""
    n = me.release(**args)
    emit({"released": n}, as_json, f"released {n}")


@inbox.command("extend")
@from_operation(EXTEND, arguments=("ids",), flags={"seconds": "--ttl"})
@as_agent
@json_option
def extend(args: dict[str, Any], me: Agent, as_json: bool) -> None:
    """Extend a lease (or only message IDs of it) to --ttl seconds from now."""
    expires = me.extend(**args)
    emit(
        {"lease_token": args["lease_token"], "expires_at": expires},
        as_json,
        f"lease token {safe(args['lease_token'])} until {expires}",
    )


@inbox.command("quarantine")
@from_operation(QUARANTINE, arguments=("message_id",))
@as_agent
@json_option
def quarantine(args: dict[str, Any], me: Agent, as_json: bool) -> None:
    """Set message ID aside with a reason; the rest of the queue goes on."""
    me.quarantine(**args)
    emit({"quarantined": args["message_id"]}, as_json, f"quarantined {safe(args['message_id'])}")


@inbox.command("next")
@from_operation(NEXT_TURN, flags={"lease": "--ttl"})
@as_agent
@json_option
def next_(args: dict[str, Any], me: Agent, as_json: bool) -> None:
    """Your next turn: what to show the model, framed, in delivery order.

    Confirm it with `broker inbox seen TURN` once the model call returned."""
    turn = me.next_turn(**args)
    if as_json:
        emit_json(turn)
        return
    if turn.id is None and not turn.items:
        click.echo("(nothing new)")
        return
    if turn.id is not None:
        lines = [f"turn {turn.id} (confirm with: broker inbox seen {turn.id})"]
    else:
        lines = ["(nothing new; standing directives:)"]
    for item in turn.items:
        lines += ["", block(item.content)]
    click.echo("\n".join(lines))


@inbox.command("seen")
@from_operation(SEEN, arguments=("turn_id",))
@as_agent
@json_option
def seen(args: dict[str, Any], me: Agent, as_json: bool) -> None:
    """Confirm TURN: ack its messages, advance the broadcast cursor, log a receipt."""
    result = me.seen(**args)
    if as_json:
        emit_json(result)
    else:
        click.echo(
            f"turn {safe(args['turn_id'])} seen: {len(result.message_ids)} messages, "
            f"receipt {result.receipt_id}"
        )


@main.group()
def queue() -> None:
    """The operator's view of the inbox queues: quarantined deliveries, requeue."""


@queue.command("quarantined")
@from_operation(QUARANTINED, arguments=("space",))
@json_option
def quarantined(args: dict[str, Any], as_json: bool) -> None:
    """List the quarantined deliveries of RUN_ID with their evidence: the
    message id (as `message list` shows it), the inbox, sender, delivery count,
    reason and last error. `queue requeue RUN_ID MESSAGE_ID` puts the message
    back in every inbox it is quarantined in; --json also gives each delivery's
    own id (delivery_id), which requeues that one inbox."""
    items = operator().quarantined(**args)
    if as_json:
        emit_json_lines(items)
        return
    table(
        [(i.id, i.recipient, i.sender, i.deliveries, i.reason, i.last_error) for i in items],
        ["message", "inbox", "sender", "count", "reason", "last error"],
        shrink=(4, 5),
    )


@queue.command("requeue")
@click.argument("run_id")
@click.argument("ids", nargs=-1, required=True, metavar="ID...")
@json_option
def requeue(run_id: str, ids: tuple[str, ...], as_json: bool) -> None:
    """Put quarantined deliveries back to ready: a message id (as `queue
    quarantined` shows it) in every inbox it is quarantined in, a delivery id
    (its --json delivery_id) in that one inbox."""
    n = operator().requeue(run_id, list(ids))
    emit({"requeued": n}, as_json, f"requeued {n}")


@main.command("transcript")
@click.argument("run_id")
@click.argument("address")
@json_option
def transcript(run_id: str, address: str, as_json: bool) -> None:
    """Rebuild ADDRESS's transcript in RUN_ID, turn by turn: what the model was
    shown (received, injected), what it sent, notices (--json: one turn per line)."""
    records = operator().transcript(run_id, address)
    if as_json:
        emit_json_lines(records)
        return
    if not records:
        click.echo("(empty)")
        return
    for rec in records:
        _print_turn(rec)


def _print_turn(rec: TurnRecord) -> None:
    if rec.turn_id is None:
        click.echo("== before the first turn")
    else:
        state = f"{rec.state} at {when(rec.seen_at_utc)}" if rec.seen_at_utc else rec.state
        keyvals([("== turn", rec.turn_id), ("at", when(rec.at_utc)), ("state", state)])
    lines = []
    for e in rec.injected:
        lines.append(f"-- injected #{e.position} ({e.kind} {e.message_id})")
        lines.append(block(e.content, indent="   "))
    for e in rec.sent:
        lines.append(f"-- sent {e.kind} {e.message_id} at {when(e.at_utc)}:")
        lines.append(block(e.content, indent="   "))
    for e in rec.notices:
        lines.append(f"-- notice {e.kind} at {when(e.at_utc)}: {safe(e.content)}")
    if lines:
        click.echo("\n".join(lines))
