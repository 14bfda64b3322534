"""The writer lock: a kernel lock that queues the store's writers (spec §Storage).

SQLite lets one writer in at a time; the others wait in its busy handler,
which sleeps 1, 2, 5, 10 ... 100 ms between retries and so wakes late: with
many writer processes the tail of a write is mostly sleep. So every write
transaction of the broker first takes a lock kept in a lock file beside the
database (``<database>.lock``, 0600, in the 0700 store folder), right before
``BEGIN IMMEDIATE``, and drops it right after ``COMMIT`` or ``ROLLBACK``: a
writer that finds it taken sleeps in the kernel, which wakes it the moment the
holder lets go. Readers never take it.

The lock only orders writers; SQLite's own locking still guards the data. A
process that does not take it (an older broker, the ``sqlite3`` shell, a
caller's own SQLAlchemy engine) is still safe: the busy handler is the
fallback between it and the broker.

Two ways to hold it, the first where the platform has it:

- **A robust process-shared mutex** in the lock file's shared map
  (``broker.store.sharedmutex``: Linux's libc). The calling thread waits for
  it in the kernel with the GIL let go, and a release wakes one waiter. It
  belongs to the thread that took it. It is made once per lock file, under the
  ``flock`` below, and a mark beside it in the file says it is made. In a swarm
  of writer processes it goes ~15 % further than the ``flock``, whose contended
  wait takes a helper thread.
- **An exclusive ``flock``** (another platform, a file system that cannot map
  the file, ``BROKER_WRITER_LOCK=flock``). ``flock`` locks belong to the open
  file description, not the process or the thread: one ``WriterLock`` (its own
  ``open``) per connection, never shared between threads, and never across
  ``fork()`` (a child closes every lock it inherited: a copy kept open would
  hold the parent's lock after the parent died). A blocking ``flock`` has no
  timeout, and the wait must be bounded (a stopped holder must not hang every
  writer). Uncontended, the lock is one non-blocking ``flock`` call (~1 µs).
  Contended, the blocking ``flock`` runs in a helper thread kept per lock,
  while the caller waits for it with a timeout; on timeout the caller gives the
  helper its file description to finish with (it closes it as soon as its
  ``flock`` returns, which releases the lock if it got it), opens a fresh one,
  and raises ``StoreBusy``. Nothing ever spins: a retry loop of non-blocking
  attempts was tried and made 16 writer processes 2.3x slower.

Either way the lock of a holder killed with SIGKILL is let go (the kernel
drops the ``flock`` with the process's files, and marks the mutex's owner dead:
the next writer makes it consistent and goes on; SQLite rolled the dead
writer's transaction back), and every process of a store must use the same
way (the two do not exclude each other). The lock file's first bytes hold the
store's commit counters (``count_commit``), changed only under the lock.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import mmap
import os
import struct
import threading
import time
import weakref
from typing import TYPE_CHECKING, Final, Literal

from broker import errors
from broker.store import runfiles
from broker.store.patience import Patience

if TYPE_CHECKING:
    import queue

    from broker.store.sharedmutex import Mutex

_WAITING: Final = 0
_GOT: Final = 1
_ABANDONED: Final = 2
_FAILED: Final = 3
# A file system without flock (some network and FUSE ones): order writers with
# SQLite's busy handler alone rather than fail every write.
_NO_FLOCK = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL})
_COUNTERS = struct.Struct("<QQQ")  # the lock file's commit counters (count_commit)
# After the counters: a mark that says the mutex is made, then the mutex.
_MADE = struct.Struct("<Q")
_MADE_AT: Final = 24
_MADE_MARK: Final = int.from_bytes(b"broker-m", "little")
_MUTEX_AT: Final = 64


class _Job:
    """One contended wait, handed to the helper thread."""

    __slots__ = ("fd", "ready", "mu", "state", "error")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.ready = threading.Lock()
        self.ready.acquire()  # released by the helper when the wait is over
        self.mu = threading.Lock()
        self.state = _WAITING
        self.error: OSError | None = None

    def run(self) -> bool:
        """In the helper: block for the lock. False when the caller gave up on
        it (the file description was closed here, which releases the lock)."""
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except OSError as exc:
            self.error = exc
        with self.mu:
            if self.state == _ABANDONED:
                _forget(self.fd)
                os.close(self.fd)
                return False
            self.state = _GOT if self.error is None else _FAILED
        self.ready.release()
        return True

    def give_up(self) -> bool:
        """In the caller, after its timeout: True if the helper had not got the
        lock yet (it will close the file description itself)."""
        with self.mu:
            if self.state == _WAITING:
                self.state = _ABANDONED
                return True
            return False


def _helper_loop(jobs: queue.SimpleQueue[_Job | None]) -> None:
    while True:
        job = jobs.get()
        if job is None or not job.run():
            return  # closed, or stuck with an abandoned wait: a new helper takes over


# Every lock file descriptor this process holds open, so that a forked child
# can close its copies (see the module doc).
_open_fds: set[int] = set()
_locks: weakref.WeakSet[WriterLock] = weakref.WeakSet()
_registry = threading.Lock()


def _remember(fd: int) -> None:
    with _registry:
        _open_fds.add(fd)


def _forget(fd: int) -> None:
    with _registry:
        _open_fds.discard(fd)


def _after_fork_in_child() -> None:
    global _registry
    _registry = threading.Lock()  # another thread may have held it at fork()
    for lock in list(_locks):
        lock._fd = None
        lock._jobs = None
        lock._forget_mutex()  # its address is the parent's map's
        if lock._counters:  # the child's copy of the map (and of its descriptor)
            lock._counters.close()
        lock._counters = None
    for fd in _open_fds:
        with contextlib.suppress(OSError):
            os.close(fd)
    _open_fds.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def open_lock_file(path: str, *, create: bool) -> int | None:
    """A private lock file (0600, ``O_NOFOLLOW``, this user's: ``runfiles``).
    None when it does not exist and ``create`` is off, or when the folder is
    read-only and it cannot be made: the busy handler alone orders writers then.
    A lock path that is a symlink, or a file that is not this user's own, is
    refused with a one-line ``StoreError`` whatever error opening it gave."""
    try:
        fd = runfiles.open_private(path, os.O_RDWR, create=create)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.EROFS, errno.EACCES):
            # Refused: a read-only folder where no lock file can be made (go on
            # without it), or a path someone else planted (another user's file,
            # a symlink): never mistake the second for the first, or a
            # planted file would switch the writer lock off unnoticed.
            _refuse_planted(path)
            return None
        raise errors.StoreError(f"cannot open the lock file {path}: {exc.strerror}") from exc
    _remember(fd)
    return fd


def _refuse_planted(path: str) -> None:
    """A one-line ``StoreError`` if ``path`` exists and is not this user's own
    private file (``runfiles.check``: a symlink, another user's, writable by others)."""
    try:
        st = os.lstat(path)
    except OSError:
        return  # nothing there (or not even visible): the folder refused the file
    runfiles.check(path, st, folder=False)


def kind(*, flock_only: bool) -> Literal["mutex", "flock"]:
    """Which lock this process's writers take (``broker doctor`` shows it)."""
    from broker.store import sharedmutex

    return "flock" if flock_only or sharedmutex.load() is None else "mutex"


def _stayed_taken(timeout: float, path: str) -> errors.StoreBusy:
    return errors.StoreBusy(
        f"the store's writer lock stayed taken for {timeout:g} s "
        f"(another process is writing, or stopped while writing: {path})"
    )


def _map(path: str, size: int) -> mmap.mmap | Literal[False]:
    """The lock file's first ``size`` bytes as shared memory: its counters, read
    and written under the lock with no system call (a ``pread`` and a ``pwrite``
    a commit were ~3 µs of a send), and its mutex; False on a file system that
    cannot map it. The map is made from an open file description of its own:
    ``mmap`` keeps a copy of the descriptor it maps, and a copy of the locked
    one would hold the ``flock`` past that one's close. Called under the lock
    (the mutex's map: under the ``flock``), so growing the file (with zeros: no
    commit counted yet, no mutex made) races nobody."""
    try:
        return runfiles.map_private(path, size, create=False)
    except (OSError, ValueError, errors.StoreError):
        return False


class WriterLock:
    """The writer lock as seen by one connection (one open file description).

    ``acquire(timeout)`` then ``release()``; one thread at a time (the
    connection's). Opened lazily, so a connection that only reads never
    touches the lock file."""

    __slots__ = (
        "path",
        "create",
        "flock_only",
        "_fd",
        "_jobs",
        "_off",
        "_counters",
        "_mutex",
        "_held",
        "_patience",
        "__weakref__",
    )

    def __init__(self, path: str, *, create: bool = True, flock_only: bool = False) -> None:
        self.path = path
        self.create = create
        self.flock_only = flock_only  # BROKER_WRITER_LOCK=flock
        # The lock file's mutex (None: not looked for yet; False: the flock instead).
        self._mutex: Mutex | Literal[False] | None
        self._held: bool  # this lock holds the mutex
        self._forget_mutex()
        self._off = False  # the file system has no flock: the busy handler alone
        self._fd: int | None = None
        self._jobs: queue.SimpleQueue[_Job | None] | None = None
        self._patience = Patience()  # the flock's tries before it waits
        # The lock file's counters mapped (count_commit); False: it cannot be
        # mapped (SQLite's automatic checkpoint alone then, as without the file).
        self._counters: mmap.mmap | Literal[False] | None = None
        _locks.add(self)

    def acquire(self, timeout: float | None) -> bool:
        """Take the lock, waiting at most ``timeout`` seconds (``StoreBusy``
        after that); ``None``: only if it is free now (``WriterTaken`` if not).
        False when there is no lock file to take (a store opened
        with ``create=False`` whose lock file does not exist, a read-only
        folder): SQLite's busy handler alone orders this writer then."""
        fd = self._fd
        if fd is None:
            if self._off:
                return False
            fd = self._fd = open_lock_file(self.path, create=self.create)
            if fd is None:
                return False
        mutex = self._mutex
        if mutex is None:
            mutex = self._mutex = self._find_mutex(fd, timeout)
            if self._off:  # no flock on this file system: no lock at all
                return False
        if mutex is False:
            return self._flock(fd, timeout)
        try:
            got = mutex.lock(timeout)
        except OSError as exc:
            raise errors.StoreError(f"cannot lock {self.path}: {exc.strerror}") from exc
        except BaseException:  # a signal handler's (Ctrl-C): never keep it unknowingly
            mutex.drop()
            raise
        if got == "got" or got == "owner died":
            self._held = True
            return True
        if timeout is None:
            raise errors.WriterTaken(f"the store's writer lock is taken ({self.path})")
        if got == "mine":  # waiting would wait for itself (a flock waits out the timeout)
            raise errors.StoreBusy(
                "this thread holds the store's writer lock already: a write transaction "
                f"inside another one ({self.path})"
            )
        raise _stayed_taken(timeout, self.path)

    def _forget_mutex(self) -> None:
        """Look for the mutex again at the next ``acquire`` (none with ``flock_only``)."""
        self._mutex = False if self.flock_only else None
        self._held = False

    def _find_mutex(self, fd: int, timeout: float | None) -> Mutex | Literal[False]:
        """The lock file's mutex, made first if nobody has (under the ``flock``, so
        that two processes never make it at once), or False: the ``flock`` instead
        (no such mutex on this platform, a file that cannot be mapped)."""
        from broker.store import sharedmutex

        libc = sharedmutex.load()
        if libc is None or not self._flock(fd, timeout):
            return False
        try:
            mm = _map(self.path, _MUTEX_AT + sharedmutex.SIZE)
            if mm is False:
                return False
            if self._counters:
                self._counters.close()
            self._counters = mm  # the counters too, in the same map
            at = sharedmutex.address(mm, _MUTEX_AT)
            if _MADE.unpack_from(mm, _MADE_AT)[0] != _MADE_MARK:
                if sharedmutex.make(libc, at):
                    return False
                _MADE.pack_into(mm, _MADE_AT, _MADE_MARK)
            return sharedmutex.Mutex(libc, at)
        finally:
            if self._fd is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _flock(self, fd: int, timeout: float | None) -> bool:
        """``acquire`` with the ``flock``."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            pass
        except OSError as exc:
            if exc.errno not in _NO_FLOCK:
                raise errors.StoreError(f"cannot lock {self.path}: {exc.strerror}") from exc
            self.close()
            self._off = True
            return False
        if timeout is None:
            raise errors.WriterTaken(f"the store's writer lock is taken ({self.path})")
        began = time.monotonic()
        try:
            end = began + max(0.0, timeout)
            if self._patience.tries(began, end, lambda: self._try(fd)):
                return True
            return self._helped(fd, timeout)
        finally:
            self._patience.waited(time.monotonic() - began)

    def _try(self, fd: int) -> bool | None:
        """One more try of the ``flock`` before its helper waits (as the
        mutex's, ``broker.store.patience``): True when it took it."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None
        except OSError as exc:  # as the helper's wait would say it
            raise errors.StoreError(f"cannot lock {self.path}: {exc.strerror}") from exc
        return True

    def _helped(self, fd: int, timeout: float) -> bool:
        """The contended ``flock``'s wait, in the helper thread (its own has no
        timeout)."""
        job = _Job(fd)
        jobs = self._jobs
        if jobs is None:
            import queue  # only a contended lock needs the helper (and queue's imports)

            jobs = self._jobs = queue.SimpleQueue()
            threading.Thread(
                target=_helper_loop, args=(jobs,), name="broker-writer-lock", daemon=True
            ).start()
        jobs.put(job)
        try:
            got = job.ready.acquire(timeout=max(0.0, timeout))
        except BaseException:  # a signal handler's (Ctrl-C): the wait is given up
            if job.give_up():
                self._fd = None  # the helper closes it once its flock returns
                self._jobs = None
            elif job.state == _GOT:
                fcntl.flock(fd, fcntl.LOCK_UN)
            raise
        if not got and job.give_up():
            # The helper keeps the old file description and closes it when its
            # flock returns; this connection goes on with a fresh one.
            self._fd = None
            self._jobs = None
            raise _stayed_taken(timeout, self.path)
        if job.state == _FAILED:
            assert job.error is not None
            raise errors.StoreError(
                f"cannot lock {self.path}: {job.error.strerror or job.error}"
            ) from job.error
        return True

    def release(self) -> None:
        mutex = self._mutex
        if mutex:
            if self._held:
                self._held = False
                try:
                    mutex.unlock()
                except OSError as exc:  # EPERM: taken by another thread (never by the broker)
                    raise errors.StoreError(
                        f"cannot let go of the writer lock {self.path}: {exc.strerror}"
                    ) from exc
        elif self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def count_commit(self, every: int) -> int:
        """While the lock is held: count one more commit of the store in the
        lock file, which holds three counters (little-endian u64: commits, the
        commit at which the next checkpoint is due, the commit of the last one)
        only ever changed under the lock, so every writer of every process
        counts in one sequence. When this commit is due, the next is set
        ``every`` commits on and the number of commits since the last one is
        returned (0 otherwise): the store then checkpoints the WAL, outside the
        lock (``broker.store.sqlite``)."""
        fd = self._fd
        if fd is None:
            return 0
        mm = self._counters
        if mm is None:
            mm = self._counters = _map(self.path, _COUNTERS.size)
        if mm is False:
            return 0
        n, due, last = _COUNTERS.unpack_from(mm)
        n += 1
        since = 0
        if n >= due:
            since, due, last = n - last, n + every, n
        _COUNTERS.pack_into(mm, 0, n, due, last)
        return since

    def close(self) -> None:
        """Close the file description (which drops the ``flock``; the mutex is let
        go first) and stop the helper."""
        if self._held:
            self.release()
        self._forget_mutex()  # its address dies with the map
        if self._jobs is not None:
            self._jobs.put(None)
            self._jobs = None
        if self._counters:
            self._counters.close()
        self._counters = None
        if self._fd is not None:
            fd, self._fd = self._fd, None
            _forget(fd)
            os.close(fd)
