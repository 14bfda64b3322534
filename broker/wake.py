"""Doorbells: wake a waiter in another process right after a commit (S20).

Waiting for mail must be fast (a waiter returns within milliseconds of the
commit that concerns it) and cheap (a hundred idle waiters cost nearly
nothing). Polling the tables gives one or the other, not both. So each waiter
binds a Unix datagram socket in a folder named after what it waits for (a
participant, or a whole space); a writer, after its commit, sends one byte to
every socket in the folders its commit concerns. An idle waiter sleeps in
``select`` and costs nothing.

Doorbells are an accelerator, never the source of truth: after every wake-up
(and at least every ``SAFETY_S`` seconds, in case a ring was lost, e.g. from a
writer on another host) the waiter re-checks the database. If sockets cannot
be used at all, waiters fall back to polling ``PRAGMA data_version``.

Folders live under ``$XDG_RUNTIME_DIR`` (or the temp dir), per user and per
database file, mode 0700, with short names because a socket path is limited to
108 bytes.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
import select
import socket
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.db import Store

SAFETY_S = 1.0  # re-check the database at least this often, rung or not
FALLBACK_POLL_S = 0.002  # data_version polling when sockets are unavailable

_sender: socket.socket | None = None


def _root(store: Store) -> Path:
    cached = getattr(store, "_wake_root", None)
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    digest = hashlib.sha1(str(store.path).encode()).hexdigest()[:12]
    root = Path(base) / f"broker-wake-{os.getuid()}" / digest
    store._wake_root = root  # type: ignore[attr-defined]
    return root


def _ensure_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)


def participant_key(participant_id: str) -> str:
    return f"p{participant_id}"


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
    rung = 0
    sock: socket.socket | None = None
    for key in keys:
        folder = root / key
        try:
            names = os.listdir(folder)
        except FileNotFoundError:
            continue
        if not names:
            continue
        if sock is None:
            sock = _sender_sock()
        for name in names:
            path = str(folder / name)
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


class Waiter:
    """Listens on some doorbells. Create it *before* checking the condition,
    so a commit between the check and the wait still wakes it."""

    def __init__(self, store: Store, keys: Iterable[str]) -> None:
        self.store = store
        self.socks: list[socket.socket] = []
        self.paths: list[str] = []
        self._data_version: int | None = None
        root = _root(store)
        try:
            for key in keys:
                self._bind(root / key)
        except OSError:
            self.close()  # fall back to polling data_version

    def _bind(self, folder: Path) -> None:
        path = str(folder / f"{os.getpid()}-{secrets.token_hex(3)}")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.setblocking(False)
        for _ in range(5):
            _ensure_dir(folder)
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
        ready, _, _ = select.select(self.socks, [], [], min(timeout, SAFETY_S))
        for s in ready:
            with contextlib.suppress(OSError):
                while s.recv(64):
                    pass
        return bool(ready) or timeout > SAFETY_S

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
            # The last waiter removes the folder, so a writer ringing a key nobody
            # waits on pays one failed lookup, not a directory listing.
            with contextlib.suppress(OSError):
                os.rmdir(os.path.dirname(p))
        self.socks, self.paths = [], []

    def __enter__(self) -> Waiter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
