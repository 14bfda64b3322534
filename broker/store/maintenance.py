"""Operations on a store: ``doctor`` (what is wrong, and the command that fixes
it), an online ``backup``, ``vacuum``.

``doctor`` reads; it never writes nor creates a file, so it diagnoses a store
in any state: missing, empty, behind or ahead of this broker, read-only, its
operator key file gone. Each check is one ``Finding`` with a severity and, when
something is to be fixed, the command that fixes it; a check that cannot run
is itself a finding, never a traceback. What it reads is file metadata,
pragmas and counts, never message content: whoever can read the database file
can compute all of it, so it needs no operator key (which is how it can report
a missing one).

``backup`` copies the database online through SQLite's backup API from one
read snapshot (writers go on meanwhile), a few MiB per step so a progress bar
can follow, into a temp file beside the target; the copy is integrity-checked
before it is renamed into place, and the operator key file is copied beside
it, so the backup is a store that opens as it is.

``vacuum`` folds the WAL back, rewrites the database without its free pages
and cuts the WAL, under the writer lock (readers go on; writers wait).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

from broker import errors
from broker.envvars import expand
from broker.record_type import DOCSTRINGS, record
from broker.store import writelock
from broker.store.dbfile import sqlite_path
from broker.store.filenames import check_writable_target
from broker.store.keys import KEY_ENV, KEY_SUFFIX  # the operator key (S29): its file and variable
from broker.store.migrate import HEAD, UPGRADE_BROKER, is_newer
from broker.store.runfiles import fsync_path
from broker.store.settings import StoreSettings
from broker.store.sql import stmts
from broker.store.sqlite import Store, wrap_db_error

Severity = Literal["ok", "info", "warning", "error"]
Progress = Callable[[int, int], None]  # (pages copied, pages in all)

BACKUP_STEP_PAGES = 1024  # 4 MiB at the default page size: a progress bar moves
FREE_SHARE = 0.25  # free pages past this share of the file (and 1 MiB): vacuum pays
FREE_MIN_BYTES = 1 << 20

# `broker doctor` exit codes: clean, warnings, errors (README, exit codes).
EXIT = {"ok": 0, "info": 0, "warning": 8, "error": 9}

_SQL = stmts(
    "store",
    "begin_read",
    "commit",
    "schema_version",
    "journal_mode",
    "quick_check",
    "integrity_check",
    "compile_options",
    "page_size",
    "page_count",
    "freelist_count",
    "journal_size_limit_value",
    "json_probe",
    "checkpoint_truncate",
    "vacuum",
)
_OPS = stmts(
    "ops",
    "expired_leases",
    "quarantined_by_space",
    "spaces_count",
    "orphans",
    "pg_server",
    "pg_text",
    "pg_connections",
    "pg_size",
)

# --- what doctor, backup and vacuum return (re-exported by broker.model.records) ----------


@record
class Finding:
    """One check of ``broker doctor``."""

    __pydantic_config__ = DOCSTRINGS

    check: str
    """what was checked: sqlite, journal_mode, wal, schema, integrity, file, doorbells, leases,
    quarantine, size, settings, scratch (a temporary copy left behind), guard (the git hook);
    on PostgreSQL server, text and connections in place of the file's own (sqlite to wal,
    integrity, doorbells)"""
    severity: Literal["ok", "info", "warning", "error"]
    message: str
    fix: str | None
    """the command (or step) that fixes it; None when there is nothing to fix"""
    path: str | None = None
    data: dict[str, Any] | None = None
    """the measured values behind the message"""


@record
class BackupResult:
    __pydantic_config__ = DOCSTRINGS

    path: str
    bytes: int
    pages: int
    schema: str | None
    integrity: str
    """the copy's integrity check: "ok" (a copy that fails it is never kept)"""
    key_file: str | None
    """where the operator key file was copied beside the backup, if the store has one"""
    seconds: float


@record
class VacuumResult:
    __pydantic_config__ = DOCSTRINGS

    path: str
    bytes_before: int
    """database + WAL, before"""
    bytes_after: int
    seconds: float


def exit_code(findings: Iterable[Finding]) -> int:
    """0 when every finding is ok or info, 8 with a warning, 9 with an error."""
    return max((EXIT[f.severity] for f in findings), default=0)


# --- doctor -------------------------------------------------------------------------------
def doctor(target: Store | str | None = None) -> list[Finding]:
    """Every check of the store ``target`` (a ``Store``, a URL, or None for the
    default store), worst first within nothing: in the order they run."""
    if isinstance(target, Store):
        return list(_checks(target))
    try:
        store = Store(target, create=False, migrate=False)
    except errors.BrokerError as exc:
        fix = "broker db upgrade" if isinstance(exc, errors.StoreNotFound) else None
        return [Finding("store", "error", exc.message, fix, _path_of(target))]
    try:
        return list(_checks(store))
    finally:
        store.close()


def _path_of(url: str | None) -> str | None:
    try:
        return sqlite_path(StoreSettings.from_env(url).url)
    except errors.BrokerError:
        return None


def _checks(store: Store) -> Iterator[Finding]:
    pg = store.dialect == "postgresql"
    found = list(_guard("store", lambda: _store_mode(store)))
    yield from found
    if pg and found[0].severity == "error":  # no server to ask: one line, not one per check
        yield from _guard("settings", lambda: _settings(store))
        return
    if pg:  # the server's own checks: no file, WAL or pragma of ours to look at
        yield from _guard("server", lambda: _pg_server(store))
        yield from _guard("text", lambda: _pg_text(store))
        yield from _guard("connections", lambda: _pg_connections(store))
    else:
        yield from _guard("sqlite", lambda: _sqlite(store))
        yield from _guard("journal_mode", lambda: _journal_mode(store))
        yield from _guard("wal", lambda: _wal(store))
    rev: list[str | None] = []
    yield from _guard("schema", lambda: _schema(store, rev))
    if pg:
        yield from _guard("file", lambda: _pg_key_file(store))
    else:
        yield from _guard("integrity", lambda: _integrity(store))
        yield from _guard("file", lambda: _files(store))
        yield from _guard("doorbells", lambda: _doorbells(store))
    yield from _guard("scratch", lambda: _scratch(store))
    if rev and rev[0] == HEAD:
        yield from _guard("leases", lambda: _leases(store))
        yield from _guard("quarantine", lambda: _quarantine(store))
        yield from _guard("references", lambda: _references(store))
    else:
        yield Finding(
            "leases",
            "info",
            "leases, quarantine and references not checked: the schema is not at head",
            None,
        )
    yield from _guard("size", lambda: _pg_size(store) if pg else _size(store))
    yield from _guard("settings", lambda: _settings(store))


def _guard(check: str, fn: Callable[[], Iterable[Finding]]) -> Iterator[Finding]:
    """A check that fails is a finding of its own, and the others still run."""
    try:
        found = list(fn())
    except errors.BrokerError as exc:
        found = [Finding(check, "error", f"could not check: {exc.message}", None)]
    except (OSError, sqlite3.Error) as exc:
        found = [Finding(check, "error", f"could not check: {wrap_db_error(exc).message}", None)]
    yield from found


def _store_mode(store: Store) -> Iterator[Finding]:
    if store.dialect == "postgresql":
        try:
            store.connect().close()
        except errors.StoreError as exc:
            missing = "does not exist" in exc.message
            fix = (
                "create the database (the broker makes its tables, not the database): "
                "createdb NAME as its owner, then broker db upgrade"
                if missing
                else "start the server, or check the host, port and user in BROKER_URL"
            )
            yield Finding("store", "error", exc.message, fix, store.display)
            return
    if store.read_only is None:
        yield Finding("store", "ok", f"store at {store.display}", None, store.display)
    else:
        yield Finding(
            "store",
            "warning",
            f"the store at {store.display} can only be read: {store.read_only}",
            "run broker from a user that can write it, or `broker backup PATH` to a writable folder",
            store.display,
        )


def _sqlite(store: Store) -> Iterator[Finding]:
    with store.read() as t:
        options = [str(r["compile_options"]) for r in t.all(_SQL["compile_options"])]
        try:
            has_json = bool(t.one(_SQL["json_probe"])["ok"])
        except sqlite3.Error:
            has_json = False
    data = {
        "version": sqlite3.sqlite_version,
        "threadsafety": sqlite3.threadsafety,
        "compile_options": options,
    }
    text = f"SQLite {sqlite3.sqlite_version}, {len(options)} compile options"
    if not has_json:
        yield Finding(
            "sqlite",
            "error",
            f"{text}: no JSON functions (json_each), which the broker's statements use",
            "use a Python whose SQLite is 3.38 or newer (or built with JSON1)",
            data=data,
        )
    elif sqlite3.threadsafety == 0:
        yield Finding(
            "sqlite",
            "error",
            f"{text}, built without thread safety (THREADSAFE=0)",
            "use a Python whose SQLite is built thread-safe",
            data=data,
        )
    else:
        yield Finding("sqlite", "ok", text, None, data=data)


def _journal_mode(store: Store) -> Iterator[Finding]:
    with store.read() as t:
        mode = str(t.one(_SQL["journal_mode"])["journal_mode"]).lower()
    if mode == "wal":
        yield Finding("journal_mode", "ok", "WAL journal mode", None)
    elif store.read_only is not None:
        yield Finding(
            "journal_mode", "info", f"journal mode {mode}: the store is read as immutable", None
        )
    else:
        yield Finding(
            "journal_mode",
            "error",
            f"journal mode is {mode}, not WAL: readers and writers block each other",
            "broker db upgrade",
        )


def _wal(store: Store) -> Iterator[Finding]:
    wal = Path(f"{store.path}-wal")
    size = _file_size(wal)
    with store.read() as t:
        limit = int(t.one(_SQL["journal_size_limit_value"])["journal_size_limit"])
    data = {"bytes": size, "limit_bytes": limit}
    if size > limit > 0:
        yield Finding(
            "wal",
            "warning",
            f"the WAL is {_mib(size)}, over its {_mib(limit)} limit: a long reader kept it "
            "from being folded back",
            "broker vacuum",
            str(wal),
            data,
        )
    else:
        yield Finding("wal", "ok", f"WAL {_mib(size)} (limit {_mib(limit)})", None, str(wal), data)


def _schema(store: Store, out: list[str | None]) -> Iterator[Finding]:
    rev = store.schema_version()
    out.append(rev)
    data = {"current": rev, "head": HEAD}
    if rev == HEAD:
        yield Finding("schema", "ok", f"schema at head ({HEAD})", None, data=data)
    elif rev is None:
        yield Finding(
            "schema", "error", "the database has no broker schema", "broker db upgrade", data=data
        )
    elif is_newer(rev):
        yield Finding(
            "schema",
            "error",
            f"schema {rev} is newer than this broker knows ({HEAD}): a newer broker wrote it",
            f"upgrade broker ({UPGRADE_BROKER})",
            data=data,
        )
    else:
        yield Finding(
            "schema", "error", f"schema {rev} is behind head {HEAD}", "broker db upgrade", data=data
        )


def _integrity(store: Store) -> Iterator[Finding]:
    with store.read() as t:
        rows = [str(r["quick_check"]) for r in t.all(_SQL["quick_check"])]
    if rows == ["ok"]:
        yield Finding("integrity", "ok", "quick_check ok", None)
    else:
        yield Finding(
            "integrity",
            "error",
            f"quick_check found {len(rows)} problems, first: {rows[0]}",
            "restore the store from a backup made with `broker backup`",
            data={"problems": rows[:20]},
        )


def _files(store: Store) -> Iterator[Finding]:
    db = store.path
    yield from _private(db.parent, folder=True, what="the store folder")
    yield from _private(db, folder=False, what="the database")
    for suffix, what in (("-wal", "the WAL"), ("-shm", "the WAL index")):
        path = Path(f"{db}{suffix}")
        if path.exists() or path.is_symlink():
            yield from _private(path, folder=False, what=what)
    lock = Path(store.lock_path)
    if lock.exists() or lock.is_symlink():
        yield from _private(lock, folder=False, what="the writer lock file")
    else:
        yield Finding(
            "file", "info", "no writer lock file yet: the next write makes it", None, str(lock)
        )
    key = Path(f"{db}{KEY_SUFFIX}")
    yield from _key_file(
        key, f"restore {key.name} beside the database (`broker backup` copies it), or set {KEY_ENV}"
    )


def _key_file(key: Path, fix: str) -> Iterator[Finding]:
    if key.exists() or key.is_symlink():
        yield from _private(key, folder=False, what="the operator key file")
    elif os.environ.get(KEY_ENV):
        yield Finding(
            "file", "info", f"no operator key file; the key comes from {KEY_ENV}", None, str(key)
        )
    else:
        yield Finding(
            "file",
            "warning",
            f"no operator key file at {key}: operator commands cannot prove who they are",
            fix,
            str(key),
        )


def _private(path: Path, *, folder: bool, what: str) -> Iterator[Finding]:
    """This user's, the right type, nobody else can write (error) or read (warning)."""
    st = os.lstat(path)
    mode = stat.S_IMODE(st.st_mode)
    want = 0o700 if folder else 0o600
    data = {"mode": f"{mode:o}", "uid": st.st_uid}
    if stat.S_ISLNK(st.st_mode):
        yield Finding(
            "file", "error", f"{what} {path} is a symbolic link", f"rm {path}", str(path), data
        )
    elif folder != stat.S_ISDIR(st.st_mode) or not folder and not stat.S_ISREG(st.st_mode):
        kind = "a folder" if folder else "a regular file"
        yield Finding(
            "file", "error", f"{what} {path} is not {kind}", f"rm -r {path}", str(path), data
        )
    elif st.st_uid != os.getuid():
        yield Finding(
            "file",
            "error",
            f"{what} {path} belongs to uid {st.st_uid}, not to this user (uid {os.getuid()})",
            f"chown {os.getuid()} {path}",
            str(path),
            data,
        )
    elif mode & 0o022:
        yield Finding(
            "file",
            "error",
            f"{what} {path} is writable by others (mode {mode:o})",
            f"chmod {want:o} {path}",
            str(path),
            data,
        )
    elif mode & 0o077:
        yield Finding(
            "file",
            "warning",
            f"{what} {path} is readable by others (mode {mode:o})",
            f"chmod {want:o} {path}",
            str(path),
            data,
        )
    else:
        yield Finding("file", "ok", f"{what} {path}: mode {mode:o}, yours", None, str(path), data)


def _scratch(store: Store) -> Iterator[Finding]:
    """A killed run's temporary copy of the store's content (S47): doctor only
    reports it (it writes nothing); the next scratch folder's run removes it."""
    from broker.store import scratch

    for path in scratch.leftovers(scratch.base(store)):
        yield Finding(
            "scratch",
            "warning",
            f"{path} is a temporary copy of the store's content left by a killed run",
            f"rm -r {path}",
            str(path),
        )


def _doorbells(store: Store) -> Iterator[Finding]:
    from broker.delivery import wake

    root_path = getattr(wake, "root_path", None)
    if root_path is None:
        yield Finding("doorbells", "info", "doorbell folder not checked by this version", None)
        return
    root = Path(root_path(store))
    if not (root.exists() or root.is_symlink()):
        yield Finding(
            "doorbells",
            "info",
            f"no doorbell folder yet at {root}: the first waiter makes it",
            None,
        )
        return
    for f in _private(root, folder=True, what="the doorbell folder"):
        yield Finding("doorbells", f.severity, f.message, f.fix, f.path, f.data)


# --- the checks of a store on PostgreSQL ------------------------------------------------------
def _pg_server(store: Store) -> Iterator[Finding]:
    with store.read() as t:
        row = t.one(_OPS["pg_server"])
    version = str(row["server_version"])
    data = {"version": version, "version_num": int(row["server_version_num"])}
    yield Finding("server", "ok", f"PostgreSQL {version}", None, data=data)


def _pg_text(store: Store) -> Iterator[Finding]:
    with store.read() as t:
        row = t.one(_OPS["pg_text"])
    encoding, collate = str(row["encoding"]), str(row["lc_collate"])
    data: dict[str, Any] = {
        "encoding": encoding,
        "lc_collate": collate,
        "lc_ctype": str(row["lc_ctype"]),
        "byte_order": bool(row["byte_order"]),
    }
    if encoding != "UTF8":
        yield Finding(
            "text",
            "error",
            f"the database's encoding is {encoding}, not UTF8: text outside it (any agent may "
            "send some) is refused or garbled, and search folds only UTF-8",
            "copy the store into a UTF8 database: createdb --encoding UTF8 --template template0 "
            "NAME, then broker migrate-store --into its URL",
            data=data,
        )
    elif not data["byte_order"]:
        yield Finding(
            "text",
            "info",
            f"text sorts by the collation {collate}, not in byte order as on SQLite: lists "
            "ordered by a name (addresses, keys, threads) may come in another order",
            "for SQLite's order, create the database with: createdb --locale C --encoding UTF8 "
            "--template template0 NAME (then broker migrate-store --into its URL)",
            data=data,
        )
    else:
        yield Finding("text", "ok", f"UTF8, collation {collate} (byte order)", None, data=data)


def _pg_connections(store: Store) -> Iterator[Finding]:
    from broker.store.postgres import POOL_SIZE

    with store.read() as t:
        row = t.one(_OPS["pg_connections"])
    most, reserved, used = (
        int(row["max_connections"]),
        int(row["superuser_reserved"]),
        int(row["in_use"]),
    )
    free = most - reserved - used
    per_process = POOL_SIZE + 1  # a full pool, and the LISTEN connection of its waiters
    data = {
        "max_connections": most,
        "superuser_reserved": reserved,
        "in_use": used,
        "free": free,
        "per_process": per_process,
    }
    said = f"{used} of {most} connections in use ({reserved} kept for superusers), {free} free"
    fix = (
        "raise max_connections in postgresql.conf (a server restart), or open the store from "
        "fewer processes: agents of one `broker serve` hold no connection of their own"
    )
    if free <= 0:
        yield Finding(
            "connections", "error", f"{said}: a new broker process cannot connect", fix, data=data
        )
    elif free < per_process:
        yield Finding(
            "connections",
            "warning",
            f"{said}: fewer than one busy broker process may open ({per_process}: a pool of "
            f"{POOL_SIZE} and one for its waiters)",
            fix,
            data=data,
        )
    else:
        yield Finding("connections", "ok", said, None, data=data)


def _pg_key_file(store: Store) -> Iterator[Finding]:
    from broker.store.keys import key_file

    key = key_file(store)
    assert key is not None  # a PostgreSQL store names its key file in BROKER_HOME
    yield from _key_file(
        key,
        f"on the host that made the store, `broker key show` prints the key: set {KEY_ENV} "
        f"to it here, or put it in {key} (mode 600)",
    )


def _pg_size(store: Store) -> Iterator[Finding]:
    with store.read() as t:
        size = int(t.one(_OPS["pg_size"])["database_bytes"])
    yield Finding("size", "ok", f"database {_mib(size)}", None, store.display, {"bytes": size})


def _leases(store: Store) -> Iterator[Finding]:
    with store.read() as t:
        row = t.one(_OPS["expired_leases"], {"now": store.now_ts()})
    n = int(row["n"])
    if n:
        yield Finding(
            "leases",
            "info",
            f"{n} deliveries hold an expired lease (oldest {row['oldest']}): they return to "
            "ready at their recipient's next claim (S15)",
            None,
            data={"expired": n, "oldest": row["oldest"]},
        )
    else:
        yield Finding("leases", "ok", "no expired lease", None)


def _references(store: Store) -> Iterator[Finding]:
    """Rows that name a space, a participant or a message no row is: no key
    declares those links (revisions 0021-0023), so this read finds what a
    foreign key would have refused."""
    with store.read() as t:
        row = t.one(_OPS["orphans"])
    found = {"log_rows": int(row["log_rows"]), "deliveries": int(row["deliveries"])}
    if any(found.values()):
        yield Finding(
            "references",
            "error",
            f"{found['log_rows']} log rows name no space, {found['deliveries']} deliveries "
            "name no participant or no message: no view or export shows them",
            "restore the store from a backup made with `broker backup`",
            data=found,
        )
    else:
        yield Finding("references", "ok", "every row names a space, participant and message", None)


def _quarantine(store: Store) -> Iterator[Finding]:
    with store.read() as t:
        rows = t.all(_OPS["quarantined_by_space"])
        spaces = int(t.one(_OPS["spaces_count"])["n"])
    total = sum(int(r["n"]) for r in rows)
    if total:
        by_space = {str(r["space_id"]): int(r["n"]) for r in rows}
        yield Finding(
            "quarantine",
            "warning",
            f"{total} quarantined deliveries in {len(rows)} of {spaces} spaces",
            f"broker queue quarantined {rows[0]['space_id']}",
            data={"quarantined": total, "by_space": by_space},
        )
    else:
        yield Finding("quarantine", "ok", f"nothing quarantined ({spaces} spaces)", None)


def _size(store: Store) -> Iterator[Finding]:
    with store.read() as t:
        page = int(t.one(_SQL["page_size"])["page_size"])
        pages = int(t.one(_SQL["page_count"])["page_count"])
        free = int(t.one(_SQL["freelist_count"])["freelist_count"])
    size, free_bytes = page * pages, page * free
    data = {"bytes": size, "free_bytes": free_bytes, "page_size": page}
    if free_bytes >= FREE_MIN_BYTES and free_bytes > FREE_SHARE * size:
        yield Finding(
            "size",
            "info",
            f"database {_mib(size)}, of which {_mib(free_bytes)} free pages",
            "broker vacuum",
            str(store.path),
            data,
        )
    else:
        yield Finding("size", "ok", f"database {_mib(size)}", None, str(store.path), data)


def _settings(store: Store) -> Iterator[Finding]:
    s = store.settings
    kind = writelock.kind(flock_only=s.writer_flock) if s.writer_lock else None
    lock = f"on ({kind})" if kind else "off"
    data: dict[str, Any] = {
        "url": store.public_url,
        "synchronous": s.synchronous,
        "busy_timeout_ms": s.busy_timeout_ms,
        "writer_lock": s.writer_lock if store.dialect == "sqlite" else None,
        "writer_lock_kind": kind if store.dialect == "sqlite" else None,
        "lock_file": store.lock_path,
        "read_only": store.read_only,
        "env": {  # BROKER_URL as printed everywhere: a password stays hidden
            k: store.public_url if v == store.url else v
            for k, v in os.environ.items()
            if k.startswith("BROKER_") and k != KEY_ENV
        },
    }
    yield Finding(
        "settings",
        "info",
        f"synchronous={s.synchronous}, busy_timeout={s.busy_timeout_ms} ms, "
        + (f"writer_lock={lock}, " if store.dialect == "sqlite" else "")
        + f"url={store.public_url}",
        None,
        data=data,
    )


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n / 1024:.0f} KiB"


# --- backup ---------------------------------------------------------------------------------
def backup(
    store: Store, dest: str | Path, *, force: bool = False, progress: Progress | None = None
) -> BackupResult:
    """Copy the store online to ``dest`` (module doc); ``force`` replaces a regular file."""
    _sqlite_only(
        store,
        "backup copies a SQLite file",
        f"use pg_dump --format=custom --file=PATH {store.sql_url()} (pg_restore reads it "
        "back), and keep the operator key with it (`broker key show`)",
    )
    start = time.perf_counter()
    target = expand(str(dest), "the backup file", "path").absolute()
    key = Path(f"{store.path}{KEY_SUFFIX}")
    key_copy = Path(f"{target}{KEY_SUFFIX}")
    _check_backup_target(store, target, key_copy if key.exists() else None, force)
    from broker.store.scratch import exit_on_signals

    with exit_on_signals():  # the copy is removed on SIGTERM too (S47)
        return _backup(store, target, key, key_copy, progress, start)


def _backup(
    store: Store, target: Path, key: Path, key_copy: Path, progress: Progress | None, start: float
) -> BackupResult:
    fd, tmp_name = tempfile.mkstemp(
        prefix=f".{target.name[:40]}.", suffix=".tmp", dir=target.parent
    )
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        schema, integrity, pages = _copy(store, tmp, progress)
        if integrity != ["ok"]:
            raise errors.StoreError(
                f"the copy failed its integrity check ({integrity[0]}): no backup was kept"
            )
        fsync_path(tmp)
        os.replace(tmp, target)
        fsync_path(target.parent)
        if key.exists():
            _copy_private(key, key_copy)
    except OSError as exc:
        raise errors.StoreError(f"cannot write the backup {target}: {exc.strerror}") from exc
    finally:
        for leftover in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm"), Path(f"{tmp}-journal")):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()
    return BackupResult(
        path=str(target),
        bytes=target.stat().st_size,
        pages=pages,
        schema=schema,
        integrity="ok",
        key_file=str(key_copy) if key.exists() else None,
        seconds=round(time.perf_counter() - start, 3),
    )


def _sqlite_only(store: Store, what: str, instead: str) -> None:
    """A file operation asked of a store on PostgreSQL: one line saying what to
    use instead (``invalid_input``: nothing was done)."""
    if store.dialect == "postgresql":
        raise errors.InvalidInput(f"{what}, and this store is on PostgreSQL: {instead}")


def _check_backup_target(store: Store, target: Path, key_copy: Path | None, force: bool) -> None:
    src = store.path.resolve()
    own = {src, *(Path(f"{src}{s}") for s in ("-wal", "-shm", "-journal", ".lock", KEY_SUFFIX))}
    problem = None
    if target.resolve() in own:
        problem = f"cannot back the store up onto its own files: {target}"
    elif target.is_dir():
        problem = f"{target} is a folder: give the path of the backup file"
    elif not target.parent.is_dir():
        problem = f"no folder {target.parent} to write the backup in"
    if problem:
        raise errors.InvalidInput(problem, field="path")
    # A device, FIFO, socket or symlink is never replaced, even with force:
    # os.replace would put the database where /dev/null was (and the key
    # file beside it); force is for an older backup, a regular file.
    for path in (target, key_copy):
        if path is not None:
            check_writable_target(path, "path")
    for side in ("-wal", "-shm"):
        if Path(f"{target}{side}").exists():
            raise errors.InvalidInput(
                f"{target}{side} exists: {target} looks like a store in use; stop its users "
                "or remove it first",
                field="path",
            )
    for path in (target, key_copy) if not force else ():
        if path is not None and path.exists():
            raise errors.InvalidInput(f"{path} exists: pass --force to overwrite it", field="force")


def _copy(store: Store, tmp: Path, progress: Progress | None) -> tuple[str | None, list[str], int]:
    """The backup API from one read snapshot of the store into ``tmp``."""

    def step(status: int, remaining: int, total: int) -> None:
        if progress is not None:
            progress(total - remaining, total)

    try:
        target = sqlite3.connect(tmp, isolation_level=None)
        target.row_factory = sqlite3.Row  # rows read by name, like the store's
        try:
            source = store.connect()
            try:
                # One read transaction across every step: one snapshot, and no
                # restart when another process commits meanwhile (WAL readers
                # never block writers).
                source.execute(_SQL["begin_read"])
                source.backup(target, pages=BACKUP_STEP_PAGES, progress=step)
                source.execute(_SQL["commit"])
            finally:
                source.close()
            try:
                schema = target.execute(_SQL["schema_version"]).fetchone()["version_num"]
            except sqlite3.Error:
                schema = None
            integrity = [
                str(r["integrity_check"])
                for r in target.execute(_SQL["integrity_check"]).fetchall()
            ]
            pages = int(target.execute(_SQL["page_count"]).fetchone()["page_count"])
        finally:
            target.close()
    except sqlite3.Error as exc:
        raise wrap_db_error(exc) from exc
    return schema, integrity, pages


def _copy_private(src: Path, dest: Path) -> None:
    data = src.read_bytes()
    # A FIFO or device planted since the check: neither hangs the open nor is truncated.
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    fd = os.open(dest, flags, 0o600)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise errors.InvalidInput(f"{dest} is not a regular file: not written", field="path")
    os.set_blocking(fd, True)
    os.ftruncate(fd, 0)
    with os.fdopen(fd, "wb") as fh:
        os.fchmod(fh.fileno(), 0o600)
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


# --- vacuum ---------------------------------------------------------------------------------
def vacuum(store: Store) -> VacuumResult:
    """Fold the WAL back, rewrite the database without its free pages, cut the
    WAL; sizes are the database and its WAL together. (SQLite documents that
    VACUUM may renumber rowids of tables without an INTEGER PRIMARY KEY; it
    keeps them in practice, which the store relies on: a delivery names its
    message, and since revisions 0022-0023 its recipient and a log row its
    space, by rowid. tests/unit/store/test_ops.py holds a vacuum with holes in
    all four tables to that. A running ``export --follow`` is best restarted.)"""
    _sqlite_only(
        store,
        "vacuum rewrites a SQLite file",
        f"the server's autovacuum does this; by hand: psql {store.sql_url()} -c 'VACUUM'",
    )
    start = time.perf_counter()
    before = _store_bytes(store)
    with store.exclusive() as conn:
        conn.execute(_SQL["checkpoint_truncate"]).fetchone()
        conn.execute(_SQL["vacuum"])
        conn.execute(_SQL["checkpoint_truncate"]).fetchone()
    return VacuumResult(
        path=str(store.path),
        bytes_before=before,
        bytes_after=_store_bytes(store),
        seconds=round(time.perf_counter() - start, 3),
    )


def _store_bytes(store: Store) -> int:
    return _file_size(store.path) + _file_size(Path(f"{store.path}-wal"))
