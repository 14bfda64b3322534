"""What every table module shares: the one ``MetaData`` (its naming convention
makes constraint names stable across SQLite and PostgreSQL) and column sizes."""

from __future__ import annotations

from sqlalchemy import MetaData

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
