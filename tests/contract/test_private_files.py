"""What the broker leaves on disk: private whatever the umask (S47), temporary
copies removed on every exit path (S47), and a purge's export durable before
anything is deleted (S46). Real CLI processes (under umask 000, killed
mid-copy), real files, on both backends where a store is involved."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pgtest
import pytest
import spacegen
import trusted

from broker import Operator, Store
from broker.interchange import purge
from broker.spaces import spaces
from broker.store import scratch


def modes(root: Path) -> dict[str, str]:
    """Every folder and file below ``root`` (``root`` itself too) that is not
    0700 (a folder) or 0600 (anything else): path -> mode."""
    wrong = {}
    for path in [root, *root.rglob("*")]:
        st = path.lstat()
        want = 0o700 if stat.S_ISDIR(st.st_mode) else 0o600
        if stat.S_IMODE(st.st_mode) != want:
            wrong[str(path.relative_to(root.parent))] = f"{stat.S_IMODE(st.st_mode):o}"
    return wrong


# --- S47: private whatever the umask ------------------------------------------------------
def test_S47_every_folder_and_file_the_broker_writes_is_private_under_umask_000(
    cli: Callable[..., Any], tmp_path: Path, backend: str
) -> None:
    def run(*args: str, **kw: Any) -> Any:
        r = cli(*args, umask=0, **kw)
        assert r.code == 0, (args, r.err)
        return r

    space = run("space", "create", "--kind", "run", "--json").json()["id"]
    token = run("join", space, "lynx", "--json").json()["token"]
    me = {"BROKER_SPACE": space, "BROKER_AS": "lynx", "BROKER_TOKEN": token}
    run("msg", "send", "--to", "lynx", "to myself", env=me)
    run("export", space, "--root", str(tmp_path / "exports" / "a" / "b"), "-q")
    run("export", space, "--root", str(tmp_path / "mail" / "c"), "--layout", "mailbox", "-q")
    if backend == "sqlite":
        (tmp_path / "backups").mkdir(mode=0o700)
        run("backup", str(tmp_path / "backups" / "copy.db"))
    run("migrate-store", "--into", f"sqlite:///{tmp_path / 'moved' / 'd' / 'broker.db'}")
    run("space", "archive", space, "--yes")
    run("space", "purge", space, "--export", str(tmp_path / "purged" / "e"), "--yes")
    made = ["exports", "mail", "purged", "moved"]
    if backend == "sqlite":
        made.append("home")  # the database, its folder, key, lock and doorbells
        assert {p.name for p in (tmp_path / "home").iterdir()} >= {
            "broker.db",
            "broker.db.operator-key",
            "broker.db.lock",
        }
    wrong = {k: v for name in made for k, v in modes(tmp_path / name).items()}
    if backend == "sqlite":
        wrong |= modes(tmp_path / "backups")
    assert wrong == {}


def test_S47_make_dirs_and_create_file_set_the_mode_whatever_the_umask(tmp_path: Path) -> None:
    from broker.store import runfiles

    old = os.umask(0)
    try:
        runfiles.make_dirs(tmp_path / "a" / "b" / "c")
        os.close(runfiles.create_file(tmp_path / "a" / "b" / "c" / "f", os.O_WRONLY))
        os.umask(0o277)  # a umask that would leave the owner without write
        runfiles.make_dirs(tmp_path / "x" / "y")
        os.close(runfiles.create_file(tmp_path / "x" / "y" / "f", os.O_WRONLY))
    finally:
        os.umask(old)
    assert modes(tmp_path / "a") == {} and modes(tmp_path / "x") == {}
    (tmp_path / "mine").mkdir(mode=0o755)  # a folder that exists is not the broker's
    runfiles.make_dirs(tmp_path / "mine" / "sub")
    assert stat.S_IMODE((tmp_path / "mine").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "mine" / "sub").stat().st_mode) == 0o700


@pytest.mark.sqlite_only  # doorbells are files on SQLite (PostgreSQL: LISTEN/NOTIFY)
def test_S47_a_doorbell_folder_slot_map_and_socket_are_private_under_umask_000(
    store: Store, space: str
) -> None:
    from broker.delivery import wake

    old = os.umask(0)
    try:
        with wake.Waiter(store, [wake.space_key(space)]) as waiter:
            root = Path(wake.root_path(store))
            socket_modes = {p: stat.S_IMODE(os.lstat(p).st_mode) for p in waiter.paths}
            found = modes(root)
    finally:
        os.umask(old)
    assert socket_modes and set(socket_modes.values()) == {0o600}
    assert found == {}


# --- S47: migrate-store's copy never outlives its run --------------------------------------
def _env(home: Path, url: str) -> dict[str, str]:
    return pgtest.process_env(home, url)


def _scratch_base(home: Path, db_url: str) -> Path:
    return (
        home if db_url.startswith("postgresql") else Path(db_url.removeprefix("sqlite:///")).parent
    )


def _leftovers(base: Path) -> list[Path]:
    return sorted(base.glob(f"{scratch.PREFIX}*")) if base.is_dir() else []


def _migrate(home: Path, db_url: str, target: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "broker", "migrate-store", "--into", target],
        env=_env(home, db_url),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _mid_copy(base: Path, proc: subprocess.Popen[str], timeout: float = 60.0) -> Path:
    """The scratch folder of ``proc`` once the source's export is in it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for folder in _leftovers(base):
            if any((folder / "from").rglob("log.jsonl")):
                return folder
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    raise AssertionError("migrate-store never got to its copy")


@pytest.mark.parametrize(
    "sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGKILL], ids=lambda s: s.name
)
def test_S47_migrate_store_killed_mid_copy_leaves_no_copy_behind(
    store: Store, space: str, db_url: str, tmp_path: Path, sig: signal.Signals
) -> None:
    trusted.join(store, space, "flow/lynx")[0].send("operator", "a secret plan")
    home = tmp_path / "home"
    base = _scratch_base(home, db_url)
    target_url = f"sqlite:///{tmp_path / 'target.db'}"
    target = Store(target_url)  # made here, so the copy waits on its writer lock
    try:
        with target.write():  # the copy is exported, then waits to import
            proc = _migrate(home, db_url, target_url)
            try:
                folder = _mid_copy(base, proc)
                assert stat.S_IMODE(folder.stat().st_mode) == 0o700
                assert folder.parent == base  # beside the store, not the system's temp folder
                proc.send_signal(sig)
                proc.communicate(timeout=60)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate()
        assert proc.returncode != 0
        if sig != signal.SIGKILL:
            assert _leftovers(base) == [], f"{sig.name} left the copy behind"
            return
        # SIGKILL cannot be caught: doctor flags the copy, the next run removes it.
        assert _leftovers(base) == [folder]
        doctor = subprocess.run(
            [sys.executable, "-m", "broker", "doctor", "--json"],
            env=_env(home, db_url),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert '"check": "scratch", "severity": "warning"' in doctor.stdout, doctor.stdout
        assert f"rm -r {folder}" in doctor.stdout
        again = _migrate(home, db_url, target_url)
        out, err = again.communicate(timeout=120)
        assert again.returncode == 0, err
        assert _leftovers(base) == []
        with target.read() as t:
            assert t.one("SELECT COUNT(*) FROM spaces WHERE id = ?", (space,))[0] == 1
    finally:
        target.close()


def test_S47_migrate_store_refused_after_its_export_leaves_no_copy_behind(
    store: Store, space: str, db_url: str, tmp_path: Path, cli: Callable[..., Any]
) -> None:
    target = f"sqlite:///{tmp_path / 'target.db'}"
    assert cli("migrate-store", "--into", target).code == 0
    r = cli("migrate-store", "--into", target)  # the space is there now: refused
    assert r.code != 0 and "already" in r.err
    assert _leftovers(_scratch_base(tmp_path / "home", db_url)) == []


BACKUP_KILLED = """
import os, signal, sys, time
from broker import Operator, Store
sig = int(sys.argv[2])
# The signal's default, whatever this process inherited (under nohup SIGHUP
# comes ignored, and a backup leaves an ignored signal ignored).
signal.signal(sig, signal.SIG_DFL)

def progress(done, total):
    os.kill(os.getpid(), sig)  # mid-copy: the copy is beside the target now
    time.sleep(5)

Operator(Store(os.environ["BROKER_URL"])).backup(sys.argv[1], progress=progress)
"""


@pytest.mark.sqlite_only  # a backup is a copy of the SQLite file
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_S47_a_backup_stopped_by_a_signal_mid_copy_leaves_no_copy_behind(
    store: Store, space: str, db_url: str, tmp_path: Path, sig: signal.Signals
) -> None:
    """A real process, signalled in the middle of its copy: the half-made
    copy beside the target is removed."""
    trusted.join(store, space, "flow/lynx")[0].send("operator", "a secret plan")
    folder = tmp_path / "backups"
    folder.mkdir()
    env = {**_env(tmp_path / "home", db_url), "BROKER_URL": db_url}
    done = subprocess.run(
        [sys.executable, "-c", BACKUP_KILLED, str(folder / "copy.db"), str(int(sig))],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode in (128 + sig, -sig), done.stderr
    assert list(folder.iterdir()) == []


# --- S46: a purge deletes only what is on disk ------------------------------------------
def test_S46_a_purge_deletes_only_after_every_exported_file_and_folder_is_fsynced(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    space = spacegen.rich_space(store).space
    spaces.archive(store, space)
    events: list[tuple[str, str]] = []
    real_fsync, real_delete = os.fsync, purge._delete

    def fsync(fd: int) -> None:
        events.append(("fsync", os.path.realpath(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def delete(*args: Any) -> None:
        events.append(("delete", ""))
        real_delete(*args)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(purge, "_delete", delete)
    root = tmp_path / "exports" / "new"  # made by the purge, and its parent too
    Operator(store).purge_space(space, root)
    first = events.index(("delete", ""))
    synced = {path for kind, path in events[:first] if kind == "fsync"}
    written = {str(p.resolve()) for p in root.rglob("*")}
    folders = {str(root.resolve()), str(root.parent.resolve())}
    assert len(written) > 20  # the whole layout: files and folders
    missing = (written | folders) - synced
    assert not missing, f"deleted before these were on disk: {sorted(missing)[:5]}"
