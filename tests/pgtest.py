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
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

SERVER = os.environ.get("BROKER_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
SESSION = f"broker_t_{os.getpid()}_{secrets.token_hex(3)}"
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

    name = f"{SESSION}_tpl"
    with _admin() as conn:  # type: ignore[attr-defined]
        conn.execute(f'CREATE DATABASE "{name}"')
    atexit.register(_drop, name)
    # The template's operator key (every clone's): given, so no file is made for it.
    key = secrets.token_urlsafe(32)
    saved = os.environ.get("BROKER_OPERATOR_KEY")
    os.environ["BROKER_OPERATOR_KEY"] = key
    try:
        Store(url_of(name)).close()  # alembic upgrade head, once per session
    finally:
        if saved is None:
            del os.environ["BROKER_OPERATOR_KEY"]
        else:
            os.environ["BROKER_OPERATOR_KEY"] = saved
    _state["key"] = key
    _state["template"] = name
    return name


def close() -> None:
    """Drop this session's template (conftest calls it at the session's end; the
    atexit hook is the fallback, which pytest-xdist's workers may never reach)."""
    name = _state.pop("template", None)
    if isinstance(name, str):
        _drop(name)


def _drop(name: str) -> None:
    with contextlib.suppress(Exception), _admin() as conn:  # type: ignore[attr-defined]
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


_MIGRATED = "migrated"


@contextlib.contextmanager
def database(template: str | None = _MIGRATED, *, home: Path | None = None) -> Iterator[str]:
    """A fresh database of this session, migrated (or empty with ``template=None``);
    dropped on exit.

    Its key file is in ``home`` (the test's own folder: the ``db_url`` fixture
    passes ``tmp_path / "home"``, the ``cli`` fixture's BROKER_HOME), else in a
    temp folder of its own, removed on exit; BROKER_HOME names that folder
    while the database exists, so an in-process ``Operator(store)`` finds the
    key there and nothing is written to the user's broker folder."""
    source = _template()  # also: is the server there at all
    name = f"{SESSION}_{secrets.token_hex(4)}"
    clone = f' TEMPLATE "{source}"' if template == _MIGRATED else ""
    with _admin() as conn:  # type: ignore[attr-defined]
        conn.execute(f'CREATE DATABASE "{name}"{clone}')
    url = url_of(name)
    own = home is None
    folder = Path(tempfile.mkdtemp(prefix="pg-home-")) if home is None else home
    saved = os.environ.get("BROKER_HOME")
    os.environ["BROKER_HOME"] = str(folder)
    key = _key_file(url)
    try:
        if clone:
            # A clone holds the template's operator key hash: its key file goes
            # with it (as `broker backup` copies the file beside a SQLite copy).
            key.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(str(_state["key"]) + "\n")
        yield url
    finally:
        _drop(name)
        key.unlink(missing_ok=True)
        if saved is None:
            os.environ.pop("BROKER_HOME", None)
        else:
            os.environ["BROKER_HOME"] = saved
        if own:
            shutil.rmtree(folder, ignore_errors=True)


def _key_file(url: str) -> Path:
    from broker.store.postgres import conninfo, key_path

    return key_path(conninfo(url))


def operator_key() -> str:
    """The operator key of every migrated database of this session."""
    _template()
    return str(_state["key"])


def process_env(home: Path, url: str) -> dict[str, str]:
    """The environment of a broker process a test starts itself: this one's
    without BROKER_*, BROKER_HOME at ``home``, and on PostgreSQL the store's URL
    and operator key (no file in ``home`` names that store)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
    env["BROKER_HOME"] = str(home)
    if url.startswith("postgresql"):
        env["BROKER_URL"] = url
        env["BROKER_OPERATOR_KEY"] = operator_key()
    return env
