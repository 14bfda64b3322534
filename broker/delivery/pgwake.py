"""Doorbells on PostgreSQL: LISTEN/NOTIFY behind the same ``wake`` API (S20, S41).

A write queues one ``NOTIFY`` on the store's channel inside its own
transaction (``notify_in``, called by ``wake.ring_at_commit``), whose payload
names the keys it concerns (``broker.delivery.wake``'s participant and space
keys). PostgreSQL delivers it when the transaction commits and drops it if
it rolls back: no writer can die between its COMMIT and its ring.

Each process keeps ONE listening connection per database, shared by all its
waiters (S41: a process waiting for a thousand participants still holds one;
``application_name`` ``broker-listen`` in ``pg_stat_activity``), and a thread
that hands every notification to the waiters registered on its keys by
ringing their ``Bell`` (``broker.delivery.bells``: no file descriptor per
waiter), so a ``wake.Waiter`` and ``aio.Doorbell`` wait on PostgreSQL exactly
as they wait on a SQLite store's doorbell.

No lost wake-up: a waiter is registered with a listener whose ``LISTEN`` is
already in force before the caller's first check, so a commit after that
check is notified to it. If the listening connection drops, it reconnects and
rings every waiter of the process (a notification may have been missed; the
waiters re-check).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from broker.delivery.bells import Bell, Bells
from broker.store.sql import stmt

if TYPE_CHECKING:
    from broker.store.sqlite import Store, Tx

CHANNEL = "broker_wake"  # one channel per store: a channel is scoped to its database
PAYLOAD_MAX = 7900  # NOTIFY payloads stop at 8000 bytes
APPLICATION = "broker-listen"  # the listening connection's name in pg_stat_activity
_NOTIFY = stmt("store.notify")

_listeners: dict[tuple[int, str], Listener] = {}
_guard = threading.Lock()


def _payloads(keys: Iterable[str]) -> list[str]:
    """The keys as NOTIFY payloads of at most ``PAYLOAD_MAX`` bytes each."""
    payloads: list[str] = []
    current = ""
    for key in keys:
        if current and len(current) + len(key) + 1 > PAYLOAD_MAX:
            payloads.append(current)
            current = ""
        current = f"{current} {key}" if current else key
    if current:
        payloads.append(current)
    return payloads


def notify_in(t: Tx, keys: Iterable[str]) -> None:
    """Queue the NOTIFY of ``keys`` in ``t``: delivered by its COMMIT, dropped
    with its rollback (or its savepoint's)."""
    for payload in _payloads(keys):
        t.defer(_NOTIFY, {"channel": CHANNEL, "payload": payload})  # goes with the COMMIT


def notify(store: Store, keys: Iterable[str]) -> int:
    """A NOTIFY of its own, outside any write (``wake.ring_keys``). Never raises
    (a ring is a hint)."""
    payloads = _payloads(keys)
    if not payloads:
        return 0
    try:
        raw, held = store._checkout()
    except Exception:  # noqa: BLE001 - waiters re-check on their own
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
        self.bells = Bells()
        self.conn = self._connect()  # LISTEN is in force from here on
        self.thread = threading.Thread(target=self._run, name="broker-listen", daemon=True)
        self.thread.start()

    def _connect(self) -> Any:
        import psycopg

        conn = psycopg.connect(
            self.conninfo, autocommit=True, connect_timeout=10, application_name=APPLICATION
        )
        conn.execute(f"LISTEN {CHANNEL}")
        return conn

    def subscribe(self, keys: Iterable[str], bell: Bell) -> None:
        """Ring ``bell`` on every notification naming one of ``keys``."""
        with self.bells.lock:
            self.bells.add(keys, bell)

    def unsubscribe(self, keys: Iterable[str], bell: Bell) -> None:
        with self.bells.lock:
            self.bells.remove(keys, bell)

    def waiting(self, key: str) -> int:
        """How many waiters of this process wait on ``key`` now."""
        return self.bells.waiting(key)

    def _run(self) -> None:
        while True:
            try:
                for note in self.conn.notifies():
                    self.bells.ring(note.payload.split())
            except Exception:  # noqa: BLE001 - the connection dropped: reconnect below
                pass
            delay = 0.05
            while True:
                time.sleep(delay)
                try:
                    self.conn = self._connect()
                    break
                except Exception:  # noqa: BLE001 - the server is away or full: keep trying
                    delay = min(delay * 2, 2.0)
            self.bells.ring_all()  # something may have been missed meanwhile: everyone re-checks


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
