"""The whole-process cost of the CLI agents call per tool call: wall time and peak RSS.

Each command runs as a fresh process (``broker`` console script of this
interpreter, identity from ``BROKER_SPACE`` / ``BROKER_AS`` / ``BROKER_TOKEN``),
the rounds interleaved so every command sees the same machine. Peak RSS is the
child's ``ru_maxrss`` from ``wait4``. Floors: the interpreter starting and
exiting (``python -c pass``), a python process doing one sqlite3 INSERT, the
``sqlite3`` CLI doing one INSERT, ``redis-cli XADD``, and a file-mailbox send
as a process: ``mv`` of a written draft into ``inbox/`` (the draft is written
before the timed process, one per run).

Bytecode is present, as a user gets it: an installed wheel has its ``.pyc``
compiled at install time, so the children run without
``PYTHONDONTWRITEBYTECODE`` (a development shell may set it; with an editable
install every call would then recompile ~40 broker modules, ~100 ms), the
broker package is compiled (``compileall``) and one untimed warm-up round of
every command runs before the timed rounds.
"""

from __future__ import annotations

import compileall
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import broker
from bench.core import Ctx, Row, Scenario, body, pct
from bench.peers.broker_queue import BrokerQueue

MSG_SEND = "broker_msg_send"
INBOX_CLAIM = "broker_inbox_claim"
MAILBOX_MV = "file_mailbox_mv"


def _broker_cmd() -> list[str]:
    script = Path(sys.executable).parent / "broker"
    return [str(script)] if script.exists() else [sys.executable, "-m", "broker"]


# Peak RSS must be measured from a small parent: Linux carries the parent's RSS
# high-water mark into a forked child through exec, so wait4 from this (large)
# process would report at least its own RSS. GNU time forks the command itself;
# without it, a minimal python launcher does (its own ~8 MB is then the floor).
_LAUNCHER = (
    "import os, sys, time\n"
    "t = time.perf_counter(); pid = os.fork()\n"
    "if pid == 0:\n"
    "    os.execvp(sys.argv[1], sys.argv[1:])\n"
    "_, status, ru = os.wait4(pid, 0)\n"
    "sys.stderr.write('@@ %f %d\\n' % (time.perf_counter() - t, ru.ru_maxrss))\n"
    "sys.exit(os.waitstatus_to_exitcode(status))\n"
)
GNU_TIME = "/usr/bin/time"


def _run(cmd: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(wall seconds, peak RSS MB, exit code) of one process."""
    if os.path.exists(GNU_TIME):
        wrapped = [GNU_TIME, "-f", "@@ %M", *cmd]
    else:
        wrapped = [sys.executable, "-S", "-I", "-c", _LAUNCHER, *cmd]
    t0 = time.perf_counter()
    proc = subprocess.run(wrapped, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - t0
    tail = [ln for ln in proc.stderr.decode(errors="replace").splitlines() if ln.startswith("@@")]
    fields = tail[-1].split()[1:] if tail else []
    if len(fields) == 2:  # the launcher timed the command itself
        wall, rss_kb = float(fields[0]), int(fields[1])
    else:
        rss_kb = int(fields[0]) if fields else 0
    return wall, rss_kb / 1024.0, proc.returncode


def cli(ctx: Ctx) -> Scenario:
    runs = ctx.sizes.cli_runs
    sc = Scenario(
        "cli",
        "whole-process cost of one CLI call (wall p50)",
        unit="wall p50 ms",
        higher_is_better=False,
    )
    package = Path(broker.__file__).parent
    compiled = compileall.compile_dir(str(package), quiet=1)
    sc.params = {
        "runs": runs,
        "command": " ".join(_broker_cmd()),
        "rss_from": GNU_TIME if os.path.exists(GNU_TIME) else "python launcher (~8 MB floor)",
        "bytecode": (
            f"present: compileall of {package} ({'ok' if compiled else 'failed'}), "
            "PYTHONDONTWRITEBYTECODE dropped from the children, one untimed warm-up round"
        ),
    }
    folder = ctx.scratch("cli")
    q = BrokerQueue(folder)
    q.preload([body(i) for i in range(runs + 5)])
    # A user's interpreter writes and reads bytecode: drop a development shell's opt-out.
    base_env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("BROKER_") and k != "PYTHONDONTWRITEBYTECODE"
    }
    env = {
        **base_env,
        "BROKER_URL": str(q.store.url),
        "BROKER_SPACE": q.space,
    }
    sender_env = {**env, "BROKER_AS": "sender", "BROKER_TOKEN": q.sender_joined.token}
    worker_env = {**env, "BROKER_AS": "worker", "BROKER_TOKEN": q.worker_joined.token}
    db = folder / "floor.db"
    import sqlite3

    c = sqlite3.connect(db)
    c.execute("PRAGMA journal_mode = WAL")
    c.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)")
    c.close()
    py_insert = (
        f"import sqlite3; c = sqlite3.connect({str(db)!r}, isolation_level=None); "
        "c.execute('PRAGMA synchronous = NORMAL'); c.execute('BEGIN IMMEDIATE'); "
        "c.execute('INSERT INTO t (body) VALUES (?)', ('hello',)); c.execute('COMMIT')"
    )
    commands: dict[str, tuple[list[str], dict[str, str], str]] = {
        MSG_SEND: (
            [*_broker_cmd(), "msg", "send", "--to", "worker", "hello from the cli"],
            sender_env,
            "`broker msg send --to worker TEXT`, identity from BROKER_* env",
        ),
        INBOX_CLAIM: (
            [*_broker_cmd(), "inbox", "claim", "--json"],
            worker_env,
            "`broker inbox claim --json` (one message), identity from BROKER_* env",
        ),
        "python_floor": ([sys.executable, "-c", "pass"], base_env, "python -c pass"),
        "python_sqlite": (
            [sys.executable, "-c", py_insert],
            base_env,
            "python: one sqlite3 INSERT",
        ),
    }
    sqlite_cli = shutil.which("sqlite3")
    if sqlite_cli:
        commands["sqlite3_cli"] = (
            [
                sqlite_cli,
                str(db),
                "PRAGMA synchronous = NORMAL; INSERT INTO t (body) VALUES ('hi');",
            ],
            base_env,
            "sqlite3 CLI: one INSERT",
        )
    redis_cli = shutil.which("redis-cli")
    skipped: dict[str, str] = {}
    if redis_cli:
        from bench.peers import Unavailable
        from bench.peers.redis_streams import connect, redis_url

        try:
            connect().close()
            commands["redis_cli"] = (
                [
                    redis_cli,
                    "-u",
                    redis_url(),
                    "XADD",
                    f"bench:cli:{uuid.uuid4().hex}",
                    "*",
                    "b",
                    "hi",
                ],
                base_env,
                "redis-cli XADD",
            )
        except Unavailable as exc:
            skipped["redis_cli"] = str(exc)
    else:
        skipped["redis_cli"] = "redis-cli not installed"

    mailbox = folder / "mailbox"
    (mailbox / "drafts").mkdir(parents=True)
    (mailbox / "inbox").mkdir()
    mv = shutil.which("mv")
    if mv:
        commands[MAILBOX_MV] = (
            [mv, str(mailbox / "drafts" / "draft.txt"), str(mailbox / "inbox")],
            base_env,
            "file mailbox send as a process: `mv drafts/X inbox/` (coreutils)",
        )

    walls: dict[str, list[float]] = {k: [] for k in commands}
    rss: dict[str, list[float]] = {k: [] for k in commands}
    failures: dict[str, int] = {k: 0 for k in commands}
    try:
        for r in range(-1, runs):  # round -1: the untimed warm-up (page cache, bytecode)
            for name, (cmd, cenv, _) in commands.items():
                if name == MAILBOX_MV:  # a fresh draft to move (not timed)
                    draft = mailbox / "drafts" / "draft.txt"
                    draft.write_text(f"To: worker\nFrom: sender\n---\n{body(r)}\n")
                    cmd[-1] = str(mailbox / "inbox" / f"{r + 1:08d}.txt")
                wall, peak, code = _run(cmd, cenv)
                if r < 0:
                    continue
                walls[name].append(wall * 1000)
                rss[name].append(peak)
                if code != 0:
                    failures[name] += 1
    finally:
        q.close()
    for name, (_, _, how) in commands.items():
        if failures[name] == runs:
            sc.add(Row(name, status="error", reason=f"exit code != 0 in all {runs} runs", how=how))
            if name in (MSG_SEND, INBOX_CLAIM):
                sc.status, sc.error = "error", f"{name} failed in every run"
            continue
        stats: dict[str, Any] = {
            "wall_p50_ms": round(pct(walls[name], 50), 1),
            "wall_p99_ms": round(pct(walls[name], 99), 1),
            "peak_rss_mb": round(max(rss[name]), 1),
            "errors": failures[name],
        }
        sc.add(Row(name, stats["wall_p50_ms"], "wall p50 ms", how=how, stats=stats))
        ctx.log(f"  cli {name}: {stats['wall_p50_ms']} ms, {stats['peak_rss_mb']} MB")
    for name, why in skipped.items():
        sc.add(Row(name, status="skipped", reason=why))
    for num in (MSG_SEND, INBOX_CLAIM):
        for den in ("python_floor", "python_sqlite", MAILBOX_MV):
            sc.ratio(num, den)
    sc.target(
        "`broker msg send` whole process p50 <= 150 ms (embedded)", sc.value(MSG_SEND), "<=", 150.0
    )
    send = sc.get(MSG_SEND)
    sc.target(
        "`broker msg send` whole process <= 250 ms wall (p99)",
        send.stats["wall_p99_ms"] if send is not None else None,
        "<=",
        250.0,
    )
    return sc
