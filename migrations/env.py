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
    context.configure(
        connection=conn,
        target_metadata=target_metadata,
        render_as_batch=True,  # SQLite cannot ALTER most things in place
        compare_type=compare_type,
    )
    with context.begin_transaction():
        context.run_migrations()
    if conn.in_transaction():
        conn.commit()


run()
