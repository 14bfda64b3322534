"""What every table module shares: the one ``MetaData`` (its naming convention
makes constraint names stable across SQLite and PostgreSQL), the table of a
space's rows, and the constraints every engine spells alike (``one_of``) or its
own way (``partial_index``). The columns that mean the same in every table are
in ``column``."""

from __future__ import annotations

from typing import Any

from sqlalchemy import CheckConstraint, Index, MetaData, Table, text
from sqlalchemy.schema import SchemaItem

from broker.store.tables import column

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
metadata = MetaData(naming_convention=NAMING)


def one_of(name: str, values: tuple[str, ...]) -> CheckConstraint:
    """The CHECK that the column ``name`` takes one of ``values`` (its
    vocabulary), named after the column."""
    return CheckConstraint(f"{name} IN ({', '.join(repr(v) for v in values)})", name=name)


def space_table(name: str, *items: SchemaItem, comment: str) -> Table:
    """A table of a space's own rows: each has a ULID ``id`` and its
    ``space_id``, before the ``items`` that make it what it is."""
    return Table(name, metadata, column.ulid_key(), column.space_ref(), *items, comment=comment)


def partial_index(name: str, *columns: str, where: str, **kw: Any) -> Index:
    """An index over the rows that match ``where``: each engine spells a partial
    index its own way, and this is the one place that knows both."""
    clause = text(where)
    return Index(name, *columns, sqlite_where=clause, postgresql_where=clause, **kw)
