"""broker db upgrade|current: the schema, managed by alembic."""

from __future__ import annotations

import click

from broker.cli._common import emit_json, json_option, main


@main.group()
def db() -> None:
    """The database schema (alembic migrations shipped with broker)."""


def _open(migrate: bool):  # type: ignore[no-untyped-def]
    from broker.db import Store

    ctx = click.get_current_context().find_root()
    return Store(ctx.obj.get("url") if ctx.obj else None, migrate=migrate)


@db.command()
@json_option
def upgrade(as_json: bool) -> None:
    """Migrate the database to the newest schema (opening a store does this too)."""
    store = _open(migrate=False)
    before = store.schema_version()
    store.ensure_schema()
    after = store.schema_version()
    if as_json:
        emit_json({"url": str(store.url), "from": before, "to": after})
    else:
        click.echo(f"{store.url}: {before or 'empty'} -> {after}")


@db.command()
@json_option
def current(as_json: bool) -> None:
    """Print the schema revision of the database and the newest one."""
    from broker.migrate import HEAD

    store = _open(migrate=False)
    rev = store.schema_version()
    if as_json:
        emit_json({"url": str(store.url), "current": rev, "head": HEAD, "up_to_date": rev == HEAD})
    else:
        click.echo(
            f"{store.url}: {rev or 'empty'} (head {HEAD}{', up to date' if rev == HEAD else ''})"
        )
