"""Doorbells on PostgreSQL: LISTEN/NOTIFY behind the same ``wake`` API (S20).

A writer, right after its commit, sends one ``NOTIFY`` on the store's channel
whose payload names the keys it concerns (``broker.delivery.wake``'s participant and
space keys). Each process keeps ONE listening connection per database (not
one per waiter), and a thread that hands every notification to the waiters
registered on its keys by writing a byte to their socket pair, so a
``wake.Waiter`` (``select``) and ``aio.Doorbell`` (the event loop's reader)
wait on PostgreSQL exactly as they wait on a SQLite store's doorbell sockets.

No lost wake-up: a waiter is registered with a listener whose ``LISTEN`` is
already in force before the caller's first check, so a commit after that
check is notified to it. If the listening connection drops, it reconnects and
rings every waiter of the process (a notification may have been missed; the
waiters re-check). The one window SQLite's change marker covers and this does
not: a writer killed between its COMMIT and its NOTIFY rings nobody; its
waiters see the change at their next check (a timeout or another ring).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from broker.store.sql import stmt

if TYPE_CHECKING:
    from broker.store.sqlite import Store

CHANNEL = "broker_wake"  # one channel per store: a channel is scoped to its database
PAYLOAD_MAX = 7900  # NOTIFY payloads stop at 8000 bytes
_NOTIFY = stmt("store.notify")

_listeners: dict[tuple[int, str], Listener] = {}
_guard = threading.Lock()


def notify(store: Store, keys: Iterable[str]) -> int:
    """After a commit: one NOTIFY per ~8 kB of keys. Never raises (a ring is a hint)."""
    payloads: list[str] = []
    current = ""
    for key in keys:
        if current and len(current) + len(key) + 1 > PAYLOAD_MAX:
            payloads.append(current)
            current = ""
        current = f"{current} {key}" if current else key
    if current:
        payloads.append(current)
    if not payloads:
        return 0
    try:
        raw, held = store._checkout()
    except Exception:  # noqa: BLE001 - the commit stands; waiters re-check on their own
        return 0
    try:
        for payload in payloads:
            raw.execute(_NOTIFY, {"channel": CHANNEL, "payload": payload})
    except Exception:  # noqa: BLE001
        return 0
    finally:
        store._checkin(raw, held)
    return len(payloads)


class Listener:
    """The process's listening connection to one database, and its dispatcher."""

    def __init__(self, conninfo: str) -> None:
        self.conninfo = conninfo
        self.subs: dict[str, set[socket.socket]] = defaultdict(set)
        self.lock = threading.Lock()
        self.conn = self._connect()  # LISTEN is in force from here on
        self.thread = threading.Thread(target=self._run, name="broker-listen", daemon=True)
        self.thread.start()

    def _connect(self) -> Any:
        import psycopg

        conn = psycopg.connect(self.conninfo, autocommit=True)
        conn.execute(f"LISTEN {CHANNEL}")
        return conn

    def subscribe(self, keys: Iterable[str]) -> tuple[socket.socket, socket.socket]:
        """(read end for the waiter, write end kept here) registered on ``keys``."""
        rd, wr = socket.socketpair()
        rd.setblocking(False)
        wr.setblocking(False)
        with self.lock:
            for key in keys:
                self.subs[key].add(wr)
        return rd, wr

    def unsubscribe(self, wr: socket.socket) -> None:
        with self.lock:
            for key in [k for k, socks in self.subs.items() if wr in socks]:
                self.subs[key].discard(wr)
                if not self.subs[key]:
                    del self.subs[key]
        wr.close()

    def _ring(self, targets: Iterable[socket.socket]) -> None:
        for s in targets:
            with contextlib.suppress(OSError):  # full (already rung) or closed meanwhile
                s.send(b"!")

    def _run(self) -> None:
        while True:
            try:
                for note in self.conn.notifies():
                    keys = note.payload.split()
                    with self.lock:
                        targets = {s for k in keys for s in self.subs.get(k, ())}
                    self._ring(targets)
            except Exception:  # noqa: BLE001 - the connection dropped: reconnect below
                pass
            delay = 0.05
            while True:
                time.sleep(delay)
                try:
                    self.conn = self._connect()
                    break
                except Exception:  # noqa: BLE001 - the server is away: keep trying
                    delay = min(delay * 2, 2.0)
            with self.lock:  # something may have been missed meanwhile: everyone re-checks
                targets = {s for socks in self.subs.values() for s in socks}
            self._ring(targets)


def listener(store: Store) -> Listener:
    """This process's listener on ``store``'s database (made on first use)."""
    conninfo: str = store.conninfo  # type: ignore[attr-defined]
    key = (os.getpid(), conninfo)
    found = _listeners.get(key)
    if found is None:
        with _guard:
            found = _listeners.get(key)
            if found is None:
                found = _listeners[key] = Listener(conninfo)
    return found


def _reset_after_fork() -> None:
    global _guard
    _guard = threading.Lock()  # the listener threads of the parent are not in the child


os.register_at_fork(after_in_child=_reset_after_fork)
