"""Shared fixtures: real SQLite files in a temp folder, real processes for the CLI.

Session hygiene (issue 17): the run fails if a test leaves a process running
(or unreaped) or a file in the temp folder. Every test runs with ``TMPDIR`` set
to a folder of this session, and with ``PYTEST_BROKER_SESSION`` in its
environment, which every process it starts inherits; at the end of the session
any process still carrying the mark (or still a child of pytest) is reported
and killed, and anything left in the session's temp folder is reported.

No test writes to the user's home: ``HOME`` is a folder of the session too
(and the ``XDG_*`` folders, which would name the real ones, are unset), so a
store opened at its default place (``~/.local/share/broker``) lands there,
and the run fails if anything did; it fails too if the real broker folders
(``~/.local/share/broker``, ``$XDG_DATA_HOME/broker``) hold a file named after
this session's PostgreSQL databases (a key file written by a path that ignores
``HOME``). Only pip's cache stays the real one (``PIP_CACHE_DIR``): the wheel
test would download every dependency again into an empty one.

With pytest-xdist (``-n 2``, the README's command) every worker is a session of
its own: its own mark, temp folder, PostgreSQL template and check, reported as
an error of that worker's last test.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing.util
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import trusted

from broker import Agent, Operator, Store


class Clock:
    """An injected clock (``Store(url, clock=...)``): starts at the real now and
    moves only when told, so leases and claims expire without sleeping."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> Clock:
    return Clock()


# --- backends (issue 15) -----------------------------------------------------------------------
# The contract modules (named here, or any test module in tests/contract/) run
# every test that uses ``db_url`` (or ``store``, ``cli``...)
# on both backends: SQLite files, and a PostgreSQL database per test cloned from
# a template migrated once per session (tests/pgtest.py). Tests that are
# SQLite-only by nature (files, WAL, doorbell files, backup) carry
# ``@pytest.mark.sqlite_only``.
PG_CONTRACT = {
    "test_lease_evidence",
    "test_left",
    "test_send",
    "test_inbox",
    "test_board",
    "test_turns",
    "test_participants",
    "test_spaces",
    "test_log",
    "test_send_many",
    "test_send_edges",
    "test_grants",
    "test_limits",
    "test_mail",
    "test_reservations",
    "test_records",
    "test_inbox_edges",
    "test_board_edges",
    "test_queue_edges",
    "test_purge",
    "test_export",
    "test_import",
    "test_refusal_fields",
    "test_search_query",
    "test_edge_text",
    "test_liveness",
    "test_child_processes",
    "test_private_files",
    "test_group_commit",
    "test_takeover",
    "test_append_only",
    "test_trust_clock",
    "test_trust_attacks",
}


# --- order (issue 24) ----------------------------------------------------------------------------
# The tests that run for tens of seconds (a bench run, a wheel built and
# installed, swarms of processes) start first, longest first: pytest-xdist
# hands tests out in collection order, and one of them started last keeps one
# worker busy long after the other has finished (a tail of its whole length).
LONG_FIRST = (
    "tests/project/test_bench_quick.py::test_bench_quick_runs_every_scenario",
    "tests/project/test_wheel.py",
    "tests/soak/test_mcp_swarm.py",
    "tests/frontends/cli/test_cli_fuzz.py::test_S33_fuzz_the_serving_commands_as_processes",
    "tests/soak/test_concurrency.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        return next(
            (i for i, prefix in enumerate(LONG_FIRST) if item.nodeid.startswith(prefix)),
            len(LONG_FIRST),
        )

    items.sort(key=rank)  # stable: every other test keeps its place


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" not in metafunc.fixturenames:
        return
    module = metafunc.module.__name__.rpartition(".")[2]
    # A module in tests/contract/ (scripts/regroup_tests.py) is a contract module too.
    contract = module in PG_CONTRACT or Path(metafunc.module.__file__).parent.name == "contract"
    if contract and metafunc.definition.get_closest_marker("sqlite_only") is None:
        metafunc.parametrize("backend", ["sqlite", "postgresql"], indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    """Which engine this test's store runs on (``sqlite`` unless parametrised)."""
    return str(getattr(request, "param", "sqlite"))


@pytest.fixture
def db_url(tmp_path: Path, backend: str) -> Iterator[str]:
    if backend == "postgresql":
        import pgtest

        with pgtest.database(home=tmp_path / "home", reuse=True) as url:
            yield url
        return
    yield f"sqlite:///{tmp_path / 'home' / 'broker.db'}"


@pytest.fixture
def clocked_url(tmp_path: Path, backend: str) -> Iterator[str]:
    """A second store's URL on the test's backend (stores with an injected clock)."""
    if backend == "postgresql":
        import pgtest

        with pgtest.database(home=tmp_path / "home", reuse=True) as url:
            yield url
        return
    yield f"sqlite:///{tmp_path / 'clocked.db'}"


def open_store(url: str, **kw: Any) -> Store:
    """``Store(url, **kw)``; a SQLite file not made yet is first copied from the
    session's migrated template (tests/spacegen.py): migrating costs about half
    a second a store, and hundreds of tests each open a new one. The copy is
    what ``Store(url)`` would have made there (schema, operator key file,
    modes), so only tests of the first open itself (tests/unit/store/test_first_open.py,
    test_migrations.py, test_store.py) call ``Store`` on a missing file."""
    if url.startswith("sqlite:///"):
        import spacegen

        path = Path(url.removeprefix("sqlite:///"))
        if not path.exists():
            spacegen.copy_template(path)
    return Store(url, **kw)


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    s = open_store(db_url)
    yield s
    s.close()


@pytest.fixture
def traced(tmp_path: Path, clock: Clock) -> Iterator[tuple[Store, list[str]]]:
    """A SQLite store and every statement its connection in this thread runs
    (SQLite's trace callback: the text with its values in; a statement that
    fires triggers is reported again after each, trigger bodies as '-- '
    lines). A fixed clock: the once-a-second heartbeat of the first call does
    not recur."""
    store = Store(f"sqlite:///{tmp_path / 'b.db'}", clock=clock)
    seen: list[str] = []
    with store.write() as t:
        conn = t.raw  # this thread's connection: every call below runs on it
    conn.set_trace_callback(seen.append)
    try:
        yield store, seen
    finally:
        conn.set_trace_callback(None)
        store.close()


@pytest.fixture
def operator(store: Store) -> Operator:
    return Operator(store)


@pytest.fixture
def space(operator: Operator) -> str:
    """A running workflow space's id."""
    return operator.create_space("workflow").id


@pytest.fixture
def join(store: Store, space: str) -> Callable[..., Agent]:
    """join("lynx", agent="worker", ...) -> Agent in the default space."""

    def _join(codename: str, **fields: Any) -> Agent:
        agent, _ = trusted.join(store, fields.pop("space", space), codename, **fields)
        return agent

    return _join


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)

    def lines(self) -> list[Any]:
        return [json.loads(line) for line in self.out.splitlines() if line.strip()]


Run = Callable[[list[str], dict[str, str], str | None, int], Result]


def _spawned(args: list[str], env: dict[str, str], input: str | None, umask: int) -> Result:
    """``python -m broker ARGS``: a real process with exactly ``env``."""
    proc = subprocess.run(
        [sys.executable, "-m", "broker", *args],
        capture_output=True,
        text=True,
        env=env,
        input=input,
        timeout=120,
        umask=umask,  # -1: the test's own
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def _in_process(args: list[str], env: dict[str, str], input: str | None, umask: int) -> Result:
    """``broker ARGS`` through click's runner in this process, with the
    process environment ``env`` would be: the runner sets what ``env`` sets and
    unsets the BROKER_* variables it lacks (every other variable is this
    process's own). The store a command opens is closed when it returns."""
    from click.testing import CliRunner

    from broker.frontends.cli import main

    overrides: dict[str, str | None] = {
        k: None for k in os.environ if k.startswith("BROKER_") and k not in env
    }
    overrides.update({k: v for k, v in env.items() if os.environ.get(k) != v})
    # A umask is this process's while the command runs (a test runs alone in
    # its process: nothing else creates files meanwhile), as a process's own
    # would be for the whole of its life.
    saved = os.umask(umask) if umask != -1 else None
    try:
        res = CliRunner().invoke(main, args, input=input, env=overrides, prog_name="broker")
    finally:
        if saved is not None:
            os.umask(saved)
    err = res.stderr
    if (
        res.exc_info is not None
        and res.exception is not None
        and not isinstance(res.exception, SystemExit)
    ):
        import traceback  # what the interpreter would print for an escaped exception

        err += "".join(traceback.format_exception(*res.exc_info))
    return Result(res.exit_code, res.stdout, err)


def _cli(tmp_path: Path, db_url: str, run: Run) -> Callable[..., Result]:
    home = tmp_path / "home"
    join_keys: dict[str, str] = {}

    def _run(
        *args: str, env: dict[str, str] | None = None, input: str | None = None, umask: int = -1
    ) -> Result:
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
        full_env["BROKER_HOME"] = str(home)
        if db_url.startswith("postgresql"):
            import pgtest

            full_env["BROKER_URL"] = db_url
            full_env["BROKER_OPERATOR_KEY"] = pgtest.operator_key()  # no file in BROKER_HOME
        full_env.update(env or {})
        credential = {"--join-key", "--parent-token"} & set(args)
        if args[:1] == ("join",) and len(args) > 1 and not credential:
            if args[1] not in join_keys:
                _rotate_join_key(args[1], full_env, join_keys, run)
            if args[1] in join_keys and "BROKER_JOIN_KEY" not in full_env:
                full_env["BROKER_JOIN_KEY"] = join_keys[args[1]]
        res = run(list(args), full_env, input, umask)
        if args[:2] == ("space", "create") and res.code == 0:
            _remember_join_key(res.out, join_keys)
        return res

    return _run


@pytest.fixture
def cli(tmp_path: Path, db_url: str) -> Callable[..., Result]:
    """Run ``broker ARGS`` with BROKER_HOME in tmp (and BROKER_URL naming the
    test's PostgreSQL database on that backend), in this process through
    click's ``CliRunner``: the same arguments, environment, output and exit
    code as a process, without starting an interpreter (about 0.2 s of CPU a
    call, against a few milliseconds here); ``umask=`` sets this process's
    umask while the command runs. Where the process boundary is the point
    (signals, pipes, locks, doorbells rung by another process, a closed stdin,
    the installed entry point), a test uses ``cli_process``.

    Like an operator's shell after ``eval "$(broker space create ...)"``, it
    remembers the join key each ``space create`` printed (S27) and hands it to
    a later ``join`` of that space as BROKER_JOIN_KEY, unless the test gives a
    credential itself. A space made through the library (whose key the shell
    never saw) gets one from the operator's ``space join-key --rotate``."""
    return _cli(tmp_path, db_url, _in_process)


@pytest.fixture
def cli_process(tmp_path: Path, db_url: str) -> Callable[..., Result]:
    """``cli``'s twin as a real process (``python -m broker ARGS``): for a
    test of what only a process has (its exit on a signal or a closed pipe,
    its locks, a doorbell another process rings)."""
    return _cli(tmp_path, db_url, _spawned)


def _rotate_join_key(space: str, env: dict[str, str], keys: dict[str, str], run: Run) -> None:
    res = run(["space", "join-key", space, "--rotate", "--json"], env, None, -1)
    if res.code == 0:  # else the join itself reports why (no store, no space...)
        data = json.loads(res.out)
        keys[space] = keys[data["space_id"]] = data["join_key"]


def _remember_join_key(out: str, keys: dict[str, str]) -> None:
    """The space id and join key of ``space create``'s output (--json or plain)."""
    text = out.strip()
    if text.startswith("{"):
        data = json.loads(text)
        keys[data["id"]] = data["join_key"]
        return
    fields = dict(part.split("=", 1) for part in text.split()[1:] if "=" in part)
    keys[fields["BROKER_SPACE"]] = fields["BROKER_JOIN_KEY"]


# --- session hygiene -------------------------------------------------------------------------
SESSION_VAR = "PYTEST_BROKER_SESSION"  # not BROKER_*: the cli fixture drops those
SYSTEM_TMP = tempfile.gettempdir()  # the machine's temp folder, before the session's own
# Nothing is expected to stay in the session's temp folder (the broker's own
# per-user doorbell folder of long store paths lives in /tmp, not $TMPDIR).
KEPT_TMP: set[str] = set()
ORPHAN_GRACE_S = 10.0  # processes killed by the last test may still be exiting
# The variables that name folders of the user's: unset for the session, so
# every default falls under the session's HOME.
XDG_VARS = ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME")


def broker_data_folders() -> list[Path]:
    """The broker's default data folders of the real user (before HOME moves)."""
    folders = [Path(os.path.expanduser("~")) / ".local" / "share" / "broker"]
    if os.environ.get("XDG_DATA_HOME"):
        folders.append(Path(os.environ["XDG_DATA_HOME"]) / "broker")
    return folders


def home_problems(home: Path, real: list[Path], marker: str) -> list[str]:
    """What the session wrote where it must not: anything in the broker folder
    of the session's HOME, and any entry named after this session (``marker``)
    in the real user's broker folders."""
    problems: list[str] = []
    ours = home / ".local" / "share" / "broker"
    if ours.exists():
        found = sorted(str(p.relative_to(home)) for p in ours.rglob("*")) or [".local/share/broker"]
        problems.append(
            "a test wrote to the home folder's broker store instead of its own temp folder "
            f"(BROKER_HOME/--url): ~/{', ~/'.join(found[:10])}"
        )
    for folder in real:
        try:
            names = [n for n in os.listdir(folder) if marker in n]
        except OSError:
            continue
        if names:
            problems.append(f"this session wrote into the real {folder}: {', '.join(names[:10])}")
    return problems


def pytest_configure(config: pytest.Config) -> None:
    import spacegen

    config.addinivalue_line(
        "markers", "sqlite_only: a test of the SQLite file itself (not run on PostgreSQL)"
    )

    cache = getattr(config, "cache", None)
    if cache is not None:  # kept between runs; the key covers every schema source
        spacegen.TEMPLATE_DIR = Path(cache.mkdir("broker-template"))


def _proc_table() -> dict[int, tuple[int, str, bytes]]:
    """pid -> (parent pid, state, environment) of every process we can read."""
    table: dict[int, tuple[int, str, bytes]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            fields = stat[stat.rindex(b")") + 2 :].split()
            with open(f"/proc/{name}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            continue  # gone meanwhile, or not ours to read
        table[int(name)] = (int(fields[1]), fields[0].decode(), environ)
    return table


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:160]
    except OSError:
        return "?"


# multiprocessing's own helpers (the forkserver the runtime uses, its resource
# tracker): one per pytest process, stopped by multiprocessing at exit.
MP_HELPERS = (
    b"from multiprocessing.forkserver import main",
    b"from multiprocessing.resource_tracker import main",
)


def _mp_helper(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read()
    except OSError:
        return False
    return any(h in cmd for h in MP_HELPERS)


def session_processes(token: str) -> dict[int, str]:
    """Processes this session started that still exist: pid -> state (Z: not reaped)."""
    me = os.getpid()
    mark = f"{SESSION_VAR}={token}".encode()
    table = _proc_table()
    children: dict[int, list[int]] = defaultdict(list)
    for pid, (ppid, _, _) in table.items():
        children[ppid].append(pid)
    found = {pid for pid, (_, _, env) in table.items() if mark in env.split(b"\0")}
    todo = list(children[me])  # forked children carry no mark of their own
    while todo:
        pid = todo.pop()
        found.add(pid)
        todo.extend(children[pid])
    found.discard(me)
    helpers = {pid for pid in children[me] if _mp_helper(pid)}
    return {pid: table[pid][1] for pid in sorted(found - helpers) if pid in table}


@pytest.fixture(scope="session", autouse=True)
def _session_hygiene(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    import pgtest
    import spacegen

    tmp_path_factory.getbasetemp()  # pytest's own folders stay where pytest keeps them
    multiprocessing.util.get_temp_dir()  # and multiprocessing's, removed by it at exit
    if spacegen.TEMPLATE_DIR is None:  # no cache plugin: one template for this session
        spacegen.TEMPLATE_DIR = tmp_path_factory.mktemp("template")
    private = tempfile.mkdtemp(prefix="broker-tests-")
    os.chmod(private, 0o1777)  # like /tmp: tests that act as another user reach into it
    home = Path(private) / "home"
    home.mkdir(mode=0o700)
    real_broker = broker_data_folders()
    pip_cache = os.environ.get("PIP_CACHE_DIR") or os.path.expanduser("~/.cache/pip")
    token = secrets.token_hex(8)
    names = ("TMPDIR", SESSION_VAR, "HOME", "PIP_CACHE_DIR", *XDG_VARS)
    saved_env = {k: os.environ.get(k) for k in names}
    saved_tempdir = tempfile.tempdir
    os.environ["TMPDIR"] = tempfile.tempdir = private
    os.environ[SESSION_VAR] = token
    os.environ["HOME"] = str(home)
    os.environ["PIP_CACHE_DIR"] = pip_cache
    for name in XDG_VARS:
        os.environ.pop(name, None)
    try:
        yield
    finally:
        pgtest.close()
        tempfile.tempdir = saved_tempdir
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    problems: list[str] = []
    deadline = time.monotonic() + ORPHAN_GRACE_S
    left = session_processes(token)
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = session_processes(token)
    if left:
        problems.append(
            "processes left running or unreaped: "
            + "; ".join(f"{pid} [{state}] {_cmdline(pid)}" for pid, state in left.items())
        )
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.waitpid(pid, os.WNOHANG)
    problems += home_problems(home, real_broker, pgtest.SESSION)
    shutil.rmtree(home, ignore_errors=True)
    leftovers = sorted(set(os.listdir(private)) - KEPT_TMP)
    shutil.rmtree(private, ignore_errors=True)
    if leftovers:
        problems.append(f"temp folders or files left behind: {', '.join(leftovers[:20])}")
    if problems:
        pytest.fail("session hygiene: " + " | ".join(problems), pytrace=False)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    # Read from the skip reports, not from pgtest.skipped: with pytest-xdist the
    # tests (and their skips) run in worker processes, the summary in this one.
    marker = "NO POSTGRESQL: "
    for report in terminalreporter.stats.get("skipped", []):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if marker in reason:
            why = reason.split(marker, 1)[1]
            terminalreporter.write_sep(
                "!", f"NOTICE: POSTGRESQL TESTS SKIPPED: {why}", red=True, bold=True
            )
            return
