"""The store: connections, pragmas, transactions, error wrapping.

Every write transaction starts with ``BEGIN IMMEDIATE`` (pysqlite's own BEGIN
is off: ``isolation_level=None``), so a transaction that will write takes the
write lock up front and never fails mid-way on a lock upgrade. Reads use a
deferred ``BEGIN`` and see one snapshot. SQLAlchemy engines built here emit
the same from its ``begin`` event.

Hot paths run prepared SQL on the DBAPI connection of the transaction
(``Tx.execute``): SQLAlchemy costs ~3x raw sqlite3 per statement and ~300 ms
to import, too much for a CLI called per tool call, so it is loaded only when
needed: migrations, and ``Tx.connection`` (a SQLAlchemy ``Connection`` in the
same transaction), which is how the caller's own work and the broker's commit
or fail together (spec §Habits).

Writers queue on a kernel lock (``broker.store.writelock``: ``<database>.lock``)
taken right before ``BEGIN IMMEDIATE`` and dropped right after ``COMMIT`` or
``ROLLBACK``, so the next writer is woken the moment the lock is free instead
of sleeping in SQLite's busy handler; readers never take it.

``Store(url, create=False)`` never creates a file: a missing store is one
``StoreError`` line, and a store that cannot be written (a read-only file
system, file or folder) opens read-only (``mode=ro``, or ``immutable=1`` on a
read-only file system when no WAL file is left), its writes refused with the
reason. Read-only commands open stores that way.

Driver errors are wrapped once, here, into ``broker.errors`` classes.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import datetime
from typing import TYPE_CHECKING, Any

from broker import errors
from broker.ids import Clock, SteadyClock, parse_ts
from broker.store import dbfile
from broker.store.dbfile import sqlite_path
from broker.store.migrate import HEAD, OnStep, is_newer, too_new
from broker.store.settings import StoreSettings
from broker.store.sql import Stmt, stmt
from broker.store.writelock import WriterLock

if TYPE_CHECKING:
    from pathlib import Path

    import sqlalchemy as sa

Params = Sequence[Any] | dict[str, Any]
Row = sqlite3.Row  # read by name: row["address"]
Rows = Sequence[dict[str, Any]]  # whole rows by column name: what a table's one writer inserts
MIN_SQLITE = (3, 35, 0)  # UPDATE ... RETURNING
MIGRATE_WAIT_S = 120.0  # the longest a process waits for another's first-open migration
# A connection's files: the database, its WAL, the writer's lock file (S41: a server counts them).
FILES_PER_CONNECTION = 3
# The WAL is checkpointed about every CHECKPOINT_FRAMES pages written (just
# before SQLite's automatic checkpoint at 1,000 would run), counted in commits of the store (all processes, under the writer
# lock): by the writer whose commit is due, after it let go of the lock (see
# Store._transaction). Commits per checkpoint start at CHECKPOINT_EVERY and
# follow the pages per commit each checkpoint measures (a send writes ~11, an
# ack ~3), between the two bounds.
CHECKPOINT_FRAMES = 900
CHECKPOINT_EVERY = 64
CHECKPOINT_EVERY_BOUNDS = (8, 1000)

_BEGIN_WRITE = stmt("store.begin_write")
_NEWEST_AT = stmt("store.newest_at")
_BEGIN_READ = stmt("store.begin_read")
_COMMIT = stmt("store.commit")
_ROLLBACK = stmt("store.rollback")
_SAVEPOINT = stmt("store.savepoint")
_ROLLBACK_TO = stmt("store.rollback_to_savepoint")
_RELEASE = stmt("store.release_savepoint")
_DATA_VERSION = stmt("store.data_version")
_CHECKPOINT = stmt("store.checkpoint_passive")
_SCHEMA_VERSION = stmt("store.schema_version")
_PRAGMAS = [
    stmt("store.wal"),
    stmt("store.wal_autocheckpoint"),
    stmt("store.foreign_keys"),
    stmt("store.recursive_triggers"),
    stmt("store.journal_size_limit"),
]
_SYNCHRONOUS = {"NORMAL": stmt("store.synchronous_normal"), "FULL": stmt("store.synchronous_full")}


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

    __slots__ = ("store", "raw", "write", "_after_commit", "_sa", "checkpoint_due")

    def __init__(self, store: Store, raw: Connection, write: bool) -> None:
        self.store = store
        self.raw = raw
        self.write = write
        self._after_commit: list[Callable[[], None]] = []
        self._sa: sa.Connection | None = None
        # After a ``Store.write_now`` commit: the commits since the last
        # checkpoint when one is due (0: none), for ``Store.checkpoint_after``.
        self.checkpoint_due = 0

    @property
    def connection(self) -> sa.Connection:
        """A SQLAlchemy ``Connection`` inside this same transaction, for the caller's
        own work ("do my work and send the message" commits or fails together)."""
        if self._sa is None:
            self.raw.flush()  # the caller's statements come after ours
            self._sa = self.store._sa_connection(self.raw)
        return self._sa

    # Statements come from the catalogue (``broker.store.sql``); rows are read by name.
    def execute(self, sql: str, params: Params = ()) -> sqlite3.Cursor:
        return self.raw.execute(sql, params)

    def defer(self, sql: str, params: Params = ()) -> None:
        """A write nobody reads an answer of: run at once on SQLite; on
        PostgreSQL sent with the next statement that is answered (one round
        trip for several, ``postgres.PgConn``), its refusal raised there."""
        self.raw.defer(sql, params)

    def defer_many(self, sql: str, rows: Sequence[Params]) -> None:
        """``defer`` of several rows: on SQLite run at once as ``many`` (one
        ``executemany``: ~2 µs a row less than a call each), on PostgreSQL
        each held as ``defer`` holds it."""
        self.raw.defer_many(sql, rows)

    def flush(self) -> None:
        """What ``defer`` holds, sent now (a refusal of it raised here)."""
        self.raw.flush()

    def two(
        self, first: str, first_params: Params, then: str, then_params: Params
    ) -> tuple[list[Any], list[Any]]:
        """Two statements and their rows: on PostgreSQL sent together (with
        what ``defer`` holds), one round trip where they took two. ``then``
        runs whatever ``first`` answers: the caller judges both after."""
        return self.raw.two((first, first_params), (then, then_params))

    def many(self, sql: str, rows: Sequence[Params]) -> None:
        """``executemany`` of ``rows`` (``run_many``)."""
        run_many(self.raw, sql, rows)

    # Typed ``Any``: a few aggregate reads still take columns by position
    # (``row[0]`` of a ``count(*)``); named reads go through ``row``/``rows``.
    def one(self, sql: str, params: Params = ()) -> Any:
        return self.raw.execute(sql, params).fetchone()

    def all(self, sql: str, params: Params = ()) -> list[Any]:
        return self.raw.execute(sql, params).fetchall()

    def rows(self, sql: str, params: Params = ()) -> list[dict[str, Any]]:
        return [dict(r) for r in self.raw.execute(sql, params).fetchall()]

    def row(self, sql: str, params: Params = ()) -> dict[str, Any] | None:
        r = self.raw.execute(sql, params).fetchone()
        return None if r is None else dict(r)

    def savepoint(self) -> None:
        self.raw.execute(_SAVEPOINT)

    def let_go(self, cause: BaseException | None) -> None:
        """``let_go`` of an error the transaction goes on after."""
        let_go(cause)

    def rollback_to_savepoint(self, cause: BaseException | None = None) -> None:
        """Undo the writes since ``savepoint``; ``cause``: the error that undoes
        them, which the transaction outlives (see ``let_go``)."""
        let_go(cause)
        self.raw.execute(_ROLLBACK_TO)
        self.raw.execute(_RELEASE)

    def release_savepoint(self, cause: BaseException | None = None) -> None:
        """Keep the writes since ``savepoint``; ``cause`` as for ``rollback_to_savepoint``."""
        let_go(cause)
        self.raw.execute(_RELEASE)

    def after_commit(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` once the outermost transaction has committed (wake-ups); a
        callable equal to one already pending is not added again."""
        if fn not in self._after_commit:
            self._after_commit.append(fn)


# Frames of a generator or coroutine: clearing one that is suspended would close it.
_SUSPENDABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


def let_go(exc: BaseException | None) -> None:
    """Clear the locals of the frames ``exc`` came up through (and of the errors
    it was raised during). A transaction that goes on after a caught error (a
    savepoint rolled back or released, then more writes and the COMMIT) must
    not meet that error's statements still running: a cursor of a write's
    RETURNING whose rows were not all read keeps its statement in progress for
    as long as a frame holds it, and SQLite refuses to release a savepoint,
    open one or COMMIT past it ("SQL statements in progress"). The error
    itself is often kept longer (a group commit's job answers with it after
    the COMMIT). Its traceback keeps its lines, for a log."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        tb = exc.__traceback__
        while tb is not None:
            frame = tb.tb_frame
            if not frame.f_code.co_flags & _SUSPENDABLE:
                with contextlib.suppress(RuntimeError):  # still running: the catcher's own
                    frame.clear()
            tb = tb.tb_next
        exc = exc.__cause__ or exc.__context__


_stores: weakref.WeakSet[Store] = weakref.WeakSet()
# Connections inherited across fork() are kept referenced, never closed, in the
# child: closing them would drop the parent's POSIX locks on the database.
_inherited: list[Any] = []


def _after_fork_in_child() -> None:
    for store in list(_stores):
        _inherited.append((store._local, store._spare, store._engine, store._sa_engines))
        store._reset_connections()


os.register_at_fork(after_in_child=_after_fork_in_child)


_execute = sqlite3.Connection.execute


class Connection(sqlite3.Connection):
    """A DBAPI connection of the store, with its own view of the writer lock
    (``flock`` locks belong to an open file description: one per connection)."""

    writer_lock: WriterLock | None = None

    def execute(self, sql: str, params: Params = ()) -> sqlite3.Cursor:  # type: ignore[override]
        """A catalogue statement's named values bound by number (``Stmt.numbered``)."""
        if type(params) is dict and type(sql) is Stmt:
            text, values = sql.numbered
            return _execute(self, text, values(params))
        return _execute(self, sql, params)

    def defer(self, sql: str, params: Params = ()) -> None:
        """``Tx.defer``: no round trip to save in-process; run now."""
        self.execute(sql, params)

    def defer_many(self, sql: str, rows: Sequence[Params]) -> None:
        """``Tx.defer_many``: run now, as ``Tx.many``."""
        run_many(self, sql, rows)

    def flush(self) -> None:
        """``Tx.flush``: nothing is ever held."""

    def two(
        self, first: tuple[str, Params], then: tuple[str, Params]
    ) -> tuple[list[Any], list[Any]]:
        """``Tx.two``: one after the other (no round trip to save in-process)."""
        return self.execute(*first).fetchall(), self.execute(*then).fetchall()


def run_many(raw: Any, sql: str, rows: Sequence[Params]) -> None:
    """``executemany`` on ``raw``; a single row through ``execute`` (~15 µs cheaper)."""
    if len(rows) == 1:
        raw.execute(sql, rows[0])
    elif rows:
        raw.executemany(sql, rows)


def shell_word(text: str) -> str:
    """``text`` as one shell word: in double quotes when nothing in it is special
    there (a query's own single quotes stay readable), else shlex's quoting."""
    import shlex

    return f'"{text}"' if not set(text) & set('"$`\\!') else shlex.quote(text)


class Store:
    """A broker database. Thread-safe; create one per process and share it.

    Each thread holds one DBAPI connection (the hot path skips any pool); a
    nested transaction in the same thread takes a spare one.

    A ``postgresql+psycopg://`` URL opens the same store on a PostgreSQL server
    (``broker.store.postgres.PgStore``, imported only then)."""

    def __new__(cls, url: str | None = None, **kwargs: Any) -> Store:
        if cls is Store:
            settings = kwargs.get("settings")
            target = url or (settings.url if settings else None) or os.environ.get("BROKER_URL")
            if target is not None and target.startswith("postgres"):
                from broker.store.postgres import PgStore

                return super().__new__(PgStore)
        return super().__new__(cls)

    def __init__(
        self,
        url: str | None = None,
        *,
        clock: Clock | None = None,
        settings: StoreSettings | None = None,
        migrate: bool = True,
        create: bool = True,
    ) -> None:
        """Open the store at ``url`` (default: ``BROKER_URL``, else the file in
        ``BROKER_HOME``).

        ``create=True`` (write commands) makes the folder (0700) and the file
        (0600) if needed, and ``migrate`` brings the schema to head. With
        ``create=False`` (read-only commands) no file is ever created (no
        database, no lock file): a missing store raises one ``StoreError`` line,
        and ``migrate`` only checks that the schema is at head
        (``SchemaOutOfDate`` otherwise); ``migrate=False`` skips even that
        (``broker db current``, ``broker doctor``). Either way a store that
        cannot be written opens read-only: ``read_only`` is then the reason and
        every write transaction is refused with it."""
        self.settings = settings or StoreSettings.from_env(url)
        self.clock = SteadyClock(clock)  # S44: never back, whatever the process's clock
        self._floored = False  # S44: the clock moved up to the store's newest time yet
        self.url = self.settings.url
        self.create = create
        self._migrating: int | None = None  # the thread running ensure_schema's migration
        self._place(migrate)
        self._reset_connections()
        _stores.add(self)
        if migrate and create and self.read_only is None:
            self.ensure_schema()
        elif migrate:
            self._check_schema()

    def _place(self, migrate: bool) -> None:
        """Where the store is, how messages name it, and whether it may be written
        (``__init__``): here a SQLite file, made if ``create`` (``PgStore._place``)."""
        self.dialect = "sqlite"
        db = sqlite_path(self.url)
        if sqlite3.sqlite_version_info < MIN_SQLITE:
            raise errors.UnsupportedSQLite(
                f"SQLite {sqlite3.sqlite_version} is too old: broker needs >= 3.35 (UPDATE ... RETURNING)"
            )
        self.path = (
            dbfile.prepare(db) if self.create else dbfile.existing(db, allow_empty=not migrate)
        )
        self.display = str(self.path)  # how messages name the store
        self.public_url = self.url  # the URL as printed (PostgreSQL's hides a password)
        self.lock_path = f"{self.path}.lock"
        self.read_only: str | None = dbfile.read_only_reason(self.path)
        if self.read_only is None and not self.create and self.path.stat().st_size == 0:
            # Only inspected (migrate=False): read it as it is, or the WAL
            # pragma would write a header into a file nobody asked to change.
            self.read_only = "it is an empty file, only inspected here"
        self._target, self._uri = str(self.path), False
        if self.read_only is not None:
            self._target, self._uri = dbfile.read_only_uri(self.path), True

    def _reset_connections(self) -> None:
        self._checkpoint_every = CHECKPOINT_EVERY
        self._lock = threading.Lock()  # a fork may have copied it held by another thread
        self._local = threading.local()
        self._spare: list[Connection] = []
        self._live: weakref.WeakSet[Connection] = weakref.WeakSet()
        self._engine: Any = None
        self._sa_engines: dict[int, Any] = {}

    # --- setup -----------------------------------------------------------------
    def _configure(self, conn: sqlite3.Connection) -> None:
        conn.isolation_level = None  # we emit BEGIN ourselves
        conn.row_factory = sqlite3.Row
        # busy_timeout comes from sqlite3.connect(timeout=...).
        if self.read_only is None:
            self._to_wal(conn)
        for pragma in _PRAGMAS[1:]:
            conn.execute(pragma)
        conn.execute(_SYNCHRONOUS[self.settings.synchronous])

    def _to_wal(self, conn: sqlite3.Connection) -> None:
        """``journal_mode = WAL``, retried while another connection holds the
        file. Turning a new file to WAL escalates a read lock to an exclusive
        one, and SQLite answers that with SQLITE_BUSY at once, without its busy
        handler (waiting could deadlock): two processes opening one new file
        together would see "database is locked" before either migrated. The
        loser retries until the winner's conversion is done (then it is a
        no-op), up to the busy timeout."""
        deadline = time.monotonic() + self.settings.busy_timeout_ms / 1000
        pause = 0.001
        while True:
            try:
                conn.execute(_PRAGMAS[0])
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def connect(self, *, wait: bool = True) -> Connection:
        """A new configured DBAPI connection (the caller closes it); ``wait=False``:
        one that never waits for SQLite's locks (busy at once, ``write_now``)."""
        try:
            conn = sqlite3.connect(
                self._target,
                isolation_level=None,
                check_same_thread=False,
                timeout=self.settings.busy_timeout_ms / 1000 if wait else 0.0,
                factory=Connection,
                uri=self._uri,
            )
            self._configure(conn)
            if not self._floored:
                self._floor_clock(conn)
            self._live.add(conn)
        except sqlite3.Error as exc:
            if self.read_only is not None:
                raise errors.StoreError(
                    f"cannot read the store at {self.path}: {self.read_only}, and SQLite "
                    f"cannot open it read-only ({exc})"
                ) from exc
            raise wrap_db_error(exc) from exc
        return conn

    def files_to_open(self, threads: int) -> int:
        """Descriptors this store may still open when ``threads`` threads use it
        at once (S41: a server's file budget keeps room for them): each thread
        holds a connection of its own, of three files (the database, its WAL,
        the writer's lock file; the shared memory is one per process)."""
        return FILES_PER_CONNECTION * max(0, threads - len(self._live))

    def _floor_clock(self, conn: sqlite3.Connection) -> None:
        """S44: this process's time starts no earlier than the newest log row of
        the store (the last one written), so a process started after its clock
        stepped back judges leases from there on, not an hour before. SQLite
        has no clock of its own; its writers share the host. Once per store."""
        self._floored = True
        try:
            row = conn.execute(_NEWEST_AT).fetchone()
        except sqlite3.Error:
            return  # not migrated yet: nothing written, nothing to follow
        if row is not None and row[0]:
            self.clock.floor(parse_ts(row[0]))

    @property
    def engine(self) -> Any:
        """A SQLAlchemy engine on the same file, created on first use (migrations,
        callers' own SQL). Its connections get the same pragmas and BEGIN IMMEDIATE."""
        if self._engine is None:
            import sqlalchemy as sa

            engine = sa.create_engine(f"sqlite:///{self.path}", creator=self.connect)
            sa.event.listen(engine, "begin", _on_begin)
            self._engine = engine
        return self._engine

    def _sa_connection(self, raw: Any) -> sa.Connection:
        """SQLAlchemy on the transaction's own connection ``raw`` (``Tx.connection``):
        a pool of exactly this connection, made once per connection, never reset
        on return: the transaction belongs to the broker's Tx, not to SQLAlchemy."""
        engine = self._sa_engines.get(id(raw))
        if engine is None:
            engine = self._sa_engines[id(raw)] = self._sa_engine_on(raw)
        return engine.connect()

    def _sa_engine_on(self, raw: sqlite3.Connection) -> sa.Engine:
        import sqlalchemy as sa

        engine = sa.create_engine(
            f"sqlite:///{self.path}",
            creator=lambda: raw,
            poolclass=sa.pool.StaticPool,
            pool_reset_on_return=None,
        )
        sa.event.listen(engine, "begin", _on_begin)
        return engine

    # --- schema (both backends: each names its lock, its errors, its empty database) ---
    # What reading the version of a never-migrated database says (every part).
    _NEVER_MIGRATED: tuple[str, ...] = ("no such table",)

    def ensure_schema(self, on_step: OnStep | None = None) -> None:
        """Migrate an empty or older database to head, once (``_migration_lock``);
        cheap when already there. A store not created or writable here is only
        checked. ``on_step`` is told of each revision applied (``migrate.OnStep``)."""
        rev = self.schema_version()
        if rev == HEAD:
            return
        if is_newer(rev):
            raise too_new(self.display, str(rev))
        if self.read_only is not None or not self.create:
            self._check_schema()
            return
        from broker.store.migrate import upgrade

        try:
            with self._migration_lock():
                if self.schema_version() == HEAD:
                    return  # another process migrated it while this one waited
                upgrade(self.engine, on_step=on_step)
                from broker.store import keys

                keys.ensure(self)  # the operator key is made with the store (S29)
        except errors.BrokerError:
            raise
        except Exception as exc:  # alembic wraps driver errors its own way
            raise self._wrap_error(exc) from exc

    @contextmanager
    def _migration_lock(self) -> Iterator[None]:
        # Alembic's SQLite support is not transactional DDL (each migration may
        # commit on its own), so two processes opening one new file must not
        # migrate side by side: the writer lock (its own file description here)
        # serialises them, and the second finds the schema at head once it gets
        # it. Writers of other processes wait meanwhile; this thread's own
        # write transactions (e.g. setting the store up) skip the lock it holds.
        lock = self._writer_lock(create=True)
        try:
            lock.acquire(max(MIGRATE_WAIT_S, self.settings.busy_timeout_ms / 1000))
            self._migrating = threading.get_ident()
            yield
        finally:
            self._migrating = None
            lock.close()  # closing the file description drops the lock

    def _writer_lock(self, *, create: bool) -> WriterLock:
        return WriterLock(self.lock_path, create=create, flock_only=self.settings.writer_flock)

    @staticmethod
    def _wrap_error(exc: BaseException) -> errors.BrokerError:
        return wrap_db_error(exc)

    # SQLAlchemy's wrappers of the driver's errors (a caller's SQL through
    # ``Tx.connection``), known by name: SQLAlchemy is not imported to test them.
    _SA_ERRORS = frozenset({"OperationalError", "IntegrityError"})

    def _statement_failed(self, exc: BaseException) -> bool:
        """Whether ``exc``, raised inside a transaction, is the database refusing a
        statement (wrapped into one ``StoreError`` line) rather than the caller's own."""
        return isinstance(exc, sqlite3.Error) or type(exc).__name__ in self._SA_ERRORS

    def _no_schema(self) -> errors.BrokerError:
        """The refusal of a database with no broker schema (``_check_schema``)."""
        return errors.StoreNotFound(dbfile.NO_STORE.format(path=self.path))

    def _check_schema(self) -> None:
        """A store that is not migrated here (read-only) must already be at head."""
        rev = self.schema_version()
        if rev is None:
            raise self._no_schema()
        if is_newer(rev):
            raise too_new(self.display, rev)
        if rev != HEAD:
            raise errors.SchemaOutOfDate(
                f"the store at {self.display} has schema {rev}, this broker needs {HEAD}: "
                "run `broker db upgrade`"
            )

    def schema_version(self) -> str | None:
        try:
            with self.read() as tx:
                row = tx.one(_SCHEMA_VERSION)
        except errors.StoreError as exc:
            if all(part in exc.message for part in self._NEVER_MIGRATED):
                return None  # an empty database: never migrated
            raise
        return row[0] if row else None

    def now_in(self, t: Tx, space_id: str) -> datetime:
        """The store's time for a write of one space, read after the space's lock
        (S44): later than every write of the space that committed before it.
        SQLite's writers share the host's clock and queue on one lock: ``now()``.
        The PostgreSQL store reads the database's clock in ``t``."""
        self.lock_space(t, space_id)
        return self.now()

    def lock_space(self, t: Tx, space_id: str) -> None:
        """Make the writers of one space queue behind each other from here to the
        end of ``t`` (the per-space sequence is gap-free and in commit order, a
        check-then-insert cannot race). On SQLite ``BEGIN IMMEDIATE`` already
        serialises every writer of the file: nothing to do, no round trip. The
        PostgreSQL store locks the space's counter row (``broker.store.postgres``)."""

    def socket_path(self) -> Path:
        """Where ``broker serve`` listens by default: ``broker.sock`` beside the database."""
        return self.path.parent / "broker.sock"

    # --- the engine's own SQL client ------------------------------------------------
    def sql_url(self) -> str:
        """What the engine's own tools take to open this store, quoted for a shell."""
        import shlex

        return shlex.quote(str(self.path))

    def sql_shell(self, query: str) -> str:
        """The shell command that runs ``query`` in the engine's own SQL client."""
        return f"sqlite3 {self.sql_url()} {shell_word(query)}"

    # --- time --------------------------------------------------------------------
    def now(self) -> datetime:
        """The store's time (S44): the clock given, or the process's, never going back."""
        return self.clock()

    def now_ts(self) -> str:
        return self.clock.stamp()

    # --- transactions -------------------------------------------------------------
    def write(self, tx: Tx | None = None) -> AbstractContextManager[Tx]:
        """A write transaction (BEGIN IMMEDIATE), or join ``tx`` if given."""
        if tx is not None:
            if not tx.write:
                raise errors.StoreError("cannot write inside a read transaction")
            return nullcontext(tx)  # the outer transaction commits or rolls back
        return self._transaction(write=True)

    def read(self, tx: Tx | None = None) -> AbstractContextManager[Tx]:
        """A read snapshot (deferred BEGIN), or reuse ``tx`` if given."""
        if tx is not None:
            return nullcontext(tx)
        return self._transaction(write=False)

    def write_now(self) -> AbstractContextManager[Tx] | None:
        """A write transaction that begins only if it can without waiting: the
        writer lock and SQLite's write lock both free, else ``WriterTaken`` as
        it is entered, before anything ran. For a caller that must never
        block, a server's event loop (its group committer). It runs on a
        connection of this thread's that never waits for a lock, and leaves a
        checkpoint its commit makes due (a few milliseconds of I/O) to the
        caller: ``Tx.checkpoint_due``, for ``checkpoint_after`` in a thread
        that may wait. None on a store whose every write waits (PostgreSQL:
        the COMMIT is a round trip to the server)."""
        return self._transaction(write=True, now=True)

    transaction = write  # the public name for "my work and the broker's, together"

    def size_pool(self, size: int) -> None:
        """At most ``size`` connections in this process's pool (PostgreSQL's
        connection budget, S41). A SQLite store keeps one connection per
        thread that uses it: nothing to size."""

    def data_version(self) -> int:
        """``PRAGMA data_version`` on this thread's connection: it changes when
        another connection commits. A few microseconds, no lock, no transaction."""
        raw, held = self._checkout()
        try:
            return int(raw.execute(_DATA_VERSION).fetchone()[0])
        finally:
            self._checkin(raw, held)

    def checkpoint(self) -> tuple[int, int, int]:
        """A PASSIVE WAL checkpoint (never waits for anyone): (busy, wal frames,
        frames checkpointed). Waiters run it when the database is idle, so the
        WAL is folded back between bursts, not only every 1000 pages."""
        raw, held = self._checkout()
        try:
            busy, log, done = raw.execute(_CHECKPOINT).fetchone()
            return int(busy), int(log), int(done)
        finally:
            self._checkin(raw, held)

    @contextmanager
    def exclusive(self) -> Iterator[Connection]:
        """A fresh connection, outside any transaction, with the writer lock held:
        for statements that cannot run inside one (``VACUUM``, a ``TRUNCATE``
        checkpoint), even with ``BROKER_WRITER_LOCK=off``: the writers that take the
        lock wait on it meanwhile (the others, in SQLite's busy handler); readers go on."""
        if self.read_only is not None:
            raise errors.StoreError(f"cannot write to the store at {self.path}: {self.read_only}")
        conn = self.connect()
        lock = self._writer_lock(create=self.create)
        try:
            held = lock.acquire(self.settings.busy_timeout_ms / 1000)
            try:
                yield conn
            except sqlite3.Error as exc:
                raise wrap_db_error(exc) from exc
            finally:
                if held:
                    lock.release()
        finally:
            lock.close()
            conn.close()

    def _checkout(self) -> tuple[Connection, bool]:
        held: Connection | None = getattr(self._local, "conn", None)
        if held is None:
            held = self._local.conn = self.connect()
            self._local.busy = False
        if not self._local.busy:
            self._local.busy = True
            return held, True
        with self._lock:
            spare = self._spare.pop() if self._spare else None
        return (spare or self.connect()), False

    def _checkin(self, conn: Connection, held: bool) -> None:
        if held:
            self._local.busy = False
        else:
            with self._lock:
                self._spare.append(conn)

    def _checkout_now(self) -> Connection:
        """This thread's connection for ``write_now`` (one that never waits)."""
        if getattr(self._local, "now_busy", False):  # a write_now inside another
            raise errors.WriterTaken(f"a write is already open here ({self.path})")
        conn: Connection | None = getattr(self._local, "now", None)
        if conn is None:
            conn = self._local.now = self.connect(wait=False)
        self._local.now_busy = True
        return conn

    @contextmanager
    def _transaction(self, write: bool, now: bool = False) -> Iterator[Tx]:
        if write and self.read_only is not None:
            raise errors.StoreError(f"cannot write to the store at {self.path}: {self.read_only}")
        raw, held = (self._checkout_now(), False) if now else self._checkout()
        committed: Tx | None = None
        tx: Tx | None = None
        lock: WriterLock | None = None
        since = 0  # commits since the last checkpoint, when this one is due
        try:
            if write and self.settings.writer_lock and self._migrating != threading.get_ident():
                lock = raw.writer_lock
                if lock is None:
                    lock = raw.writer_lock = self._writer_lock(create=self.create)
                if not lock.acquire(None if now else self.settings.busy_timeout_ms / 1000):
                    lock = None  # no lock file: SQLite's busy handler alone
            try:
                raw.execute(_BEGIN_WRITE if write else _BEGIN_READ)
            except sqlite3.Error as exc:
                error = wrap_db_error(exc)
                if now and isinstance(error, errors.StoreBusy):
                    raise errors.WriterTaken(f"the store is being written ({self.path})") from exc
                raise error from exc
            tx = Tx(self, raw, write)
            try:
                yield tx
            except BaseException as exc:
                self._rollback(tx)
                if self._statement_failed(exc):
                    raise wrap_db_error(exc) from exc
                raise
            try:
                if tx._sa is not None and tx._sa.in_transaction():
                    tx._sa.commit()  # the caller used tx.connection: SQLAlchemy commits for both
                if raw.in_transaction:
                    raw.execute(_COMMIT)
            except Exception as exc:
                self._rollback(tx)
                raise wrap_db_error(exc) from exc
            committed = tx
            if lock is not None:
                since = lock.count_commit(self._checkpoint_every)
        finally:
            if lock is not None:
                lock.release()  # right after COMMIT / ROLLBACK: the next writer goes
            if tx is not None and tx._sa is not None:
                tx._sa.close()
            if now:
                self._local.now_busy = False
            else:
                self._checkin(raw, held)
        for fn in committed._after_commit:
            fn()
        if now:
            committed.checkpoint_due = since
        elif since:
            self.checkpoint_after(since)

    def checkpoint_after(self, since: int) -> None:
        """The checkpoint a commit made due, ``since`` commits after the last.

        SQLite's own checkpoint runs inside a COMMIT, so under the writer
        lock, and waits for two fsyncs: ~5 ms on a busy disk, every writer
        queued behind it. Run after the lock is free and the wake-ups are out,
        it holds up only its caller (PASSIVE: never waits for readers or other
        writers). SQLite's automatic one stays, just past it, for writers
        without the lock file."""
        with contextlib.suppress(errors.BrokerError, sqlite3.Error):
            frames = self.checkpoint()[1]  # the WAL's pages since it restarted
            low, high = CHECKPOINT_EVERY_BOUNDS
            per_commit = max(1.0, frames / since)  # more if a reader held the WAL
            every = int(CHECKPOINT_FRAMES / per_commit)
            now = self._checkpoint_every  # at most halved or doubled at a time
            self._checkpoint_every = min(high, 2 * now, max(low, now // 2, every))

    @staticmethod
    def _rollback(tx: Tx) -> None:
        try:
            if tx._sa is not None and tx._sa.in_transaction():
                tx._sa.rollback()
            if tx.raw.in_transaction:
                tx.raw.execute(_ROLLBACK)
        except Exception:  # noqa: BLE001 - the original error is the one to report
            pass

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        now = getattr(self._local, "now", None)
        for c in [x for x in (conn, now) if x is not None] + self._spare:
            if c.writer_lock is not None:
                c.writer_lock.close()
            c.close()
        if self._engine is not None:
            self._engine.dispose()
        self._reset_connections()


def _on_begin(conn: sa.Connection) -> None:
    raw = conn.connection.driver_connection
    if raw is not None and raw.in_transaction:
        return  # SQLAlchemy autobegins inside a broker transaction: already begun
    # Outside a broker Tx (migrations, the caller's own engine use): writes
    # take the lock up front, so two processes migrating one file serialize.
    read = conn.get_execution_options().get("broker_read")
    conn.exec_driver_sql(str(_BEGIN_READ if read else _BEGIN_WRITE))
