"""`broker msg send|send-many|status|search|policy` (an agent's mail) and `broker
message send|list|threads|search|status` (the operator's voice and the
operator's read of the log)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from broker import errors
from broker.api.operations import OPERATOR_SEARCH, OPERATOR_SEND, SEARCH, SEND, SEND_MANY
from broker.frontends.cli._common import (
    COUNT,
    agent,
    emit_json,
    identity_options,
    json_option,
    main,
    operator,
    text_arg,
)
from broker.frontends.cli._output import emit_json_lines, emit_lines, print_result, run_send, safe
from broker.frontends.cli.options import from_operation
from broker.vocab import MESSAGE_KINDS, SEARCH_SYNTAX, ascii_digits

if TYPE_CHECKING:
    from broker.model.records import AckStatus, LogEntry, SearchHit, Thread

F = TypeVar("F", bound=Callable[..., Any])


@main.group()
def msg() -> None:
    """Agent messaging: the msg.send tool (identity from --space/--as/--token)."""


@msg.command("send")
@from_operation(SEND, arguments=("text",))
@identity_options
@json_option
def msg_send(
    args: dict[str, Any], space: str | None, as_: str | None, token: str | None, as_json: bool
) -> None:
    """Send TEXT as yourself ('-' reads stdin). Exits 1 if it reached nobody."""
    me = agent(space, as_, token)
    run_send(lambda: me.send(**args), as_json)


@msg.command("send-many")
@from_operation(SEND_MANY, flags={"items": "--item"})
@identity_options
@json_option
def msg_send_many(
    args: dict[str, Any], space: str | None, as_: str | None, token: str | None, as_json: bool
) -> None:
    """Send many messages in one transaction, each --item a JSON object with
    msg send's fields ({"to": "otter", "text": "hi"}); '--item -' reads them
    from stdin, one a line. All or none: a refused item sends nothing and is
    named (items[2].to). Prints each item's outcome, in order."""
    results = agent(space, as_, token).send_many(**args)
    if as_json:
        emit_json_lines(results)
        return
    for result in results:
        print_result(result, False)


def _print_status(st: AckStatus, as_json: bool) -> None:
    if as_json:
        emit_json(st)
        return
    flag = " (ack required)" if st.ack_required else ""
    click.echo(f"{st.id}{flag}: seen by {len(st.seen)} of {len(st.reached)}")
    if st.seen:
        click.echo(f"seen: {safe(', '.join(st.seen))}")
    if st.not_seen:
        click.echo(f"not seen: {safe(', '.join(st.not_seen))}")


@msg.command("status")
@click.argument("message_id")
@identity_options
@json_option
def msg_status(
    message_id: str, space: str | None, as_: str | None, token: str | None, as_json: bool
) -> None:
    """Who has seen MESSAGE_ID, a message you sent: those it reached whose
    confirmed turn showed it, and those not yet."""
    _print_status(agent(space, as_, token).status(message_id), as_json)


@msg.command("policy")
@click.argument(
    "policy", required=False, type=click.Choice(["open", "parent-and-lead", "listed", "closed"])
)
@click.option(
    "--allow",
    multiple=True,
    metavar="ADDR",
    help="An address a 'listed' policy lets in (repeatable).",
)
@identity_options
@json_option
def msg_policy(
    policy: str | None,
    allow: tuple[str, ...],
    space: str | None,
    as_: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """Show, or set, who may message you directly (S38): open (anyone),
    parent-and-lead, listed (--allow ADDR...) or closed. The operator and the
    lead always reach you; a refused sender's message is logged not_reached
    with reason contact_policy."""
    me = agent(space, as_, token)
    if policy is None:
        if allow:
            raise errors.InvalidInput("--allow goes with the 'listed' policy", field="allow")
        got = me.contact_policy()
    else:
        got = me.set_contact_policy(policy, list(allow))
    if as_json:
        emit_json(got)
        return
    click.echo(got.policy + (f": {safe(', '.join(got.allow))}" if got.allow else ""))


def _hit_line(h: SearchHit) -> str:
    stamp = h.created_at_utc[:19].replace("T", " ")
    where = f" [{safe(h.thread)}]" if h.thread else ""
    return f"#{h.seq} {h.id} {stamp} {h.kind} {safe(h.sender)}{where}: {safe(h.snippet)}"


def _searched(args: dict[str, Any]) -> dict[str, Any]:
    """The search's fields as the CLI also takes them: ``--kind`` comma-separated
    (direct,post) and ``--since`` an age (10m, 2h)."""
    kinds = [k.strip() for word in args["kinds"] or () for k in word.split(",") if k.strip()]
    return {**args, "kinds": kinds or None, "since": _since(args["since"])}


SEARCH_HELP = f"""Query: {SEARCH_SYNTAX}.
Best match first, matched words in [brackets]."""


@msg.command("search", epilog=SEARCH_HELP)
@from_operation(SEARCH, arguments=("query",))
@identity_options
@json_option
def msg_search(
    args: dict[str, Any], space: str | None, as_: str | None, token: str | None, as_json: bool
) -> None:
    """Full-text search of the messages you sent or received (S36)."""
    hits = agent(space, as_, token).search(**_searched(args))
    emit_lines(hits, as_json, _hit_line)


@main.group()
def message() -> None:
    """The operator's messages: send to any participant, read the log."""


@message.command("send")
@from_operation(OPERATOR_SEND, arguments=("space", "text"))
@json_option
def message_send(args: dict[str, Any], as_json: bool) -> None:
    """Send TEXT to RUN_ID as the operator ('-' reads stdin). Exits 1 if it
    reached nobody."""
    op = operator()
    run_send(lambda: op.send(**args), as_json)


RECEIPT = "seen"  # the kind of a confirmed turn's receipt (S18)


def _kinds(value: str | None) -> list[str] | None:
    if not value:
        return None
    kinds = [k.strip() for k in value.split(",") if k.strip()]
    for k in kinds:
        if k not in MESSAGE_KINDS:
            raise errors.InvalidInput(
                f"unknown kind {k!r}: use {', '.join(MESSAGE_KINDS)}", field="kind"
            )
    return kinds


def _after(value: str | None) -> str | int | None:
    """--after: a seq (as `message list` shows it, with or without '#') or a message id."""
    if value is None:
        return None
    digits = value.removeprefix("#")
    if ascii_digits(digits) and len(digits) < 19:
        return int(digits)
    return value


_AGO = re.compile(r"(\d+(?:\.\d+)?)([smhd])", re.ASCII)
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _since(value: str | None) -> str | None:
    """--since: an age (90s, 10m, 2h, 1d), or a time as the library reads one
    (``client.utc_time``: ISO-8601, UTC or with an offset)."""
    if value is None:
        return None
    from datetime import UTC, datetime, timedelta

    ago = _AGO.fullmatch(value.strip())
    if ago is None:
        from broker.api.handles import utc_time

        try:
            return utc_time(value, "since")
        except errors.InvalidInput:
            raise errors.InvalidInput(
                f"bad --since {value!r}: an ISO-8601 time (2026-11-30T03:52:00Z) or an age "
                "(10m, 2h, 1d)",
                field="since",
            ) from None
    seconds = float(ago.group(1)) * _UNIT[ago.group(2)]
    if seconds > 100 * 365 * 86400:
        raise errors.InvalidInput(f"bad --since {value!r}: at most 100 years ago", field="since")
    moment = datetime.now(UTC) - timedelta(seconds=seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _entry_line(e: LogEntry) -> str:
    outcome = f" -> {safe(', '.join(e.reached))}" if e.reached else ""
    if e.not_reached:
        misses = ", ".join(f"{safe(n.address)}: {n.reason}" for n in e.not_reached)
        outcome += f" [not reached: {misses}]"
    flag = " URGENT" if e.urgent else ""
    flag += f" {e.importance.upper()}" if e.importance != "normal" else ""
    flag += f" [{safe(e.thread)}]" if e.thread else ""
    stamp = e.created_at_utc[:19].replace("T", " ")
    return f"#{e.seq} {e.id} {stamp} {e.kind}{flag} {safe(e.sender)}{outcome}: {safe(e.body)}"


@message.command("list")
@click.argument("run_id")
@click.option(
    "--after", metavar="SEQ|ID", help="Only messages after this one: its seq (#12 or 12) or id."
)
@click.option(
    "--kind",
    metavar="KINDS",
    help="Comma-separated kinds, e.g. direct,operator (seen: the receipts).",
)
@click.option(
    "--receipts",
    is_flag=True,
    help="Also show the seen receipts (folded out by default, --json too).",
)
@click.option("--from", "sender", metavar="ADDR", help="Only messages this participant sent.")
@click.option(
    "--to", "to", metavar="ADDR", help="Only messages addressed to ADDR or that reached it."
)
@click.option("--since", metavar="WHEN", help="Only messages since a UTC time or an age (10m, 2h).")
@click.option("--limit", type=COUNT, metavar="N", help="The first N matching messages.")
@click.option("--tail", type=COUNT, metavar="N", help="The last N matching messages.")
@click.option("--thread", metavar="NAME", help="Only the messages of thread NAME (S35).")
@click.option(
    "--follow", is_flag=True, help="Then keep printing new messages until the space stops."
)
@json_option
def message_list(
    run_id: str,
    after: str | None,
    kind: str | None,
    receipts: bool,
    sender: str | None,
    to: str | None,
    since: str | None,
    limit: int | None,
    tail: int | None,
    thread: str | None,
    follow: bool,
    as_json: bool,
) -> None:
    """Print the log of RUN_ID, oldest first: '#SEQ ID TIME KIND SENDER -> REACHED: BODY'
    (--json: one object per line). The seen receipts a confirmed turn writes are
    folded out, from --json too: --receipts shows them among the rest, --kind
    seen only them."""
    if limit is not None and tail is not None:
        raise errors.InvalidInput("--limit and --tail exclude each other", field="tail")
    if thread is not None and follow:
        raise errors.InvalidInput("--thread and --follow exclude each other", field="follow")
    kinds = _kinds(kind)
    if kinds is None and not receipts:
        kinds = [k for k in MESSAGE_KINDS if k != RECEIPT]
    filters: dict[str, Any] = {
        "kinds": kinds,
        "sender": sender,
        "to": to,
        "since": _since(since),
    }
    op = operator()
    entries = op.log(
        run_id, after=_after(after), limit=limit, tail=tail, **filters, **_thread(thread)
    )
    emit_lines(entries, as_json, _entry_line)
    if follow:
        last: str | int | None = entries[-1].seq if entries else _after(after)
        if limit is not None:  # the first N were shown: what follows is what is new
            newest = op.log(run_id, tail=1)
            last = newest[0].seq if newest else last
        for batch in op.follow(run_id, after=last, **filters):
            emit_lines(batch, as_json, _entry_line)


def _thread(thread: str | None) -> dict[str, str]:
    # Only when given: a served operator's log takes no thread argument yet.
    return {} if thread is None else {"thread": thread}


@message.command("threads")
@click.argument("run_id")
@json_option
def message_threads(run_id: str, as_json: bool) -> None:
    """The threads of RUN_ID, most recently active first: 'THREAD N messages,
    LAST TIME, SENDERS' (--json: one object per line)."""
    emit_lines(operator().threads(run_id), as_json, _thread_line)


def _thread_line(th: Thread) -> str:
    stamp = th.last_at[:19].replace("T", " ")
    return (
        f"{safe(th.thread)}: {th.messages} message{'s' * (th.messages != 1)}, "
        f"last {stamp}, {safe(', '.join(th.senders))}"
    )


@message.command("search", epilog=SEARCH_HELP)
@from_operation(OPERATOR_SEARCH, arguments=("space", "query"))
@json_option
def message_search(args: dict[str, Any], as_json: bool) -> None:
    """Full-text search of the whole log of RUN_ID (S36)."""
    emit_lines(operator().search(**_searched(args)), as_json, _hit_line)


@message.command("status")
@click.argument("run_id")
@click.argument("message_id")
@json_option
def message_status(run_id: str, message_id: str, as_json: bool) -> None:
    """Who has seen MESSAGE_ID among those it reached."""
    _print_status(operator().status(run_id, message_id), as_json)


def _participants_alias() -> click.Command:
    """``message participants RUN_ID``: the source's name for ``dir list``, the
    same command (its options, output and exit codes) under a second name."""
    import copy

    from broker.frontends.cli.directory import list_

    alias = copy.copy(list_)
    alias.name = "participants"
    alias.help = (
        "List the participants of RUN_ID, as `dir list` does (the same command; the "
        "source's `message participants <run-id>`)."
    )
    alias.short_help = None
    return alias


message.add_command(_participants_alias())


@main.group()
def agentiflow() -> None:
    """An agentiflow's shorthands (operator): `agentiflow send` to its lead."""


@agentiflow.command("send")
@click.argument("run_id")
@click.argument("text", nargs=-1, required=True)
@click.option(
    "--now",
    is_flag=True,
    help="Urgent: marked URGENT and shown to the lead first, ahead of everything else, at "
    "its next turn (never inside a tool call in progress).",
)
@json_option
def agentiflow_send(run_id: str, text: tuple[str, ...], now: bool, as_json: bool) -> None:
    """Send TEXT to the lead of agentiflow RUN_ID as the operator ('-' reads
    stdin): short for `message send RUN_ID --to lead [--urgent]`, --now being
    --urgent. A space of another kind has no lead to send to: refused, nothing
    logged. Exits 1 if the lead was not reached."""
    body = text_arg(text)
    op = operator()
    space = op.get_space(run_id)
    if space.kind != "agentiflow":
        raise errors.InvalidInput(
            f"{space.id} is a {space.kind}, not an agentiflow: it has no lead to send to "
            f"(use `broker message send {space.id} --to ADDRESS`)",
            field="run_id",
        )
    run_send(lambda: op.send(space.id, body, to=["lead"], urgent=now), as_json)
