"""Operating a store: ``broker doctor``, ``broker backup PATH``, ``broker vacuum``
(spec §Storage). Real stores, real processes (the CLI, a writer that keeps
writing during a backup, a process holding the writer lock)."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlrows
import trusted

from broker import Operator, Store, errors
from broker.store.maintenance import exit_code
from broker.store.migrate import HEAD

KEY_ENV = {"BROKER_OPERATOR_KEY": "test-operator-key"}
CHECKS = {
    "store",
    "sqlite",
    "journal_mode",
    "wal",
    "schema",
    "integrity",
    "file",
    "doorbells",
    "leases",
    "quarantine",
    "references",
    "size",
    "settings",
}


def files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def by_check(findings: list[Any], check: str) -> list[Any]:
    return [f for f in findings if f.check == check]


def worst(findings: list[Any]) -> set[str]:
    return {f.severity for f in findings}


@pytest.fixture
def healthy(store: Store) -> Store:
    """A store with one space; the operator key is its own key file (S29)."""
    Operator(store).create_space("workflow")
    return store


# --- doctor -----------------------------------------------------------------------------------
def test_doctor_on_a_healthy_store_is_clean_and_exits_0(cli: Callable[..., Any]) -> None:
    assert cli("space", "create", "--kind", "workflow", env=KEY_ENV).code == 0
    res = cli("doctor", "--json", env=KEY_ENV)
    assert res.code == 0, res.out + res.err
    lines = res.lines()  # JSON Lines: one finding per line
    assert {d["check"] for d in lines} == CHECKS
    for d in lines:
        assert set(d) == {"check", "severity", "message", "fix", "path", "data"}
        assert d["severity"] in ("ok", "info"), d
    schema = next(d for d in lines if d["check"] == "schema")
    assert schema["data"] == {"current": HEAD, "head": HEAD}
    settings = next(d for d in lines if d["check"] == "settings")
    assert settings["data"]["writer_lock"] is True and "writer_lock=on" in settings["message"]
    kind = settings["data"]["writer_lock_kind"]  # the platform's: its robust mutex on Linux
    assert kind == ("mutex" if sys.platform.startswith("linux") else "flock")
    assert f"writer_lock=on ({kind})" in settings["message"]
    flock = cli("doctor", "--json", env={**KEY_ENV, "BROKER_WRITER_LOCK": "flock"}).lines()
    settings = next(d for d in flock if d["check"] == "settings")
    assert settings["data"]["writer_lock_kind"] == "flock"
    assert "writer_lock=on (flock)" in settings["message"]
    text = cli("doctor", env=KEY_ENV)
    assert text.code == 0 and "schema at head" in text.out
    off = cli("doctor", "--json", env={**KEY_ENV, "BROKER_WRITER_LOCK": "off"}).lines()
    settings = next(d for d in off if d["check"] == "settings")
    assert settings["data"]["writer_lock"] is False and "writer_lock=off" in settings["message"]
    assert settings["data"]["writer_lock_kind"] is None


def test_doctor_on_a_missing_store_is_one_error_and_creates_nothing(
    cli: Callable[..., Any], tmp_path: Path
) -> None:
    res = cli("doctor")
    assert res.code == 9, res.err
    assert res.out.splitlines()[0].startswith("error    store         no broker database at")
    assert "fix: broker db upgrade" in res.out
    assert "Traceback" not in res.err
    assert not (tmp_path / "home").exists()


def test_doctor_reads_without_creating_or_changing_any_file(healthy: Store) -> None:
    folder = healthy.path.parent
    healthy.close()
    os.unlink(f"{healthy.path}.lock")
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir() if not p.name.endswith("-shm")}
    findings = Operator.doctor(healthy.url)
    after = {p.name: p.stat().st_mtime_ns for p in folder.iterdir() if not p.name.endswith("-shm")}
    assert set(after) - set(before) <= {"broker.db-wal"}  # SQLite's own, while a reader is open
    assert {k: v for k, v in after.items() if k in before} == before
    lock = by_check(findings, "file")
    assert any(f.severity == "info" and "no writer lock file yet" in f.message for f in lock)


def test_doctor_says_how_to_fix_file_modes(healthy: Store) -> None:
    db, folder = healthy.path, healthy.path.parent
    os.chmod(db, 0o644)
    os.chmod(folder, 0o755)
    found = {f.path: f for f in by_check(Operator.doctor(healthy), "file")}
    assert found[str(db)].severity == "warning"
    assert found[str(db)].fix == f"chmod 600 {db}"
    assert found[str(folder)].fix == f"chmod 700 {folder}"
    os.chmod(db, 0o666)
    findings = Operator.doctor(healthy)
    f = {f.path: f for f in by_check(findings, "file")}[str(db)]
    assert f.severity == "error" and "writable by others" in f.message
    assert exit_code(findings) == 9
    os.chmod(db, 0o600)
    os.chmod(folder, 0o700)
    assert exit_code(Operator.doctor(healthy)) == 0


def test_doctor_still_diagnoses_a_store_without_its_operator_key_file(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BROKER_OPERATOR_KEY", raising=False)
    Operator(store).create_space("workflow")
    key = Path(f"{store.path}.operator-key")
    if key.exists():
        key.unlink()
    findings = Operator.doctor(store)  # a class method: no key needed to run it
    assert {f.check for f in findings} == CHECKS
    missing = [f for f in by_check(findings, "file") if f.path == str(key)]
    assert [f.severity for f in missing] == ["warning"]
    assert "BROKER_OPERATOR_KEY" in (missing[0].fix or "")
    assert exit_code(findings) == 8


def test_doctor_reports_a_schema_behind_head_with_its_fix(healthy: Store) -> None:
    with healthy.write() as t:
        t.execute("UPDATE alembic_version SET version_num = '0001'")
    findings = Operator.doctor(healthy.url)
    (schema,) = by_check(findings, "schema")
    assert schema.severity == "error" and schema.fix == "broker db upgrade"
    assert by_check(findings, "leases")[0].message.startswith(
        "leases, quarantine and references not checked"
    )
    assert exit_code(findings) == 9


def test_doctor_counts_quarantine_and_expired_leases(
    db_url: str, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BROKER_OPERATOR_KEY", KEY_ENV["BROKER_OPERATOR_KEY"])
    store = Store(db_url, clock=clock)
    try:
        space = Operator(store).create_space("workflow").id
        sender, _ = trusted.join(store, space, "sender")
        worker, _ = trusted.join(store, space, "worker")
        for i in range(3):
            sender.send("worker", f"job {i}")
        bad = worker.claim(limit=1)
        worker.quarantine(bad.lease_token, bad.deliveries[0].id, "cannot parse")
        worker.claim(limit=1, lease=5)  # never settled
        clock.advance(10)
        findings = Operator.doctor(store)
    finally:
        store.close()
    (q,) = by_check(findings, "quarantine")
    assert q.severity == "warning" and q.data == {"quarantined": 1, "by_space": {space: 1}}
    assert q.fix == f"broker queue quarantined {space}"
    (lease,) = by_check(findings, "leases")
    assert lease.severity == "info" and lease.data["expired"] == 1
    assert exit_code(findings) == 8


def test_doctor_finds_rows_that_name_no_space_participant_or_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No key declares a log row's space, a delivery's recipient or its message
    (numbers and rowids, revisions 0021-0023): a file written by another
    program could hold a row naming none, which no view or export shows.
    Doctor counts them: an error, and none in a healthy store."""
    monkeypatch.setenv("BROKER_OPERATOR_KEY", KEY_ENV["BROKER_OPERATOR_KEY"])
    store = Store(f"sqlite:///{tmp_path / 'b.db'}")
    try:
        space = Operator(store).create_space("workflow").id
        sender, _ = trusted.join(store, space, "sender")
        trusted.join(store, space, "worker")
        for i in range(3):
            sender.send("worker", f"job {i}")
        (ok,) = by_check(Operator.doctor(store), "references")
        assert ok.severity == "ok"
        raw = sqlite3.connect(store.path)
        try:
            with raw:
                raw.execute(
                    "UPDATE deliveries SET recipient_no = 999 WHERE rowid = "
                    "(SELECT min(rowid) FROM deliveries)"
                )
        finally:
            raw.close()
        (bad,) = by_check(Operator.doctor(store), "references")
    finally:
        store.close()
    assert bad.severity == "error" and bad.data == {"log_rows": 0, "deliveries": 1}
    assert "1 deliveries name no participant or no message" in bad.message


# --- backup -----------------------------------------------------------------------------------
WRITER = """
import sys
from broker import Agent, Operator, Store
store = Store(sys.argv[1])
op = Operator(store)
space = op.create_space("workflow", inbox_cap=10**9, sender_share=1).id  # one sender fills it
a, _ = op.join(space, "a", pid=None)
b, _ = op.join(space, "b", pid=None)
print("writing", flush=True)
i = 0
while True:
    a.send("b", f"m{i}")
    i += 1
"""


@contextmanager
def writing(url: str) -> Iterator[subprocess.Popen[str]]:
    """A real process that keeps sending, one message per transaction."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, url], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "writing"
        yield proc
    finally:
        proc.kill()
        proc.wait()


def messages(url: str) -> int:
    s = Store(url, create=False)
    try:
        with s.read() as t:
            return int(t.one("SELECT count(*) FROM messages")[0])
    finally:
        s.close()


def test_backup_is_online_consistent_and_opens_as_a_store(healthy: Store, tmp_path: Path) -> None:
    key = Path(f"{healthy.path}.operator-key")
    if not key.exists():
        key.write_text("secret")
        os.chmod(key, 0o600)
    dest = tmp_path / "backups" / "copy.db"
    dest.parent.mkdir(mode=0o700)
    steps: list[tuple[int, int]] = []
    with writing(healthy.url):
        deadline = time.monotonic() + 60
        while messages(healthy.url) == 0 and time.monotonic() < deadline:
            time.sleep(0.01)  # the writer has committed (a store that changes under the copy)
        first = messages(healthy.url)
        res = Operator(healthy).backup(
            dest, progress=lambda done, total: steps.append((done, total))
        )
        last = messages(healthy.url)
        while last == first and time.monotonic() < deadline:
            time.sleep(0.01)  # and goes on writing: the backup held nothing up
            last = messages(healthy.url)
    assert res.path == str(dest) and res.integrity == "ok" and res.schema == HEAD
    assert steps and steps[-1][0] == steps[-1][1] == res.pages
    assert [d for d, _ in steps] == sorted(d for d, _ in steps)
    copied = messages(f"sqlite:///{dest}")
    assert first <= copied <= last  # one snapshot taken while the writer wrote
    assert last > first  # the writer was not stopped by the backup
    assert stat.S_IMODE(dest.stat().st_mode) == 0o600
    assert res.key_file == f"{dest}.operator-key"
    assert Path(res.key_file).read_bytes() == key.read_bytes()
    assert stat.S_IMODE(Path(res.key_file).stat().st_mode) == 0o600
    assert exit_code(Operator.doctor(f"sqlite:///{dest}")) == 0
    assert files(dest.parent) == ["copy.db", "copy.db.operator-key"]  # no temp file left


def test_backup_refuses_to_overwrite_without_force(cli: Callable[..., Any], tmp_path: Path) -> None:
    assert cli("space", "create", "--kind", "workflow", env=KEY_ENV).code == 0
    dest = tmp_path / "b.db"
    dest.write_text("precious")
    res = cli("backup", str(dest), env=KEY_ENV)
    assert res.code == 2 and res.err.strip().endswith(
        f"{dest} exists: pass --force to overwrite it"
    )
    assert len(res.err.strip().splitlines()) == 1
    assert dest.read_text() == "precious"
    res = cli("backup", str(dest), "--force", "--json", env=KEY_ENV)
    assert res.code == 0, res.err
    out = res.json()
    assert out["integrity"] == "ok" and out["path"] == str(dest)
    assert messages(f"sqlite:///{dest}") == 0


def test_backup_refuses_the_stores_own_files_and_a_store_in_use(
    healthy: Store, tmp_path: Path
) -> None:
    op = Operator(healthy)
    for own in (healthy.path, Path(f"{healthy.path}-wal"), Path(f"{healthy.path}.lock")):
        with pytest.raises(errors.InvalidInput, match="its own files"):
            op.backup(own, force=True)
    live = tmp_path / "live.db"
    live.write_text("")
    Path(f"{live}-wal").write_text("frames")
    with pytest.raises(errors.InvalidInput, match="looks like a store in use"):
        op.backup(live, force=True)
    assert live.read_text() == ""


def test_backup_of_a_missing_store_is_one_line_and_creates_nothing(
    cli: Callable[..., Any], tmp_path: Path
) -> None:
    res = cli("backup", str(tmp_path / "b.db"), env=KEY_ENV)
    assert res.code == 3 and "no broker database at" in res.err and "Traceback" not in res.err
    assert not (tmp_path / "home").exists() and not (tmp_path / "b.db").exists()


# --- vacuum -----------------------------------------------------------------------------------
def test_vacuum_gives_free_pages_back_and_says_the_sizes(healthy: Store) -> None:
    with healthy.write() as t:  # free pages: a big table made and dropped
        t.execute("CREATE TABLE scratch (x BLOB)")
        t.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000) "
            "INSERT INTO scratch SELECT randomblob(4000) FROM n"
        )
    with healthy.write() as t:
        t.execute("DROP TABLE scratch")
    (size,) = by_check(Operator.doctor(healthy), "size")
    assert size.fix == "broker vacuum" and size.data["free_bytes"] > 4_000_000
    res = Operator(healthy).vacuum()
    assert res.bytes_after < res.bytes_before - 4_000_000
    (size,) = by_check(Operator.doctor(healthy), "size")
    assert size.severity == "ok" and size.data["free_bytes"] == 0
    with healthy.read() as t:
        assert t.one("SELECT count(*) FROM spaces")[0] == 1


def test_vacuum_waits_for_the_writer_lock(healthy: Store) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\nfrom broker import Store\ns = Store(sys.argv[1])\n"
            "with s.write():\n    print('holding', flush=True)\n    sys.stdin.readline()\n",
            healthy.url,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        env = {**os.environ, "BROKER_BUSY_TIMEOUT_MS": "200", "BROKER_URL": healthy.url}
        res = subprocess.run(
            [sys.executable, "-m", "broker", "vacuum", "--json"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert res.returncode == 11, res.stderr
        assert "writer lock stayed taken" in res.stderr and "Traceback" not in res.stderr
        assert holder.stdin is not None
        holder.stdin.write("go\n")
        holder.stdin.flush()
        assert holder.wait(30) == 0
        res = subprocess.run(
            [sys.executable, "-m", "broker", "vacuum", "--json"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout)["bytes_after"] > 0
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.wait()


def test_vacuum_keeps_each_delivery_in_its_messages_rowid_range(
    healthy: Store, tmp_path: Path
) -> None:
    """Revision 0017 keys a delivery by its message's rowid (times 2^20), and the
    log's rowid is no INTEGER PRIMARY KEY: SQLite says VACUUM *may* renumber
    such rowids. With holes a purge left in the log, a vacuum keeps them, so a
    message still finds its deliveries (a settle that missed names where they
    are: ``inbox.by_message_ids``) and an inbox still claims in log order."""
    op = Operator(healthy)
    (kept,) = [s.id for s in op.spaces()]
    gone = op.create_space("workflow").id
    late = op.create_space("workflow").id  # a space, and participants, past the hole
    x, _ = trusted.join(healthy, gone, "x")
    y, _ = trusted.join(healthy, gone, "y")
    a, _ = trusted.join(healthy, kept, "a")
    b, _ = trusted.join(healthy, kept, "b")
    z, _ = trusted.join(healthy, late, "z")
    sent = []
    for i in range(20):  # the purged space's rows interleaved with the kept one's
        x.send("y", f"gone {i}")
        sent.append(a.send(["b"], f"kept {i}").id)
        z.send("z", f"late {i}")
    for s in (x, y):
        s.leave()
    op.stop_space(gone)
    op.archive_space(gone)
    op.purge_space(gone, tmp_path / "export")
    res = op.vacuum()
    assert res.bytes_after <= res.bytes_before
    with healthy.read() as t:
        # Every delivery of the kept space's inboxes still names a message of it by
        # its rowid (revision 0021: the row holds no other link to it); the claim
        # below checks it is the right one.
        rows, named = t.one(
            "SELECT count(*), count(m.rowid) FROM deliveries d "
            "LEFT JOIN messages m ON m.rowid = d.rowid >> 20 "
            f"AND m.space_no = {sqlrows.SPACE_NO} WHERE d.recipient_no IN "
            "(SELECT p.rowid FROM participants p WHERE p.space_id = ?)",
            (kept, kept),
        )
    assert rows == named == 20, (rows, named)
    got = b.claim(limit=20)
    assert [d.body for d in got.deliveries] == [f"kept {i}" for i in range(20)]
    assert [d.id for d in got.deliveries] == sent
    # A space and a participant are their rows' rowids inside the store (revisions
    # 0022, 0023): with holes a purge left in both tables, a vacuum keeps them.
    assert [d.body for d in z.claim(limit=20).deliveries] == [f"late {i}" for i in range(20)]
    assert [e.body for e in op.log(late)] == [f"late {i}" for i in range(20)]
    (references,) = by_check(Operator.doctor(healthy), "references")
    assert references.severity == "ok"
