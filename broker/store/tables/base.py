"""What every table module shares: the one ``MetaData`` (its naming convention
makes constraint names stable across SQLite and PostgreSQL) and column sizes."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Index, MetaData, text

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
metadata = MetaData(naming_convention=NAMING)


def in_(column: str, values: tuple[str, ...]) -> str:
    """A CHECK clause: ``column`` takes one of ``values``."""
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


ID = 26  # ULID length
TS = 27  # len("2026-11-30T02:54:03.123456Z")


def partial_index(name: str, *columns: str, where: str, **kw: Any) -> Index:
    """An index over the rows that match ``where``: each engine spells a partial
    index its own way, and this is the one place that knows both."""
    clause = text(where)
    return Index(name, *columns, sqlite_where=clause, postgresql_where=clause, **kw)
