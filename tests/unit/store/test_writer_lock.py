"""The writer lock (spec §Storage, "Writer lock"): every write transaction holds
the lock of ``<database>.lock`` (its robust mutex, or its ``flock`` with
``BROKER_WRITER_LOCK=flock`` or where there is no such mutex) from right before
``BEGIN IMMEDIATE`` to right after ``COMMIT``/``ROLLBACK``; readers never take
it; the wait is bounded; it is let go when its holder dies; a writer that does
not use it is still safe behind SQLite's busy handler. Every test runs with
each of the two kinds.

Real processes hold the lock; who holds and who waits is read from the kernel
(``lockview``: ``/proc/locks``, the mutex's futex word and the waiters' system
calls), never guessed from timing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import lockview
import pytest
import trusted

from broker import Operator, Store, errors
from broker.store import writelock
from broker.store.settings import StoreSettings
from broker.store.sqlite import CHECKPOINT_FRAMES

HOLDER = """
import sys
from broker import Store
store = Store(sys.argv[1])
with store.write() as t:
    t.execute("SELECT count(*) FROM spaces").fetchone()
    print("holding", flush=True)
    sys.stdin.readline()
print("released", flush=True)
store.close()
"""

DEADLINE_S = 30.0


@pytest.fixture(autouse=True, params=["mutex", "flock"])
def kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Which lock the stores of the test (and the processes it starts) take."""
    kind = str(request.param)
    if kind == "mutex" and writelock.kind(flock_only=False) != "mutex":
        pytest.skip("LOUD SKIP: this platform has no robust process-shared mutex")
    monkeypatch.setenv("BROKER_WRITER_LOCK", "flock" if kind == "flock" else "on")
    return kind


flocks = lockview.holders  # the name these tests had when the flock was the only kind


def until(cond: Callable[[], bool], what: str) -> None:
    """Wait for a condition the kernel or another process makes true (no fixed sleep)."""
    deadline = time.monotonic() + DEADLINE_S
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def fds_to(path: Path) -> int:
    """How many file descriptors of this process point at ``path``."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == str(path):
                n += 1
        except OSError:
            pass
    return n


@contextmanager
def holder(url: str) -> Iterator[subprocess.Popen[str]]:
    """A real process inside a write transaction (holding the writer lock)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "holding"
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def release(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("go\n")
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == "released"


def with_timeout(store: Store, ms: int) -> Store:
    return Store(store.url, settings=dataclasses.replace(store.settings, busy_timeout_ms=ms))


def space_count(store: Store) -> int:
    with store.read() as t:
        return int(t.one("SELECT count(*) FROM spaces")[0])


def lock_of(store: Store) -> Path:
    return Path(f"{store.path}.lock")


def test_storage_a_write_transaction_holds_the_writer_lock_and_releases_it(store: Store) -> None:
    lock = lock_of(store)
    with store.write():
        assert flocks(lock) == [(os.getpid(), False)]
    assert flocks(lock) == []
    st = os.stat(lock)
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.getuid()


def test_storage_the_writer_lock_is_dropped_when_its_holder_is_killed(store: Store) -> None:
    Operator(store).create_space("workflow")
    lock = lock_of(store)
    with holder(store.url) as proc:
        assert flocks(lock) == [(proc.pid, False)]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        # The kernel dropped it with the process: the next writer goes at once.
        assert flocks(lock) == []
        quick = with_timeout(store, 2000)
        try:
            Operator(quick).create_space("workflow")
        finally:
            quick.close()
    assert space_count(store) == 2  # the killed transaction left nothing behind


@contextmanager
def queued_behind(store: Store) -> Iterator[None]:
    """A writer of this process (a thread making a space) queued behind the
    holder (``holder``), as the kernel shows it; the body lets the holder go
    (one way or another), and the writer must then have written."""
    done = threading.Event()
    failed: list[BaseException] = []

    def write() -> None:
        try:
            Operator(store).create_space("workflow")
        except BaseException as exc:  # noqa: BLE001 - reported below
            failed.append(exc)
        done.set()

    before = space_count(store)
    t = threading.Thread(target=write)
    t.start()
    try:
        lock = lock_of(store)
        until(lambda: (os.getpid(), True) in flocks(lock), "our writer to queue on the lock")
        assert not done.is_set()
        assert space_count(store) == before
        yield
    finally:
        t.join(DEADLINE_S)
    assert done.is_set() and not failed, failed
    assert space_count(store) == before + 1


def test_storage_a_waiting_writer_is_woken_when_the_holder_commits(store: Store) -> None:
    # The kernel shows our writer queued behind the holder, and hands it the
    # lock when the holder lets go.
    with holder(store.url) as proc, queued_behind(store):
        assert space_count(store) == 0  # queued: it has not written
        release(proc)
    assert space_count(store) == 1  # it wrote once the holder let go


def test_storage_the_wait_is_bounded_with_a_store_busy_error(store: Store, kind: str) -> None:
    lock = lock_of(store)
    quick = with_timeout(store, 200)
    try:
        with holder(store.url) as proc:
            with pytest.raises(errors.StoreBusy, match="writer lock stayed taken") as info:
                Operator(quick).create_space("workflow")
            assert "\n" not in str(info.value) and str(lock) in str(info.value)
            assert info.value.exit_code == 11
            assert space_count(store) == 0  # nothing written
            release(proc)
        if kind == "flock":
            # The abandoned wait gave its file description back (closing it once its
            # flock returned), and the store writes again through a fresh one.
            until(lambda: fds_to(lock) == 0, "the abandoned wait to close its file description")
        Operator(quick).create_space("workflow")
        assert space_count(store) == 1
        assert flocks(lock) == []
    finally:
        quick.close()


def test_storage_readers_never_take_the_writer_lock(store: Store) -> None:
    Operator(store).create_space("workflow")
    before = fds_to(lock_of(store))
    reader = with_timeout(store, 50)
    try:
        with holder(store.url), reader.read() as t:
            assert t.one("SELECT count(*) FROM spaces")[0] == 1
        # This reader's connection never even opened the lock file.
        assert fds_to(lock_of(store)) == before
    finally:
        reader.close()


def test_storage_a_writer_without_the_lock_is_still_safe_behind_the_busy_handler(
    store: Store,
) -> None:
    """The sqlite3 shell takes SQLite's write lock but not the broker's: the
    broker's writer gets the flock, then waits in SQLite's busy handler."""
    shell = shutil.which("sqlite3")
    if shell is None:
        pytest.skip("the sqlite3 shell is not installed")
    lock = lock_of(store)
    proc = subprocess.Popen(
        [shell, "-batch", str(store.path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    done = threading.Event()
    failed: list[BaseException] = []

    def write() -> None:
        try:
            Operator(store).create_space("workflow")
        except BaseException as exc:  # noqa: BLE001
            failed.append(exc)
        done.set()

    t = threading.Thread(target=write)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(
            "BEGIN IMMEDIATE;\nCREATE TABLE shell_work (x INTEGER);\n"
            "INSERT INTO shell_work VALUES (1);\n.print began\n"
        )
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "began"
        t.start()
        until(lambda: (os.getpid(), False) in flocks(lock), "our writer to hold the flock")
        assert not done.is_set()  # it holds the flock yet cannot write: the shell has SQLite's lock
        proc.stdin.write("COMMIT;\n.print committed\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "committed"
        t.join(DEADLINE_S)
        assert done.is_set() and not failed, failed
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    with store.read() as tx:
        assert tx.one("SELECT count(*) FROM shell_work")[0] == 1
    assert space_count(store) == 1


def test_storage_a_forked_child_does_not_share_the_parents_writer_lock(store: Store) -> None:
    """flock belongs to the open file description: a child that reused the
    parent's would 'get' a lock the parent holds. The child closes its copies."""
    lock = lock_of(store)
    Operator(store).create_space("workflow")  # this thread's connection has its lock open
    with store.write():
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            code = 1
            try:
                inherited = fds_to(lock)
                child = with_timeout(store, 100)
                try:
                    Operator(child).create_space("workflow")
                    code = 3  # it wrote while the parent holds the lock: shared
                except errors.StoreBusy:
                    code = 0 if inherited == 0 else 4
                child.close()
            finally:
                os._exit(code)
        try:
            _, status = os.waitpid(pid, 0)
        except BaseException:
            os.kill(pid, signal.SIGKILL)  # never leave it behind
            os.waitpid(pid, 0)
            raise
    assert os.waitstatus_to_exitcode(status) == 0
    assert space_count(store) == 1


def test_storage_a_lock_file_planted_as_a_symlink_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'home' / 'broker.db'}"
    store = Store(url)
    try:
        lock = lock_of(store)
        victim = tmp_path / "victim.txt"
        victim.write_text("mine")
        os.unlink(lock)
        os.symlink(victim, lock)
        other = Store(url)  # a fresh process's view: no lock file open yet
        try:
            with pytest.raises(errors.StoreError, match="symbolic link") as info:
                Operator(other).create_space("workflow")
            assert "\n" not in str(info.value)
        finally:
            other.close()
        assert victim.read_text() == "mine"
        assert space_count(store) == 0
    finally:
        store.close()


NOBODY = 65534  # the other user of the planted-file test


def test_storage_a_lock_file_writable_by_others_is_refused_not_skipped(tmp_path: Path) -> None:
    """A lock path this user cannot open because it is not private (mode 066:
    EACCES for its owner, writable by everyone) is refused in one line; it never
    switches the writer lock off (as a read-only folder does)."""
    url = f"sqlite:///{tmp_path / 'home' / 'broker.db'}"
    store = Store(url)
    try:
        lock = lock_of(store)
        os.chmod(lock, 0o066)
        other = Store(url)  # a fresh process's view: no lock file open yet
        try:
            with pytest.raises(errors.StoreError, match="writable by group or others") as info:
                Operator(other).create_space("workflow")
            assert "\n" not in str(info.value) and str(lock) in str(info.value)
        finally:
            other.close()
        assert space_count(store) == 0
    finally:
        store.close()


@pytest.mark.skipif(
    os.getuid() != 0,
    reason="LOUD SKIP: planting a file of another user needs root (chown); the mode-066 "
    "variant above covers the same refusal for any user",
)
def test_storage_a_lock_file_of_another_user_is_refused_not_skipped() -> None:
    """A planted lock file: a file of another user (root, 0600) at ``<db>.lock``
    gives the store's owner EACCES. Before, that read as "a read-only folder"
    and every write went on without the writer lock; now it is refused in one
    line naming the file and its owner. A read-only folder still means "no
    lock file" (not an error)."""
    import json
    import tempfile

    from broker.store.writelock import WriterLock

    base = Path(tempfile.mkdtemp(prefix="broker-planted-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)  # NOBODY reaches its own folder inside
        home = base / "home"
        home.mkdir(mode=0o700)
        os.chown(home, NOBODY, NOBODY)
        lock = home / "broker.db.lock"
        lock.write_text("")  # planted by root, 0600: NOBODY cannot open it
        os.chmod(lock, 0o600)
        readonly = base / "readonly"  # root's folder: NOBODY can create nothing there
        readonly.mkdir(mode=0o755)

        def as_nobody() -> dict[str, str]:
            # A forked child (no exec: the interpreter lives in root's home)
            # that becomes NOBODY and takes both locks.
            out: dict[str, str] = {}
            for name, path in (("planted", lock), ("readonly", readonly / "broker.db.lock")):
                try:
                    out[name] = "taken" if WriterLock(str(path)).acquire(5) else "no lock"
                except errors.StoreError as exc:
                    out[name] = f"{exc.code}: {exc}"
            return out

        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child reports through the pipe
            code = 0
            try:
                os.close(r)
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
                os.write(w, json.dumps(as_nobody()).encode())
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        os.close(w)
        with os.fdopen(r, "rb") as f:
            got = json.loads(f.read() or b"{}")
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert got == {
            "planted": f"store_error: refusing the file {lock}: it belongs to uid 0, "
            f"not to this user (uid {NOBODY})",
            "readonly": "no lock",  # a read-only folder: writers go on behind SQLite's busy handler
        }
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_storage_the_first_open_migration_uses_the_writer_lock_file(tmp_path: Path) -> None:
    """One lock file per store: no ``*.migrate.lock`` beside it any more."""
    folder = tmp_path / "home"
    store = Store(f"sqlite:///{folder / 'broker.db'}")
    try:
        Operator(store).create_space("workflow")
        names = sorted(p.name for p in folder.iterdir())
        assert "broker.db.lock" in names
        assert not [n for n in names if n.endswith(".migrate.lock")]
    finally:
        store.close()


def test_storage_the_wal_stays_bounded_under_the_writer_lock(store: Store) -> None:
    """The writers fold the WAL back about every CHECKPOINT_FRAMES pages,
    counted in commits under the writer lock, after letting it go (SQLite's
    automatic checkpoint, inside a COMMIT, stays as a backstop just past it);
    the broker never opens SQLite's -shm itself (closing such a descriptor
    would drop SQLite's own POSIX locks on it)."""

    space = Operator(store).create_space("workflow", inbox_cap=10**9).id
    a, _ = trusted.join(store, space, "a")
    trusted.join(store, space, "b")
    with store.read() as t:
        assert t.one("PRAGMA wal_autocheckpoint")[0] == 1000
    assert CHECKPOINT_FRAMES < 1000
    wal_sizes = []
    for i in range(3000):
        a.send("b", "x" * 2000)
        if i % 500 == 499:
            wal_sizes.append(os.path.getsize(f"{store.path}-wal"))
    # ~6 MB of log went through; 1,000 pages (4 MB) of WAL at most, plus a transaction.
    assert max(wal_sizes) < 5 * 1024 * 1024, wal_sizes


def test_storage_broker_writer_lock_off_leaves_writers_to_the_busy_handler(
    store: Store, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """BROKER_WRITER_LOCK=off: a write transaction never takes the writer lock
    (SQLite's busy handler alone orders writers: more throughput, a longer
    tail, bench/README). Shown by another holder of the lock file: with the
    lock on, a write waits for it (store_busy after the timeout); off, it goes
    at once, and the kernel never sees it queue."""
    monkeypatch.setenv("BROKER_WRITER_LOCK", "off")
    assert StoreSettings.from_env(store.url).writer_lock is False
    monkeypatch.setenv("BROKER_WRITER_LOCK", "ON")  # either case
    assert StoreSettings.from_env(store.url).writer_lock is True
    monkeypatch.setenv("BROKER_WRITER_LOCK", "maybe")
    with pytest.raises(errors.InvalidInput, match="^BROKER_WRITER_LOCK must be on, off or flock"):
        Store(store.url)
    monkeypatch.setenv("BROKER_WRITER_LOCK", "Flock")
    assert StoreSettings.from_env(store.url).writer_flock is True
    monkeypatch.setenv("BROKER_WRITER_LOCK", "off")
    off = Store(
        store.url,
        settings=dataclasses.replace(StoreSettings.from_env(store.url), busy_timeout_ms=200),
    )
    on = with_timeout(store, 200)
    lock = lock_of(store)
    held, done = threading.Event(), threading.Event()

    def hold() -> None:  # someone else (another thread) holds the writer lock
        other = writelock.WriterLock(str(lock), flock_only=kind == "flock")
        try:
            assert other.acquire(5.0)
            held.set()
            done.wait(DEADLINE_S)
        finally:
            other.close()

    holding = threading.Thread(target=hold)
    holding.start()
    try:
        assert held.wait(DEADLINE_S)
        Operator(off).create_space("workflow")  # no wait: it does not take the lock
        assert flocks(lock) == [(os.getpid(), False)]  # only the holder, nobody queued
        assert space_count(store) == 1
        with pytest.raises(errors.StoreBusy, match="writer lock stayed taken"):
            Operator(on).create_space("workflow")  # the lock on: it waits, then gives up
        assert space_count(store) == 1
    finally:
        done.set()
        holding.join(DEADLINE_S)
        on.close()
        off.close()


def test_storage_a_claim_builds_its_records_after_letting_go_of_the_writer_lock(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim of many messages turns its rows into records after the commit:
    the writer lock is not held while it does (the kernel shows no holder)."""
    from broker.delivery import inbox

    sid = Operator(store).create_space("workflow").id
    lynx, _ = trusted.join(store, sid, "flow/lynx", pid=None)
    for i in range(40):
        lynx.send("lynx", f"m{i}")
    lock = lock_of(store)
    held: list[list[tuple[int, bool]]] = []
    build = inbox.deliveries_of

    def watched(rows: list[object]) -> list[object]:
        held.append(flocks(lock))
        return build(rows)  # type: ignore[arg-type, return-value]

    monkeypatch.setattr(inbox, "deliveries_of", watched)
    got = lynx.claim(limit=32).deliveries
    assert [d.body for d in got] == [f"m{i}" for i in range(32)]
    assert held == [[]]  # built once, with nobody holding the lock


def test_storage_write_now_begins_only_when_it_need_not_wait(store: Store) -> None:
    """``Store.write_now`` (a server's event loop runs its writes through it)
    never waits: with the writer lock taken by another process, or SQLite's
    own lock by a writer without the lock file, it refuses at once with
    ``WriterTaken`` (a busy timeout of a minute notwithstanding), writing
    nothing and never queueing on the lock; once both are free it writes."""
    patient = with_timeout(store, 60_000)
    try:
        with holder(store.url):
            now = patient.write_now()
            assert now is not None
            with pytest.raises(errors.WriterTaken, match="writer lock is taken"), now as t:
                raise AssertionError("it began")
            assert (os.getpid(), True) not in flocks(lock_of(store))  # it never queued
        lockless = sqlite3.connect(store.path, isolation_level=None)
        try:
            lockless.execute("BEGIN IMMEDIATE")  # SQLite's lock, not the broker's
            now = patient.write_now()
            assert now is not None
            with pytest.raises(errors.WriterTaken, match="being written"), now as t:
                raise AssertionError("it began")
            assert flocks(lock_of(store)) == []  # the flock it took is let go
            lockless.execute("ROLLBACK")
        finally:
            lockless.close()
        assert space_count(store) == 0
        Operator(patient).create_space("workflow")
        now = patient.write_now()
        assert now is not None
        with now as t:
            assert t.one("SELECT count(*) FROM spaces")[0] == 1
    finally:
        patient.close()


def test_storage_write_now_leaves_a_due_checkpoint_to_its_caller(store: Store) -> None:
    """The checkpoint a commit makes due is a few milliseconds of I/O: a
    ``write_now`` commit (on a server's event loop) does not run it but names
    it (``Tx.checkpoint_due``), and ``checkpoint_after`` (the writer thread)
    folds the WAL back into the database file."""
    Operator(store).create_space("workflow")  # a plain write runs the due checkpoint itself
    db = Path(store.path)
    due = 0
    for n in range(1001):  # the next one is due within CHECKPOINT_EVERY_BOUNDS commits
        before = hashlib.sha256(db.read_bytes()).digest()  # the database file, not its WAL
        now = store.write_now()
        assert now is not None
        with now as t:  # a page changed (SQLite skips an update that changes nothing)
            t.execute("UPDATE spaces SET settings = :s", {"s": f'{{"n": {n}}}'})
        if t.checkpoint_due:
            due = t.checkpoint_due
            break
    assert due > 0
    assert hashlib.sha256(db.read_bytes()).digest() == before  # the file untouched: not run
    store.checkpoint_after(due)
    assert hashlib.sha256(db.read_bytes()).digest() != before  # the WAL folded back into it


def test_storage_a_write_inside_another_in_one_thread_is_refused_not_left_to_wait(
    store: Store, kind: str
) -> None:
    """A write transaction opened inside another one of the same thread would
    wait for itself. The mutex knows its holder's thread and refuses at once
    (``store_busy``, in one line); a ``flock`` knows only its file description,
    so there the inner write waits out the busy timeout. Nothing is written."""
    quick = with_timeout(store, 300)
    try:
        with quick.write() as outer:
            outer.execute("SELECT count(*) FROM spaces").fetchone()
            started = time.monotonic()
            with pytest.raises(errors.StoreBusy) as info:
                Operator(quick).create_space("workflow")
            waited = time.monotonic() - started
        assert "\n" not in str(info.value) and str(lock_of(store)) in str(info.value)
        if kind == "mutex":
            assert "holds the store's writer lock already" in str(info.value)
            assert waited < 0.3  # refused before the timeout could run out
        else:
            assert "stayed taken for 0.3 s" in str(info.value)
        assert space_count(store) == 0
        Operator(quick).create_space("workflow")  # the lock is let go with the outer write
        assert space_count(store) == 1
    finally:
        quick.close()


def test_storage_a_signal_reaches_its_handler_while_a_writer_waits(store: Store) -> None:
    """A writer waiting for a taken lock still runs the process's signal
    handlers (Ctrl-C stops it) within a moment, not after its busy timeout
    (a minute here): the mutex's wait comes back to Python every
    ``sharedmutex.SLICE_S``, the flock's waits on a lock Python can interrupt."""
    from broker.store import sharedmutex

    class Stop(Exception):
        pass

    def stop(signum: int, frame: object) -> None:
        raise Stop

    patient = with_timeout(store, 60_000)
    old = signal.signal(signal.SIGALRM, stop)
    try:
        with holder(store.url) as proc:
            signal.setitimer(signal.ITIMER_REAL, 0.2)
            started = time.monotonic()
            with pytest.raises(Stop):
                Operator(patient).create_space("workflow")
            assert time.monotonic() - started < 0.2 + 4 * sharedmutex.SLICE_S
            assert space_count(store) == 0
            release(proc)
        # The wait given up keeps nothing: the next writer (another file
        # description, another connection) takes the lock at once.
        quick = with_timeout(store, 2000)
        try:
            Operator(quick).create_space("workflow")
        finally:
            quick.close()
        Operator(patient).create_space("workflow")  # and the stopped one writes again
        assert space_count(store) == 2
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        patient.close()


def test_storage_a_writer_queued_behind_a_holder_that_is_killed_goes_on(store: Store) -> None:
    """The holder dies (SIGKILL) while a writer is queued behind it: the kernel
    lets the lock go with the dead holder (the mutex marked owner-dead and a
    sleeper woken; the flock dropped with its files), and the queued writer
    takes it and writes; the dead holder's transaction left nothing."""
    Operator(store).create_space("workflow")
    with holder(store.url) as proc, queued_behind(store):
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert space_count(store) == 2
    assert flocks(lock_of(store)) == []
