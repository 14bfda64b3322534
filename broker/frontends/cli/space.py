"""broker space create|list|show|stop|archive (S1): the operator's spaces."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from broker.api.operations import (
    ARCHIVE_SPACE,
    CREATE_SPACE,
    ROTATE_JOIN_KEY,
    SET_SPACE,
    SPACE_USAGE,
    SPACES,
    STOP_SPACE,
)
from broker.frontends.cli._common import (
    confirm,
    emit_json,
    emit_json_lines,
    is_terminal,
    json_option,
    keyvals,
    main,
    operator,
    server,
    store,
    table,
    yes_option,
)
from broker.frontends.cli._output import emit, to_jsonable, when
from broker.frontends.cli.options import from_operation

if TYPE_CHECKING:
    from broker.model.records import Space, SpaceUsage


@main.group()
def space() -> None:
    """Message spaces, one per root run (operator)."""


@space.command("create")
@from_operation(CREATE_SPACE, flags={"settings": "--setting"})
@json_option
def create(args: dict[str, Any], as_json: bool) -> None:
    """Create a space (and the store if there is none); print its id and its
    join key, shown this once, as one line for the shell:
    `eval "$(broker space create)"` sets BROKER_SPACE and
    BROKER_JOIN_KEY (--json: {"id": ..., "join_key": ..., ...})."""
    if server() is not None:  # client mode: the server has the store
        op = operator()
    else:
        from broker.api.handles import Operator

        op = Operator(store(create=True), via="cli")
    sp = op.call(CREATE_SPACE, args)
    emit(sp, as_json, f"export BROKER_SPACE={sp.id} BROKER_JOIN_KEY={sp.join_key}")


@space.command("join-key")
@from_operation(ROTATE_JOIN_KEY, arguments=("space",))
@click.option(
    "--rotate",
    is_flag=True,
    required=True,
    help="Make a new join key (required: the old key is never shown again).",
)
@json_option
def join_key(args: dict[str, Any], rotate: bool, as_json: bool) -> None:
    """Give space RUN_ID a new join key and print it (S27): for a space made
    before join keys, or whose key was lost or leaked. The old key stops
    working; participants already in keep their tokens."""
    new = operator().rotate_join_key(**args)
    emit(new, as_json, f"export BROKER_SPACE={new.space_id} BROKER_JOIN_KEY={new.join_key}")


@space.command("list")
@from_operation(SPACES)
@json_option
def list_(args: dict[str, Any], as_json: bool) -> None:
    """List the spaces of the store, oldest first."""
    items = operator().spaces(**args)
    if as_json:
        emit_json_lines(items)
    else:
        table(
            [(s.id, s.kind, s.state, when(s.created_at_utc)) for s in items],
            ["id", "kind", "state", "created"],
        )


@space.command("show")
@from_operation(SPACE_USAGE, arguments=("space",))
@json_option
def show(args: dict[str, Any], as_json: bool) -> None:
    """Show one space (RUN_ID: full id, compact form or unique prefix): its
    limits in effect and their use (S30): the log against log_max_mb, the
    senders holding most of it, each inbox against inbox_cap."""
    op = operator()
    sp = op.get_space(args["space"])
    _show(sp, op.space_usage(**{**args, "space": sp.id}), as_json)


@space.command("set")
@from_operation(SET_SPACE, arguments=("space", "settings"))
@json_option
def set_(args: dict[str, Any], as_json: bool) -> None:
    """Change a space's limits, e.g. `broker space set RUN_ID log_max_mb=128
    sender_share=0.25` (S30). Each setting is checked against its bounds (see
    `space show`); the change is logged (`message list` shows it)."""
    op = operator()
    sp = op.get_space(args["space"])
    usage = op.call(SET_SPACE, {**args, "space": sp.id})
    _show(op.get_space(sp.id), usage, as_json)


def _show(sp: Space, usage: SpaceUsage, as_json: bool) -> None:
    from broker.vocab import describe_setting as describe
    from broker.vocab import number

    if as_json:
        emit_json({**to_jsonable(sp), "usage": to_jsonable(usage)})
        return
    settings = ", ".join(f"{k}={_num(v)}" for k, v in sorted(sp.settings.items()))
    pct = 100 * usage.log_bytes / usage.log_cap_bytes if usage.log_cap_bytes else 0.0
    keyvals(
        [
            ("id", sp.id),
            ("kind", sp.kind),
            ("state", sp.state),
            ("settings", settings or "(defaults)"),
            ("created", when(sp.created_at_utc)),
            ("updated", when(sp.updated_at_utc)),
            (
                "log",
                f"{_mb(usage.log_bytes)} of {_mb(usage.log_cap_bytes)} ({pct:.1f}%), "
                f"{usage.messages} rows; one sender at most {_mb(usage.sender_log_cap_bytes)}",
            ),
            ("inbox", f"one sender at most {usage.sender_inbox_cap} waiting in another's inbox"),
            (
                "join key",
                f"{usage.join_key_members} admitted hold {_mb(usage.join_key_log_bytes)} of the "
                f"log together; at most {_mb(usage.join_key_log_cap_bytes)}",
            ),
            (
                "board",
                f"{usage.holds} live holds of {number(usage.limits['space_holds_cap'])} (one "
                f"participant at most {number(usage.limits['holds_cap'])}); "
                f"{_mb(usage.board_bytes)} kept",
            ),
        ]
    )
    click.echo()
    table(
        [
            (k, number(v), describe(k), "set" if k in sp.settings else "default")
            for k, v in usage.limits.items()
        ],
        ["setting", "in effect", "bounds", "from"],
    )
    click.echo()
    table(
        [
            (u.sender, _mb(u.log_bytes), f"{100 * u.share:.1f}%", u.messages)
            for u in usage.top_senders
        ],
        ["sender", "log", "share", "messages"],
        empty="(no messages)",
    )
    click.echo()
    table(
        [(i.address, i.status, f"{i.waiting}/{i.cap}", i.holds) for i in usage.inboxes],
        ["participant", "status", "waiting", "holds"],
        empty="(no participants)",
    )


def _num(v: object) -> str:
    from broker.vocab import number

    return number(v) if isinstance(v, int | float) and not isinstance(v, bool) else str(v)


def _mb(n: int) -> str:
    from broker.vocab import human_size

    return human_size(n)


def _live(run_id: str) -> str:
    n = len(operator().participants(run_id, include_left=False))
    return f"{n} participant{'' if n == 1 else 's'}"


@space.command("stop")
@from_operation(STOP_SPACE, arguments=("space",))
@yes_option
@json_option
def stop(args: dict[str, Any], yes: bool, as_json: bool) -> None:
    """Stop a space: it takes no more messages or participants, and those
    still in it are recorded as left. Asks first (--yes for scripts)."""
    sp = operator().get_space(**args)
    if sp.state == "running":
        confirm(f"Stop {sp.id}? {_live(sp.id)} will be recorded as left.", yes)
    sp = operator().stop_space(sp.id)
    emit(sp, as_json, f"{sp.id} {sp.state}")


@space.command("archive")
@from_operation(ARCHIVE_SPACE, arguments=("space",))
@yes_option
@json_option
def archive(args: dict[str, Any], yes: bool, as_json: bool) -> None:
    """Archive a space: stopped for good, its history kept. Asks first (--yes for scripts)."""
    sp = operator().get_space(**args)
    if sp.state != "archived":
        extra = f" {_live(sp.id)} will be recorded as left." if sp.state == "running" else ""
        confirm(f"Archive {sp.id} for good?{extra}", yes)
    sp = operator().archive_space(sp.id)
    emit(sp, as_json, f"{sp.id} {sp.state}")


@space.command("purge")
@click.argument("run_id")
@click.option(
    "--export",
    "export_dir",
    required=True,
    type=click.Path(),
    help="Folder to export the space to first (JSONL layout); verified before anything goes.",
)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation (scripts).")
@json_option
def purge(run_id: str, export_dir: str, yes: bool, as_json: bool) -> None:
    """Delete an archived space's rows, after exporting it to --export and checking
    the export against the database (the only way rows leave the store; recorded
    in the store's purge journal). Import the export to get the space back."""
    import sys

    from broker import errors
    from broker.api.handles import Operator

    if not yes:
        if not is_terminal(sys.stdin):
            raise errors.InvalidInput(
                f"purging {run_id} deletes its rows: confirm at a terminal, or pass --yes"
            )
        if not click.confirm(
            f"Export {run_id} to {export_dir}, check it, then delete the space's rows?",
            err=True,
        ):
            raise errors.InvalidInput(f"not confirmed: nothing of {run_id} was deleted")
    done = Operator(store()).purge_space(run_id, export_dir)
    if as_json:
        emit_json(done)
    else:
        keyvals(
            [
                ("purged", done.space_id),
                ("export", done.export_dir),
                ("digest", done.digest),
                ("files", done.files),
                *((f"deleted {table}", n) for table, n in done.counts.items()),
            ]
        )
