"""The store on PostgreSQL: the same ``Store`` API over psycopg 3 and its pool.

``Store("postgresql+psycopg://user@host:5432/db")`` returns a ``PgStore``.
Everything above the store is unchanged: the modules run the same catalogue
statements (``Stmt.postgresql``) and the few statements still outside the
catalogue (``?`` placeholders, rewritten once per text here) through the same
``Tx``; rows read by name and by position like ``sqlite3.Row``.

What differs, and why it is invisible to a caller:

- Transactions: writes run at READ COMMITTED (``store.begin_write``); what
  SQLite's single writer gave for free is kept by row locks taken by the
  statements that need them (the space's counter row is locked before a send
  takes its sequence number, so the per-space sequence stays gap-free and in
  commit order; claims select with ``FOR UPDATE SKIP LOCKED``). Reads are a
  REPEATABLE READ READ ONLY snapshot, like SQLite's deferred ``BEGIN``.
- Booleans are stored as SMALLINT 0/1 (``broker.store.dialect``), the values the
  SQLite store returns, so every statement compares them the same way.
- ``numeric`` results (``sum()`` of integers) load as ``int`` when integral,
  as SQLite returns them.
- No file: no writer lock, no WAL, no doorbell folder (wake-ups are
  LISTEN/NOTIFY, ``broker.delivery.pgwake``); the first-open migration is serialised
  by an advisory lock instead of the lock file.

The connection budget (S41): a process holds at most ``pool_size``
connections in its pool (``POOL_SIZE`` unless ``size_pool`` says otherwise;
``broker serve`` sizes it to its threads), keeps one of them open while idle
and closes the others after ``POOL_IDLE_S`` unused, plus ONE listening
connection while anything in it waits (``broker.delivery.pgwake``). Pooled
connections are named ``broker`` in ``pg_stat_activity`` unless the URL names
them. A server at its connection limit refuses a new connection with
``too_many_connections`` (exit 11) at once, not after a wait.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from broker import errors
from broker.store.dbfile import STORE_URLS
from broker.store.sql import Stmt, stmt
from broker.store.sqlite import Store, Tx, shell_word

if TYPE_CHECKING:
    import sqlalchemy as sa

try:
    import psycopg
    from psycopg import pq
    from psycopg.adapt import Dumper
    from psycopg.types.numeric import NumericLoader
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError as exc:  # pragma: no cover - the `pg` extra is not installed
    raise errors.StoreError(
        "PostgreSQL needs psycopg 3 and psycopg_pool: pip install 'swarm-broker[pg]'"
    ) from exc

MIGRATE_LOCK = 0x62726F6B  # pg_advisory_lock key of the first-open migration ("brok")
POOL_SIZE = 8  # pooled connections a process holds at most (``size_pool`` changes it)
POOL_IDLE_S = 30.0  # a pooled connection beyond the first is closed after this long unused
APPLICATION = "broker"  # pooled connections' application_name, unless the URL gives one
CONNECT_TIMEOUT_S = 10
GROW_WAIT_S = 1.0  # a checkout waiting this long asks the server whether it is full
# SQLSTATE 53300 (too_many_connections); a refused connection's text says it
# before the server sends a code psycopg keeps.
_FULL = ("too many connections", "too many clients", "remaining connection slots are reserved")

_BEGIN_WRITE = stmt("store.begin_write").postgresql
_BEGIN_READ = stmt("store.begin_read").postgresql
_COMMIT = stmt("store.commit").postgresql
_ROLLBACK = stmt("store.rollback").postgresql
_MIGRATE_LOCK = stmt("store.migrate_lock")
_LOCK_SPACE = stmt("store.lock_space")
_CLOCK = stmt("store.clock")
_DB_CLOCK = _CLOCK.postgresql
_QMARK = re.compile(r"'(?:[^']|'')*'|\?|%")


def conninfo(url: str) -> str:
    """``postgresql+psycopg://...`` -> the libpq URL psycopg takes."""
    scheme, rest = url.split("://", 1)
    if scheme not in ("postgresql", "postgresql+psycopg", "postgres"):
        raise errors.InvalidInput(f"bad database URL {redacted(url)!r}: {STORE_URLS}", field="url")
    try:  # an unclosed [ or a port that is not one: refused here, in one line
        urlsplit(url).port  # noqa: B018 - read for the check it makes
    except ValueError as exc:
        raise errors.InvalidInput(
            f"bad database URL {redacted(url)!r}: {exc}", field="url"
        ) from None
    return f"postgresql://{rest}"


def redacted(url: str) -> str:
    """The URL without its password, for messages and ``store.path``."""
    try:
        parts = urlsplit(url)
    except ValueError:  # not parsable: hide all between :// and @ (a password may be there)
        scheme, _, rest = url.partition("://")
        return f"{scheme}://***@{rest.rpartition('@')[2]}" if "@" in rest else url
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urlunsplit(parts._replace(netloc=netloc))


def to_pg(sql: str) -> str:
    """A statement for psycopg: a catalogue one's PostgreSQL text, or a plain
    ``?``-placeholder text rewritten (``?`` -> ``%s``, a literal ``%`` doubled)."""
    if isinstance(sql, Stmt):
        # Before the cache: a Stmt equals its SQLite text, which another entry
        # may share with a different PostgreSQL text (store.lock_space).
        return sql.postgresql
    return _rewrite(sql)


@lru_cache(maxsize=4096)
def _rewrite(sql: str) -> str:
    def sub(m: re.Match[str]) -> str:
        text = m.group(0)
        if text == "?":
            return "%s"
        if text == "%":
            return "%%"
        return text.replace("%", "%%")

    return _QMARK.sub(sub, sql)


class PgRow(tuple):  # type: ignore[type-arg]
    """A row read by name (``row["id"]``) or position, and ``dict(row)``: the
    ``sqlite3.Row`` interface the modules use."""

    __slots__ = ()
    _index: dict[str, int] = {}
    _names: tuple[str, ...] = ()

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return tuple.__getitem__(self, self._index[key])
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._names)


@lru_cache(maxsize=1024)
def _row_class(names: tuple[str, ...]) -> type[PgRow]:
    index = {n: i for i, n in enumerate(names)}
    return type("Row", (PgRow,), {"__slots__": (), "_index": index, "_names": names})


def _row_factory(cursor: Any) -> Any:
    desc = cursor.description
    if desc is None:
        return tuple
    return _row_class(tuple(d.name for d in desc))


class _IntegralNumeric(NumericLoader):
    """``sum()`` of integers is ``numeric`` in PostgreSQL: load it as the int
    SQLite returns (a fractional value stays a float)."""

    def load(self, data: Any) -> Any:
        value = super().load(data)
        return int(value) if value == value.to_integral_value() else float(value)


class _BoolSmallint(Dumper):
    """A Python bool is stored as the SMALLINT 0/1 of a boolean column."""

    oid = 21  # int2

    def dump(self, obj: Any) -> bytes:
        return b"1" if obj else b"0"


class PgConn:
    """The DBAPI face ``Tx`` uses (``execute``, ``executemany``, ``in_transaction``)
    over one psycopg connection; every statement is rewritten for psycopg once.

    Each statement is a round trip to the server, the largest part of a write's
    time on PostgreSQL. So what needs no answer waits for the next statement
    that does (``defer``): the transaction's BEGIN, the space's row lock, the
    inserts of a send and its NOTIFY go with the next read or with the COMMIT,
    in one pipeline (psycopg's pipeline mode: sent together, the server runs
    them in order). A send is two round trips, not seven. A deferred
    statement's refusal is raised by the statement it went with (a
    ``StoreError`` as before; the transaction is rolled back the same)."""

    __slots__ = ("conn", "writer_lock", "locked", "pending")

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.writer_lock = None
        self.locked: set[str] = set()  # spaces whose row this transaction holds
        self.pending: list[tuple[str, Any]] = []  # deferred, not yet sent

    # A refused statement is a broker error here, at once, as sqlite3's is one
    # by the time it leaves ``Tx`` on the other dialect: callers that handle a
    # refusal inside the transaction (the importer's row-by-row retry) catch
    # ``StoreError`` on both backends.
    def execute(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> Any:
        if self.pending:
            return self._send_pending((sql, params))[0]
        cur = self.conn.cursor(row_factory=_row_factory)
        try:
            cur.execute(to_pg(sql), params or None)
        except psycopg.Error as exc:
            raise wrap_pg_error(exc) from exc
        return cur

    def defer(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> None:
        """Run ``sql`` with the next statement that is answered (class doc)."""
        self.pending.append((sql, params))

    def defer_many(self, sql: str, rows: Sequence[Any]) -> None:
        """``defer`` of each of ``rows``."""
        self.pending.extend((sql, row) for row in rows)

    def flush(self) -> None:
        """Send what is deferred now (its refusal is raised here)."""
        if self.pending:
            self._send_pending()

    def commit(self) -> None:
        """COMMIT, with what is deferred; nothing at all if nothing but the
        BEGIN was ever asked for."""
        if self.pending == [(_BEGIN_WRITE, ())] or self.pending == [(_BEGIN_READ, ())]:
            self.pending.clear()
        elif self.pending:
            self._send_pending((_COMMIT, ()))
        elif self.in_transaction:
            self.execute(_COMMIT)

    def rollback(self) -> None:
        """Forget what is deferred; ROLLBACK what the server began."""
        self.pending.clear()
        if self.in_transaction:
            self.conn.execute(_ROLLBACK)

    def two(self, first: tuple[str, Any], then: tuple[str, Any]) -> tuple[list[Any], list[Any]]:
        """``Tx.two``: both statements in one pipeline with what is deferred
        (a refusal of any of them raised here), and their rows."""
        a, b = self._send_pending(first, then)
        return a.fetchall(), b.fetchall()

    def _send_pending(self, *answered: tuple[str, Any]) -> list[Any]:
        """What is deferred and then ``answered``, in one pipeline: the
        cursors of ``answered``."""
        pending, self.pending = self.pending, []
        cursors = []
        try:
            with self.conn.pipeline():
                for sql, params in pending:
                    self.conn.execute(to_pg(sql), params or None)
                for sql, params in answered:
                    cur = self.conn.cursor(row_factory=_row_factory)
                    cur.execute(to_pg(sql), params or None)
                    cursors.append(cur)
        except psycopg.Error as exc:
            raise wrap_pg_error(exc) from exc
        return cursors

    def executemany(self, sql: str, rows: Sequence[Any]) -> None:
        self.flush()
        with self.conn.cursor() as cur:
            try:
                cur.executemany(to_pg(sql), rows)
            except psycopg.Error as exc:
                raise wrap_pg_error(exc) from exc

    @property
    def in_transaction(self) -> bool:
        return self.conn.info.transaction_status != pq.TransactionStatus.IDLE

    def close(self) -> None:
        self.conn.close()


def full(exc: BaseException) -> bool:
    """Whether ``exc`` is the server refusing a connection for its connection limit."""
    if (getattr(exc, "sqlstate", None) or "") == "53300":
        return True
    return any(words in str(exc) for words in _FULL)


def too_many_connections(display: str, exc: BaseException) -> errors.TooManyConnections:
    why = " ".join(str(exc).split()).rpartition("FATAL:")[2].strip() or "too many connections"
    return errors.TooManyConnections(
        f"the PostgreSQL server at {display} refused a connection ({why}): retry later, or make "
        "room (fewer processes or smaller pools, or a higher max_connections)"
    )


def wrap_pg_error(exc: BaseException) -> errors.BrokerError:
    """Map a psycopg error (raw or SQLAlchemy-wrapped) to a broker error."""
    orig = getattr(exc, "orig", None) or exc
    text = str(orig).split("\n")[0]
    if "append-only" in text:
        return errors.AppendOnly(text)
    if full(orig):
        return errors.TooManyConnections(f"the PostgreSQL server refused a connection: {text}")
    if isinstance(orig, psycopg.errors.LockNotAvailable | psycopg.errors.QueryCanceled):
        return errors.StoreBusy(f"database stayed locked: {text}")
    if (getattr(orig, "sqlstate", None) or "").startswith("40"):  # deadlock, serialization
        return errors.StoreBusy(f"the database rolled the transaction back, retry it: {text}")
    if isinstance(orig, psycopg.IntegrityError):
        return errors.StoreError(f"integrity error: {text}")
    if isinstance(orig, psycopg.OperationalError):
        return errors.StoreError(f"cannot reach the database: {text}")
    return errors.StoreError(f"database error: {text}")


def _leave_it(dbapi_connection: Any) -> None:
    """SQLAlchemy's COMMIT or ROLLBACK on a broker Tx's connection: the Tx's to do."""


class PgStore(Store):
    """A broker database on a PostgreSQL server (module doc). Thread-safe;
    one per process, shared: a pool of connections (a transaction holds one)."""

    def _place(self, migrate: bool) -> None:
        # S44: the database's clock, read once per process (``pool``), unless a
        # clock was given (tests that move time).
        self._db_clock = not self.clock.given
        self.dialect = "postgresql"
        self.conninfo = conninfo(self.url)
        self.display = self.public_url = redacted(self.url)
        # No file: `path` names the database in messages (and keys per-store state).
        self.path = Path(self.display)
        self.key_path = key_path(self.conninfo)  # the operator key file (S29), in BROKER_HOME
        self.lock_path = ""
        self.read_only = None
        self._target, self._uri = self.conninfo, False
        self.pool_size = POOL_SIZE

    def _reset_connections(self) -> None:
        super()._reset_connections()
        self._pool: ConnectionPool[Any] | None = None
        self._pid = os.getpid()

    def _follow_db_clock(self, conn: PgConn) -> None:
        """S44: this process's time becomes the database's (``SteadyClock.offset``):
        every host judges time and leases by one clock, whatever its own says."""
        wall = self.clock.wall
        before = wall()
        seconds = float(conn.execute(_DB_CLOCK).fetchone()[0])
        here = before + (wall() - before) / 2
        self.clock.offset = datetime.fromtimestamp(seconds, UTC) - here

    # --- connections -------------------------------------------------------------
    def _configure_pg(self, conn: psycopg.Connection[Any]) -> None:
        conn.adapters.register_loader("numeric", _IntegralNumeric)
        conn.adapters.register_dumper(bool, _BoolSmallint)
        # A lock or statement never waits longer than a SQLite writer would.
        conn.execute(f"SET lock_timeout = {int(self.settings.busy_timeout_ms)}")

    def pool(self) -> ConnectionPool[Any]:
        if self._pool is None or self._pid != os.getpid():
            with self._lock:
                if self._pool is None or self._pid != os.getpid():
                    self._pid = os.getpid()
                    # One direct connection first: a server that is not there (or
                    # full) is one line at once, not the pool's retries for its timeout.
                    first = self.connect()
                    try:
                        if self._db_clock:
                            self._follow_db_clock(first)
                    finally:
                        first.close()
                    self._pool = ConnectionPool(
                        self.conninfo,
                        min_size=1,
                        max_size=max(1, self.pool_size),
                        max_idle=POOL_IDLE_S,
                        kwargs={"autocommit": True, "fallback_application_name": APPLICATION},
                        configure=self._configure_pg,
                        timeout=self.settings.busy_timeout_ms / 1000,
                        open=False,
                        name=f"broker-{id(self):x}",
                    )
                    try:
                        self._pool.open(wait=True, timeout=CONNECT_TIMEOUT_S)
                    except Exception as exc:
                        self._pool.close()
                        self._pool = None
                        raise self._why_not(exc, opening=True) from exc
        return self._pool

    def size_pool(self, size: int) -> None:
        """At most ``size`` connections in this process's pool (S41)."""
        self.pool_size = max(1, int(size))
        pool = self._pool
        if pool is not None and self._pid == os.getpid():
            pool.resize(1, self.pool_size)

    def files_to_open(self, threads: int) -> int:
        """Descriptors this store may still open when ``threads`` threads use it
        at once (S41: a server's file budget keeps room for them): a socket per
        pooled connection, the pool bounded by its size, and the direct
        connections beside it (the first one, the LISTEN connection)."""
        pool = self._pool
        opened = pool.get_stats().get("pool_size", 0) if pool is not None else 0
        return max(0, min(threads, self.pool_size) - opened) + 2

    def _why_not(self, exc: BaseException, *, opening: bool = False) -> errors.BrokerError:
        """Why the pool gave no connection: the server refuses one (asked
        directly, so the refusal is the server's own words), or every
        connection of the pool stayed busy past the busy timeout."""
        try:
            self.connect().close()
        except errors.BrokerError as refused:
            return refused
        if isinstance(exc, PoolTimeout) and not opening:
            return errors.StoreBusy(
                f"all {self.pool_size} connections of this process to {self.display} stayed "
                f"busy for {self.settings.busy_timeout_ms / 1000:g} s (BROKER_BUSY_TIMEOUT_MS)"
            )
        return errors.StoreError(f"cannot reach the PostgreSQL store at {self.display}: {exc}")

    def connect(self) -> PgConn:  # type: ignore[override]
        """A new configured connection outside the pool (the caller closes it)."""
        try:
            conn = psycopg.connect(
                self.conninfo,
                autocommit=True,
                connect_timeout=CONNECT_TIMEOUT_S,
                fallback_application_name=APPLICATION,
            )
            self._configure_pg(conn)
        except psycopg.Error as exc:
            if full(exc):
                raise too_many_connections(self.display, exc) from exc
            why = " ".join(str(exc).split())
            raise errors.StoreError(
                f"cannot reach the PostgreSQL store at {self.display}: {why}"
            ) from exc
        return PgConn(conn)

    def _checkout(self) -> tuple[PgConn, bool]:  # type: ignore[override]
        try:
            pool = self.pool()
            wait = self.settings.busy_timeout_ms / 1000
            try:
                return PgConn(pool.getconn(timeout=min(GROW_WAIT_S, wait))), True
            except PoolTimeout:
                if wait <= GROW_WAIT_S:
                    raise
            # None free for a while: if the server refuses the pool a new one,
            # say so now (the pool would retry it until the busy timeout).
            self.connect().close()
            return PgConn(pool.getconn(timeout=wait - GROW_WAIT_S)), True
        except errors.BrokerError:
            raise
        except PoolTimeout as exc:
            raise self._why_not(exc) from exc
        except Exception as exc:
            raise wrap_pg_error(exc) from exc

    def _checkin(self, conn: PgConn, held: bool) -> None:  # type: ignore[override]
        pool = self._pool
        if pool is not None and self._pid == os.getpid():
            pool.putconn(conn.conn)

    @property
    def engine(self) -> Any:
        """A SQLAlchemy engine on the same database (migrations, callers' own SQL)."""
        if self._engine is None:
            import sqlalchemy as sa

            from broker.store.dialect import register_sqlalchemy

            register_sqlalchemy()
            self._engine = sa.create_engine(
                f"postgresql+psycopg://{self.url.split('://', 1)[1]}", poolclass=sa.pool.NullPool
            )
        return self._engine

    def _sa_engine_on(self, raw: Any) -> sa.Engine:
        import sqlalchemy as sa

        from broker.store.dialect import register_sqlalchemy

        register_sqlalchemy()
        engine = sa.create_engine(
            "postgresql+psycopg://",
            creator=lambda: raw.conn,
            poolclass=sa.pool.StaticPool,
            pool_reset_on_return=None,
        )
        # The transaction is the broker Tx's, which commits or rolls it back
        # itself: SQLAlchemy's first connect rolls back whatever it finds (after
        # reading the server's version), which ended ours before the caller's
        # work and the broker's writes joined it ("SAVEPOINT can only be used in
        # transaction blocks"), and its own COMMIT would leave the broker's
        # deferred writes out of it.
        setattr(engine.dialect, "do_rollback", _leave_it)  # noqa: B010 - an instance's own
        setattr(engine.dialect, "do_commit", _leave_it)  # noqa: B010
        return engine

    # --- schema (``Store.ensure_schema``, ``_check_schema``, ``schema_version``) ------
    _NEVER_MIGRATED = ("alembic_version", "does not exist")

    @contextmanager
    def _migration_lock(self) -> Iterator[None]:
        # Concurrent first opens queue on an advisory lock (PostgreSQL's DDL is
        # transactional: the second finds the schema at head once it gets it).
        lock = self.connect()
        try:
            lock.execute(_MIGRATE_LOCK, {"key": MIGRATE_LOCK})
            yield
        finally:
            lock.close()  # ends the session: the advisory lock goes with it

    @staticmethod
    def _wrap_error(exc: BaseException) -> errors.BrokerError:
        return wrap_pg_error(exc)

    _SA_ERRORS = frozenset(
        {"OperationalError", "IntegrityError", "ProgrammingError", "InternalError", "DataError"}
    )

    def _statement_failed(self, exc: BaseException) -> bool:
        return isinstance(exc, psycopg.Error) or type(exc).__name__ in self._SA_ERRORS

    def _no_schema(self) -> errors.BrokerError:
        return errors.StoreNotFound(
            f"no broker schema in the PostgreSQL database {self.display}: create it with "
            "`broker db upgrade` (or `broker space create`)"
        )

    # --- transactions ------------------------------------------------------------
    def lock_space(self, t: Tx, space_id: str) -> None:
        """The row lock on the space's counter row (``Store.lock_space``): taken
        first in every write of a space (before any participant row, so two
        writers never wait on each other in opposite orders), once per
        transaction (a ``PgConn`` lives for one transaction)."""
        raw: PgConn = t.raw  # type: ignore[assignment]
        if space_id not in raw.locked:
            raw.defer(_LOCK_SPACE, {"space_id": space_id})  # answered by the next statement
            raw.locked.add(space_id)

    def now_in(self, t: Tx, space_id: str) -> datetime:
        """The database's clock, read in ``t`` after the space's lock (S44). Each
        process follows that clock only to within a millisecond
        (``_follow_db_clock``), so a write whose time must order it against other
        processes' writes of the space (a reservation granted after an
        overlapping one ended) takes the one clock itself, exactly, and this
        process's clock is moved up to it. A clock a test gives is kept."""
        self.lock_space(t, space_id)
        if not self._db_clock:
            return self.now()
        raw: PgConn = t.raw  # type: ignore[assignment]
        at = datetime.fromtimestamp(float(raw.execute(_CLOCK).fetchone()[0]), UTC)
        self.clock.floor(at)
        return at

    def socket_path(self) -> Path:
        """No folder of the database's here: the socket lives in BROKER_HOME,
        beside the store's key file (``pg-HOST-PORT-DBNAME.sock``)."""
        return home_file(self.conninfo, ".sock")

    def sql_url(self) -> str:
        """The libpq URL psql and pg_dump take (the password hidden), quoted for a shell."""
        import shlex

        return shlex.quote(redacted(self.conninfo))

    def sql_shell(self, query: str) -> str:
        return f"psql {self.sql_url()} -c {shell_word(query)}"

    def data_version(self) -> int:
        """No cheap commit counter on PostgreSQL: wake-ups come by NOTIFY."""
        return 0

    def checkpoint(self) -> tuple[int, int, int]:
        return 0, 0, 0  # the server checkpoints itself

    @contextmanager
    def exclusive(self) -> Iterator[Any]:
        raise errors.StoreError(
            f"not available on PostgreSQL (the store at {self.display}): use the server's tools"
        )
        yield  # pragma: no cover

    def write_now(self) -> None:
        """None: every write here waits for the server (its COMMIT is a round trip)."""
        return None

    @contextmanager
    def _transaction(self, write: bool, now: bool = False) -> Iterator[Tx]:
        raw, held = self._checkout()
        committed: Tx | None = None
        tx: Tx | None = None
        broken = False
        try:
            raw.defer(_BEGIN_WRITE if write else _BEGIN_READ)  # sent with the first statement
            tx = Tx(self, raw, write)  # type: ignore[arg-type]
            try:
                yield tx
            except BaseException as exc:
                broken = not self._pg_rollback(tx)
                if self._statement_failed(exc):
                    raise wrap_pg_error(exc) from exc
                raise
            try:
                if tx._sa is not None and tx._sa.in_transaction():
                    tx._sa.commit()  # its bookkeeping only: raw.commit() is the COMMIT
                raw.commit()
            except Exception as exc:
                broken = not self._pg_rollback(tx)
                raise wrap_pg_error(exc) from exc
            committed = tx
        finally:
            if tx is not None and tx._sa is not None:
                tx._sa.close()
            if broken or raw.conn.closed:
                self._discard(raw)
            else:
                self._checkin(raw, held)
        for fn in committed._after_commit:
            fn()

    def _discard(self, raw: PgConn) -> None:
        pool = self._pool
        try:
            raw.conn.close()
        finally:
            if pool is not None and self._pid == os.getpid():
                pool.putconn(raw.conn)  # the pool replaces a closed connection

    @staticmethod
    def _pg_rollback(tx: Tx) -> bool:
        try:
            if tx._sa is not None and tx._sa.in_transaction():
                tx._sa.rollback()
            tx.raw.rollback()  # a PgConn here: forgets the deferred, rolls back the begun
            return True
        except Exception:  # noqa: BLE001 - the original error is the one to report
            return False

    def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None and self._pid == os.getpid():
            pool.close()
        for engine in self._sa_engines.values():
            engine.dispose()
        if self._engine is not None:
            self._engine.dispose()
        self._engine = None
        self._sa_engines = {}


def key_path(info: str) -> Path:
    """The operator key file of a PostgreSQL store: no file sits beside the
    database, so it lives in BROKER_HOME, named after the server and database
    (``pg-HOST-PORT-DBNAME.operator-key``); BROKER_OPERATOR_KEY overrides it."""
    from broker.store.keys import KEY_SUFFIX

    return home_file(info, KEY_SUFFIX)


def home_file(info: str, suffix: str) -> Path:
    """A file of this host's for the PostgreSQL store ``info`` (its operator key,
    the socket of its ``broker serve``): in BROKER_HOME, named after the server
    and database, ``pg-HOST-PORT-DBNAME`` and ``suffix``."""
    from broker.store.settings import broker_home

    parts = urlsplit(info)
    name = "-".join(
        [parts.hostname or "local", str(parts.port or 5432), parts.path.lstrip("/") or "postgres"]
    )
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name)
    return broker_home() / f"pg-{safe}{suffix}"
