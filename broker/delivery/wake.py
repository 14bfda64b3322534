"""Doorbells: wake a waiter in another process right after a commit (S20).

Waiting for mail must be fast (a waiter returns within milliseconds of the
commit that concerns it) and cheap (a hundred idle waiters cost nearly
nothing). Polling the tables gives one or the other, not both. So each waiter
binds a Unix datagram socket in a folder named after what it waits for (a
participant, or a whole space); a writer, after its commit, sends one byte to
every socket in the folders its commit concerns. An idle waiter sleeps in
``select`` and costs nothing.

Writers must not pay for doorbells nobody listens to (a send is ~100 µs; a
directory listing is ~10). So waiters also count themselves in a small shared
memory map of slots (one byte per hash bucket of keys, changed under a file
lock); a writer reads the slot — no system call — and lists a folder only when
somebody may be waiting there.

No lost wake-up, by construction. A ``Waiter`` registers (slot counted, socket
bound) and then reads the store's change marker (``PRAGMA data_version``,
which moves when another connection commits) *before* its caller checks the
database; every return of ``wait()`` re-reads it before the caller checks
again. A writer commits *before* it reads the slot, so a commit that lands
between the caller's check and its ``wait()`` finds the socket bound and
rings it. A commit that rings nobody (its writer was killed between COMMIT and
the ring, or wrote with plain SQL) still moves the marker: ``wait()`` compares
it on entry and returns at once if anything was committed since the reading
(at most once in a row, so that traffic concerning others cannot turn a waiter
into a poller of the tables; a change left unread then is taken by the first
tick). While asleep the waiter looks at the marker about every ``SAFETY_S`` seconds
(a few microseconds, no lock): a safety net, not the mechanism anything
depends on. If sockets cannot be used at all, waiters poll the marker instead
(``FALLBACK_POLL_S``). The asyncio API (``broker.api.aio.Doorbell``) blocks in its
event loop instead of ``select`` but takes the same steps, the Waiter's own
(``enter``, ``sleeping``, ``woken``, ``changed``): one logic, not two.

Where the doorbells live (spec §Reliability): never in a folder another local user can
pre-create or redirect. The folder is ``<database>-wake`` beside the database
file (in the store folder, 0700). If that path is too long for a socket
address (108 bytes), a short per-user folder is used instead:
``/run/user/<uid>/broker/<digest>`` when that folder (the usual
``$XDG_RUNTIME_DIR``) is this user's own, else ``/tmp/broker-<uid>/<digest>``;
found without reading the environment, so that every process agrees.
Every folder is created 0700 and the ``slots`` file 0600; each is checked
before use (``broker.store.runfiles``: this user's, not a symlink, not writable by
others) and files are opened with ``O_NOFOLLOW``; a folder planted by someone
else is refused with a one-line ``StoreError`` naming it.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import hashlib
import mmap
import os
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from broker import errors
from broker.store import runfiles
from broker.store.sql import stmt

if TYPE_CHECKING:
    import socket

    from broker.store.sqlite import Store, Tx

# socket, select and secrets load where a waiter or a ring needs them: a send
# that rings nobody (or a claim) does not pay ~4 ms of their imports.

SAFETY_S = 5.0  # while asleep, look for commits that rang nobody this often
FALLBACK_POLL_S = 0.002  # data_version polling when sockets are unavailable
PG_POLL_S = 0.05  # PostgreSQL without its LISTEN connection: re-check this often
SLOTS = 8192  # shared-memory buckets of waiter counts

# A socket address holds 107 bytes and a NUL: <root>/<key>/<pid>-<6 hex>.
SOCKET_PATH_MAX = 107
KEY_MAX = 27  # "p" + a 26-character participant id; "s" + 16 hex for a space
_NAME_MAX = 14  # up to 7 digits of pid, "-", 6 hex digits
ROOT_MAX = SOCKET_PATH_MAX - (1 + KEY_MAX + 1 + _NAME_MAX)

_DATA_VERSION = stmt("store.data_version")
_ID_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")

# Test hook: called as ``_hook(waiter, event)`` with event "enter" (wait() was
# called and has not read the change marker yet: the window between a caller's
# check and its wait), "sleep" (about to block) and "woke" (returning; the
# waiter's ``woke`` says why). None outside tests.
_hook: Callable[[Waiter, str], None] | None = None

_sender: socket.socket | None = None
_maps: dict[str, mmap.mmap] = {}
_count_lock = threading.Lock()  # lockf excludes processes, not threads of one process


def _close_sender() -> None:
    if _sender is not None:
        _sender.close()


atexit.register(_close_sender)


def _reset_after_fork() -> None:
    global _sender, _count_lock
    _sender = None  # never share a socket object across fork()
    _count_lock = threading.Lock()  # another thread may have held it at fork()


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


def _open(store: Store, *, create: bool) -> tuple[str, mmap.mmap] | None:
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
        fd = runfiles.open_private(os.path.join(root, "slots"), os.O_RDWR, create=create)
    except FileNotFoundError:
        return None
    try:
        if os.fstat(fd).st_size < SLOTS:
            os.ftruncate(fd, SLOTS)  # only ever grows it, with zeros: safe to race
        mm = mmap.mmap(fd, SLOTS)
    finally:
        os.close(fd)
    _maps[root] = mm
    return root, mm


@lru_cache(maxsize=65536)
def _slot(key: str) -> int:
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


# --- ringing (writers, after their commit) --------------------------------------------------
def _sender_sock() -> socket.socket:
    global _sender
    if _sender is None:
        import socket

        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.setblocking(False)
        _sender = s
    return _sender


def _listdir(folder: str) -> list[str]:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        runfiles.check(folder, os.fstat(fd), folder=True)
        return os.listdir(fd)
    finally:
        os.close(fd)


def ring_keys(store: Store, keys: Iterable[str]) -> int:
    """Ring every waiter on ``keys``; returns how many sockets were rung.

    Runs after a commit, so it never raises: without a usable doorbell folder
    nobody is rung (waiters refuse an unsafe folder themselves, loudly, or
    poll the change marker)."""
    if store.dialect != "sqlite":  # PostgreSQL: NOTIFY (broker.delivery.pgwake)
        from broker.delivery import pgwake

        return pgwake.notify(store, keys)
    try:
        opened = _open(store, create=False)
    except (OSError, errors.StoreError):
        return 0
    if opened is None:
        return 0  # nobody ever waited on this database
    root, mm = opened
    rung = 0
    for key in keys:
        if not mm[_slot(key)]:
            continue  # nobody waits on this bucket: no system call at all
        folder = os.path.join(root, key)
        try:
            names = _listdir(folder)
        except (OSError, errors.StoreError):
            continue
        sock = _sender_sock()
        for name in names:
            path = os.path.join(folder, name)
            try:
                sock.sendto(b"!", path)
                rung += 1
            except BlockingIOError:
                rung += 1  # its buffer is full: it has been rung already
            except OSError as exc:
                if exc.errno == errno.ECONNREFUSED:
                    with contextlib.suppress(OSError):
                        os.unlink(path)  # its waiter died without cleaning up
    return rung


@lru_cache(maxsize=4096)
def state_key(space_id: str) -> str:
    """The doorbell of what the operator watches in a space besides its log:
    who is in it (joins, leaves, statuses) and what they hold (claims and
    reservations). Sends ring ``space_key``; watchers of the state wait on both."""
    return "v" + hashlib.sha1(space_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]


SPACES_KEY = "spaces"  # the doorbell of the list of spaces (created, stopped, archived, purged)


@dataclass(frozen=True)
class Ring:
    """A ring of ``keys`` to run after a commit (``Tx.after_commit``): equal
    rings of one transaction run once, so a stop that records fifty departures
    rings each watcher once."""

    store: Store
    keys: tuple[str, ...]

    def __call__(self) -> None:
        ring_keys(self.store, self.keys)


def ring_after(t: Tx, *keys: str) -> None:
    """Ring ``keys`` once ``t`` has committed (once however often it is asked)."""
    t.after_commit(Ring(t.store, keys))


def ring(store: Store, space_id: str, participant_ids: Iterable[str] = ()) -> None:
    """After a commit: wake the participants it concerns and the space's followers."""
    ring_keys(store, [space_key(space_id), *(participant_key(p) for p in participant_ids)])


def ring_space(store: Store, space_id: str) -> None:
    ring_keys(store, [space_key(space_id)])


def _count(root: str, slot: int, delta: int) -> None:
    """Change a slot's waiter count under an exclusive lock (waiters only)."""
    mm = _maps[root]
    with _count_lock:
        fd = runfiles.open_private(os.path.join(root, "slots"), os.O_RDWR, create=False)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX)
            value = mm[slot]
            if value < 255:  # saturated slots stay "maybe waiting": only costs a listing
                mm[slot] = max(0, value + delta)
        finally:
            os.close(fd)  # releases the lock


# --- waiting --------------------------------------------------------------------------------
class Waiter:
    """Listens on some doorbells. Create it *before* checking the condition and
    call ``wait()`` after each check that found nothing: whatever commits after
    the Waiter was made (or after the previous ``wait()`` returned) wakes it.

    Raises ``StoreError`` if the doorbell folder is not this user's own; falls
    back to polling the change marker if sockets cannot be used here."""

    def __init__(self, store: Store, keys: Iterable[str]) -> None:
        self.store = store
        self.socks: list[socket.socket] = []
        self.paths: list[str] = []
        self.slots: list[int] = []
        self.root: str | None = None
        self.woke = ""  # why the last wait() returned: changed | rung | tick | polled | timeout
        # Waiters started together must not tick together: each tick's re-check
        # commits (a heartbeat), which every other waiter would see on entry.
        import secrets

        self._jitter = 0.75 + secrets.randbelow(501) / 1000
        self._pg: tuple[Any, socket.socket] | None = None  # (listener, write end)
        if store.dialect != "sqlite":
            self._listen_pg(keys)
            self._marker = self._read_marker()
            return
        try:
            opened = _open(store, create=True)
            if opened is None:
                raise OSError(errno.ENOENT, "the doorbell folder vanished", root_path(store))
            self.root = opened[0]
            for key in keys:
                slot = _slot(key)
                _count(self.root, slot, +1)
                self.slots.append(slot)
                self._bind(os.path.join(self.root, key))
        except OSError:
            self.close()  # a read-only folder, no Unix sockets...: poll data_version
        except BaseException:
            self.close()
            raise
        # After registering, before the caller's first check (see the module doc).
        self._marker = self._read_marker()

    def _listen_pg(self, keys: Iterable[str]) -> None:
        """PostgreSQL: a socket pair the process's LISTEN connection rings
        (``broker.delivery.pgwake``); polling if the server cannot be listened to."""
        from broker.delivery import pgwake

        try:
            found = pgwake.listener(self.store)
            rd, wr = found.subscribe(keys)
        except Exception:  # noqa: BLE001 - no listener: poll (PG_POLL_S)
            return
        self._pg = (found, wr)
        self.socks.append(rd)

    def _bind(self, folder: str) -> None:
        import secrets
        import socket

        path = os.path.join(folder, f"{os.getpid()}-{secrets.token_hex(3)}")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            s.setblocking(False)
            for _ in range(5):
                runfiles.private_dir(folder)
                try:
                    s.bind(path)
                    break
                except FileNotFoundError:
                    continue  # the last waiter removed the folder between our mkdir and bind
            else:
                raise OSError(errno.ENOENT, "cannot bind a doorbell socket", path)
        except BaseException:
            s.close()
            raise
        self.socks.append(s)
        self.paths.append(path)

    @property
    def polling(self) -> bool:
        return not self.socks

    def _read_marker(self) -> tuple[int, int] | None:
        """(connection, data_version): the version only compares on one connection,
        so a reading on another one counts as a change (a harmless extra check)."""
        store = self.store
        try:
            raw, held = store._checkout()
        except Exception:  # noqa: BLE001 - a failing read must not lose a wake-up
            return None
        try:
            # PostgreSQL has no such marker (a constant): any pooled connection reads it.
            where = id(raw) if store.dialect == "sqlite" else 0
            return where, int(raw.execute(_DATA_VERSION).fetchone()[0])
        except Exception:  # noqa: BLE001
            return None
        finally:
            store._checkin(raw, held)

    def changed(self) -> bool:
        """Whether another connection committed since the last reading (re-read now).

        For a waiter that blocks elsewhere (``broker.api.aio``'s event loop): its
        safety tick and its polling fallback, on the same marker as ``wait()``."""
        now = self._read_marker()
        changed = now is None or now != self._marker
        self._marker = now
        return changed

    def ticked(self) -> bool:
        """At a safety tick: whether a commit may have rung nobody. SQLite reads
        its change marker; PostgreSQL has none, so every tick re-checks (one
        query per waiter per ``SAFETY_S``): a writer killed between its COMMIT
        and its NOTIFY is seen there, not only at the wait's timeout."""
        return self.changed() or self.store.dialect != "sqlite"

    def _drain(self) -> None:
        for s in self.socks:
            with contextlib.suppress(OSError):  # BlockingIOError once empty
                while s.recv(64):
                    pass

    def enter(self) -> bool:
        """The first step of every wait: True if something committed since the
        marker was read (when this Waiter was made, or when the previous wait
        returned), and the caller must re-check instead of sleeping (``woke`` is
        then "changed"). ``wait()`` starts with it; a waiter that blocks
        elsewhere (``broker.api.aio``) calls it, then ``sleeping()`` before each
        block and ``woken(why)`` when it returns."""
        if _hook is not None:
            _hook(self, "enter")
        now = self._read_marker()
        if (now is None or now != self._marker) and self.woke != "changed":
            # Committed after the caller's last check. At most once in a row:
            # under traffic that concerns others the marker moves during every
            # check, and a waiter must not turn into a poller of the tables.
            # A change left here stays unread, so the first tick takes it.
            self._marker = now
            self._drain()  # rings of what the caller is about to see: not a next wake
            return self._return("changed", True)
        return False

    def sleeping(self) -> None:
        """About to block (announced to the test hook)."""
        if _hook is not None:
            _hook(self, "sleep")

    def woken(self, why: str) -> bool:
        """The end of a wait: ``why`` is "rung", "tick", "polled" or "timeout".
        After a ring the doorbell is drained and the marker re-read: the caller
        re-checks from here. True unless it timed out."""
        if why == "rung":
            self._drain()
            self._marker = self._read_marker()
        return self._return(why, why != "timeout")

    def _return(self, why: str, result: bool) -> bool:
        self.woke = why
        if _hook is not None:
            _hook(self, "woke")
        return result

    def wait(self, timeout: float) -> bool:
        """Sleep until rung or ``timeout``; True if something may have changed
        since the Waiter was made or the previous ``wait()`` returned."""
        import select

        if self.enter():
            return True
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return self.woken("timeout")
            self.sleeping()
            if self.polling:
                if self._pg is None and self.store.dialect != "sqlite":
                    # PostgreSQL without a listener: no change marker to read,
                    # so the caller re-checks every PG_POLL_S.
                    time.sleep(min(left, PG_POLL_S))
                    return self._return("polled", True)
                time.sleep(min(left, FALLBACK_POLL_S))
                if self.changed():
                    return self.woken("polled")
                continue
            tick = SAFETY_S * self._jitter
            ready, _, _ = select.select(self.socks, [], [], min(left, tick))
            if ready:
                return self.woken("rung")
            if self.ticked():
                return self.woken("tick")  # a commit rang nobody: re-check
            if left > tick:
                with contextlib.suppress(Exception):
                    self.store.checkpoint()  # idle for a whole tick: fold the WAL back

    def close(self) -> None:
        if self._pg is not None:
            self._pg[0].unsubscribe(self._pg[1])
            self._pg = None
        for s in self.socks:
            with contextlib.suppress(OSError):
                s.close()
        for p in self.paths:
            with contextlib.suppress(OSError):
                os.unlink(p)
            # The last waiter removes the folder (fails harmlessly if others remain).
            with contextlib.suppress(OSError):
                os.rmdir(os.path.dirname(p))
        if self.root is not None:
            for slot in self.slots:
                with contextlib.suppress(OSError, errors.StoreError):
                    _count(self.root, slot, -1)
        self.socks, self.paths, self.slots = [], [], []

    def __enter__(self) -> Waiter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
