"""PostgreSQL databases for the tests: one per test, never shared between runs.

The server is ``BROKER_TEST_PG`` (default: this machine's own,
``postgresql+psycopg://postgres@127.0.0.1:5432/test``, trust auth). A session
migrates one template database (``broker_t_<session>_tpl``) once; each test
gets ``CREATE DATABASE ... TEMPLATE`` of it (tens of milliseconds) and drops it
after. Names carry the pid and a random part, so concurrent runs never meet.

Unreachable server: in CI (``CI`` set) the test fails loudly; elsewhere it is
skipped, and the session's summary says so in capitals (``NOTICE``).

The contract fixtures (``database(reuse=True)``) take a used clone back
instead of dropping it: a DROP DATABASE forces a checkpoint of the whole server
(PostgreSQL 15: most of a second, seconds under load), a clone writes the
template's 8 MB again. A used clone is cut off (its connections ended, then
renamed, so a straggler finds no database, as after a drop), emptied
(every row deleted with no trigger firing, or ``TRUNCATE`` for a user that is
not a superuser; sequences restarted, the template's rows put back) and kept for the next test, unless anything but rows changed (tables,
columns, indexes, constraints, triggers, functions, schemas, extensions,
settings: the catalogue's fingerprint differs from the template's), or any
step fails: then it is dropped, as before.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SERVER = os.environ.get("BROKER_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
SESSION = f"broker_t_{os.getpid()}_{secrets.token_hex(3)}"
_state: dict[str, object] = {}
skipped: list[str] = []  # why PostgreSQL tests were skipped (the summary prints it)


def url_of(database: str) -> str:
    base, _, _ = SERVER.rpartition("/")
    return f"{base}/{database}"


_admins: dict[int, Any] = {}  # this process's admin connection, kept between tests


@contextlib.contextmanager
def _admin() -> Iterator[Any]:
    """The server's admin connection (CREATE, RENAME, DROP DATABASE): one per
    process, kept open (a connection costs ~8 ms, twice per test before), made
    anew when it broke or in a forked child."""
    import psycopg

    conn = _admins.get(os.getpid())
    if conn is None or conn.closed or conn.broken:
        conn = _admins[os.getpid()] = psycopg.connect(
            SERVER.replace("+psycopg", ""), autocommit=True, connect_timeout=5
        )
    yield conn


def reachable() -> str | None:
    """None if the server answers, else why not."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install -e '.[pg]')"
    try:
        with _admin() as conn:
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
    with _admin() as conn:
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
    with _connect(name) as conn:  # what a used clone is checked and emptied against
        _state["fingerprint"] = _fingerprint(conn)
        tables = [r[0] for r in conn.execute(_TABLES).fetchall()]
        _state["tables"] = tables
        _state["sequences"] = [r[0] for r in conn.execute(_SEQUENCES).fetchall()]
        _state["rows"] = {t: conn.execute(f'SELECT * FROM "{t}"').fetchall() for t in tables}
        _state["superuser"] = conn.execute(
            "SELECT rolsuper FROM pg_roles WHERE rolname = current_user"
        ).fetchone()[0]
    _state["key"] = key
    _state["template"] = name
    return name


def _connect(database: str) -> Any:
    import psycopg

    return psycopg.connect(
        url_of(database).replace("+psycopg", ""), autocommit=True, connect_timeout=5
    )


_TABLES = (
    "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') ORDER BY 1"
)
_SEQUENCES = (
    "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = 'public' AND c.relkind = 'S' ORDER BY 1"
)
# Everything of a database but its rows (and planner statistics).
_FINGERPRINT = """
SELECT md5(string_agg(x, E'\n' ORDER BY x)) FROM (
  SELECT 'rel ' || n.nspname || '.' || c.relname || ' ' || c.relkind::text || ' '
         || coalesce(c.relacl::text, '') || ' ' || c.relpersistence::text || ' '
         || coalesce((SELECT string_agg(a.attname || ':' || format_type(a.atttypid, a.atttypmod)
                              || ':' || a.attnotnull || ':'
                              || coalesce(pg_get_expr(d.adbin, d.adrelid), ''), ','
                              ORDER BY a.attnum)
                      FROM pg_attribute a
                      LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
                      WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped), '')
         || ' ' || CASE WHEN c.relkind = 'i' THEN pg_get_indexdef(c.oid) ELSE '' END
         || ' ' || CASE WHEN c.relkind IN ('v', 'm') THEN pg_get_viewdef(c.oid) ELSE '' END
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
   WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')
     AND n.nspname NOT LIKE 'pg_temp%' AND n.nspname NOT LIKE 'pg_toast_temp%'
  UNION ALL
  SELECT 'con ' || conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(oid)
    FROM pg_constraint WHERE connamespace <> 'pg_catalog'::regnamespace
  UNION ALL
  SELECT 'trg ' || tgrelid::regclass::text || ' ' || tgenabled::text || ' ' || pg_get_triggerdef(oid)
    FROM pg_trigger WHERE NOT tgisinternal
  UNION ALL
  SELECT 'fn ' || p.oid::regprocedure::text || ' ' || md5(pg_get_functiondef(p.oid))
    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
   WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND p.prokind IN ('f', 'p')
  UNION ALL
  SELECT 'ns ' || nspname || ' ' || coalesce(nspacl::text, '') FROM pg_namespace
   WHERE nspname NOT LIKE 'pg_temp%' AND nspname NOT LIKE 'pg_toast_temp%'
  UNION ALL SELECT 'ext ' || extname || ' ' || extversion FROM pg_extension
  UNION ALL SELECT 'pol ' || polrelid::regclass::text || ' ' || polname FROM pg_policy
  UNION ALL SELECT 'rule ' || schemaname || '.' || rulename || ' ' || definition FROM pg_rules
   WHERE schemaname NOT IN ('pg_catalog', 'information_schema')
  UNION ALL SELECT 'type ' || t.typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
   WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')
     AND n.nspname NOT LIKE 'pg_temp%' AND n.nspname NOT LIKE 'pg_toast_temp%'
  UNION ALL SELECT 'set ' || coalesce(setrole::text, '') || ' ' || array_to_string(setconfig, ',')
    FROM pg_db_role_setting
   WHERE setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
  UNION ALL SELECT 'db ' || datconnlimit || ' ' || datallowconn || ' ' || datistemplate || ' '
         || coalesce(datacl::text, '') FROM pg_database WHERE datname = current_database()
) s(x)
"""


def _fingerprint(conn: Any) -> str:
    return str(conn.execute(_FINGERPRINT).fetchone()[0])


_pool: list[str] = []  # emptied clones, ready for the next test


def _take_back(name: str) -> str | None:
    """``name`` cut off, emptied to the template's rows and renamed: the new
    name, or None (dropped) when anything but its rows changed or a step failed."""
    fresh = f"{SESSION}_{secrets.token_hex(4)}"
    try:
        with _admin() as admin:
            for _ in range(50):  # a terminated backend takes a moment to leave
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = %s AND pid <> pg_backend_pid()",
                    (name,),
                )
                try:
                    admin.execute(f'ALTER DATABASE "{name}" RENAME TO "{fresh}"')
                    break
                except Exception:  # noqa: BLE001 - still in use: end it again
                    time.sleep(0.02)
            else:
                raise RuntimeError(f"{name} stays in use")
        with _connect(fresh) as conn:
            if _fingerprint(conn) != _state["fingerprint"]:
                raise RuntimeError("its schema changed")
            with conn.transaction():
                tables: list[str] = _state["tables"]  # type: ignore[assignment]
                if _state["superuser"]:
                    # Row by row with no trigger firing (the log's append-only
                    # ones): a few rows each, where TRUNCATE makes every table
                    # and index a new file (a quarter of a second).
                    conn.execute("SET LOCAL session_replication_role = replica")
                    with conn.pipeline():  # one round trip, not one a table
                        for table in tables:
                            conn.execute(f'DELETE FROM "{table}"')
                else:
                    conn.execute("TRUNCATE " + ", ".join(f'"{t}"' for t in tables))
                for seq in _state["sequences"]:  # type: ignore[attr-defined]
                    conn.execute(f'ALTER SEQUENCE "{seq}" RESTART')
                for table, rows in _state["rows"].items():  # type: ignore[attr-defined]
                    for row in rows:
                        marks = ", ".join(["%s"] * len(row))
                        conn.execute(f'INSERT INTO "{table}" VALUES ({marks})', row)
        return fresh
    except Exception:  # noqa: BLE001 - whatever it was: the clone goes, as before
        _drop(fresh)
        _drop(name)
        return None


def close() -> None:
    """Drop this session's template and the clones kept for reuse (conftest
    calls it at the session's end; the atexit hook is the fallback, which
    pytest-xdist's workers may never reach)."""
    while _pool:
        _drop(_pool.pop())
    name = _state.pop("template", None)
    if isinstance(name, str):
        _drop(name)
    conn = _admins.pop(os.getpid(), None)
    if conn is not None:
        conn.close()


def _drop(name: str) -> None:
    with contextlib.suppress(Exception), _admin() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


_MIGRATED = "migrated"


@contextlib.contextmanager
def database(
    template: str | None = _MIGRATED, *, home: Path | None = None, reuse: bool = False
) -> Iterator[str]:
    """A fresh database of this session, migrated (or empty with ``template=None``);
    dropped on exit, or with ``reuse`` (a migrated one) emptied and kept for
    the next test that asks for one (see the module's docstring).

    Its key file is in ``home`` (the test's own folder: the ``db_url`` fixture
    passes ``tmp_path / "home"``, the ``cli`` fixture's BROKER_HOME), else in a
    temp folder of its own, removed on exit; BROKER_HOME names that folder
    while the database exists, so an in-process ``Operator(store)`` finds the
    key there and nothing is written to the user's broker folder."""
    source = _template()  # also: is the server there at all
    clone = f' TEMPLATE "{source}"' if template == _MIGRATED else ""
    reuse = reuse and bool(clone)
    if reuse and _pool:
        name = _pool.pop()
    else:
        name = f"{SESSION}_{secrets.token_hex(4)}"
        with _admin() as conn:
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
        kept = _take_back(name) if reuse else None
        if kept is None:
            _drop(name)
        else:
            _pool.append(kept)
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
