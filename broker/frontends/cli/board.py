"""broker board ...: the shared board of a space (S21-S24).

The agent tools (post, read, directive, retract, claim, release, renew, and
the path reservations of S37: reserve, check, unreserve, renew-reservation)
act as the participant in --space/--as/--token or BROKER_*; the operator's
commands (view, claims, journal, and release-key / release-reservation, which
end anyone's hold) take a RUN_ID. A fencing token is --fence.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from broker.frontends.cli._common import (
    Whole,
    agent,
    emit_json_lines,
    identity_options,
    json_option,
    main,
    operator,
    table,
    text_arg,
    ttl_option,
    wait_option,
)
from broker.frontends.cli._output import TO_HELP, emit, emit_lines, run_send, safe, when
from broker.vocab import BOARD_READ_DEFAULT, BOARD_READ_MAX

if TYPE_CHECKING:
    from broker.model.records import BoardEntry, ClaimGrant, JournalEntry, PathCheck, Reservation

DEFAULT_TTL = 300.0  # keep equal to broker.board.claims.DEFAULT_TTL (not imported: CLI start-up)
READ_LIMIT = Whole(1, BOARD_READ_MAX)

fence_option = click.option(
    "--fence",
    type=Whole(1, 2**63 - 1),
    required=True,
    metavar="N",
    help="The fencing token (from `board claim`, or `board reserve` for a path reservation).",
)


@main.group()
def board() -> None:
    """The shared board: posts, standing directives, key claims and their journal."""


@board.command("post")
@click.option(
    "--to",
    "to",
    multiple=True,
    metavar="ADDR",
    help="Also deliver to these addressees' inboxes (repeatable); none = a channel post.",
)
@click.option(
    "--idempotency-key", metavar="KEY", help="A repeat with the same key returns the first result."
)
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
    """Post TEXT on the board ('-' reads stdin). Exits 1 if addressed and it reached nobody."""
    body = text_arg(text)
    me = agent(space, as_, token)
    run_send(lambda: me.post(body, addressed_to=list(to), idempotency_key=idempotency_key), as_json)


def _print_board(entries: list[BoardEntry], limit: int, more: str, as_json: bool) -> None:
    if as_json:
        emit_json_lines(entries)
        return
    lines = []
    for e in entries:
        head = f"{e.id} #{e.seq} {when(e.created_at_utc)}"
        to = f" -> {safe(', '.join(e.to))}" if e.to else ""
        if e.kind == "directive":
            state = "in force" if e.in_force else "retracted"
            lines.append(f"{head} directive ({state}) {safe(e.sender)}{to}: {safe(e.body)}")
        elif e.kind == "retract":
            lines.append(f"{head} retract {safe(e.sender)}: lifts {safe(e.ref)}")
        else:
            lines.append(f"{head} post {safe(e.sender)}{to}: {safe(e.body)}")
    if len(entries) == limit:
        lines.append(f"(more: {more} --after {entries[-1].id})")
    click.echo("\n".join(lines) if lines else "(nothing on the board)")


@board.command("read")
@click.option("--after", metavar="ID", help="Only entries after this one (the last id you read).")
@click.option(
    "--limit",
    type=READ_LIMIT,
    metavar="N",
    default=BOARD_READ_DEFAULT,
    show_default=True,
    help="At most this many entries.",
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
    """Read the board (tool board.read): posts, directives and retractions,
    oldest first. Pass the last id you read as --after to get what is new."""
    entries = agent(space, as_, token).board_read(after=after, limit=limit)
    _print_board(entries, limit, "broker board read", as_json)


@board.command("view")
@click.argument("run_id")
@click.option("--after", metavar="ID", help="Only entries after this one.")
@click.option(
    "--limit",
    type=READ_LIMIT,
    metavar="N",
    default=BOARD_READ_DEFAULT,
    show_default=True,
    help="At most this many entries.",
)
@json_option
def view(run_id: str, after: str | None, limit: int, as_json: bool) -> None:
    """The board of RUN_ID as the operator sees it (what board read shows an agent)."""
    entries = operator().board(run_id, after=after, limit=limit)
    _print_board(entries, limit, f"broker board view {run_id}", as_json)


@board.command("directive")
@click.option("--to", "to", multiple=True, required=True, metavar="ADDR", help=TO_HELP)
@click.option(
    "--idempotency-key", metavar="KEY", help="A repeat with the same key returns the first result."
)
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
    body = text_arg(text)
    me = agent(space, as_, token)
    run_send(lambda: me.directive(list(to), body, idempotency_key=idempotency_key), as_json)


@board.command("retract")
@click.argument("directive_id", metavar="ID")
@identity_options
@json_option
def retract(
    directive_id: str, space: str | None, as_: str | None, token: str | None, as_json: bool
) -> None:
    """Lift directive ID. Only its author may (board.retract grant)."""
    result = agent(space, as_, token).retract(directive_id)
    emit(result, as_json, f"retracted {safe(directive_id)} ({result.id} seq {result.seq})")


def _grant(grant: ClaimGrant, as_json: bool, verb: str) -> None:
    emit(grant, as_json, f"{verb} {safe(grant.key)} fence {grant.fence} until {grant.expires_at}")


@board.command("claim")
@click.argument("key")
@ttl_option("How long the claim lasts (at least 0.001, at most 86400).", DEFAULT_TTL)
@wait_option(
    "Wait up to SECONDS (at most 86400) for a key someone else holds: woken the moment "
    "it is released, or when its claim runs out; no polling."
)
@identity_options
@json_option
def claim(
    key: str,
    ttl: float,
    wait: float,
    space: str | None,
    as_: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """Claim KEY exclusively for --ttl seconds; prints its fencing token (--fence
    for release and renew).

    Held by someone else: exit 5 with the holder and expiry (with --wait, once
    the wait is over). Claiming a key you already hold re-grants it with a
    larger fence (the old one goes stale)."""
    _grant(agent(space, as_, token).claim_key(key, ttl, wait=wait), as_json, "claimed")


@board.command("release")
@click.argument("key")
@fence_option
@identity_options
@json_option
def release(
    key: str,
    fence: int,
    space: str | None,
    as_: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """Release KEY held with --fence N. A stale fence: exit 5 (lease_lost)."""
    entry = agent(space, as_, token).release_key(key, fence)
    emit(entry, as_json, f"released {safe(entry.key)} fence {entry.fence}")


@board.command("renew")
@click.argument("key")
@fence_option
@ttl_option("The new length, from now (at least 0.001, at most 86400).", DEFAULT_TTL)
@identity_options
@json_option
def renew(
    key: str,
    fence: int,
    ttl: float,
    space: str | None,
    as_: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """Extend your claim on KEY to --ttl seconds from now (same fence). A stale
    or expired fence: exit 5 (lease_lost)."""
    _grant(agent(space, as_, token).renew_key(key, fence, ttl), as_json, "renewed")


@board.command("claims")
@click.argument("run_id")
@json_option
def claims(run_id: str, as_json: bool) -> None:
    """List the live claims of RUN_ID (held and not expired): keys, then path
    reservations. --json: one line per key claim, then one per reservation
    (those have "pattern" and "mode")."""
    op = operator()
    items, paths = op.claims(run_id), op.reservations(run_id)
    if as_json:
        emit_json_lines([*items, *paths])
        return
    table(
        [(c.key, c.holder, c.fence, when(c.claimed_at_utc), when(c.expires_at)) for c in items],
        ["key", "holder", "fence", "claimed", "expires"],
        empty="(no key claims)" if paths else "(none)",
    )
    if paths:
        click.echo("")
        _reservations(paths)


def _reservations(items: list[Reservation]) -> None:
    table(
        [(r.pattern, r.mode, r.holder, r.fence, when(r.expires_at), r.reason or "") for r in items],
        ["pattern", "mode", "holder", "fence", "expires", "reason"],
        shrink=(5,),
        empty="(no path reservations)",
    )


# --- path reservations (S37) --------------------------------------------------------------
@board.command("reserve")
@click.argument("patterns", nargs=-1, required=True, metavar="PATTERN...")
@click.option("--shared", is_flag=True, help="Shared: other shared holders may overlap.")
@ttl_option("How long the reservation lasts (at least 0.001, at most 86400).", DEFAULT_TTL)
@click.option("--reason", metavar="TEXT", help="Why (shown to whoever runs into it).")
@identity_options
@json_option
def reserve(
    patterns: tuple[str, ...],
    shared: bool,
    ttl: float,
    reason: str | None,
    space: str | None,
    as_: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """Reserve path PATTERNs (S37): `*` and `?` and `[a-z]` inside a segment,
    `**` for any number of segments (quote them from the shell). Exclusive
    unless --shared; one fence per pattern, all or none.

    Overlapping someone else's reservation (some path matches both, and one of
    the two is exclusive): exit 5 (conflict) naming holder, pattern, expiry and
    a path both match. Reserving a pattern you hold re-grants it (new fence)."""
    grants = agent(space, as_, token).reserve(list(patterns), shared=shared, ttl=ttl, reason=reason)
    emit_lines(grants, as_json, _reserved_line)


def _reserved_line(g: Reservation) -> str:
    return f"reserved {safe(g.pattern)} ({g.mode}) fence {g.fence} until {g.expires_at}"


def _print_checks(checks: list[PathCheck], as_json: bool) -> None:
    if as_json:
        emit_json_lines(checks)
        return
    rows = []
    for c in checks:
        if not c.held_by:
            rows.append((c.path, "free", "", "", "", ""))
        for r in c.held_by:
            state = "BLOCKED" if c.blocked else "ok"
            rows.append((c.path, state, r.pattern, r.mode, r.holder, when(r.expires_at)))
    table(rows, ["path", "state", "pattern", "mode", "holder", "expires"])


@board.command("check")
@click.argument("paths", nargs=-1, required=True, metavar="PATH...")
@identity_options
@json_option
def check(
    paths: tuple[str, ...], space: str | None, as_: str | None, token: str | None, as_json: bool
) -> None:
    """Say who holds what covers each PATH (tool board.read). A path is
    BLOCKED for you when someone else holds a covering pattern exclusively
    (what `broker guard` refuses to commit). Exit 0 either way."""
    _print_checks(agent(space, as_, token).check_paths(list(paths)), as_json)


@board.command("unreserve")
@fence_option
@identity_options
@json_option
def unreserve(
    fence: int, space: str | None, as_: str | None, token: str | None, as_json: bool
) -> None:
    """Release your path reservation with --fence N (from `board reserve`).
    A stale fence: exit 5 (lease_lost)."""
    entry = agent(space, as_, token).release_reservation(fence)
    emit(entry, as_json, f"released {safe(entry.key.removeprefix('path '))} fence {entry.fence}")


@board.command("renew-reservation")
@fence_option
@ttl_option("The new length, from now (at least 0.001, at most 86400).", DEFAULT_TTL)
@identity_options
@json_option
def renew_reservation(
    fence: int,
    ttl: float,
    space: str | None,
    as_: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """Extend your path reservation with --fence N to --ttl seconds from now
    (same fence). A stale or expired fence: exit 5 (lease_lost)."""
    g = agent(space, as_, token).renew_reservation(fence, ttl)
    emit(g, as_json, f"renewed {safe(g.pattern)} fence {g.fence} until {g.expires_at}")


# --- the operator ends a hold (S22, S37) ----------------------------------------------------
reason_option = click.option(
    "--reason", metavar="TEXT", help="Why (journaled as `operator: TEXT`)."
)


def _ended(entry: JournalEntry, as_json: bool) -> None:
    emit(
        entry,
        as_json,
        f"released {safe(entry.key)} fence {entry.fence} (held by {safe(entry.owner)})",
    )


@board.command("release-key")
@click.argument("run_id")
@click.argument("key")
@click.option(
    "--fence",
    type=click.IntRange(1, 2**63 - 1),
    metavar="N",
    help="Only if this is the current grant's fence (else exit 5, lease_lost).",
)
@reason_option
@json_option
def release_key(
    run_id: str, key: str, fence: int | None, reason: str | None, as_json: bool
) -> None:
    """End the live claim on KEY in RUN_ID, whoever holds it (operator). The
    holder's fence goes stale; the journal says `released`, reason
    `operator: ...`. Nobody holds it: exit 5 (lease_lost)."""
    _ended(operator().release_key(run_id, key, fence=fence, reason=reason), as_json)


@board.command("release-reservation")
@click.argument("run_id")
@fence_option
@reason_option
@json_option
def release_reservation(run_id: str, fence: int, reason: str | None, as_json: bool) -> None:
    """End the live path reservation with --fence N in RUN_ID, whoever holds it
    (operator; `board claims RUN_ID` lists the fences). The fence goes stale;
    the journal says `released`, reason `operator: ...`. Not live: exit 5
    (lease_lost)."""
    _ended(operator().release_reservation(run_id, fence, reason=reason), as_json)


@board.command("journal")
@click.argument("run_id")
@click.option("--key", metavar="KEY", help="Only this key.")
@json_option
def journal(run_id: str, key: str | None, as_json: bool) -> None:
    """Print the claim journal of RUN_ID: claimed / renewed / released / expired,
    oldest first. Expired claims are journaled first. A `why` column says who
    else ended a hold, when someone did: `left` (its holder left) or
    `operator: ...`."""
    items = operator().claim_journal(run_id, key=key)
    if as_json:
        emit_json_lines(items)
        return
    why = any(j.reason for j in items)
    rows: list[tuple[object, ...]] = [
        (when(j.at_utc), j.event, j.key, j.owner, j.fence, when(j.expires_at))
        + ((j.reason or "",) if why else ())
        for j in items
    ]
    headers = ["at", "event", "key", "owner", "fence", "expires", *(["why"] if why else [])]
    table(rows, headers, shrink=(6,) if why else ())
