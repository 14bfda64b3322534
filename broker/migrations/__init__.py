"""Alembic migrations, shipped inside the package so `broker db upgrade` works
from any install. ``HEAD`` is checked on every open without importing alembic
(importing it costs tens of milliseconds on a CLI call); a test keeps it equal
to the script directory's head.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

HEAD = "0002"
HERE = Path(__file__).parent


def config(url: str | None = None) -> Any:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(HERE))
    if url:
        cfg.set_main_option("sqlalchemy.url", url)
    return cfg


def upgrade(engine: Any, revision: str = "head") -> None:
    """Upgrade using ``engine``: its connect/begin events apply (BEGIN IMMEDIATE),
    so two processes opening one empty file migrate it once, serially."""
    from alembic import command

    cfg = config()
    with engine.connect() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def current(engine: Any) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()
