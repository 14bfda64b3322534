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
somebody may be waiting there. The order makes it race-free: a waiter counts
itself and binds *before* it checks the database, a writer commits *before*
it reads the slot, so either the writer sees the waiter or the waiter sees the
commit.

Doorbells are an accelerator, never the source of truth: after every wake-up
the waiter re-checks the database, and every ``SAFETY_S`` seconds it looks at
``PRAGMA data_version`` (a few microseconds, no lock) in case a ring was lost
(a writer killed between its commit and its ring): only if something was
committed meanwhile does it re-check. So an idle waiter costs a select() and a
pragma per tick, not a transaction. If sockets cannot be used at all, waiters
fall back to polling ``PRAGMA data_version``.

Folders live under ``$XDG_RUNTIME_DIR`` (or the temp dir), per user and per
database file, mode 0700, with short names because a socket path is limited to
108 bytes.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import mmap
import os
import secrets
import select
import socket
import tempfile
import time
import zlib
from collections.abc import Iterable
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.db import Store

SAFETY_S = 5.0  # look for commits that rang nobody (a writer killed after COMMIT) this often
FALLBACK_POLL_S = 0.002  # data_version polling when sockets are unavailable
SLOTS = 8192  # shared-memory buckets of waiter counts

_sender: socket.socket | None = None
_maps: dict[str, mmap.mmap] = {}


def _root(store: Store) -> str:
    cached: str | None = getattr(store, "_wake_root", None)
    if cached is not None:
        return cached
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    digest = hashlib.sha1(str(store.path).encode()).hexdigest()[:12]
    root = os.path.join(base, f"broker-wake-{os.getuid()}", digest)
    os.makedirs(root, mode=0o700, exist_ok=True)
    store._wake_root = root  # type: ignore[attr-defined]
    return root


def _slots(root: str) -> mmap.mmap:
    mm = _maps.get(root)
    if mm is None:
        path = os.path.join(root, "slots")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size < SLOTS:
                os.ftruncate(fd, SLOTS)
            mm = mmap.mmap(fd, SLOTS)
        finally:
            os.close(fd)
        _maps[root] = mm
    return mm


@lru_cache(maxsize=65536)
def _slot(key: str) -> int:
    return zlib.crc32(key.encode()) % SLOTS


def participant_key(participant_id: str) -> str:
    return f"p{participant_id}"


@lru_cache(maxsize=4096)
def space_key(space_id: str) -> str:
    return "s" + hashlib.sha1(space_id.encode()).hexdigest()[:16]


def _sender_sock() -> socket.socket:
    global _sender
    if _sender is None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.setblocking(False)
        _sender = s
    return _sender


def _reset_after_fork() -> None:
    global _sender
    _sender = None  # never share a socket object across fork()


os.register_at_fork(after_in_child=_reset_after_fork)


def ring_keys(store: Store, keys: Iterable[str]) -> int:
    """Ring every waiter on ``keys``; returns how many sockets were rung."""
    root = _root(store)
    mm = _slots(root)
    rung = 0
    for key in keys:
        if not mm[_slot(key)]:
            continue  # nobody waits on this bucket: no system call at all
        folder = os.path.join(root, key)
        try:
            names = os.listdir(folder)
        except FileNotFoundError:
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
                if exc.errno in (errno.ECONNREFUSED, errno.ENOENT):
                    with contextlib.suppress(OSError):
                        os.unlink(path)  # its waiter died without cleaning up
    return rung


def ring(store: Store, space_id: str, participant_ids: Iterable[str] = ()) -> None:
    """After a commit: wake the participants it concerns and the space's followers."""
    ring_keys(store, [space_key(space_id), *(participant_key(p) for p in participant_ids)])


def ring_space(store: Store, space_id: str) -> None:
    ring_keys(store, [space_key(space_id)])


def _count(root: str, slot: int, delta: int) -> None:
    """Change a slot's waiter count under an exclusive lock (waiters only)."""
    mm = _slots(root)
    fd = os.open(os.path.join(root, "slots"), os.O_RDWR)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX)
        value = mm[slot]
        if value < 255:  # saturated slots stay "maybe waiting": only costs a listing
            mm[slot] = max(0, value + delta)
        fcntl.lockf(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


class Waiter:
    """Listens on some doorbells. Create it *before* checking the condition,
    so a commit between the check and the wait still wakes it."""

    def __init__(self, store: Store, keys: Iterable[str]) -> None:
        self.store = store
        self.socks: list[socket.socket] = []
        self.paths: list[str] = []
        self.slots: list[int] = []
        self._data_version: int | None = None
        try:
            self.root = _root(store)
            for key in keys:
                slot = _slot(key)
                _count(self.root, slot, +1)
                self.slots.append(slot)
                self._bind(os.path.join(self.root, key))
        except OSError:
            self.close()  # fall back to polling data_version

    def _bind(self, folder: str) -> None:
        path = os.path.join(folder, f"{os.getpid()}-{secrets.token_hex(3)}")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.setblocking(False)
        for _ in range(5):
            os.makedirs(folder, mode=0o700, exist_ok=True)
            try:
                s.bind(path)
                break
            except FileNotFoundError:
                continue  # the last waiter removed the folder between our mkdir and bind
        else:
            s.close()
            raise OSError(errno.ENOENT, "cannot bind a doorbell socket", path)
        self.socks.append(s)
        self.paths.append(path)

    @property
    def polling(self) -> bool:
        return not self.socks

    def wait(self, timeout: float) -> bool:
        """Sleep until rung or ``timeout``; True if something may have changed."""
        if timeout <= 0:
            return False
        if self.polling:
            return self._poll(timeout)
        deadline = time.monotonic() + timeout
        if timeout > SAFETY_S:
            self._committed_since_last_tick()  # the baseline for the ticks below
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            ready, _, _ = select.select(self.socks, [], [], min(left, SAFETY_S))
            if ready:
                for s in ready:
                    with contextlib.suppress(OSError):
                        while s.recv(64):
                            pass
                return True
            if left > SAFETY_S:
                if self._committed_since_last_tick():
                    return True  # a commit happened without a ring reaching us: re-check
                with contextlib.suppress(Exception):
                    self.store.checkpoint()  # idle for a whole tick: fold the WAL back

    def _committed_since_last_tick(self) -> bool:
        """Whether another connection committed since the previous check."""
        try:
            v = self.store.data_version()
        except Exception:  # noqa: BLE001 - a failing check must not lose a wake-up
            return True
        changed = self._data_version is None or v != self._data_version
        self._data_version = v
        return bool(changed)

    def _poll(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        raw = self.store.connect()
        try:
            # data_version is per connection, so take the baseline on this one.
            self._data_version = raw.execute("PRAGMA data_version").fetchone()[0]
            while time.monotonic() < deadline:
                time.sleep(FALLBACK_POLL_S)
                v = raw.execute("PRAGMA data_version").fetchone()[0]
                if v != self._data_version:
                    self._data_version = v
                    return True
        finally:
            raw.close()
        return False

    def close(self) -> None:
        for s in self.socks:
            with contextlib.suppress(OSError):
                s.close()
        for p in self.paths:
            with contextlib.suppress(OSError):
                os.unlink(p)
            # The last waiter removes the folder (fails harmlessly if others remain).
            with contextlib.suppress(OSError):
                os.rmdir(os.path.dirname(p))
        for slot in self.slots:
            with contextlib.suppress(OSError):
                _count(self.root, slot, -1)
        self.socks, self.paths, self.slots = [], [], []

    def __enter__(self) -> Waiter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
