"""broker db upgrade|current: the schema, managed by alembic."""

from __future__ import annotations

import click

from broker.frontends.cli._common import emit_json, json_option, main, store


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
    from broker.api.handles import SCHEMA_HEAD

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


@main.command("migrate-store")
@click.option(
    "--into",
    "to",
    required=True,
    metavar="URL",
    help="URL of the store to copy every space into (postgresql+psycopg://... or sqlite:///PATH).",
)
@json_option
def migrate_store(to: str, as_json: bool) -> None:
    """Copy every space of this store into the store at --into (e.g. SQLite to
    PostgreSQL), through the JSONL export layout, in one import transaction;
    then check the copy exports byte-identically. Agents re-join on the target
    (tokens are never exported)."""
    from broker.api.handles import Operator

    copy = Operator(store()).migrate_store(to)
    if as_json:
        emit_json(copy.as_dict())
        return
    state = "identical" if copy.identical else "DIFFERENT"
    click.echo(f"{len(copy.spaces)} spaces -> {copy.to}: {copy.files} files, {state}")
    if not copy.identical:
        raise SystemExit(1)
