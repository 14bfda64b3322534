"""broker space create|list|show|stop|archive (S1)."""

from __future__ import annotations

import click

from broker.cli._common import emit_json, json_option, keyvals, main, store, table
from broker.vocab import SPACE_KINDS


@main.group()
def space() -> None:
    """Message spaces: one per root run."""


def _parse_settings(pairs: tuple[str, ...]) -> dict[str, object]:
    from broker import errors

    out: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise errors.InvalidInput(f"bad --setting {pair!r}: use KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


@space.command("create")
@click.option("--kind", type=click.Choice(SPACE_KINDS), required=True, help="Kind of root run.")
@click.option(
    "--setting",
    "settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a limit, e.g. inbox_cap=512.",
)
@json_option
def create(kind: str, settings: tuple[str, ...], as_json: bool) -> None:
    """Create a space and print its id."""
    from broker import spaces

    sp = spaces.create(store(), kind, settings=_parse_settings(settings))
    if as_json:
        emit_json({"id": sp.id, "kind": sp.kind, "state": sp.state, "settings": sp.settings})
    else:
        click.echo(sp.id)


@space.command("list")
@click.option(
    "--state",
    type=click.Choice(["running", "stopped", "archived"]),
    help="Only spaces in this state.",
)
@json_option
def list_(state: str | None, as_json: bool) -> None:
    """List spaces."""
    from broker import spaces

    items = spaces.list_spaces(store(), state=state)
    if as_json:
        emit_json(items)
    else:
        table(
            [(s.id, s.kind, s.state, s.created_at_utc) for s in items],
            ["id", "kind", "state", "created"],
        )


@space.command("show")
@click.argument("run_id")
@json_option
def show(run_id: str, as_json: bool) -> None:
    """Show one space (RUN_ID: full id, compact form or unique prefix)."""
    from broker import spaces

    sp = spaces.get(store(), run_id)
    if as_json:
        emit_json(sp)
    else:
        keyvals(
            [
                ("id", sp.id),
                ("kind", sp.kind),
                ("state", sp.state),
                ("settings", sp.settings or "{}"),
                ("created", sp.created_at_utc),
                ("updated", sp.updated_at_utc),
            ]
        )


@space.command("stop")
@click.argument("run_id")
@json_option
def stop(run_id: str, as_json: bool) -> None:
    """Stop a space: its participants are recorded as left; it takes no more messages."""
    from broker import spaces

    sp = spaces.stop(store(), run_id)
    emit_json(sp) if as_json else click.echo(f"{sp.id} {sp.state}")


@space.command("archive")
@click.argument("run_id")
@json_option
def archive(run_id: str, as_json: bool) -> None:
    """Archive a space (stopped for good; its history stays)."""
    from broker import spaces

    sp = spaces.archive(store(), run_id)
    emit_json(sp) if as_json else click.echo(f"{sp.id} {sp.state}")


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
    from broker.client import Operator

    if not yes:
        if not sys.stdin.isatty():
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
