"""Alembic environment: the metadata in broker.store.tables is the one schema source."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from broker.store.dialect import compare_type, register_sqlalchemy
from broker.store.tables import metadata

# PostgreSQL stores booleans as SMALLINT 0/1 (broker.store.dialect): the revisions
# run unchanged on both engines.
register_sqlalchemy()

config = context.config
target_metadata = metadata


def run() -> None:
    conn = config.attributes.get("connection")
    if conn is None:
        # Plain `alembic` CLI (autogenerate): use the configured URL.
        engine = create_engine(config.get_main_option("sqlalchemy.url") or "")
        with engine.connect() as c:
            _migrate(c)
        return
    _migrate(conn)


def _migrate(conn):
    # A caller may watch each revision go by (``broker db upgrade`` on a
    # terminal: a large store's revisions that rewrite a table take a while).
    watch = config.attributes.get("on_step")
    context.configure(
        connection=conn,
        target_metadata=target_metadata,
        render_as_batch=True,  # SQLite cannot ALTER most things in place
        compare_type=compare_type,
        on_version_apply=[] if watch is None else [_reporter(watch)],
    )
    with context.begin_transaction():
        context.run_migrations()
    if conn.in_transaction():
        conn.commit()


def _reporter(watch):
    """An alembic ``on_version_apply`` callback that calls ``watch(revision,
    title, seconds)`` after each revision, with the seconds since the last."""
    import time

    last = [time.monotonic()]

    def applied(ctx, step, heads, run_args):  # alembic passes these by name
        now = time.monotonic()
        revision = step.up_revision if step.is_upgrade else None
        rev = step.up_revision_id if step.is_upgrade else ",".join(step.down_revision_ids)
        title = (revision.doc or "").splitlines()[0] if revision is not None else ""
        watch(str(rev), title, now - last[0])
        last[0] = now

    return applied


run()
