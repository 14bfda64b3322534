"""broker board ...: the shared board of a space (S21-S24).

The agent tools (post, read, directive, retract, claim, release, renew, and
the path reservations of S37: reserve, check, unreserve, renew-reservation)
act as the participant in --space/--as/--token or BROKER_*; the operator's
commands (view, claims, journal, and release-key / release-reservation, which
end anyone's hold) take a RUN_ID. A fencing token is --fence.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from broker.api.operations import (
    BOARD_READ,
    CHECK_PATHS,
    CLAIM_KEY,
    DIRECTIVE,
    POST,
    RELEASE_KEY,
    RENEW_KEY,
    RENEW_RESERVATION,
    RESERVE,
    RETRACT,
    UNRESERVE,
)
from broker.frontends.cli._common import (
    Whole,
    as_agent,
    emit_json_lines,
    json_option,
    main,
    operator,
    table,
    whole_option,
)
from broker.frontends.cli._output import emit, emit_lines, run_send, safe, when
from broker.frontends.cli.options import from_operation
from broker.vocab import BOARD_READ_DEFAULT, BOARD_READ_MAX

if TYPE_CHECKING:
    from broker.api.handles import Agent
    from broker.model.records import (
        BoardEntry,
        ClaimGrant,
        JournalEntry,
        PathCheck,
        Reservation,
    )

DEFAULT_TTL = 300.0  # keep equal to broker.board.claims.DEFAULT_TTL (not imported: CLI start-up)
limit_option = whole_option(
    "--limit", 1, BOARD_READ_MAX, BOARD_READ_DEFAULT, "At most this many entries.", metavar="N"
)

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
@from_operation(POST, arguments=("text",), flags={"addressed_to": "--to"})
@as_agent
@json_option
def post(args: dict[str, Any], me: Agent, as_json: bool) -> None:
    """Post TEXT on the board ('-' reads stdin). Exits 1 if addressed and it reached nobody."""
    run_send(lambda: me.post(**args), as_json)


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
@from_operation(BOARD_READ)
@as_agent
@json_option
def read(args: dict[str, Any], me: Agent, as_json: bool) -> None:
    """Read the board (tool board.read): posts, directives and retractions,
    oldest first. Pass the last id you read as --after to get what is new."""
    entries = me.board_read(**args)
    _print_board(entries, args["limit"], "broker board read", as_json)


@board.command("view")
@click.argument("run_id")
@click.option("--after", metavar="ID", help="Only entries after this one.")
@limit_option
@json_option
def view(run_id: str, after: str | None, limit: int, as_json: bool) -> None:
    """The board of RUN_ID as the operator sees it (what board read shows an agent)."""
    entries = operator().board(run_id, after=after, limit=limit)
    _print_board(entries, limit, f"broker board view {run_id}", as_json)


@board.command("directive")
@from_operation(DIRECTIVE, arguments=("text",))
@as_agent
@json_option
def directive(args: dict[str, Any], me: Agent, as_json: bool) -> None:
    """Issue a standing directive TEXT: shown to its addressees every turn until
    retracted; role/step directives also apply to later joiners. Needs the
    board.directive grant (named at join, board.*, or a lead)."""
    run_send(lambda: me.directive(**args), as_json)


@board.command("retract")
@from_operation(RETRACT, arguments=("directive_id",))
@as_agent
@json_option
def retract(args: dict[str, Any], me: Agent, as_json: bool) -> None:
    """Lift directive ID. Only its author may (board.retract grant)."""
    result = me.retract(**args)
    emit(result, as_json, f"retracted {safe(args['directive_id'])} ({result.id} seq {result.seq})")


def _grant(grant: ClaimGrant, as_json: bool, verb: str) -> None:
    emit(grant, as_json, f"{verb} {safe(grant.key)} fence {grant.fence} until {grant.expires_at}")


@board.command("claim")
@from_operation(CLAIM_KEY, arguments=("key",))
@as_agent
@json_option
def claim(args: dict[str, Any], me: Agent, as_json: bool) -> None:
    """Claim KEY exclusively for --ttl seconds; prints its fencing token (--fence
    for release and renew).

    Held by someone else: exit 5 with the holder and expiry (with --wait, once
    the wait is over: woken the moment it is released, or when its claim runs
    out; no polling). Claiming a key you already hold re-grants it with a
    larger fence (the old one goes stale)."""
    _grant(me.claim_key(**args), as_json, "claimed")


@board.command("release")
@from_operation(RELEASE_KEY, arguments=("key",))
@as_agent
@json_option
def release(args: dict[str, Any], me: Agent, as_json: bool) -> None:
    """Release KEY held with --fence N. A stale fence: exit 5 (lease_lost)."""
    entry = me.release_key(**args)
    emit(entry, as_json, f"released {safe(entry.key)} fence {entry.fence}")


@board.command("renew")
@from_operation(RENEW_KEY, arguments=("key",))
@as_agent
@json_option
def renew(args: dict[str, Any], me: Agent, as_json: bool) -> None:
    """Extend your claim on KEY to --ttl seconds from now (same fence). A stale
    or expired fence: exit 5 (lease_lost)."""
    _grant(me.renew_key(**args), as_json, "renewed")


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
@from_operation(RESERVE, arguments=("patterns",))
@as_agent
@json_option
def reserve(args: dict[str, Any], me: Agent, as_json: bool) -> None:
    """Reserve path PATTERNs (S37): `*` and `?` and `[a-z]` inside a segment,
    `**` for any number of segments (quote them from the shell). Exclusive
    unless --shared; one fence per pattern, all or none.

    Overlapping someone else's reservation (some path matches both, and one of
    the two is exclusive): exit 5 (conflict) naming holder, pattern, expiry and
    a path both match. Reserving a pattern you hold re-grants it (new fence)."""
    grants = me.reserve(**args)
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
@from_operation(CHECK_PATHS, arguments=("paths",))
@as_agent
@json_option
def check(args: dict[str, Any], me: Agent, as_json: bool) -> None:
    """Say who holds what covers each PATH (tool board.read). A path is
    BLOCKED for you when someone else holds a covering pattern exclusively
    (what `broker guard` refuses to commit). Exit 0 either way."""
    _print_checks(me.check_paths(**args), as_json)


@board.command("unreserve")
@from_operation(UNRESERVE)
@as_agent
@json_option
def unreserve(args: dict[str, Any], me: Agent, as_json: bool) -> None:
    """Release your path reservation with --fence N (from `board reserve`).
    A stale fence: exit 5 (lease_lost)."""
    entry = me.release_reservation(**args)
    emit(entry, as_json, f"released {safe(entry.key.removeprefix('path '))} fence {entry.fence}")


@board.command("renew-reservation")
@from_operation(RENEW_RESERVATION)
@as_agent
@json_option
def renew_reservation(args: dict[str, Any], me: Agent, as_json: bool) -> None:
    """Extend your path reservation with --fence N to --ttl seconds from now
    (same fence). A stale or expired fence: exit 5 (lease_lost)."""
    g = me.renew_reservation(**args)
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
