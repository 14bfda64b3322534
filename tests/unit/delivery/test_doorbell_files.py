"""spec §Reliability: doorbells and lock files that another local user could pre-create
or redirect are refused, and nothing of the victim's is touched.

The attacker is a real second user: ``nobody``, run through ``setpriv`` (or
``runuser``) by this root test process. It plants what it can in a shared
sticky folder (like ``/tmp``): the doorbell folder beside a database in it, the
per-user fallback folder, a symlinked ``slots`` file or lock file pointing at a
file of the victim's. The victim (this process) must refuse with a one-line
StoreError naming the path, keep delivering mail, and leave the target file
alone. Where no second user can be had (not root, no setpriv/runuser, no
``nobody``) those tests are skipped, saying why. The checks that need no second
user (modes, symlinks planted by the same user) always run.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import trusted
from conftest import SYSTEM_TMP

from broker import Operator, Store, errors
from broker.delivery import doorbells, wake


def _attacker_command() -> tuple[list[str], int] | str:
    """The argv prefix that runs a shell command as ``nobody``, and its uid; or
    the reason there is none."""
    if os.geteuid() != 0:
        return "needs root to act as a second user (nobody); run the suite as root to cover it"
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        return "this machine has no user 'nobody'"
    if shutil.which("setpriv"):
        prefix = ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}"]
        return [*prefix, "--clear-groups", "--", "sh", "-c"], nobody.pw_uid
    if shutil.which("runuser"):
        return ["runuser", "-u", "nobody", "--", "sh", "-c"], nobody.pw_uid
    return "neither setpriv nor runuser is installed"


ATTACKER = _attacker_command()
needs_second_user = pytest.mark.skipif(
    isinstance(ATTACKER, str), reason=f"SECOND-USER TESTS SKIPPED: {ATTACKER}"
)


class Attacker:
    def __init__(self) -> None:
        assert not isinstance(ATTACKER, str)
        self.prefix, self.uid = ATTACKER

    def run(self, script: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.prefix, script], capture_output=True, text=True, timeout=60, cwd="/"
        )

    def must(self, script: str) -> None:
        done = self.run(script)
        assert done.returncode == 0, f"the attacker's setup failed: {done.stderr}"


@pytest.fixture
def attacker() -> Attacker:
    return Attacker()


@pytest.fixture
def shared() -> Iterator[Path]:
    """A sticky, world-writable folder like /tmp, that the test removes."""
    folder = Path(tempfile.mkdtemp(prefix="broker-shared-", dir=SYSTEM_TMP))
    try:
        folder.chmod(0o1777)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def precious(tmp_path: Path) -> Path:
    """A file of the victim's that a planted symlink points at."""
    f = tmp_path / "precious"
    f.write_text("the victim's data\n")
    f.chmod(0o644)
    return f


def _untouched(f: Path) -> None:
    assert f.read_text() == "the victim's data\n"
    assert stat.S_IMODE(f.stat().st_mode) == 0o644


class Victim:
    def __init__(self, db: Path) -> None:
        self.store = Store(f"sqlite:///{db}")
        space = Operator(self.store).create_space("workflow").id
        self.a, _ = trusted.join(self.store, space, "w/a")
        self.b, _ = trusted.join(self.store, space, "w/b")
        self.key = wake.participant_key(self.b.identity.participant_id)

    def assert_refused(self, path: str, why: str) -> None:
        """Waiting is refused in one line naming ``path``; mail still flows."""
        with pytest.raises(errors.StoreError) as e:
            wake.Waiter(self.store, [self.key])
        message = str(e.value)
        assert "\n" not in message
        assert re.search(
            rf"refusing (the folder |the file )?{re.escape(path)}: .*{why}", message
        ), message
        with pytest.raises(errors.StoreError, match=re.escape(path)):
            self.b.claim(wait=1)
        sent = self.a.send("b", "still delivered")  # the writer neither rings into it nor fails
        assert sent.reached == ["b"]
        assert wake.ring_keys(self.store, [self.key]) == 0
        assert [d.body for d in self.b.claim().deliveries] == ["still delivered"]


@pytest.fixture
def victim() -> Iterator[Callable[[Path], Victim]]:
    made: list[Victim] = []

    def make(db: Path) -> Victim:
        v = Victim(db)
        made.append(v)
        return v

    yield make
    for v in made:
        v.store.close()


# --- a second user ----------------------------------------------------------------------------
@needs_second_user
def test_private_files_a_doorbell_folder_another_user_planted_beside_the_database_is_refused(
    shared: Path, attacker: Attacker, victim: Callable[[Path], Victim], precious: Path
) -> None:
    db = shared / "victim.db"
    root = f"{db}-wake"
    assert len(root) <= wake.ROOT_MAX  # beside the database, not the fallback
    attacker.must(f"mkdir -m 0777 {root} && ln -s {precious} {root}/slots")
    v = victim(db)
    assert wake.root_path(v.store) == root
    v.assert_refused(root, f"belongs to uid {attacker.uid}")
    _untouched(precious)


@needs_second_user
def test_private_files_a_doorbell_folder_another_user_redirected_by_a_symlink_is_refused(
    shared: Path, attacker: Attacker, victim: Callable[[Path], Victim], precious: Path
) -> None:
    db = shared / "victim.db"
    root = f"{db}-wake"
    attacker.must(f"mkdir -m 0777 {shared}/elsewhere && ln -s {shared}/elsewhere {root}")
    v = victim(db)
    v.assert_refused(root, "symbolic link")
    assert os.listdir(shared / "elsewhere") == []  # nothing created through the link


@needs_second_user
def test_private_files_the_per_user_fallback_folder_planted_by_another_user_is_refused(
    shared: Path,
    attacker: Attacker,
    victim: Callable[[Path], Victim],
    precious: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A store path too long for a socket address uses <tmp>/broker-<uid>/<digest>:
    with the temp folder shared, another user may have made that folder first."""
    monkeypatch.setattr(doorbells, "RUNTIME_PARENTS", (str(shared / "no-run-user"), str(shared)))
    db = tmp_path / ("long-" * 20) / "victim.db"
    v = victim(db)
    root = wake.root_path(v.store)
    base = str(shared / f"broker-{os.getuid()}")
    assert os.path.dirname(root) == base
    attacker.must(f"mkdir -m 0777 {base} {root} && ln -s {precious} {root}/slots")
    v.assert_refused(base, f"belongs to uid {attacker.uid}")
    _untouched(precious)


@needs_second_user
def test_private_files_a_run_user_folder_of_another_user_is_not_used(
    shared: Path,
    attacker: Attacker,
    victim: Callable[[Path], Victim],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = shared / "run-user"
    attacker.must(f"mkdir -m 0700 {run}")
    monkeypatch.setattr(doorbells, "RUNTIME_PARENTS", (str(run), str(shared)))
    v = victim(tmp_path / ("long-" * 20) / "victim.db")
    assert wake.root_path(v.store).startswith(str(shared / f"broker-{os.getuid()}") + "/")
    with wake.Waiter(v.store, [v.key]) as w:
        assert not w.polling
        assert wake.ring_keys(v.store, [v.key]) == 1


@needs_second_user
def test_private_files_another_user_cannot_plant_anything_in_the_victims_doorbell_folder(
    shared: Path, attacker: Attacker, victim: Callable[[Path], Victim], precious: Path
) -> None:
    db = shared / "victim.db"
    v = victim(db)
    root = wake.root_path(v.store)
    with wake.Waiter(v.store, [v.key]):
        before = sorted(os.listdir(root))
        tried = attacker.run(f"ln -s {precious} {root}/{v.key}/evil || ln -s {precious} {root}/x")
        assert tried.returncode != 0 and "Permission denied" in tried.stderr
        assert sorted(os.listdir(root)) == before
        assert wake.ring_keys(v.store, [v.key]) == 1
    assert stat.S_IMODE(os.lstat(root).st_mode) == 0o700
    _untouched(precious)


@needs_second_user
def test_private_files_a_lock_file_another_user_planted_as_a_symlink_is_never_followed(
    shared: Path, attacker: Attacker, precious: Path
) -> None:
    """The writer lock file (broker.store.writelock) is opened with O_NOFOLLOW: the
    victim's file behind a planted link is neither created, locked nor changed,
    and the planted link is refused in one line. (Before, the EACCES it gives
    in a sticky folder read as "a read-only folder" and the lock was skipped:
    writers went on behind SQLite's busy handler alone, unnoticed.)"""
    db = shared / "victim.db"
    attacker.must(f"ln -s {precious} {db}.lock")
    with pytest.raises(errors.StoreError, match="symbolic link") as info:
        store = Store(f"sqlite:///{db}")
        try:
            Operator(store).create_space("workflow")
        finally:
            store.close()
    assert "\n" not in str(info.value) and f"{db}.lock" in str(info.value)
    _untouched(precious)
    assert os.path.islink(f"{db}.lock")


# --- the same checks without a second user ------------------------------------------------------
def test_private_files_a_doorbell_folder_writable_by_others_is_refused(
    tmp_path: Path, victim: Callable[[Path], Victim]
) -> None:
    v = victim(tmp_path / "v.db")
    root = wake.root_path(v.store)
    os.mkdir(root)
    os.chmod(root, 0o777)  # made by something of ours with a careless mode
    v.assert_refused(root, "writable by group or others")


def test_private_files_a_slots_file_that_is_a_symlink_is_never_followed(
    tmp_path: Path, victim: Callable[[Path], Victim], precious: Path
) -> None:
    v = victim(tmp_path / "v.db")
    root = wake.root_path(v.store)
    os.makedirs(root, mode=0o700)
    os.symlink(precious, os.path.join(root, "slots"))
    v.assert_refused(os.path.join(root, "slots"), "symbolic link")
    _untouched(precious)


def test_private_files_doorbell_folders_are_0700_and_the_slots_file_0600(
    tmp_path: Path, victim: Callable[[Path], Victim]
) -> None:
    v = victim(tmp_path / "v.db")
    with wake.Waiter(v.store, [v.key]) as w:
        root = wake.root_path(v.store)
        assert stat.S_IMODE(os.stat(root).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(os.path.dirname(w.paths[0])).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(os.path.join(root, "slots")).st_mode) == 0o600


@pytest.fixture
def xdg_runtime_dir() -> Iterator[Path]:
    """A short private folder, like /run/user/<uid>."""
    folder = Path(tempfile.mkdtemp(prefix="xdg-", dir=SYSTEM_TMP))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_S20_a_store_path_too_long_for_a_socket_address_rings_through_a_short_private_folder(
    tmp_path: Path,
    victim: Callable[[Path], Victim],
    monkeypatch: pytest.MonkeyPatch,
    xdg_runtime_dir: Path,
) -> None:
    xdg = xdg_runtime_dir  # stands for /run/user/<uid>
    monkeypatch.setattr(doorbells, "RUNTIME_PARENTS", (str(xdg), "/nonexistent"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/somewhere/else")  # never read: all processes agree
    v = victim(tmp_path / ("long-" * 20) / "victim.db")
    root = wake.root_path(v.store)
    assert root.startswith(str(xdg / "broker") + "/") and len(root) <= wake.ROOT_MAX
    with wake.Waiter(v.store, [v.key]) as w:
        assert not w.polling
        assert w.socket_path and len(os.fsencode(w.socket_path)) <= wake.SOCKET_PATH_MAX
        v.a.send("b", "rung")
        assert w.wait(30) is True and w.woke == "rung"
    assert stat.S_IMODE(os.stat(xdg / "broker").st_mode) == 0o700


def test_private_files_imported_participant_ids_never_name_a_path() -> None:
    for hostile in ("../../etc", "a/b", "x" * 200, "é", ""):
        key = wake.participant_key(hostile)
        assert re.fullmatch(r"p[0-9A-Za-z]{0,26}", key), (hostile, key)
    assert wake.participant_key("01J0ABCDEFGHJKMNPQRSTVWXYZ") == "p01J0ABCDEFGHJKMNPQRSTVWXYZ"


# --- the socket address budget ------------------------------------------------------------------
def _folder_of_length(n: int) -> Path:
    """A real folder whose path is exactly ``n`` bytes long, under the system temp dir."""
    base = Path(tempfile.mkdtemp(prefix="len-", dir=SYSTEM_TMP))
    pad = n - len(os.fsencode(str(base))) - 1
    assert pad > 0, "the system temp folder's path is too long for this test"
    folder = base / ("x" * pad)
    folder.mkdir()
    assert len(os.fsencode(str(folder))) == n
    return folder


def _bind_at(path: str) -> bool:
    import socket

    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        s.bind(path)
        return True
    except OSError:
        return False
    finally:
        s.close()
        with contextlib.suppress(OSError):
            os.unlink(path)


def test_S20_the_longest_doorbell_socket_path_fits_a_socket_address_with_no_byte_to_spare() -> None:
    """ROOT_MAX is the longest doorbell folder that still fits the worst case:
    a process's socket (one per process, beside the key folders) named with a
    7-digit pid (Linux's maximum)."""
    name = "4194304-abcdef"
    for extra, fits in ((0, True), (1, False)):
        root = _folder_of_length(wake.ROOT_MAX + extra)
        try:
            assert _bind_at(str(root / name)) is fits, (extra, len(str(root / name)))
        finally:
            shutil.rmtree(root.parent)


def test_S20_the_doorbell_folder_stays_beside_the_database_up_to_the_longest_that_fits(
    victim: Callable[[Path], Victim],
) -> None:
    for extra, beside in ((0, True), (1, False)):
        folder = _folder_of_length(wake.ROOT_MAX + extra - len("/v.db-wake"))
        try:
            v = victim(folder / "v.db")
            assert (wake.root_path(v.store) == f"{folder}/v.db-wake") is beside
            with wake.Waiter(v.store, [wake.participant_key("Z" * 26)]) as w:
                assert not w.polling  # the process's socket binds in it
            v.store.close()
        finally:
            shutil.rmtree(folder.parent)


def test_private_files_a_27_character_id_is_hashed_to_fit_the_key_budget() -> None:
    assert len(wake.participant_key("A" * 26)) == wake.KEY_MAX == 27
    assert wake.participant_key("A" * 26) == "p" + "A" * 26
    key = wake.participant_key("A" * 27)
    assert len(key) <= wake.KEY_MAX and key != "p" + "A" * 27
