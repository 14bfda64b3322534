"""broker space create|list|show|stop|archive (S1)."""

from __future__ import annotations

import click

from broker.cli._common import (
    emit_json,
    json_option,
    keyvals,
    main,
    operator,
    table,
)
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

    sp = operator().create_space(kind, **_parse_settings(settings))
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

    items = operator().spaces(state=state)
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

    sp = operator().get_space(run_id)
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

    sp = operator().stop(run_id)
    emit_json(sp) if as_json else click.echo(f"{sp.id} {sp.state}")


@space.command("archive")
@click.argument("run_id")
@json_option
def archive(run_id: str, as_json: bool) -> None:
    """Archive a space (stopped for good; its history stays)."""

    sp = operator().archive(run_id)
    emit_json(sp) if as_json else click.echo(f"{sp.id} {sp.state}")
