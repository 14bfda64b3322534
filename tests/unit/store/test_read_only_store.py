"""Read-only stores (spec §Storage, "Read-only stores"): ``Store(url,
create=False)`` never creates a file, a missing store is one clear line, and a
store on a read-only file system opens for reading with its writes refused in
one line. The read-only file system is real: a read-only bind mount in a
private mount namespace (``unshare``), skipped with a notice where the
machine does not allow one."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from broker import Operator, Store, errors
from broker.store.migrate import HEAD


def files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_storage_a_missing_store_is_one_line_and_nothing_is_created(tmp_path: Path) -> None:
    folder = tmp_path / "home"
    with pytest.raises(errors.StoreNotFound) as info:  # not found: exit 3
        Store(f"sqlite:///{folder / 'broker.db'}", create=False)
    msg = str(info.value)
    assert msg.startswith(f"no broker database at {folder / 'broker.db'}")
    assert "broker db upgrade" in msg and "\n" not in msg
    assert not folder.exists()
    folder.mkdir()
    (folder / "broker.db").touch()  # an empty file is not a store either
    with pytest.raises(errors.StoreNotFound, match="no broker database at"):
        Store(f"sqlite:///{folder / 'broker.db'}", create=False)
    assert files(folder) == ["broker.db"]


def test_storage_a_store_opened_without_create_makes_no_file(tmp_path: Path) -> None:
    folder = tmp_path / "home"
    url = f"sqlite:///{folder / 'broker.db'}"
    made = Store(url)
    space = Operator(made).create_space("workflow").id
    made.close()
    (folder / "broker.db.lock").unlink()
    before = set(files(folder))
    ro = Store(url, create=False)
    try:
        with ro.read() as t:
            assert t.one("SELECT id FROM spaces")["id"] == space
        # A write still works (SQLite's busy handler orders it) but makes no lock file.
        Operator(ro).create_space("workflow")
        assert ro.read_only is None
    finally:
        ro.close()
    assert set(files(folder)) - before <= {"broker.db-wal", "broker.db-shm"}
    assert "broker.db.lock" not in files(folder)


def test_storage_a_store_behind_head_is_not_migrated_by_a_read_only_open(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'broker.db'}"
    s = Store(url)
    with s.write() as t:  # make it look older than this broker
        t.execute("UPDATE alembic_version SET version_num = '0001'")
    s.close()
    with pytest.raises(errors.SchemaOutOfDate, match="broker db upgrade") as info:
        Store(url, create=False)
    assert f"needs {HEAD}" in str(info.value)
    unchecked = Store(url, create=False, migrate=False)  # `db current`, `doctor`
    try:
        assert unchecked.schema_version() == "0001"
    finally:
        unchecked.close()


# --- a real read-only file system --------------------------------------------------------
PROBE = """
import json, sys
from broker import Operator, Store, errors
out = {}
try:
    s = Store(sys.argv[1], create=sys.argv[2] == "create")
except errors.BrokerError as exc:
    print(json.dumps({"open_error": str(exc), "code": exc.code}))
    raise SystemExit(0)
out["read_only"] = s.read_only
with s.read() as t:
    out["spaces"] = [r["id"] for r in t.all("SELECT id FROM spaces ORDER BY id")]
try:
    Operator(s).create_space("workflow")
    out["write"] = "ok"
except errors.BrokerError as exc:
    out["write_error"] = str(exc)
    out["code"] = exc.code
print(json.dumps(out))
"""


def on_read_only_mount(folder: Path, *args: str) -> dict[str, object]:
    """Run PROBE with ``folder`` bind-mounted read-only over itself (private namespace)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("unshare is not installed: no read-only mount to test on")
    cmd = [
        unshare,
        "-rm",
        "sh",
        "-c",
        'mount --bind -o ro "$0" "$0" && exec "$@"',
        str(folder),
        sys.executable,
        "-c",
        PROBE,
        *args,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0 and (
        "Operation not permitted" in proc.stderr or "mount" in proc.stderr
    ):
        pytest.skip(f"no private read-only mount here: {proc.stderr.strip()[:200]}")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("mode", ["create", "no-create"])
def test_storage_a_store_on_a_read_only_file_system_reads_and_refuses_writes_in_one_line(
    tmp_path: Path, mode: str
) -> None:
    folder = tmp_path / "home"
    url = f"sqlite:///{folder / 'broker.db'}"
    s = Store(url)
    space = Operator(s).create_space("workflow").id
    s.close()  # the last connection folds the WAL back and removes it
    assert "broker.db-wal" not in files(folder)
    before = files(folder)
    out = on_read_only_mount(folder, url, mode)
    assert out["read_only"] == "it is on a read-only file system"
    assert out["spaces"] == [space]
    assert out["code"] == "store_error"
    assert out["write_error"] == (
        f"cannot write to the store at {folder / 'broker.db'}: it is on a read-only file system"
    )
    assert files(folder) == before


def test_storage_a_read_only_file_system_still_shows_what_the_wal_holds(tmp_path: Path) -> None:
    """A WAL left behind (its writer killed) is read through ``mode=ro``, not
    skipped as ``immutable=1`` would."""
    folder = tmp_path / "home"
    url = f"sqlite:///{folder / 'broker.db'}"
    writer = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, sys\n"
            "from broker import Operator, Store\n"
            "s = Store(sys.argv[1])\n"
            "with s.write() as t:\n"
            "    t.execute('PRAGMA wal_autocheckpoint = 0')\n"
            "print(Operator(s).create_space('workflow').id, flush=True)\n"
            "os._exit(0)  # no close: the WAL stays\n",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert writer.returncode == 0, writer.stderr
    space = writer.stdout.strip()
    assert (folder / "broker.db-wal").stat().st_size > 0
    out = on_read_only_mount(folder, url, "no-create")
    assert out["spaces"] == [space]
    assert "write_error" in out
