"""Keys (S27, S29): the store's operator key and the spaces' join keys.

The operator key proves a caller is the operator. It is made with the store: a
random secret in the file ``<database>.operator-key`` (0600, created with
O_EXCL|O_NOFOLLOW), its SHA-256 in the one-row ``operator_key`` table, so a
store without a file beside it (PostgreSQL) checks it the same way.
``BROKER_OPERATOR_KEY`` overrides the file: set when the store is made, it *is*
the key (no file is written). Reading the file refuses one that is not this
user's own or that others can read: a key someone else could have planted or
read proves nothing.

A join key is a space's secret for joining it (S27), shown once by ``space
create`` (or ``rotate_join_key``) and stored only as a hash. Keys are
high-entropy random strings, so a plain SHA-256 is enough; comparisons are
constant-time (``hmac.compare_digest``).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from broker import errors
from broker.store import runfiles
from broker.store.sql import stmt

if TYPE_CHECKING:
    from broker.store.sqlite import Store, Tx

KEY_ENV = "BROKER_OPERATOR_KEY"
KEY_SUFFIX = ".operator-key"  # the operator key file beside the database
_GET = stmt("trust.operator_key")
_INSERT = stmt("trust.insert_operator_key")
_JOIN_KEY = stmt("trust.join_key")
_REPLACE = stmt("trust.replace_operator_key")


def digest(secret: str) -> str:
    """The stored form of a key (SHA-256 hex). A lone surrogate cannot be a
    key anyone typed, but must not crash the check either."""
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def matches(secret: str, stored: str | None) -> bool:
    return stored is not None and hmac.compare_digest(digest(secret), stored)


def new_key() -> str:
    import secrets  # keys are made by operator commands: agents' CLI calls skip random & co

    return secrets.token_urlsafe(32)


# --- the operator key file ----------------------------------------------------------
def key_file(store: Store) -> Path | None:
    """Where the store's operator key file is: beside a SQLite database; for a
    store with no file of its own (PostgreSQL) the store names it
    (``key_path``: a file in BROKER_HOME named after the server and database)."""
    own = getattr(store, "key_path", None)
    if own is not None:
        return Path(own)
    path = getattr(store, "path", None)
    return Path(f"{path}{KEY_SUFFIX}") if path else None


def read_key_file(path: Path) -> str | None:
    """The key in ``path``, None when there is no file; a file that is a
    symlink, not this user's, or open to others is refused (``auth_failed``)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        why = (
            "is a symbolic link" if exc.errno == errno.ELOOP else f"cannot be read ({exc.strerror})"
        )
        raise errors.AuthError(f"the operator key file {path} {why}: refusing it") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise errors.AuthError(
                f"the operator key file {path} is not a regular file: refusing it"
            )
        if st.st_uid != os.geteuid():
            raise errors.AuthError(
                f"the operator key file {path} belongs to uid {st.st_uid}, not to you: refusing it"
            )
        if st.st_mode & 0o077:
            raise errors.AuthError(
                f"the operator key file {path} is open to others (mode "
                f"{stat.S_IMODE(st.st_mode):04o}): refusing it; run chmod 600 {path}"
            )
        data = os.read(fd, 4096)
    finally:
        os.close(fd)
    key = data.decode("utf-8", "replace").strip()
    if not key:
        raise errors.AuthError(f"the operator key file {path} is empty: refusing it")
    return key


def _write_key_file(path: Path) -> str:
    """Make the key file with a new key; an existing file (an earlier broker's,
    or a racing process's) is adopted instead."""
    key = new_key()
    try:
        runfiles.make_dirs(path.parent)  # BROKER_HOME of a PostgreSQL store's key (S47)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        os.fchmod(fd, 0o600)  # os.open's mode is filtered by the umask
    except FileExistsError:
        found = read_key_file(path)
        if found is None:  # it vanished between the two calls: try once more
            return _write_key_file(path)
        return found
    except OSError as exc:
        raise errors.StoreError(
            f"cannot create the operator key file {path}: {exc.strerror}"
        ) from exc
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(key + "\n")
        f.flush()
        os.fsync(f.fileno())
    return key


def ensure(store: Store) -> None:
    """Give the store its operator key if it has none yet (the store's first
    write open at this schema): BROKER_OPERATOR_KEY, else the key file beside
    the database (adopted when it exists, made when not)."""
    with store.write() as t:
        if t.one(_GET) is not None:
            return
        secret = os.environ.get(KEY_ENV)
        if not secret:
            path = key_file(store)
            if path is None:
                raise errors.AuthError(
                    f"this store has no file beside it: set {KEY_ENV} to make its operator key"
                )
            secret = _write_key_file(path)
        t.execute(_INSERT, {"key_hash": digest(secret), "now": store.now_ts()})


def operator_key_hash(t: Tx) -> str | None:
    row = t.one(_GET)
    return None if row is None else str(row["key_hash"])


def take_operator_key(store: Store, t: Tx, secret: str) -> None:
    """Make ``secret`` the store's operator key in ``t`` (a copy of another
    store into this one, which holds no space yet: ``broker migrate-store``).
    The key file is written by ``write_key_file`` once ``t`` has committed."""
    params = {"key_hash": digest(secret), "now": store.now_ts()}
    t.execute(_INSERT if operator_key_hash(t) is None else _REPLACE, params)


def write_key_file(store: Store, secret: str) -> Path | None:
    """Put ``secret`` in the store's key file (made 0600, or replaced whole
    through a private temp file and a rename, never through a symlink). With
    BROKER_OPERATOR_KEY set and no file yet, nothing is written: the variable
    is the key (as when a store is made). The file's path, or None."""
    path = key_file(store)
    if path is None or os.environ.get(KEY_ENV) and not (path.exists() or path.is_symlink()):
        return None
    if path.is_symlink() or path.exists() and not path.is_file():
        raise errors.StoreError(f"the operator key file {path} is not a regular file: not written")
    try:
        if not path.parent.exists():
            path.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{new_key()[:8]}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(secret + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
    except OSError as exc:
        raise errors.StoreError(
            f"cannot write the operator key file {path}: {exc.strerror}; set {KEY_ENV} "
            "to the key instead"
        ) from exc
    return path


def presented(store: Store, key: str | None = None) -> str:
    """The operator key a caller presents: ``key``, else BROKER_OPERATOR_KEY,
    else the key file beside the database."""
    if key is not None:
        if not isinstance(key, str) or not key:
            raise errors.AuthError("the operator key must be a non-empty string")
        return key
    env = os.environ.get(KEY_ENV)
    if env:
        return env
    path = key_file(store)
    found = read_key_file(path) if path is not None else None
    if found is None:
        where = f"no key file at {path}" if path is not None else "no key file"
        raise errors.AuthError(
            f"operator key required: {where} and {KEY_ENV} is not set (where the key file "
            f"is, `broker key show` prints the key to set {KEY_ENV} to)"
        )
    return found


def verify_operator(t: Tx, secret: str) -> None:
    """Refuse (``auth_failed``) unless ``secret`` is the store's operator key."""
    row = t.one(_GET)
    if row is None:
        raise errors.AuthError(
            "this store has no operator key yet: run `broker db upgrade` once to make it"
        )
    if not matches(secret, row["key_hash"]):
        raise errors.AuthError(
            f"the operator key given is not this store's (check {KEY_ENV} or the key file)"
        )


# --- join keys ------------------------------------------------------------------------
def verify_join_key(t: Tx, space_id: str, secret: str) -> None:
    row = t.one(_JOIN_KEY, {"space_id": space_id})
    stored = row["join_key_hash"] if row is not None else None
    if stored is None:
        raise errors.AuthError(
            f"space {space_id} has no join key (made before join keys): the operator "
            f"makes one with `broker space join-key {space_id} --rotate`"
        )
    if not matches(secret, stored):
        raise errors.AuthError(f"the join key given is not the join key of space {space_id}")
