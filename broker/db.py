"""The store: one engine per database, pragmas, transactions, error wrapping.

Every write transaction starts with ``BEGIN IMMEDIATE`` (pysqlite's own BEGIN
is off; we emit ours from SQLAlchemy's ``begin`` event), so a transaction that
will write takes the write lock up front and never fails mid-way on a lock
upgrade. Reads use a deferred ``BEGIN`` and see one snapshot.

Hot paths run prepared SQL on the DBAPI connection of the transaction
(``Tx.execute``); the caller's own work can use ``Tx.connection`` (a SQLAlchemy
``Connection``) in the same transaction, which is how "do my work and send the
message" commits or fails together (DESIGN §7).

Driver errors are wrapped once, here, into ``broker.errors`` classes.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import make_url

from broker import errors
from broker.dialect import MIN_SQLITE
from broker.ids import Clock, fmt_ts, system_clock
from broker.migrations import HEAD
from broker.settings import StoreSettings

Params = Sequence[Any] | dict[str, Any]


def wrap_db_error(exc: BaseException) -> errors.BrokerError:
    """Map a driver error (raw or SQLAlchemy-wrapped) to a broker error."""
    orig = getattr(exc, "orig", None) or exc
    text = str(orig)
    if "append-only" in text:
        return errors.AppendOnly(text.split("\n")[0])
    if "database is locked" in text or "database is busy" in text:
        return errors.StoreBusy(f"database stayed locked: {text}")
    if isinstance(orig, sqlite3.IntegrityError):
        return errors.StoreError(f"integrity error: {text}")
    return errors.StoreError(f"database error: {text}")


class Tx:
    """One open transaction. Pass it as ``tx=`` to join broker writes to it."""

    __slots__ = ("store", "connection", "raw", "write", "_after_commit", "__weakref__")

    def __init__(self, store: Store, connection: sa.Connection, write: bool) -> None:
        self.store = store
        self.connection = connection
        self.raw: Any = connection.connection.driver_connection
        self.write = write
        self._after_commit: list[Callable[[], None]] = []

    def execute(self, sql: str, params: Params = ()) -> Any:
        return self.raw.execute(sql, params)

    def one(self, sql: str, params: Params = ()) -> Any:
        return self.raw.execute(sql, params).fetchone()

    def all(self, sql: str, params: Params = ()) -> list[Any]:
        rows: list[Any] = self.raw.execute(sql, params).fetchall()
        return rows

    def rows(self, sql: str, params: Params = ()) -> list[dict[str, Any]]:
        cur = self.raw.execute(sql, params)
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]

    def row(self, sql: str, params: Params = ()) -> dict[str, Any] | None:
        cur = self.raw.execute(sql, params)
        r = cur.fetchone()
        if r is None:
            return None
        return dict(zip([d[0] for d in cur.description], r, strict=True))

    def after_commit(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` once the outermost transaction has committed (wake-ups)."""
        self._after_commit.append(fn)


_stores: weakref.WeakSet[Store] = weakref.WeakSet()
# Connections inherited across fork() are kept referenced, never closed, in the
# child: closing them would drop the parent's POSIX locks on the database.
_inherited: list[Any] = []


def _after_fork_in_child() -> None:
    # A pooled connection must never be used on both sides of fork(): the child
    # drops the parent's pool (and this thread's held connection) unclosed.
    for store in list(_stores):
        _inherited.append(store._local)
        store._local = threading.local()
        store.engine.dispose(close=False)


os.register_at_fork(after_in_child=_after_fork_in_child)


class Store:
    """A broker database. Thread-safe; create one per process and share it."""

    def __init__(
        self,
        url: str | None = None,
        *,
        clock: Clock | None = None,
        settings: StoreSettings | None = None,
        migrate: bool = True,
    ) -> None:
        self.settings = settings or StoreSettings.from_env(url)
        self.clock: Clock = clock or system_clock
        self.url = make_url(self.settings.url)
        self.dialect = self.url.get_backend_name()
        if self.dialect != "sqlite":
            raise errors.StoreError(f"unsupported database {self.dialect!r}: only sqlite for now")
        if sqlite3.sqlite_version_info < MIN_SQLITE:
            raise errors.UnsupportedSQLite(
                f"SQLite {sqlite3.sqlite_version} is too old: broker needs >= 3.35 (UPDATE ... RETURNING)"
            )
        self.path = self._prepare_file()
        self.engine = sa.create_engine(
            self.url,
            connect_args={"check_same_thread": False, "isolation_level": None},
            pool_size=8,
            max_overflow=64,
        )
        event.listen(self.engine, "connect", self._on_connect)
        event.listen(self.engine, "begin", self._on_begin)
        self._local = threading.local()
        _stores.add(self)
        if migrate:
            self.ensure_schema()

    # --- setup -----------------------------------------------------------------
    def _prepare_file(self) -> Path | None:
        db = self.url.database
        if not db or db == ":memory:":
            raise errors.InvalidInput("broker needs a database file, not an in-memory database")
        path = Path(db).expanduser().absolute()
        folder = path.parent
        if not folder.exists():
            folder.mkdir(parents=True, mode=0o700)
            os.chmod(folder, 0o700)  # mkdir's mode is filtered by the umask
        if not path.exists():
            fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
            os.close(fd)
            os.chmod(path, 0o600)
        return path

    def _on_connect(self, dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {int(self.settings.busy_timeout_ms)}")
        cur.execute("PRAGMA journal_mode = WAL")
        cur.execute(f"PRAGMA synchronous = {self.settings.synchronous}")
        cur.execute("PRAGMA foreign_keys = ON")
        # Bound the WAL on disk after checkpoints (DESIGN §4 Checkpoints).
        cur.execute("PRAGMA journal_size_limit = 67108864")
        cur.close()

    @staticmethod
    def _on_begin(conn: sa.Connection) -> None:
        raw = conn.connection.driver_connection
        if raw is not None and raw.in_transaction:
            return  # SQLAlchemy autobegins inside a broker transaction: already begun
        mode = "BEGIN" if conn.get_execution_options().get("broker_read") else "BEGIN IMMEDIATE"
        conn.exec_driver_sql(mode)

    def ensure_schema(self) -> None:
        """Migrate an empty or older database to head; cheap when already there."""
        if self.schema_version() == HEAD:
            return
        from broker.migrations import upgrade

        try:
            upgrade(self.engine)
        except errors.BrokerError:
            raise
        except Exception as exc:  # alembic wraps driver errors its own way
            raise wrap_db_error(exc) from exc

    def schema_version(self) -> str | None:
        try:
            with self.read() as tx:
                row = tx.one("SELECT version_num FROM alembic_version")
        except errors.StoreError:
            return None
        return row[0] if row else None

    # --- time --------------------------------------------------------------------
    def now(self) -> datetime:
        return self.clock()

    def now_ts(self) -> str:
        return fmt_ts(self.clock())

    # --- transactions -------------------------------------------------------------
    @contextmanager
    def write(self, tx: Tx | None = None) -> Iterator[Tx]:
        """A write transaction (BEGIN IMMEDIATE), or join ``tx`` if given."""
        if tx is not None:
            if not tx.write:
                raise errors.StoreError("cannot write inside a read transaction")
            yield tx
            return
        with self._transaction(write=True) as t:
            yield t

    @contextmanager
    def read(self, tx: Tx | None = None) -> Iterator[Tx]:
        """A read snapshot (deferred BEGIN), or reuse ``tx`` if given."""
        if tx is not None:
            yield tx
            return
        with self._transaction(write=False) as t:
            yield t

    transaction = write  # the public name for "my work and the broker's, together"

    def _checkout(self) -> tuple[sa.Connection, bool]:
        """This thread's held connection, or a pooled one if it is busy (nested use).

        Holding one connection per thread skips the pool on the hot path."""
        held: sa.Connection | None = getattr(self._local, "conn", None)
        if held is not None and not getattr(self._local, "busy", False):
            self._local.busy = True
            return held, True
        try:
            conn = self.engine.connect()
        except Exception as exc:
            raise wrap_db_error(exc) from exc
        if held is None:
            self._local.conn = conn
            self._local.busy = True
            return conn, True
        return conn, False

    def _checkin(self, conn: sa.Connection, held: bool) -> None:
        if held:
            self._local.busy = False
        else:
            conn.close()

    @contextmanager
    def _transaction(self, write: bool) -> Iterator[Tx]:
        conn, held = self._checkout()
        raw = conn.connection.driver_connection
        assert raw is not None
        committed: Tx | None = None
        try:
            try:
                # Begun on the DBAPI connection: SQLAlchemy's begin costs more than
                # the statement. Caller SQL on tx.connection joins via _on_begin.
                raw.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            except Exception as exc:
                raise wrap_db_error(exc) from exc
            tx = Tx(self, conn, write)
            try:
                yield tx
            except BaseException as exc:
                self._rollback(conn, raw)
                if isinstance(exc, (sqlite3.Error, sa.exc.DBAPIError)):
                    raise wrap_db_error(exc) from exc
                raise
            try:
                if conn.in_transaction():
                    conn.commit()  # the caller used tx.connection: let SQLAlchemy close its side
                if raw.in_transaction:
                    raw.execute("COMMIT")
            except Exception as exc:
                self._rollback(conn, raw)
                raise wrap_db_error(exc) from exc
            committed = tx
        finally:
            self._checkin(conn, held)
        for fn in committed._after_commit:
            fn()

    @staticmethod
    def _rollback(conn: sa.Connection, raw: Any) -> None:
        try:
            if conn.in_transaction():
                conn.rollback()
            if raw.in_transaction:
                raw.execute("ROLLBACK")
        except Exception:  # noqa: BLE001 - the original error is the one to report
            pass

    def close(self) -> None:
        self.engine.dispose()
