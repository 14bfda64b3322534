"""Scratch folders beside a store (S47): temporary copies that never outlive their run.

Work that copies a store's content to files for a while (``migrate-store``'s
two export trees) does it in a private folder beside the store, not in the
system's temp folder (shared, often another file system, and left behind
by a killed run): ``.broker-scratch-<what>-<pid>-<start>-<random>``, 0700,
in the database's folder (PostgreSQL: the folder of its operator key file,
in BROKER_HOME). It is removed on every exit path: a return, an exception,
Ctrl-C, and SIGTERM or SIGHUP, which raise ``SystemExit`` while it exists
(when nothing else handles them). SIGKILL cannot be caught: the folder
names the process that made it (pid and start time), so the next scratch
folder made beside the store removes any whose process is gone, and
``broker doctor`` reports them (``leftovers``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from broker.store import procs, runfiles

PREFIX = ".broker-scratch-"
_CAUGHT: tuple[int, ...] = (signal.SIGTERM.value, signal.SIGHUP.value)


def base(store: Any) -> Path:
    """The folder scratch folders of ``store`` go in (beside its files)."""
    key_path = getattr(store, "key_path", None)  # PostgreSQL: no file of its own
    return Path(key_path).parent if key_path is not None else Path(store.path).parent


def _maker(name: str) -> tuple[int, int] | None:
    """(pid, start time) of the process that made the scratch folder ``name``."""
    parts = name[len(PREFIX) :].split("-")
    try:
        return int(parts[-3]), int(parts[-2])
    except (IndexError, ValueError):
        return None


def leftovers(folder: Path) -> list[Path]:
    """Scratch folders in ``folder`` whose process is gone (a killed run's)."""
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    found = []
    for name in names:
        maker = _maker(name) if name.startswith(PREFIX) else None
        if maker is None:
            continue
        pid, start = maker
        now = procs.start_time(pid)
        if now is None or (start and now and now != start):
            found.append(folder / name)
    return found


def _exit_on_signal(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def exit_on_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP raise SystemExit meanwhile, so ``finally`` runs and
    removes a temporary copy (only in the main thread, and only where their
    default would kill the process outright)."""
    saved: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in _CAUGHT:
            if signal.getsignal(sig) is signal.SIG_DFL:
                saved[sig] = signal.signal(sig, _exit_on_signal)
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def scratch(store: Any, what: str) -> Iterator[Path]:
    """A private folder beside ``store`` for the duration of the block, removed
    on every exit path (see the module doc); killed runs' leftovers are
    removed first."""
    folder = base(store)
    runfiles.make_dirs(folder)
    for old in leftovers(folder):
        shutil.rmtree(old, ignore_errors=True)
    pid = os.getpid()
    prefix = f"{PREFIX}{what}-{pid}-{procs.start_time(pid) or 0}-"
    with exit_on_signals():
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=folder))
        try:
            os.chmod(path, runfiles.DIR_MODE)  # mkdtemp's 0700 is filtered by the umask
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)
