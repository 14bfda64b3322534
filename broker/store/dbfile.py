"""The store's database file: where it is, making it, and whether it can be written.

A write command makes the folder (0700) and the file (0600) on first use; a
read-only command never makes either (``Store(url, create=False)``): a
missing store is one line. A store this user cannot write (a read-only file
system, file or folder) is opened for reading through SQLite's URI options:
``mode=ro``, or ``immutable=1`` on a read-only file system when no WAL file is
left (SQLite cannot make the ``-shm`` index there, and nobody can write it;
with a WAL left, ``immutable`` would skip what it holds, so ``mode=ro`` reads
it through the index that is there).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from broker import errors
from broker.store import runfiles

NO_STORE = (
    "no broker database at {path}: create one with `broker space create` or "
    "`broker db upgrade` (or point BROKER_HOME/BROKER_URL/--url at yours)"
)


def sqlite_path(url: str) -> str:
    """The file of a ``sqlite:///`` URL, parsed without importing SQLAlchemy
    (its import alone costs ~300 ms, too much for a CLI called per tool call)."""
    for prefix in ("sqlite+pysqlite:///", "sqlite:///"):
        if url.startswith(prefix):
            return url[len(prefix) :].split("?", 1)[0]
    if url.startswith("postgresql"):
        raise errors.StoreError("PostgreSQL is not supported yet: use a sqlite:/// URL")
    raise errors.InvalidInput(f"bad database URL {url!r}: {STORE_URLS}", field="url")


# The forms a store URL takes, for every refusal of one (a CLI adds client mode's).
STORE_URLS = (
    "use sqlite:///PATH (a file: sqlite:////abs/path/broker.db) or "
    "postgresql+psycopg://USER@HOST:PORT/DB"
)
SERVER_URLS = "http(s)://HOST:PORT or unix:///PATH/broker.sock"


def _file_path(db: str) -> Path:
    if not db or db == ":memory:":
        raise errors.InvalidInput("broker needs a database file, not an in-memory database")
    from broker.envvars import expand

    return expand(db, "the database file", "url").absolute()


def _check_is_file(path: Path) -> None:
    """A store path where something other than a file is (a folder, a FIFO, a
    device) is named as such: "no database, create one" would send the user
    to ``space create``, which then cannot open it either."""
    try:
        mode = os.stat(path).st_mode  # a symlink to the database file is fine
    except OSError:
        return  # missing (or unreadable): the caller says so
    if stat.S_ISREG(mode):
        return
    kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file"
    raise errors.InvalidInput(
        f"the store's database {path} is {kind}, not a database file: move it away, "
        "or point BROKER_HOME/BROKER_URL/--url elsewhere",
        field="url",
    )


def prepare(db: str) -> Path:
    """The database file, made (folder 0700, file 0600) if it is not there."""
    path = _file_path(db)
    _check_is_file(path)
    try:
        runfiles.make_dirs(path.parent)  # it and its missing parents 0700 (S47)
        if not path.exists():
            os.close(runfiles.create_file(path, os.O_WRONLY))
    except OSError as exc:
        raise errors.StoreError(f"cannot create the database file {path}: {exc.strerror}") from exc
    return path


def existing(db: str, *, allow_empty: bool = False) -> Path:
    """The database file of a ``create=False`` store: never made here. An
    empty file is no store either, unless the caller only inspects it
    (``allow_empty``: ``broker db current`` reports it as empty)."""
    path = _file_path(db)
    _check_is_file(path)
    if not path.is_file() or (path.stat().st_size == 0 and not allow_empty):
        raise errors.StoreNotFound(NO_STORE.format(path=path))
    return path


def read_only_reason(path: Path) -> str | None:
    """Why the store at ``path`` cannot be written, or None when it can."""
    if _on_read_only_fs(str(path)):
        return "it is on a read-only file system"
    if not os.access(path, os.W_OK):
        return "the database file is read-only for this user"
    if not os.access(path.parent, os.W_OK | os.X_OK):
        return "its folder is read-only for this user"
    return None


def read_only_uri(path: Path) -> str:
    """The SQLite URI that reads a store this user cannot write (module doc)."""
    from urllib.parse import quote  # only here: a CLI call pays for no import it does not use

    target = f"file:{quote(str(path))}"
    if _on_read_only_fs(str(path)) and not _nonempty(f"{path}-wal"):
        return f"{target}?immutable=1"
    return f"{target}?mode=ro"


def _on_read_only_fs(path: str) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _nonempty(path: str) -> bool:
    try:
        return os.stat(path).st_size > 0
    except OSError:
        return False
