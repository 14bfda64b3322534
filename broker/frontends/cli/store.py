"""broker db upgrade|current (the schema, managed by alembic), migrate-store, and
key show (the operator key, to carry to another host)."""

from __future__ import annotations

import sys

import click

from broker.frontends.cli._common import emit_json, is_terminal, json_option, main, store
from broker.frontends.cli._output import emit


@main.group()
def db() -> None:
    """The database schema (alembic migrations shipped with broker)."""


@db.command()
@json_option
def upgrade(as_json: bool) -> None:
    """Create the database if there is none and migrate it to the newest schema
    (opening a store for any other command does this too). On a terminal, each
    revision is named on stderr as it is applied, with its time: a revision that
    rewrites a table takes a while on a large store."""
    s = store(create=True, migrate=False)
    before = s.schema_version()
    s.ensure_schema(on_step=_revision_line if is_terminal(sys.stderr) else None)
    after = s.schema_version()
    emit(
        {"url": s.public_url, "before": before, "after": after},
        as_json,
        f"{s.public_url}: {before or 'empty'} -> {after}",
    )


def _revision_line(revision: str, title: str, seconds: float) -> None:
    click.echo(f"  {revision}  {title} ({seconds:.1f} s)", err=True)


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
                "url": s.public_url,
                "current": rev,
                "head": SCHEMA_HEAD,
                "up_to_date": rev == SCHEMA_HEAD,
            }
        )
    else:
        from broker.api.handles import newer_schema_fix

        up = ", up to date" if rev == SCHEMA_HEAD else ""
        fix = newer_schema_fix(rev)
        if fix:
            up = f"; a newer broker wrote it: {fix}"
        click.echo(f"{s.public_url}: {rev or 'empty'} (head {SCHEMA_HEAD}{up})")


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
    then check the copy exports byte-identically. Join keys, participants'
    tokens and (into a store with no space yet) the operator key come along:
    agents go on with what they hold, pointed at the new store."""
    from broker.api.handles import Operator

    copy = Operator(store()).migrate_store(to)
    if as_json:
        emit_json(copy.as_dict())
        return
    state = "identical" if copy.identical else "DIFFERENT"
    click.echo(f"{_count(len(copy.spaces), 'space')} -> {copy.to}: {copy.files} files, {state}")
    carried = f"{_count(copy.join_keys, 'join key')}, {_count(copy.tokens, 'participant token')}"
    click.echo(f"carried: {carried}")
    if copy.operator_key == "carried":
        where = f"in {copy.key_file}" if copy.key_file else "BROKER_OPERATOR_KEY, as here"
        click.echo(f"operator key: this store's, carried ({where})")
    elif copy.operator_key == "same":
        click.echo("operator key: the same in both stores")
    else:
        click.echo(
            "operator key: the target's own, kept (it already holds spaces): its operator "
            "key, not this one, works there"
        )
    if not copy.identical:
        raise SystemExit(1)


@main.group()
def key() -> None:
    """The store's operator key: what operator commands prove they are the operator with."""


@key.command("show")
@json_option
def key_show(as_json: bool) -> None:
    """Print the operator key, to carry it to another host.

    Operator only: the key must be here already (the key file, or
    BROKER_OPERATOR_KEY), and it is checked against the store before it is
    printed. On the other host: export BROKER_OPERATOR_KEY=<the key>.
    """
    from broker.api.handles import Operator

    s = store()
    op = Operator(s, via="cli")
    if as_json:
        emit_json({"store": s.public_url, "operator_key": op.key})
        return
    click.echo(op.key)
    if is_terminal(sys.stdout):
        click.echo(
            "On another host: export BROKER_OPERATOR_KEY=<the key above>. Keep it secret: "
            "it is the operator's authority over every space of this store.",
            err=True,
        )


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"
