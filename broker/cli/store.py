"""broker db upgrade|current: the schema, managed by alembic."""

from __future__ import annotations

import click

from broker.cli._common import emit_json, json_option, main, store


@main.group()
def db() -> None:
    """The database schema (alembic migrations shipped with broker)."""


@db.command()
@json_option
def upgrade(as_json: bool) -> None:
    """Create the database if there is none and migrate it to the newest schema
    (opening a store for any other command does this too)."""
    s = store(create=True, migrate=False)
    before = s.schema_version()
    s.ensure_schema()
    after = s.schema_version()
    if as_json:
        emit_json({"url": str(s.url), "before": before, "after": after})
    else:
        click.echo(f"{s.url}: {before or 'empty'} -> {after}")


@db.command()
@json_option
def current(as_json: bool) -> None:
    """Print the schema revision of the database and the newest one (changes nothing)."""
    from broker.client import SCHEMA_HEAD

    s = store(migrate=False)
    rev = s.schema_version()
    if as_json:
        emit_json(
            {
                "url": str(s.url),
                "current": rev,
                "head": SCHEMA_HEAD,
                "up_to_date": rev == SCHEMA_HEAD,
            }
        )
    else:
        up = ", up to date" if rev == SCHEMA_HEAD else ""
        click.echo(f"{s.url}: {rev or 'empty'} (head {SCHEMA_HEAD}{up})")
