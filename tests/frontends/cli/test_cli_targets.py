"""Commands that write a path the caller names (``backup PATH`` and its
operator-key file, ``guard install``'s hook) write regular files only: a
FIFO, a device, a socket or a symlink already there is refused, with or
without --force, and is left as it was (README "broker backup"; S33: bad
input writes nothing).

No test touches /dev/null itself: the device here is reached through a
symlink, and the FIFO is made in the test's folder.
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from broker import Operator, Store, errors

KEY_ENV = {"BROKER_OPERATOR_KEY": "test-operator-key"}


def assert_refused_as_not_regular(res: Any, path: Path, kind: str) -> None:
    assert res.code == 2, res.err
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.err
    assert lines[0] == (
        f"broker: invalid_input: {path} is {kind}: broker writes only regular files; "
        "give the path of a regular file or of a new one"
    )
    assert "--force" not in lines[0]  # --force cannot help: never suggested


def test_S33_backup_never_replaces_a_fifo_or_a_symlink_to_a_device_even_with_force(
    cli: Callable[..., Any], tmp_path: Path
) -> None:
    assert cli("space", "create", "--kind", "workflow", env=KEY_ENV).code == 0
    fifo = tmp_path / "myfifo"
    os.mkfifo(fifo)
    device = tmp_path / "zero-link"
    device.symlink_to("/dev/zero")
    for force in ((), ("--force",)):
        res = cli("backup", str(fifo), *force, env=KEY_ENV)
        assert_refused_as_not_regular(res, fifo, "a FIFO (named pipe)")
        res = cli("backup", str(device), *force, env=KEY_ENV)
        assert_refused_as_not_regular(res, device, "a symbolic link")
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert device.is_symlink() and os.readlink(device) == "/dev/zero"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "myfifo", "zero-link"]


def test_S33_backup_checks_the_operator_key_file_beside_it_the_same_way(
    store: Store, tmp_path: Path
) -> None:
    Operator(store).create_space("workflow")
    key = Path(f"{store.path}.operator-key")
    if not key.exists():
        key.write_text("secret")
        os.chmod(key, 0o600)
    dest = tmp_path / "copy.db"
    side = Path(f"{dest}.operator-key")
    os.mkfifo(side)
    with pytest.raises(errors.InvalidInput, match="is a FIFO") as refused:
        Operator(store).backup(dest, force=True)
    assert refused.value.fields == {"field": "path"}
    assert not dest.exists() and stat.S_ISFIFO(side.lstat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("copy")) == [
        "copy.db.operator-key"
    ]  # no temp file, no database left beside the FIFO


def test_S33_guard_install_refuses_a_hook_that_is_a_fifo(
    cli: Callable[..., Any], tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(hook)
    for force in ((), ("--force",)):
        res = cli("guard", "install", "--repo", str(repo), *force, env={"BROKER_SPACE": "x"})
        assert_refused_as_not_regular(res, hook, "a FIFO (named pipe)")
    assert stat.S_ISFIFO(hook.lstat().st_mode)
    assert not (hook.parent / "pre-commit.pre-broker").exists()
    assert not [p for p in hook.parent.iterdir() if "broker-tmp" in p.name]
