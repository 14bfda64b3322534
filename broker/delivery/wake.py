"""Doorbells: wake a waiter in another process right after a commit (S20, S41).

Waiting for mail must be fast (a waiter returns within milliseconds of the
commit that concerns it) and cheap (a hundred idle waiters cost nearly
nothing), and a process's waiters must not cost it a file descriptor each: a
server holding a thousand long-polls or MCP identities would run out (S41).
So each process has ONE doorbell per store: a Unix datagram socket in the
doorbell folder, read by one thread of the process. A waiter registers the
keys it waits for (a participant, or a whole space): the first waiter of the
process on a key puts a marker file named after the process's socket in the
key's folder. A writer, after its commit, lists the folders of the keys its
commit concerns and sends each process found there one datagram naming its
keys; the process's thread rings the in-process ``Bell`` of every waiter on
them (``broker.delivery.bells``: no file descriptor). An idle waiter sleeps
on its bell and costs nothing.

Writers must not pay for doorbells nobody listens to (a send is ~100 µs; a
directory listing is ~10). So processes also count their keys in a small
shared memory map of slots (one byte per hash bucket of keys, changed under a
file lock); a writer reads the slot — no system call — and lists a folder
only when somebody may be waiting there.

A datagram socket's queue is short (``net.unix.max_dgram_qlen``, often 10):
a writer that finds it full (the process is busy or stopped) never blocks; it
leaves a ``<socket>.lost`` file beside the socket and sends once more. The
process's thread looks for that file after each batch it reads and, finding
it, rings every waiter of the process: a missed ring costs re-checks, never
a wake-up.

No lost wake-up, by construction. A ``Waiter`` registers (slot counted,
marker made, bell added) and then reads the store's change marker (``PRAGMA
data_version``, which moves when another connection commits) *before* its
caller checks the database; every return of ``wait()`` re-reads it before
the caller checks again. A writer commits *before* it reads the slot, so a
commit that lands between the caller's check and its ``wait()`` finds the
marker and rings the process, whose thread rings the bell; the bell stays
rung until the waiter's next ``wait()`` sees it. A commit that rings nobody
(its writer was killed between COMMIT and the ring, or wrote with plain SQL)
still moves the marker: ``wait()`` compares it on entry and returns at once
if anything was committed since the reading (at most once in a row, so that
traffic concerning others cannot turn a waiter into a poller of the tables;
a change left unread then is taken by the first tick). While asleep the
waiter looks at the marker about every ``SAFETY_S`` seconds (a few
microseconds, no lock): a safety net, not the mechanism anything depends on.
If sockets cannot be used at all, waiters poll the marker instead
(``FALLBACK_POLL_S``). The asyncio API (``broker.api.aio.Doorbell``) awaits
the bell in its event loop instead of blocking a thread but takes the same
steps, the Waiter's own (``enter``, ``sleeping``, ``woken``, ``changed``):
one logic, not two. On PostgreSQL the process's doorbell is its one LISTEN
connection (``broker.delivery.pgwake``), and the same bells.

The process's socket and thread live while the process has a waiter on the
store, and ``doorbells.LINGER_S`` after the last one leaves (a server whose
long-polls come and go does not make a socket and a thread for each);
``broker.delivery.doorbells`` keeps them, the folder and its files.

Where the doorbells live (spec §Reliability): never in a folder another local user can
pre-create or redirect. The folder is ``<database>-wake`` beside the database
file (in the store folder, 0700). If that path is too long for a socket
address (108 bytes), a short per-user folder is used instead:
``/run/user/<uid>/broker/<digest>`` when that folder (the usual
``$XDG_RUNTIME_DIR``) is this user's own, else ``/tmp/broker-<uid>/<digest>``;
found without reading the environment, so that every process agrees.
Every folder is created 0700 and every file 0600; each is checked before use
(``broker.store.runfiles``: this user's, not a symlink, not writable by
others) and files are opened with ``O_NOFOLLOW``; a folder planted by someone
else is refused with a one-line ``StoreError`` naming it.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from broker import errors
from broker.delivery import doorbells
from broker.delivery.bells import Bell
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
DATAGRAM_MAX = 2048  # bytes of keys per datagram (a writer splits longer lists)

_DATA_VERSION = stmt("store.data_version")

# The keys and the folder every waiter and writer names (broker.delivery.doorbells).
participant_key = doorbells.participant_key
space_key = doorbells.space_key
state_key = doorbells.state_key
board_key = doorbells.board_key
SPACES_KEY = doorbells.SPACES_KEY
root_path = doorbells.root_path
KEY_MAX, ROOT_MAX, SOCKET_PATH_MAX = (
    doorbells.KEY_MAX,
    doorbells.ROOT_MAX,
    doorbells.SOCKET_PATH_MAX,
)

# Test hook: called as ``_hook(waiter, event)`` with event "enter" (wait() was
# called and has not read the change marker yet: the window between a caller's
# check and its wait), "sleep" (about to block) and "woke" (returning; the
# waiter's ``woke`` says why). None outside tests.
_hook: Callable[[Waiter, str], None] | None = None

_sender: socket.socket | None = None


def _close_sender() -> None:
    if _sender is not None:
        _sender.close()


atexit.register(_close_sender)


def _reset_after_fork() -> None:
    global _sender
    _sender = None  # never share a socket object across fork()


os.register_at_fork(after_in_child=_reset_after_fork)


# --- ringing (writers) ------------------------------------------------------------------------
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


def _payloads(keys: list[str]) -> Iterator[bytes]:
    """The keys as datagrams of at most ``DATAGRAM_MAX`` bytes."""
    current = ""
    for key in keys:
        if current and len(current) + len(key) + 1 > DATAGRAM_MAX:
            yield current.encode()
            current = ""
        current = f"{current} {key}" if current else key
    if current:
        yield current.encode()


def ring_keys(store: Store, keys: Iterable[str]) -> int:
    """Ring every process waiting on ``keys``; returns how many process
    doorbells were rung (each rings its own waiters on those keys).

    Runs after a commit, so it never raises: without a usable doorbell folder
    nobody is rung (waiters refuse an unsafe folder themselves, loudly, or
    poll the change marker). On PostgreSQL it is a NOTIFY of its own; writes
    ring inside their transaction instead (``ring_at_commit``)."""
    if store.dialect != "sqlite":
        from broker.delivery import pgwake

        return pgwake.notify(store, keys)
    try:
        opened = doorbells.open_root(store, create=False)
    except (OSError, errors.StoreError):
        return 0
    if opened is None:
        return 0  # nobody ever waited on this database
    root, mm = opened
    targets: dict[str, list[str]] = {}  # a process's doorbell -> its keys rung now
    for key in keys:
        if not mm[doorbells.slot(key)]:
            continue  # nobody waits on this bucket: no system call at all
        try:
            names = _listdir(os.path.join(root, key))
        except (OSError, errors.StoreError):
            continue
        for name in names:
            if doorbells.NAME.fullmatch(name):
                targets.setdefault(name, []).append(key)
    if not targets:
        return 0
    rung = 0
    home = doorbells.home_of(root)
    if home is not None and (mine := targets.pop(home.name, None)) is not None:
        # This process's own waiters (a server's, rung by its own commit): their
        # bells directly, without a datagram to our own doorbell thread.
        home.bells.ring(mine)
        rung += 1
        if not targets:
            return rung
    sock = _sender_sock()
    for name, rung_keys in targets.items():
        path = os.path.join(root, name)
        for payload in _payloads(rung_keys):
            try:
                sock.sendto(payload, path)
            except BlockingIOError:
                _overflowed(sock, path)  # its queue is full: it will ring everyone
            except OSError as exc:
                if exc.errno in (errno.ECONNREFUSED, errno.ENOENT):
                    _remove_dead(root, name, rung_keys)  # its process died without cleaning up
                    break
                continue
        else:
            rung += 1
    return rung


def _overflowed(sock: socket.socket, path: str) -> None:
    """A process's queue is full: leave the mark its thread looks for after
    each batch (it then rings all its waiters), and send once more so that
    a thread that already looked reads another batch ("*": ring everyone)."""
    with contextlib.suppress(OSError):
        os.close(runfiles.open_private(f"{path}.lost", os.O_WRONLY))
    with contextlib.suppress(OSError):
        sock.sendto(b"*", path)


@dataclass(frozen=True)
class Ring:
    """A ring of ``keys`` to run after a commit (``Tx.after_commit``): equal
    rings of one transaction run once, so a stop that records fifty departures
    rings each watcher once."""

    store: Store
    keys: tuple[str, ...]

    def __call__(self) -> None:
        ring_keys(self.store, self.keys)


def ring(store: Store, space_id: str, participant_ids: Iterable[str] = ()) -> None:
    """After a commit: wake the participants it concerns and the space's followers."""
    ring_keys(store, [space_key(space_id), *(participant_key(p) for p in participant_ids)])


def _remove_dead(root: str, name: str, keys: Iterable[str]) -> None:
    for key in keys:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(root, key, name))
    for leftover in (name, f"{name}.lost"):
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(root, leftover))


def keys_of(space_id: str, participant_ids: Iterable[str] = ()) -> list[str]:
    """The doorbells a write in ``space_id`` concerning ``participant_ids`` rings:
    theirs and the space's followers'."""
    return [space_key(space_id), *(participant_key(p) for p in participant_ids)]


def ring_at_commit(t: Tx, keys: Iterable[str]) -> None:
    """Ring ``keys`` when ``t`` commits, never before and never for a rollback.

    SQLite rings the doorbells after the COMMIT (a writer killed in between
    rings nobody: its waiters see the change marker move). PostgreSQL queues
    the NOTIFY inside the transaction itself, and the server delivers it at
    COMMIT (and drops it with a rollback, a rolled-back savepoint's too): no
    window in which a commit rings nobody."""
    key_list = list(keys)
    if t.store.dialect == "sqlite":
        t.after_commit(Ring(t.store, tuple(key_list)))  # equal rings of one commit run once
        return
    from broker.delivery import pgwake

    pgwake.notify_in(t, key_list)


# --- waiting --------------------------------------------------------------------------------
class Waiter:
    """Listens on some doorbells. Create it *before* checking the condition and
    call ``wait()`` after each check that found nothing: whatever commits after
    the Waiter was made (or after the previous ``wait()`` returned) wakes it.

    It holds no file descriptor of its own: its ``bell`` is rung by the
    process's doorbell (see the module doc).

    Raises ``StoreError`` if the doorbell folder is not this user's own; falls
    back to polling the change marker if sockets cannot be used here."""

    def __init__(self, store: Store, keys: Iterable[str]) -> None:
        self.store = store
        self.keys = list(dict.fromkeys(keys))
        self.bell = Bell()
        self.woke = ""  # why the last wait() returned: changed | rung | tick | polled | timeout
        # Waiters started together must not tick together: each tick's re-check
        # commits (a heartbeat), which every other waiter would see on entry.
        import secrets

        self._jitter = 0.75 + secrets.randbelow(501) / 1000
        self._pid = os.getpid()
        self._home: doorbells.ProcessDoorbell | None = None
        self._pg: Any = None  # the process's pgwake.Listener
        if store.dialect != "sqlite":
            self._listen_pg()
        else:
            # A read-only folder, no Unix sockets...: poll data_version.
            with contextlib.suppress(OSError):
                self._home = doorbells.register(store, self.keys, self.bell)
        # After registering, before the caller's first check (see the module doc).
        self._marker = self._read_marker()

    def _listen_pg(self) -> None:
        """PostgreSQL: the bell on the process's LISTEN connection
        (``broker.delivery.pgwake``); polling if the server cannot be listened to."""
        from broker.delivery import pgwake

        try:
            found = pgwake.listener(self.store)
            found.subscribe(self.keys, self.bell)
        except Exception:  # noqa: BLE001 - no listener: poll (PG_POLL_S)
            return
        self._pg = found

    @property
    def polling(self) -> bool:
        return self._home is None and self._pg is None

    @property
    def paths(self) -> list[str]:
        """The markers of this waiter's keys (its process's, shared with its
        other waiters on them); empty when polling or on PostgreSQL."""
        home = self._home
        return [] if home is None else [home.marker(k) for k in self.keys]

    @property
    def socket_path(self) -> str | None:
        """Its process's doorbell socket (None when polling or on PostgreSQL)."""
        return None if self._home is None else self._home.path

    def _read_marker(self) -> tuple[int, int] | None:
        """(connection, data_version): the version only compares on one connection,
        so a reading on another one counts as a change (a harmless extra check)."""
        store = self.store
        if store.dialect != "sqlite":
            return 0, 0  # no such marker: NOTIFY is sent by the COMMIT itself
        try:
            raw, held = store._checkout()
        except Exception:  # noqa: BLE001 - a failing read must not lose a wake-up
            return None
        try:
            return id(raw), int(raw.execute(_DATA_VERSION).fetchone()[0])
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
        its change marker. PostgreSQL has none and needs none: its NOTIFY is
        part of the commit (``ring_at_commit``), and a LISTEN connection that
        dropped rings every waiter when it is back."""
        return self.changed()

    def _drain(self) -> None:
        self.bell.clear()

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
        After a ring (or a tick) the bell is cleared and the marker re-read:
        the caller re-checks from here. True unless it timed out."""
        if why in ("rung", "tick"):
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
        if self.enter():
            return True
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return self.woken("timeout")
            self.sleeping()
            if self.polling:
                if self.store.dialect != "sqlite":
                    # PostgreSQL without a listener: no change marker to read,
                    # so the caller re-checks every PG_POLL_S.
                    time.sleep(min(left, PG_POLL_S))
                    return self._return("polled", True)
                time.sleep(min(left, FALLBACK_POLL_S))
                if self.changed():
                    return self.woken("polled")
                continue
            tick = SAFETY_S * self._jitter
            if self.bell.wait(min(left, tick)):
                return self.woken("rung")
            if self.ticked():
                return self.woken("tick")  # a commit rang nobody: re-check
            if left > tick:
                with contextlib.suppress(Exception):
                    self.store.checkpoint()  # idle for a whole tick: fold the WAL back

    def close(self) -> None:
        home, pg = self._home, self._pg
        self._home = self._pg = None
        if self._pid != os.getpid():
            return  # made before a fork(): its registrations are the parent's
        if pg is not None:
            pg.unsubscribe(self.keys, self.bell)
        if home is not None:
            doorbells.unregister(home, self.keys, self.bell)

    def __enter__(self) -> Waiter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
