"""Running the alembic migrations in ``migrations/`` (top level of the project).

``HEAD`` is checked on every open without importing alembic (importing it costs
tens of milliseconds on a CLI call); a test keeps it equal to the script
directory's head. The scripts ship inside the wheel as ``broker/_migrations``
(a package-dir mapping in ``pyproject.toml``); in a source checkout they are
read from ``migrations/`` beside ``broker/``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

HEAD = "0026"
UPGRADE_BROKER = "pip install -U swarm-broker"
_PACKAGE = Path(__file__).resolve().parent.parent  # broker/


def script_location() -> Path:
    """The folder holding ``env.py`` and ``versions/``: installed, or the checkout's."""
    for folder in (_PACKAGE / "_migrations", _PACKAGE.parent / "migrations"):
        if (folder / "env.py").is_file() and (folder / "versions").is_dir():
            return folder
    from broker.errors import SchemaOutOfDate

    raise SchemaOutOfDate(f"broker's migration scripts are missing (looked in {_PACKAGE})")


def is_newer(rev: str | None) -> bool:
    """A revision this broker does not number at or below its head: written by a
    newer broker (revisions are numbered in order, ``0001`` up to ``HEAD``)."""
    return rev is not None and not (rev.isdigit() and int(rev) <= int(HEAD))


def too_new(where: str, rev: str) -> Exception:
    """The one refusal of a store from a newer broker, on every path that opens
    one (``StoreTooNew``, exit 14): never "run db upgrade", which cannot help."""
    from broker.errors import StoreTooNew

    return StoreTooNew(
        f"the store at {where} has schema {rev}, newer than this broker knows (its newest is "
        f"{HEAD}): a newer broker wrote it; upgrade broker ({UPGRADE_BROKER})",
        schema=rev,
        head=HEAD,
    )


def config(url: str | None = None) -> Any:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(script_location()))
    if url:
        cfg.set_main_option("sqlalchemy.url", url)
    return cfg


# What ``upgrade`` tells a watcher after each revision: its number, its title
# (the first line of its docstring) and the seconds it took.
OnStep = Callable[[str, str, float], None]


def upgrade(engine: Any, revision: str = "head", on_step: OnStep | None = None) -> None:
    """Upgrade using ``engine``: its connect/begin events apply (BEGIN IMMEDIATE),
    so two processes opening one empty file migrate it once, serially."""
    from alembic import command

    cfg = config()
    with engine.connect() as conn:
        cfg.attributes["connection"] = conn
        cfg.attributes["on_step"] = on_step
        command.upgrade(cfg, revision)


def current(engine: Any) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()
