"""Operating a store per backend, and a swarm across hosts (PostgreSQL behind
``broker serve``, agents and the operator elsewhere).

Real servers and stores: ``broker serve`` runs as a process of its own on a
PostgreSQL database with no extra flag, answering over HTTP and its socket;
the other commands run through the CLI in this process (click's runner), each
with exactly the BROKER_* environment a user would have. Covered: ``broker
key show`` and BROKER_OPERATOR_KEY
carrying the operator key to another BROKER_HOME; ``doctor``, ``backup`` and
``vacuum`` on PostgreSQL; URLs printed whole (and a password never); a store
from a newer broker refused in one line with its own exit code on both
backends; ``migrate-store`` carrying join keys, tokens and the operator key
both ways between SQLite and PostgreSQL.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pgtest
import pytest
import spacegen
from click.testing import CliRunner

from broker import Agent, Operator, Store, errors
from broker.frontends.cli import main
from broker.store import postgres
from broker.store.maintenance import doctor, exit_code
from broker.store.migrate import HEAD

ANNOUNCE = re.compile(r"broker serve: (?P<where>.+) \(store (?P<store>.+)\)$", re.M)
# A PostgreSQL URL cut short: one slash after the scheme (a URL read as a path).
HALF_URL = re.compile(r"postgres(?:ql)?(?:\+psycopg)?:/(?!/)")
PG_CHECKS = {
    "store",
    "server",
    "text",
    "connections",
    "schema",
    "file",
    "leases",
    "quarantine",
    "references",
    "size",
    "settings",
}


def env_of(home: Path, **extra: str) -> dict[str, str]:
    """A broker process's environment: this one's without BROKER_*, BROKER_HOME at ``home``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
    env["BROKER_HOME"] = str(home)
    env.update(extra)
    return env


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


def broker(*args: str, env: dict[str, str]) -> Ran:
    """``broker ARGS`` with exactly the environment ``env`` (BROKER_* as given,
    no other), run in this process (click's runner: a process start costs a
    second on a loaded machine; ``broker serve`` runs as a real process)."""
    given = {k: None for k in os.environ if k.startswith("BROKER_")}
    given.update({k: v for k, v in env.items() if k.startswith("BROKER_")})
    res = CliRunner().invoke(main, list(args), env=given)
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    return Ran(res.exit_code, res.stdout, res.stderr)


def one_line(res: Ran) -> str:
    """The refusal's one stderr line (never a traceback)."""
    assert "Traceback" not in res.stderr, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    return lines[0]


@pytest.fixture
def short_home() -> Iterator[Path]:
    """A BROKER_HOME whose path leaves room for a socket name (the session's TMPDIR)."""
    home = Path(tempfile.mkdtemp(prefix="h"))
    try:
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)


class Serve:
    """``broker serve --port 0`` in a process of its own, stopped by ``stop``."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        fd, name = tempfile.mkstemp(prefix="serve-", suffix=".log")
        os.close(fd)
        self.log = Path(name)
        self._out = open(self.log, "w+b")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "broker", "serve", "--port", "0", *args],
            stdout=self._out,
            stderr=self._out,
            env=env,
        )
        deadline = time.monotonic() + 90  # a loaded machine starts slowly
        while not (found := ANNOUNCE.search(self.output())):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                out = self.output()
                self.stop()
                raise AssertionError(f"broker serve did not start: {out}")
            time.sleep(0.02)
        self.where = found.group("where").split()
        self.store = found.group("store")
        self.socket = next((w.removeprefix("unix://") for w in self.where if "unix:" in w), None)
        self.base = next(w for w in self.where if w.startswith("http://"))

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        finally:
            self._out.close()
            self.log.unlink(missing_ok=True)


def _space_with_lynx(store: Store) -> tuple[str, str, Agent, str]:
    """A running space, its join key, and lynx (joined with it) and lynx's token."""
    created = Operator(store).create_space("workflow")
    lynx, joined = Agent.join(store, created.id, "lynx", join_key=created.join_key)
    return created.id, created.join_key, lynx, joined.token


# --- broker serve on PostgreSQL ---------------------------------------------------------------
def test_served_pg_broker_serve_on_postgresql_needs_no_flag_and_answers_over_http(
    short_home: Path,
) -> None:
    with pgtest.database(home=short_home) as url:
        store = Store(url)
        try:
            sid, _, _, token = _space_with_lynx(store)
            Agent.join(store, sid, "otter", join_key=Operator(store).rotate_join_key(sid).join_key)
            # A password in the URL (trust auth ignores it) is never printed.
            secret = url.replace("postgres@", "postgres:sekret@")
            srv = Serve(env_of(short_home, BROKER_URL=secret))
            try:
                # The socket has a place: BROKER_HOME, beside the store's key file.
                name = postgres.key_path(postgres.conninfo(url)).name
                sock = short_home / name.replace(".operator-key", ".sock")
                assert srv.socket == str(sock)
                assert stat.S_IMODE(os.lstat(sock).st_mode) == 0o600
                assert srv.store == url.replace("postgres@", "postgres:***@")  # whole URL
                assert "sekret" not in srv.output() and not HALF_URL.search(srv.output())
                transport = httpx.HTTPTransport(uds=str(sock))
                with httpx.Client(base_url="http://broker", transport=transport) as c:
                    assert c.get("/healthz").json()["status"] == "ok"
                key = {"Authorization": f"Bearer {pgtest.operator_key()}"}
                with httpx.Client(base_url=srv.base, headers=key) as op:
                    assert sid in {s["id"] for s in op.get("/api/spaces").json()}
                lynx = {"Authorization": f"Bearer {token}"}  # an agent holds its token only
                with httpx.Client(base_url=srv.base, headers=lynx) as c:
                    sent = c.post(
                        f"/api/runs/{sid}/agent/send",
                        json={"to": ["otter"], "text": "across hosts"},
                    )
                    assert sent.status_code == 200, sent.text
                    assert sent.json()["reached"] == ["otter"]
            finally:
                srv.stop()
            assert not sock.exists()  # removed on the way out
            log = Operator(store).log(sid)
            assert [(e.sender, e.body) for e in log] == [("lynx", "across hosts")]
        finally:
            store.close()


def test_served_pg_two_workers_each_with_its_own_pool_write_every_send_once(
    short_home: Path,
) -> None:
    """``broker serve --workers 2`` on PostgreSQL: both workers answer agents
    (each on new connections, so the kernel hands them to both), and every send
    is in the log exactly once, whichever worker's committer wrote it."""
    with pgtest.database(home=short_home) as url:
        store = Store(url)
        try:
            sid, _, _, token = _space_with_lynx(store)
            srv = Serve(env_of(short_home, BROKER_URL=url), "--workers", "2", "--quiet")
            try:
                pids: set[str] = set()
                sent = []
                lynx = {"Authorization": f"Bearer {token}"}
                # The workers share the listeners: whichever is woken first takes a
                # connection, and on a loaded machine the one that just answered
                # can take many in a row. Ask until both have answered (or 30 s).
                deadline = time.monotonic() + 30
                for i in itertools.count():
                    if (len(pids) == 2 and i >= 20) or time.monotonic() > deadline:
                        break
                    with httpx.Client(base_url=srv.base, headers=lynx, timeout=60) as c:
                        r = c.post(
                            f"/api/runs/{sid}/agent/send", json={"to": ["lynx"], "text": f"m{i}"}
                        )
                        assert r.status_code == 200, r.text
                        pids.add(r.headers["x-broker-worker"])
                        sent.append(f"m{i}")
                assert len(pids) == 2, pids
            finally:
                srv.stop()
            log = Operator(store).log(sid)
            assert sorted(e.body for e in log) == sorted(sent)
        finally:
            store.close()


def test_served_pg_a_socket_path_too_long_serves_over_tcp_alone_and_says_so(
    tmp_path: Path,
) -> None:
    home = tmp_path / ("h" * 90)
    with pgtest.database(home=home) as url:
        srv = Serve(env_of(home, BROKER_URL=url))
        try:
            assert srv.socket is None and srv.base.startswith("http://127.0.0.1:")
            assert "broker serve: no Unix socket: its place" in srv.output()
            with httpx.Client(base_url=srv.base) as c:
                assert c.get("/healthz").status_code == 200
        finally:
            srv.stop()
        res = broker("serve", "--no-tcp", env=env_of(home, BROKER_URL=url))
        assert res.returncode == 2
        assert "give a shorter --socket" in one_line(res)


# --- the operator key across hosts (S29) --------------------------------------------------------
def test_S29_key_show_carries_the_operator_key_to_another_host(tmp_path: Path) -> None:
    here, there = tmp_path / "here", tmp_path / "there"
    with pgtest.database(home=here) as url:
        shown = broker("key", "show", env=env_of(here, BROKER_URL=url))
        assert shown.returncode == 0, shown.stderr
        key = shown.stdout.strip()
        assert key == pgtest.operator_key() and shown.stdout == key + "\n"
        as_json = json.loads(
            broker("key", "show", "--json", env=env_of(here, BROKER_URL=url)).stdout
        )
        assert as_json == {"store": url, "operator_key": key}
        # Another host (another BROKER_HOME): no key file there.
        res = broker("space", "list", env=env_of(there, BROKER_URL=url))
        assert res.returncode == 4
        assert "`broker key show` prints the key to set BROKER_OPERATOR_KEY to" in one_line(res)
        res = broker("key", "show", env=env_of(there, BROKER_URL=url))
        assert res.returncode == 4 and res.stdout == ""
        carried = env_of(there, BROKER_URL=url, BROKER_OPERATOR_KEY=key)
        made = broker("space", "create", "--kind", "run", "--json", env=carried)
        assert made.returncode == 0, made.stderr
        listed = broker("space", "list", "--json", env=carried)
        assert json.loads(made.stdout)["id"] in listed.stdout
        wrong = broker(
            "key", "show", env=env_of(there, BROKER_URL=url, BROKER_OPERATOR_KEY="guessed")
        )
        assert wrong.returncode == 4 and "guessed" not in wrong.stdout + wrong.stderr
        assert "not this store's" in one_line(wrong)
        assert not there.exists()  # the other host's home: nothing written there


def test_S29_key_show_on_sqlite_prints_the_key_file_it_checked(tmp_path: Path) -> None:
    spacegen.fresh_store(tmp_path / "home").close()
    res = broker("key", "show", env=env_of(tmp_path / "home"))
    assert res.returncode == 0, res.stderr
    assert res.stdout == (tmp_path / "home" / "broker.db.operator-key").read_text()
    (tmp_path / "home" / "broker.db.operator-key").unlink()
    res = broker("key", "show", env=env_of(tmp_path / "home"))
    assert res.returncode == 4 and res.stdout == ""


# --- doctor, backup and vacuum on PostgreSQL ----------------------------------------------------
def test_pg_doctor_runs_the_servers_own_checks(tmp_path: Path) -> None:
    with pgtest.database(home=tmp_path / "home") as url:
        res = broker("doctor", "--json", env=env_of(tmp_path / "home", BROKER_URL=url))
        assert res.returncode == 0, res.stdout + res.stderr
        found = {d["check"]: d for d in map(json.loads, res.stdout.splitlines())}
        assert set(found) == PG_CHECKS
        assert all(d["severity"] in ("ok", "info") for d in found.values()), found
        assert "PRAGMA" not in res.stdout + res.stderr
        assert found["store"]["message"] == f"store at {url}"
        assert found["schema"]["data"] == {"current": HEAD, "head": HEAD}
        server = found["server"]["data"]
        assert server["version_num"] >= 100000 and found["server"]["message"].startswith(
            f"PostgreSQL {server['version']}"
        )
        text = found["text"]["data"]
        assert text["encoding"] == "UTF8" and text["byte_order"] is True  # the test server: C
        conn = found["connections"]["data"]
        assert conn["in_use"] >= 1  # this doctor's own connection at least
        assert conn["free"] == conn["max_connections"] - conn["superuser_reserved"] - conn["in_use"]
        assert conn["per_process"] == postgres.POOL_SIZE + 1
        key = postgres.key_path(postgres.conninfo(url))
        assert found["file"]["path"] == str(key) and found["file"]["severity"] == "ok"
        # Another host: no key file there, and its fix says how to carry the key.
        res = broker("doctor", env=env_of(tmp_path / "there", BROKER_URL=url))
        assert res.returncode == 8
        assert (
            "fix: on the host that made the store, `broker key show` prints the key" in res.stdout
        )


def test_pg_doctor_on_a_server_it_cannot_reach_is_one_finding_with_its_fix(
    tmp_path: Path,
) -> None:
    found = doctor("postgresql+psycopg://postgres@127.0.0.1:1/nothing")  # nothing listens
    assert [(f.check, f.severity) for f in found] == [("store", "error"), ("settings", "info")]
    assert found[0].message.startswith("cannot reach the PostgreSQL store at postgresql+psycopg://")
    assert found[0].fix == "start the server, or check the host, port and user in BROKER_URL"
    with pgtest.database(home=tmp_path / "home") as url:  # the server is there; this database not
        missing = doctor(url + "_gone")
    assert [f.check for f in missing] == ["store", "settings"]
    assert "does not exist" in missing[0].message and "createdb NAME" in (missing[0].fix or "")
    assert exit_code(missing) == 9


def test_pg_doctor_warns_when_the_connection_budget_cannot_hold_one_more_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pgtest.database(home=tmp_path / "home") as url:
        store = Store(url)
        try:
            conn = next(f for f in doctor(store) if f.check == "connections")
            assert conn.severity == "ok"
            # A pool as large as the server's every slot: one more process would not
            # fit, whatever the other tests of a parallel run hold or let go meanwhile
            # (the free slots read just now were seen to grow before the next reading).
            monkeypatch.setattr(postgres, "POOL_SIZE", conn.data["max_connections"])
            tight = next(f for f in doctor(store) if f.check == "connections")
            assert tight.severity == "warning" and "max_connections" in (tight.fix or "")
            assert exit_code(doctor(store)) == 8
        finally:
            store.close()


def test_pg_doctor_says_when_text_does_not_sort_in_byte_order(tmp_path: Path) -> None:
    with pgtest.database(template=None, home=tmp_path / "home") as url:
        name = url.rpartition("/")[2]
        icu = f"{name}_icu"
        with pgtest._admin() as admin:
            try:
                admin.execute(
                    f'CREATE DATABASE "{icu}" TEMPLATE template0 ENCODING UTF8 '
                    "LOCALE_PROVIDER icu ICU_LOCALE 'en-US'"
                )
            except Exception as exc:  # noqa: BLE001 - the server decides what it can build
                pytest.skip(f"this PostgreSQL cannot make an ICU database: {exc}")
            try:
                store = Store(pgtest.url_of(icu), migrate=False, create=False)
                try:
                    text = next(f for f in doctor(store) if f.check == "text")
                finally:
                    store.close()
                assert text.severity == "info" and text.data["byte_order"] is False
                assert "not in byte order as on SQLite" in text.message
                assert "createdb --locale C" in (text.fix or "")
            finally:
                admin.execute(f'DROP DATABASE IF EXISTS "{icu}" WITH (FORCE)')


def test_pg_backup_and_vacuum_say_what_to_use_instead_in_one_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with pgtest.database(home=home) as url:
        env = env_of(home, BROKER_URL=url)
        libpq = url.replace("+psycopg", "")
        res = broker("backup", str(tmp_path / "copy.db"), env=env)
        assert res.returncode == 2, res.stderr
        said = one_line(res)
        assert said.startswith("broker: invalid_input: backup copies a SQLite file, and this store")
        assert f"pg_dump --format=custom --file=PATH {libpq} " in said
        assert not (tmp_path / "copy.db").exists()
        res = broker("vacuum", env=env)
        assert res.returncode == 2
        assert f"psql {libpq} -c 'VACUUM'" in one_line(res)
        store = Store(url)
        try:
            with pytest.raises(errors.InvalidInput, match="pg_dump"):
                Operator(store).backup(tmp_path / "copy.db")
        finally:
            store.close()


def test_pg_urls_are_printed_whole_and_a_password_never(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with pgtest.database(home=home) as url:
        secret = url.replace("postgres@", "postgres:sekret@")  # trust auth ignores it
        shown_pw = url.replace("postgres@", "postgres:***@")  # whole, the password hidden
        env = env_of(home, BROKER_URL=secret)
        outputs = []
        for args in (["db", "current"], ["db", "upgrade"], ["doctor"], ["doctor", "--json"]):
            res = broker(*args, env=env)
            assert res.returncode == 0, (args, res.stderr)
            outputs.append(res.stdout + res.stderr)
        outputs.append(one_line(broker("backup", str(tmp_path / "b.db"), env=env)))
        text = "\n".join(outputs)
        assert "sekret" not in text
        assert not HALF_URL.search(text), text
        assert f"{shown_pw}: {HEAD} (head {HEAD}, up to date)" in outputs[0]
        assert "postgresql://postgres:***@" in outputs[4]  # pg_dump's URL: libpq's form
        assert f"store at {shown_pw}\n" in outputs[2]


def test_pg_the_demos_sql_hint_runs_in_the_stores_own_client(tmp_path: Path) -> None:
    """The demo prints ``store.sql_shell(query)``: psql for PostgreSQL, sqlite3
    for a file; each printed command runs as it is, in a shell."""
    query = "SELECT count(*) FROM spaces WHERE kind = 'workflow'"
    lite = spacegen.fresh_store(tmp_path / "lite")
    with pgtest.database(home=tmp_path / "home") as url:
        pg = Store(url)
        try:
            for store in (lite, pg):
                Operator(store).create_space("workflow")
                command = store.sql_shell(query)
                assert command.startswith("psql " if store is pg else "sqlite3 "), command
                assert not HALF_URL.search(command)
                if shutil.which(command.split()[0]) is None:
                    pytest.skip(f"{command.split()[0]} is not installed: cannot run the hint")
                ran = subprocess.run(
                    ["sh", "-c", command], capture_output=True, text=True, timeout=60
                )
                assert ran.returncode == 0, ran.stderr
                assert re.search(r"^\s*1\s*$", ran.stdout, re.M), ran.stdout
        finally:
            pg.close()
            lite.close()


# --- a store from a newer broker ----------------------------------------------------------------
@pytest.fixture(params=["sqlite", "postgresql"])
def newer(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A store (URL, BROKER_HOME) whose schema a newer broker wrote: revision 0099."""
    home = tmp_path / "home"
    if request.param == "sqlite":
        url = f"sqlite:///{home / 'broker.db'}"
        spacegen.fresh_store(home).close()
        with _database(url) as url_:
            yield url_, home
        return
    with pgtest.database(home=home) as url, _database(url) as url_:
        yield url_, home


@contextmanager
def _database(url: str) -> Iterator[str]:
    store = Store(url)
    try:
        _space_with_lynx(store)
        with store.engine.begin() as conn:
            conn.exec_driver_sql("UPDATE alembic_version SET version_num = '0099'")
    finally:
        store.close()
    yield url


def test_storage_a_store_from_a_newer_broker_is_one_line_and_exit_14_everywhere(
    newer: tuple[str, Path],
) -> None:
    url, home = newer
    with pytest.raises(errors.StoreTooNew) as refused:
        Store(url)
    assert refused.value.exit_code == 14 and refused.value.code == "store_too_new"
    assert "db upgrade" not in refused.value.message
    with pytest.raises(errors.StoreTooNew):
        Store(url, create=False)  # a read-only open too
    env = env_of(home, BROKER_URL=url)
    for args in (
        ["db", "upgrade"],
        ["space", "list"],
        ["space", "create", "--kind", "run"],
        ["message", "list", "x"],
        ["msg", "send", "--to", "otter", "hi", "--space", "x", "--as", "lynx", "--token", "t"],
        ["serve", "--port", "0"],
    ):
        if args[0] == "serve":  # a real process: were it to start, the timeout ends it
            ran = subprocess.run(
                [sys.executable, "-m", "broker", *args],
                capture_output=True,
                text=True,
                env=env,
                timeout=60,
            )
            res = Ran(ran.returncode, ran.stdout, ran.stderr)
        else:
            res = broker(*args, env=env)
        assert res.returncode == 14, (args, res.stderr)
        line = one_line(res)
        assert line.startswith("broker: store_too_new: the store at "), line
        assert "has schema 0099, newer than this broker knows" in line
        assert "upgrade broker (pip install -U swarm-broker)" in line
        assert "db upgrade" not in line
    current = broker("db", "current", env=env)
    assert current.returncode == 0
    assert "0099 (head " in current.stdout and "upgrade broker" in current.stdout
    checked = broker("doctor", env=env)
    assert checked.returncode == 9
    assert "fix: upgrade broker (pip install -U swarm-broker)" in checked.stdout
    assert "broker db upgrade" not in checked.stdout


# --- migrate-store carries join keys, tokens and the operator key ------------------------------
def _copy_carries_everything(
    source_url: str, source_home: Path, target_url: str, target_home: Path
) -> Path:
    """A space with lynx on the source; migrate-store into the target; there,
    the old join key admits a newcomer, lynx's old token sends, and the
    source's operator key (found in the target's key file) is the operator."""
    source = Store(source_url)
    try:
        sid, join_key, _, token = _space_with_lynx(source)
        source_key = Operator(source).key
    finally:
        source.close()
    res = broker(
        "migrate-store",
        "--into",
        target_url,
        "--json",
        env=env_of(source_home, BROKER_URL=source_url),
    )
    assert res.returncode == 0, res.stderr
    copied = json.loads(res.stdout)
    assert copied["identical"] is True and copied["spaces"] == [sid]
    assert (copied["join_keys"], copied["tokens"], copied["operator_key"]) == (1, 1, "carried")
    env = env_of(target_home, BROKER_URL=target_url)
    joined = broker("join", sid, "otter", "--join-key", join_key, "--json", env=env)
    assert joined.returncode == 0, joined.stderr  # the old join key lets a newcomer in
    lynx = {**env, "BROKER_SPACE": sid, "BROKER_AS": "lynx", "BROKER_TOKEN": token}
    sent = broker("msg", "send", "--to", "otter", "still me", env=lynx)
    assert sent.returncode == 0, sent.stderr  # lynx goes on with the token it holds
    assert Path(copied["key_file"]).read_text().strip() == source_key
    listed = broker("message", "list", sid, "--json", env=env)  # the key file: no variable
    assert listed.returncode == 0, listed.stderr
    assert [json.loads(line)["body"] for line in listed.stdout.splitlines()] == ["still me"]
    wrong = broker("join", sid, "heron", "--join-key", "not-it", env=env)
    assert wrong.returncode == 4  # and only the old join key
    return Path(copied["key_file"])


def test_S27_migrate_store_from_sqlite_to_postgresql_carries_join_keys_tokens_and_key(
    tmp_path: Path,
) -> None:
    lite = tmp_path / "lite"
    spacegen.fresh_store(lite).close()
    # One host, one BROKER_HOME: the PostgreSQL store's key file is made there.
    with pgtest.database(template=None, home=lite) as url:
        key = _copy_carries_everything(f"sqlite:///{lite / 'broker.db'}", lite, url, lite)
        assert key.is_relative_to(lite)  # the target's key file, made in the one BROKER_HOME


def test_S27_migrate_store_from_postgresql_to_sqlite_carries_join_keys_tokens_and_key(
    tmp_path: Path,
) -> None:
    home = tmp_path / "pghome"
    target = tmp_path / "lite"
    with pgtest.database(home=home) as url:
        key = _copy_carries_everything(url, home, f"sqlite:///{target / 'broker.db'}", target)
    assert key.is_relative_to(target)  # the target's key file, beside its database


def test_S29_migrate_store_into_a_store_with_spaces_keeps_its_operator_key(
    tmp_path: Path,
) -> None:
    a = spacegen.fresh_store(tmp_path / "a")
    b = Store(f"sqlite:///{tmp_path / 'b' / 'broker.db'}")  # made here: a key of its own
    try:
        sid, join_key, _, _ = _space_with_lynx(a)
        theirs = Operator(b).create_space("run").id
        b_key = Operator(b).key
        copy = Operator(a).migrate_store(b.url)
        assert (copy.operator_key, copy.join_keys, copy.tokens) == ("kept", 1, 1)
        assert copy.key_file is None
        assert Operator(b).key == b_key  # its own key file still proves the operator
        assert {s.id for s in Operator(b).spaces()} == {sid, theirs}
        Agent.join(b, sid, "otter", join_key=join_key)
    finally:
        a.close()
        b.close()
