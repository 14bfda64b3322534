"""Where doorbells live, and this process's one doorbell on a store (S20, S41).

``broker.delivery.wake`` says how waiting and ringing work; this module keeps
the files they use, and the process's side of them:

- the doorbell folder of a store (``root_path``) and its shared map of
  slots (``slots``: one byte per hash bucket of keys, the number of processes
  waiting on keys of that bucket, changed under a file lock);
- the keys (``participant_key``, ``space_key``: safe, short folder names);
- ``ProcessDoorbell``: the process's socket ``<root>/<pid>-<6 hex>``, the
  marker file it puts in each key's folder while a waiter of the process
  waits on that key (as many bytes long as it has waiters there; it stays,
  empty, ``LINGER_S`` after the last one left: a wait that follows, an
  agent's next long-poll, finds it in place), the bells of those waiters,
  and the thread that reads the socket and rings them.

Every folder is created 0700 and every file 0600; each is checked before use
(``broker.store.runfiles``: this user's, not a symlink, not writable by
others) and files are opened with ``O_NOFOLLOW``.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import hashlib
import mmap
import os
import re
import threading
import time
import zlib
from functools import lru_cache
from typing import TYPE_CHECKING

from broker import errors
from broker.delivery.bells import Bell, Bells
from broker.store import runfiles

if TYPE_CHECKING:
    import socket

    from broker.store.sqlite import Store

SLOTS = 8192  # shared-memory buckets of waiter counts
LINGER_S = 1.0  # a process's doorbell, and a key's marker, outlive their last waiter this long

# A socket address holds 107 bytes and a NUL: <root>/<pid>-<6 hex>. The
# markers in key folders are plain files: no such limit on them.
SOCKET_PATH_MAX = 107
KEY_MAX = 27  # "p" + a 26-character participant id; "s" + 16 hex for a space
_NAME_MAX = 14  # up to 7 digits of pid, "-", 6 hex digits
ROOT_MAX = SOCKET_PATH_MAX - (1 + _NAME_MAX)
NAME = re.compile(r"[0-9]{1,7}-[0-9a-f]{6}")  # a process's doorbell, never a key or "slots"

_ID_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")

_maps: dict[str, mmap.mmap] = {}
_count_lock = threading.Lock()  # lockf excludes processes, not threads of one process
_lock = threading.Lock()  # this process's doorbells, their bells and markers
_doorbells: dict[str, ProcessDoorbell] = {}  # doorbell folder -> this process's doorbell


def _close_at_exit() -> None:
    for bell in list(_doorbells.values()):
        bell.close()


atexit.register(_close_at_exit)


def _reset_after_fork() -> None:
    global _count_lock, _lock
    _count_lock = threading.Lock()  # another thread may have held it at fork()
    _lock = threading.Lock()
    for bell in _doorbells.values():
        bell.forget()  # the parent's: its thread is not here, its files are not ours
    _doorbells.clear()


os.register_at_fork(after_in_child=_reset_after_fork)


# --- where ----------------------------------------------------------------------------------
def root_path(store: Store) -> str:
    """The doorbell folder of ``store`` (see the module doc); touches no file."""
    return _where(store)[0]


def _where(store: Store) -> tuple[str, str | None]:
    """(the doorbell folder, the per-user folder holding it when it is not beside
    the database), computed once per store."""
    cached: tuple[str, str | None] | None = getattr(store, "_wake_where", None)
    if cached is not None:
        return cached
    db = os.path.realpath(store.path)
    where: tuple[str, str | None] = (f"{db}-wake", None)
    if len(os.fsencode(where[0])) > ROOT_MAX:
        base = _runtime_base()
        where = (os.path.join(base, hashlib.sha256(os.fsencode(db)).hexdigest()[:16]), base)
    store._wake_where = where  # type: ignore[attr-defined]
    return where


# Where the short per-user folder of a long store path is looked for. Not from
# the environment ($XDG_RUNTIME_DIR, $TMPDIR): every process of the user must
# find the same folder whatever its environment (an MCP server, a sandbox or a
# cron job may not carry the shell's), or rings miss their waiters.
RUNTIME_PARENTS = ("/run/user/{uid}", "/tmp")


def _runtime_base() -> str:
    """A short per-user folder for roots whose store path is too long: the
    user's own /run/user/<uid> (the usual $XDG_RUNTIME_DIR), else /tmp."""
    uid = os.getuid()
    run = RUNTIME_PARENTS[0].format(uid=uid)
    try:
        runfiles.check(run, os.lstat(run), folder=True)
        return os.path.join(run, "broker")
    except (OSError, errors.StoreError):
        pass  # missing, or not this user's own: no place for our sockets
    return os.path.join(RUNTIME_PARENTS[1], f"broker-{uid}")


def open_root(store: Store, *, create: bool) -> tuple[str, mmap.mmap] | None:
    """The doorbell folder and its slot map, checked; None if no waiter ever made
    them (``create`` off: writers never create anything)."""
    root, base = _where(store)
    mm = _maps.get(root)
    if mm is not None:
        return root, mm
    if base is not None and not runfiles.private_dir(base, create=create):
        return None
    if not runfiles.private_dir(root, create=create):
        return None
    try:
        mm = runfiles.map_private(os.path.join(root, "slots"), SLOTS, create=create)
    except FileNotFoundError:
        return None
    _maps[root] = mm
    return root, mm


@lru_cache(maxsize=65536)
def slot(key: str) -> int:
    return zlib.crc32(key.encode()) % SLOTS


@lru_cache(maxsize=65536)
def participant_key(participant_id: str) -> str:
    """The doorbell of one participant's inbox (a safe, short folder name)."""
    if len(participant_id) < KEY_MAX and _ID_CHARS.issuperset(participant_id):
        return f"p{participant_id}"
    # An imported id may be anything: never let it name a path.
    return "p" + hashlib.sha256(participant_id.encode("utf-8", "surrogatepass")).hexdigest()[:26]


@lru_cache(maxsize=4096)
def space_key(space_id: str) -> str:
    """The doorbell of a whole space (its followers)."""
    return "s" + hashlib.sha1(space_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def state_key(space_id: str) -> str:
    """The doorbell of what the operator watches in a space besides its log:
    who is in it (joins, leaves, statuses) and what they hold (claims and
    reservations). Sends ring ``space_key``; watchers of the state wait on both."""
    return "v" + hashlib.sha1(space_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def board_key(space_id: str, key: str) -> str:
    """The doorbell of one board key of a space: rung when its claim ends
    (released or expired), so a claimer waiting for the key tries again."""
    name = f"{space_id}\0{key}".encode("utf-8", "surrogatepass")
    return "k" + hashlib.sha1(name).hexdigest()[:16]


SPACES_KEY = "spaces"  # the doorbell of the list of spaces (created, stopped, archived, purged)


def count_in(root: str, bucket: int, delta: int) -> None:
    """Change a slot's count of waiting processes under an exclusive lock
    (waiters only; writers read it without one)."""
    mm = _maps[root]
    with _count_lock:
        fd = runfiles.open_private(os.path.join(root, "slots"), os.O_RDWR, create=False)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX)
            value = mm[bucket]
            if value < 255:  # saturated slots stay "maybe waiting": only costs a listing
                mm[bucket] = max(0, value + delta)
        finally:
            os.close(fd)  # releases the lock


# --- the process's doorbell ---------------------------------------------------------------------
def _bind(path: str) -> socket.socket:
    """A non-blocking datagram socket bound at ``path`` (OSError if it cannot be)."""
    import socket

    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        s.setblocking(False)
        s.bind(path)
        # bind's mode is 0777 filtered by the umask; the folder (0700) already
        # keeps others out, and the socket is private too (S47).
        os.chmod(path, runfiles.FILE_MODE)
    except BaseException:
        s.close()
        raise
    return s


class ProcessDoorbell:
    """This process's one doorbell on one doorbell folder: its socket, the
    markers of its keys, its waiters' bells, and the thread that reads it
    (see the module doc). Made and closed under ``_lock``."""

    def __init__(self, root: str) -> None:
        import secrets

        self.root = root
        self.name = f"{os.getpid()}-{secrets.token_hex(3)}"
        self.path = os.path.join(root, self.name)
        self.bells = Bells()
        # Keys no waiter of this process waits on now, and since when: their
        # markers stay for LINGER_S, so a wait that comes back to one (a
        # served agent's next long-poll) makes and removes no folder or
        # file. Doing so took ~1 ms of the event loop a park (mkdir, open,
        # then rmdir on a thread, on a disk the WAL writes to): half of a
        # served re-poll's ~2 ms of CPU. A resting marker is empty (no
        # waiter: ``_tell``) and only costs a writer a ring to a bell that
        # is not there; this process's thread removes it (``_tidy``).
        self._resting: dict[str, float] = {}
        self.closed = False
        self.idle_since: float | None = None
        self.sock = _bind(self.path)
        self.thread = threading.Thread(target=self._run, name="broker-doorbell", daemon=True)
        self.thread.start()

    # --- keys (under _lock) ---------------------------------------------------------------
    def add(self, keys: list[str], bell: Bell) -> None:
        with self.bells.lock:
            first = self.bells.add(keys, bell)
            kept = [key for key in first if self._resting.pop(key, None) is not None]
            marked: list[str] = []
            try:
                for key in first:
                    if key not in kept:  # a resting key's marker is still in place
                        self._mark(key)
                        marked.append(key)
            except BaseException:
                self.bells.remove(keys, bell)
                for key in marked:
                    self._unmark(key)
                now = time.monotonic()
                self._resting.update((key, now) for key in kept)
                raise
            self._tell(keys)
        self.idle_since = None

    def remove(self, keys: list[str], bell: Bell) -> None:
        with self.bells.lock:
            now = time.monotonic()
            for key in self.bells.remove(keys, bell):
                self._resting[key] = now  # its marker stays LINGER_S (``_tidy``)
            self._tell(keys)
            if not len(self.bells):
                self.idle_since = now

    def _tell(self, keys: list[str]) -> None:
        """A marker's size is how many waiters of this process wait on its key
        (0: a resting marker): what other processes (an operator, a test) can
        see of who waits where."""
        for key in keys:
            with contextlib.suppress(OSError, errors.StoreError):
                fd = runfiles.open_private(self.marker(key), os.O_WRONLY, create=False)
                try:
                    os.ftruncate(fd, self.bells.on(key))
                finally:
                    os.close(fd)

    def _tidy(self) -> None:
        """Remove the markers of the keys that have rested LINGER_S (the
        doorbell's thread, after each wake-up: file work off the waiters'
        way). Under the bells' lock: a wait that comes back to a key meanwhile
        either finds its marker in place or makes a new one."""
        if not self._resting:
            return
        due = time.monotonic() - LINGER_S
        with self.bells.lock:
            for key in [k for k, since in self._resting.items() if since <= due]:
                del self._resting[key]
                self._unmark(key)

    def marker(self, key: str) -> str:
        return os.path.join(self.root, key, self.name)

    def _mark(self, key: str) -> None:
        bucket = slot(key)
        count_in(self.root, bucket, +1)
        try:
            folder = os.path.join(self.root, key)
            for _ in range(5):
                runfiles.private_dir(folder)
                try:
                    os.close(runfiles.open_private(self.marker(key), os.O_WRONLY))
                    return
                except FileNotFoundError:
                    continue  # the last waiter removed the folder between our mkdir and open
            raise OSError(errno.ENOENT, "cannot mark a doorbell key", folder)
        except BaseException:
            with contextlib.suppress(OSError, errors.StoreError):
                count_in(self.root, bucket, -1)
            raise

    def _unmark(self, key: str) -> None:
        marker = self.marker(key)
        with contextlib.suppress(OSError):
            os.unlink(marker)
        # The last process on the key removes the folder (fails harmlessly if others remain).
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(marker))
        with contextlib.suppress(OSError, errors.StoreError):
            count_in(self.root, slot(key), -1)

    # --- the thread ------------------------------------------------------------------------
    def _run(self) -> None:
        import select

        poller = select.poll()
        poller.register(self.sock.fileno(), select.POLLIN)
        lost = f"{self.path}.lost"
        while not self.closed:
            try:
                ready = poller.poll(LINGER_S * 1000)
            except OSError:
                break
            if self.closed:
                break
            self._tidy()
            if not ready:
                self._linger()
                continue
            keys: set[str] = set()
            while True:
                try:
                    data = self.sock.recv(65536)
                except BlockingIOError:
                    break
                except OSError:
                    if self.closed:
                        return
                    keys.add("*")  # an error we cannot read past: everyone re-checks
                    break
                keys.update(data.decode("ascii", "replace").split())
            try:
                os.unlink(lost)
            except OSError:
                if "*" in keys:
                    self.bells.ring_all()
                else:
                    self.bells.ring(keys)
            else:
                self.bells.ring_all()  # a writer found the queue full: its ring is in none
        with contextlib.suppress(OSError):
            self.sock.close()

    def _linger(self) -> None:
        with _lock:
            idle = self.idle_since
            if idle is not None and time.monotonic() - idle >= LINGER_S and not len(self.bells):
                self.close()

    def close(self) -> None:
        """Stop this doorbell (the caller holds ``_lock``, or the process exits)."""
        if self.closed:
            return
        self.closed = True
        if _doorbells.get(self.root) is self:
            del _doorbells[self.root]
        with self.bells.lock:
            keys = [*self.bells.keys(), *self._resting]
            self._resting.clear()
        for key in keys:
            self._unmark(key)
        if threading.current_thread() is not self.thread:
            with contextlib.suppress(OSError):
                self.sock.shutdown(2)  # wakes its poll: it sees ``closed`` and ends
        for leftover in (self.path, f"{self.path}.lost"):
            with contextlib.suppress(OSError):
                os.unlink(leftover)

    def forget(self) -> None:
        """In a forked child: the parent's doorbell is not this process's."""
        self.closed = True
        with contextlib.suppress(OSError):
            self.sock.close()


def register(store: Store, keys: list[str], bell: Bell) -> ProcessDoorbell:
    """``bell`` on ``keys`` in this process's doorbell on ``store`` (made on first use)."""
    opened = open_root(store, create=True)
    if opened is None:
        raise OSError(errno.ENOENT, "the doorbell folder vanished", root_path(store))
    root = opened[0]
    with _lock:
        home = _doorbells.get(root)
        if home is None or home.closed:
            home = _doorbells[root] = ProcessDoorbell(root)
        home.add(keys, bell)
    return home


def home_of(root: str) -> ProcessDoorbell | None:
    """This process's open doorbell on the folder ``root``, if it has one."""
    home = _doorbells.get(root)
    return None if home is None or home.closed else home


def unregister(home: ProcessDoorbell, keys: list[str], bell: Bell) -> None:
    with _lock:
        if not home.closed:
            home.remove(keys, bell)


def count() -> int:
    """How many doorbells (sockets) this process holds open now: one per store
    it waits on, however many waiters (S41)."""
    return len(_doorbells)


def release_idle() -> None:
    """Close every doorbell of this process that has no waiter now, without
    waiting ``LINGER_S`` (tests; a process about to drop its stores)."""
    with _lock:
        idle = [d for d in _doorbells.values() if not len(d.bells)]
        for doorbell in idle:
            doorbell.close()
    for doorbell in idle:
        doorbell.thread.join(5)
