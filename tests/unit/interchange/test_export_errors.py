"""``broker export`` / ``import`` / ``space purge`` when the file system says no
(spec §Errors): one line and exit 2 for a path that cannot be one, exit 10 for a
file system that refuses (permission, read-only, full); never a traceback, never
exit 1 (which means "not delivered")."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trusted

from broker import Operator, Store, errors
from broker.spaces import spaces

ROOT = Path(__file__).resolve().parents[3]


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def space_id(cli: Callable[..., Any]) -> str:
    space = cli("space", "create", "--kind", "run", "--json").json()["id"]
    assert isinstance(space, str)
    return space


@pytest.mark.parametrize("root", ["/proc/1/nope", "/proc/1/nope/deeper"])
def test_export_to_a_path_that_cannot_exist_is_one_line_and_exit_2(
    cli: Callable[..., Any], space_id: str, root: str
) -> None:
    r = cli("export", space_id, "--root", root)
    assert r.code == 2
    # the first part of the path that fails is named
    assert one_line(r.err).startswith("broker: invalid_input: cannot export to /proc/1/nope: ")


def test_export_under_a_file_is_one_line_and_exit_2(
    cli: Callable[..., Any], space_id: str, tmp_path: Path
) -> None:
    (tmp_path / "file").write_text("x")
    for layout in ("space", "mailbox"):
        r = cli("export", space_id, "--root", str(tmp_path / "file"), "--layout", layout)
        assert r.code == 2, r.err
        assert "Not a directory" in one_line(r.err) or "not a folder" in r.err
    r = cli("import", str(tmp_path / "file"))
    assert r.code == 2 and "is not a folder" in one_line(r.err)
    r = cli("import", str(tmp_path / "missing"))
    assert r.code == 2 and "No such file or directory" in one_line(r.err)


def test_export_into_a_kernel_file_system_that_refuses_is_exit_10(
    cli: Callable[..., Any], space_id: str
) -> None:
    r = cli("export", space_id, "--root", "/sys/kernel/broker-nope")
    if r.code == 0:  # pragma: no cover - a writable /sys (not a Linux container)
        pytest.skip("/sys accepted a folder here")
    assert r.code == 10
    assert one_line(r.err).startswith(
        "broker: file_error: cannot export to /sys/kernel/broker-nope"
    )


def _in_namespace(script: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    """Run ``script`` (sh) as root of a new user and mount namespace, where it may
    mount a small or read-only tmpfs; the test is skipped where that is not allowed."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1)")
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=16k tmpfs {tmp}"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs in a user namespace here: {probe.stderr.strip()}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
    return subprocess.run(
        ["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, env=env, timeout=120
    )


def _big_space(db: Path) -> str:
    store = Store(f"sqlite:///{db}")
    space = Operator(store).create_space("run").id
    lynx, _ = trusted.join(store, space, "flow/lynx")
    lynx.send_many([{"to": "lynx", "text": "x" * 1000} for _ in range(100)])
    store.close()
    return space


@pytest.mark.parametrize(
    ("mount", "reason"), [("size=16k", "No space left on device"), ("ro", "Read-only file system")]
)
def test_export_to_a_full_or_read_only_file_system_is_one_line_and_exit_10(
    tmp_path: Path, mount: str, reason: str
) -> None:
    space = _big_space(tmp_path / "db" / "broker.db")
    target = tmp_path / "mnt"
    target.mkdir()
    url = f"sqlite:///{tmp_path / 'db' / 'broker.db'}"
    r = _in_namespace(
        f"mount -t tmpfs -o {mount} tmpfs {target} && "
        f"PYTHONPATH={ROOT} {sys.executable} -m broker --url {url} export {space} "
        f"--root {target}/out; echo exit=$?",
        target,
    )
    assert r.stdout.strip().splitlines()[-1] == "exit=10", (r.stdout, r.stderr)
    assert one_line(r.stderr).startswith("broker: file_error: cannot export to ")
    assert reason in r.stderr


def test_purge_to_a_full_file_system_deletes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "db" / "broker.db"
    space = _big_space(db)
    store = Store(f"sqlite:///{db}")
    spaces.archive(store, space)
    store.close()
    target = tmp_path / "mnt"
    target.mkdir()
    r = _in_namespace(
        f"mount -t tmpfs -o size=16k tmpfs {target} && "
        f"PYTHONPATH={ROOT} {sys.executable} -m broker --url sqlite:///{db} space purge {space} "
        f"--export {target}/out --yes; echo exit=$?",
        target,
    )
    assert r.stdout.strip().splitlines()[-1] == "exit=10", (r.stdout, r.stderr)
    assert "No space left on device" in one_line(r.stderr)
    store = Store(f"sqlite:///{db}")
    assert len(Operator(store).log(space)) == 100, "nothing was deleted"
    store.close()


def test_export_where_permission_is_denied_is_one_line_and_exit_10() -> None:
    """As a user who may not write the export folder (``nobody`` when the tests
    run as root, in a folder of the shared temp dir it can reach)."""
    base = Path(tempfile.mkdtemp(prefix="broker-perm-"))
    try:
        home = base / "home"
        space = _big_space(home / "broker.db")
        locked = base / "locked"
        locked.mkdir(mode=0o555)
        cmd = [sys.executable, "-m", "broker", "export", space, "--root", str(locked / "out")]
        env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
        env.update(BROKER_HOME=str(home), PYTHONPATH=str(ROOT))
        if os.geteuid() == 0:
            if shutil.which("setpriv") is None:
                pytest.skip("running as root without setpriv(1): cannot drop privileges")
            for path in (base, home, *home.iterdir()):
                os.chown(path, 65534, 65534)
            os.chown(locked, 0, 0)
            cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *cmd]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
        if "No module named" in r.stderr:  # pragma: no cover - the checkout is not readable
            pytest.skip("the unprivileged user cannot read the checkout")
        assert r.returncode == 10, r.stderr
        assert one_line(r.stderr).startswith(f"broker: file_error: cannot export to {locked}")
        assert "Permission denied" in r.stderr
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_library_export_errors_are_broker_errors(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'db' / 'broker.db'}")
    space = Operator(store).create_space("run").id
    (tmp_path / "file").write_text("x")
    with pytest.raises(errors.InvalidInput, match="cannot export to"):
        Operator(store).export_space(space, tmp_path / "file" / "x")
    with pytest.raises(errors.InvalidInput, match="cannot import from"):
        Operator(store).import_dir(tmp_path / "nothing-here")
    store.close()
