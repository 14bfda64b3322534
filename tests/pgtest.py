"""PostgreSQL databases for the tests: one per test, never shared between runs.

The server is ``BROKER_TEST_PG`` (default: this machine's own,
``postgresql+psycopg://postgres@127.0.0.1:5432/test``, trust auth). A session
migrates one template database (``broker_t_<session>_tpl``) once; each test
gets ``CREATE DATABASE ... TEMPLATE`` of it (tens of milliseconds) and drops it
after. Names carry the pid and a random part, so concurrent runs never meet.

Unreachable server: in CI (``CI`` set) the test fails loudly; elsewhere it is
skipped, and the session's summary says so in capitals (``NOTICE``).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
from collections.abc import Iterator

import pytest

SERVER = os.environ.get("BROKER_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
_SESSION = f"broker_t_{os.getpid()}_{secrets.token_hex(3)}"
_state: dict[str, object] = {}
skipped: list[str] = []  # why PostgreSQL tests were skipped (the summary prints it)


def url_of(database: str) -> str:
    base, _, _ = SERVER.rpartition("/")
    return f"{base}/{database}"


def _admin() -> object:
    import psycopg

    return psycopg.connect(SERVER.replace("+psycopg", ""), autocommit=True, connect_timeout=5)


def reachable() -> str | None:
    """None if the server answers, else why not."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install -e '.[pg]')"
    try:
        with _admin() as conn:  # type: ignore[attr-defined]
            conn.execute("SELECT 1")
    except Exception as exc:  # noqa: BLE001 - any failure means: no server here
        return f"PostgreSQL at {SERVER} is not reachable: {str(exc).strip().splitlines()[0]}"
    return None


def _unavailable(why: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"PostgreSQL is required in CI: {why}", pytrace=False)
    skipped.append(why)
    pytest.skip(f"NO POSTGRESQL: {why}")


def _template() -> str:
    name = _state.get("template")
    if isinstance(name, str):
        return name
    why = _state.get("why")
    if why is None:
        why = reachable()
        _state["why"] = why or ""
    if why:
        _unavailable(str(why))
    from broker import Store

    name = f"{_SESSION}_tpl"
    with _admin() as conn:  # type: ignore[attr-defined]
        conn.execute(f'CREATE DATABASE "{name}"')
    atexit.register(_drop, name)
    Store(url_of(name)).close()  # alembic upgrade head, once per session
    _state["template"] = name
    return name


def _drop(name: str) -> None:
    with contextlib.suppress(Exception), _admin() as conn:  # type: ignore[attr-defined]
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


_MIGRATED = "migrated"


@contextlib.contextmanager
def database(template: str | None = _MIGRATED) -> Iterator[str]:
    """A fresh database of this session, migrated (or empty with ``template=None``);
    dropped on exit."""
    source = _template()  # also: is the server there at all
    name = f"{_SESSION}_{secrets.token_hex(4)}"
    clone = f' TEMPLATE "{source}"' if template == _MIGRATED else ""
    with _admin() as conn:  # type: ignore[attr-defined]
        conn.execute(f'CREATE DATABASE "{name}"{clone}')
    try:
        yield url_of(name)
    finally:
        _drop(name)
