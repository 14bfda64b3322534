"""broker board ...: the shared board of a space (S21-S24).

Agent commands (post, read, directive, retract, claim, release, renew) take
the caller's identity from --space/--as/--token or BROKER_*; release and
renew use --token for the claim's fencing token, so there the secret comes
from BROKER_TOKEN or --auth-token. Operator views (claims, journal) take a
run id.
"""

from __future__ import annotations

from typing import Any

import click

from broker.cli._common import (
    F,
    agent,
    emit_json,
    emit_json_lines,
    identity_options,
    identity_options_with,
    json_option,
    main,
    operator,
    table,
    text_arg,
)
from broker.cli.message import run_send

DEFAULT_TTL = 300.0  # keep equal to broker.board.DEFAULT_TTL (not imported: CLI start-up)


# --token is the fencing token on release/renew: the secret moves to --auth-token.
claim_identity_options = identity_options_with("--auth-token", "auth_token")


def _ttl_option(fn: F) -> F:
    return click.option(
        "--ttl",
        type=float,
        default=DEFAULT_TTL,
        show_default=True,
        metavar="SECONDS",
        help="Lease length in seconds (more than 0, at most 86400).",
    )(fn)


@main.group()
def board() -> None:
    """The shared board: posts, directives, key claims and their journal."""


@board.command("post")
@click.option(
    "--to",
    "to",
    multiple=True,
    metavar="ADDR",
    help="Also deliver to these addressees' inboxes (repeatable); none = channel post.",
)
@click.option("--idempotency-key", help="A repeat with the same key returns the first result.")
@identity_options
@json_option
@click.argument("text", nargs=-1, required=True)
def post(
    to: tuple[str, ...],
    idempotency_key: str | None,
    space: str | None,
    as_: str | None,
    token: str | None,
    as_json: bool,
    text: tuple[str, ...],
) -> None:
    """Post TEXT on the board. Exits 1 if addressed and it reached nobody."""
    me = agent(space, as_, token)
    body = text_arg(text)
    run_send(lambda: me.post(body, addressed_to=list(to), idempotency_key=idempotency_key), as_json)


@board.command("read")
@click.option("--after", metavar="ID", help="Only entries after this one (the last id you read).")
@click.option(
    "--limit", type=int, default=100, show_default=True, help="At most this many entries."
)
@identity_options
@json_option
def read(
    after: str | None,
    limit: int,
    space: str | None,
    as_: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """Read the board: posts, directives and retractions, oldest first (JSON: one
    object per line). Pass the last id you read as --after to get what is new."""
    me = agent(space, as_, token)
    entries = me.board_read(after=after, limit=limit)
    if as_json:
        emit_json_lines(entries)
        return
    for e in entries:
        to = f" -> {', '.join(e.to)}" if e.to else ""
        if e.kind == "directive":
            state = " (in force)" if e.in_force else " (retracted)"
            click.echo(
                f"{e.id} #{e.seq} {e.created_at_utc} directive{state} {e.sender}{to}: {e.body}"
            )
        elif e.kind == "retract":
            click.echo(f"{e.id} #{e.seq} {e.created_at_utc} retract {e.sender}: lifts {e.ref}")
        else:
            click.echo(f"{e.id} #{e.seq} {e.created_at_utc} post {e.sender}{to}: {e.body}")
    if len(entries) == limit:
        click.echo(f"(more: broker board read --after {entries[-1].id})")


@board.command("directive")
@click.option(
    "--to",
    "to",
    multiple=True,
    required=True,
    metavar="ADDR",
    help="Address, role:NAME, step:NAME, parent, lead or broadcast (repeatable).",
)
@click.option("--idempotency-key", help="A repeat with the same key returns the first result.")
@identity_options
@json_option
@click.argument("text", nargs=-1, required=True)
def directive(
    to: tuple[str, ...],
    idempotency_key: str | None,
    space: str | None,
    as_: str | None,
    token: str | None,
    as_json: bool,
    text: tuple[str, ...],
) -> None:
    """Issue a standing directive TEXT: shown to its addressees every turn until
    retracted; role/step directives also apply to later joiners. Needs the
    board.directive grant (named at join, board.*, or a lead)."""
    me = agent(space, as_, token)
    body = text_arg(text)
    run_send(lambda: me.directive(list(to), body, idempotency_key=idempotency_key), as_json)


@board.command("retract")
@click.argument("directive_id", metavar="ID")
@identity_options
@json_option
def retract(
    directive_id: str, space: str | None, as_: str | None, token: str | None, as_json: bool
) -> None:
    """Lift directive ID. Only its author may (board.retract grant)."""
    me = agent(space, as_, token)
    result = me.retract(directive_id)
    if as_json:
        emit_json({"id": result.id, "seq": result.seq, "retracts": directive_id})
    else:
        click.echo(f"retracted {directive_id} ({result.id} seq {result.seq})")


def _grant(data: Any, as_json: bool, verb: str) -> None:
    if as_json:
        emit_json({"key": data.key, "token": data.token, "lease_expires_at": data.lease_expires_at})
    else:
        click.echo(f"{verb} {data.key} token {data.token} until {data.lease_expires_at}")


@board.command("claim")
@click.argument("key")
@_ttl_option
@identity_options
@json_option
def claim(
    key: str, ttl: float, space: str | None, as_: str | None, token: str | None, as_json: bool
) -> None:
    """Claim KEY exclusively for --ttl seconds; prints its fencing token.

    Held by someone else: exit 5 with the holder and expiry. Claiming a key you
    already hold re-grants it with a new token (the old one goes stale)."""
    me = agent(space, as_, token)
    _grant(me.claim_key(key, ttl), as_json, "claimed")


@board.command("release")
@click.argument("key")
@click.option("--token", "fence", type=int, required=True, help="The claim's fencing token.")
@claim_identity_options
@json_option
def release(
    key: str,
    fence: int,
    space: str | None,
    as_: str | None,
    auth_token: str | None,
    as_json: bool,
) -> None:
    """Release KEY held with fencing token --token. A stale token: exit 5 (lease_lost)."""
    me = agent(space, as_, auth_token)
    entry = me.release_key(key, fence)
    if as_json:
        emit_json({"key": entry.key, "token": entry.token, "released_at": entry.at_utc})
    else:
        click.echo(f"released {entry.key} token {entry.token}")


@board.command("renew")
@click.argument("key")
@click.option("--token", "fence", type=int, required=True, help="The claim's fencing token.")
@_ttl_option
@claim_identity_options
@json_option
def renew(
    key: str,
    fence: int,
    ttl: float,
    space: str | None,
    as_: str | None,
    auth_token: str | None,
    as_json: bool,
) -> None:
    """Extend your claim on KEY to --ttl seconds from now (same token). A stale
    or expired token: exit 5 (lease_lost)."""
    me = agent(space, as_, auth_token)
    _grant(me.renew_key(key, fence, ttl), as_json, "renewed")


@board.command("claims")
@click.argument("run_id")
@json_option
def claims(run_id: str, as_json: bool) -> None:
    """List the live claims of RUN_ID (held and not expired)."""

    items = operator().claims(run_id)
    if as_json:
        emit_json(items)
        return
    table(
        [(c.key, c.holder, c.token, c.claimed_at_utc, c.lease_expires_at) for c in items],
        ["key", "holder", "token", "claimed at", "expires"],
    )


@board.command("journal")
@click.argument("run_id")
@click.option("--key", help="Only this key.")
@json_option
def journal(run_id: str, key: str | None, as_json: bool) -> None:
    """Print the claim journal of RUN_ID: claimed / renewed / released / expired,
    oldest first (JSON: one object per line). Expired claims are journaled first."""

    items = operator().claim_journal(run_id, key=key)
    if as_json:
        emit_json_lines(items)
        return
    table(
        [(j.at_utc, j.event, j.key, j.owner, j.token, j.lease_expires_at) for j in items],
        ["at", "event", "key", "owner", "token", "lease expires"],
    )


__all__ = ["board"]
