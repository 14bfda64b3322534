"""A fast CLI (issue "Swarm-scale speed", item 3): agents call the CLI once per
tool call, so start-up is their latency. The hot commands -- ``msg send``,
``inbox claim|ack|next|seen``, ``board claim|release`` -- must not import
SQLAlchemy, alembic or pydantic (pydantic's import and model building were
~150 ms of a 265 ms ``broker msg send``).

Not a timing test (speed is measured in bench/): the modules a command loads
are a condition, so the gain cannot silently regress.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_space import Populated, populate

from broker import Store
from broker.frontends.cli import COMMANDS

HEAVY = {"sqlalchemy", "alembic", "pydantic", "pydantic_core"}
# Lighter, but still milliseconds each on every agent tool call: no hot command
# loads them. The standard library's: strptime's (``_strptime``, ``calendar``),
# ``secrets`` (with ``random``), ``socket``. The broker's: the operator's
# handle and the records of other calls (``broker.model.records.spaces``, and
# ``broker.store.maintenance``'s).
NOT_HOT = {
    "_strptime",
    "calendar",
    "secrets",
    "random",
    "socket",
    "broker.api.operator",
    "broker.model.records.spaces",
    "broker.store.maintenance",
}
# Sending's modules: only the commands that send (msg send) or write the log
# (inbox seen's receipt) load them; claims, acks, turns and board claims do not.
SENDING = {
    "broker.mail.messages",
    "broker.mail.sending",
    "broker.mail.recipients",
    "broker.mail.threads",
}
# The library's own hot path still loads these (broker.api.handles -> messages ->
# models; db -> settings): engineers "send" and "queue" are making it
# pydantic-free. The lead empties this at merge; it may only shrink.
LIBRARY_PENDING: set[str] = set()

PROBE = r"""
import atexit, sys
def report():
    sys.stderr.write("\nMODULES " + " ".join(sorted(sys.modules)) + "\n")
atexit.register(report)
sys.argv = ["broker", *sys.argv[1:]]
from broker.frontends.cli import main
main()
"""


def loaded_modules(argv: list[str], env: dict[str, str]) -> tuple[set[str], str]:
    """Run ``broker ARGV`` in a fresh interpreter (it must succeed); every
    module it had imported when it exited, and its stdout."""
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, env=env, timeout=60
    )
    head, _, tail = proc.stderr.rpartition("\nMODULES ")
    assert proc.returncode == 0, (argv, head)
    return set(tail.split()), proc.stdout


def loaded(argv: list[str], env: dict[str, str]) -> tuple[set[str], str]:
    """The top-level packages ``broker ARGV`` imports (see ``loaded_modules``), and its stdout."""
    mods, out = loaded_modules(argv, env)
    return {m.split(".")[0] for m in mods}, out


def test_cli_modules_themselves_import_nothing_heavy() -> None:
    # Every command module at import time: the CLI's own part of start-up.
    modules = sorted({f"broker.frontends.cli.{m}" for m in COMMANDS.values()})
    code = "import sys\n" + "".join(f"import {m}\n" for m in modules)
    code += "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert set(out.stdout.split()) & HEAVY == set()


def test_cli_common_imports_no_json_or_shutil_at_start() -> None:
    # json loads only when --json is asked for; shutil (which pulls in bz2 and
    # lzma) never: the terminal width comes from os.
    tree = ast.parse((Path(__file__).parents[3] / "broker/frontends/cli/_output.py").read_text())
    top = {a.name for node in tree.body if isinstance(node, ast.Import) for a in node.names} | {
        node.module for node in tree.body if isinstance(node, ast.ImportFrom) and node.module
    }
    assert not top & {"json", "shutil"}, top


@pytest.fixture
def hot(tmp_path: Path) -> tuple[Populated, dict[str, str]]:
    store = Store(f"sqlite:///{tmp_path / 'home' / 'broker.db'}")
    try:
        p = populate(store)
    finally:
        store.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
    env["BROKER_HOME"] = str(tmp_path / "home")
    return p, env


def test_cli_hot_commands_import_neither_sqlalchemy_nor_pydantic(
    hot: tuple[Populated, dict[str, str]],
) -> None:
    p, env = hot
    lynx = {**env, **p.env["lynx#1"]}
    runs = [
        (["msg", "send", "--to", "otter#1", "hot path"], lynx),
        (["inbox", "ack", "--lease-token", p.lease_token], lynx),
        (["inbox", "claim", "--ttl", "60"], {**env, **p.env["lead"]}),
        (["board", "claim", "hot/key"], lynx),
        (["board", "release", "hot/key", "--fence", "1"], lynx),
        (["inbox", "next", "--json"], {**env, **p.env["otter#1"]}),
    ]
    seen_pending: set[str] = set()
    for argv, run_env in runs:
        every, out = loaded_modules(argv, run_env)
        mods = {m.split(".")[0] for m in every}
        heavy = mods & HEAVY
        assert heavy <= LIBRARY_PENDING, f"broker {' '.join(argv)} imports {heavy}"
        assert not every & NOT_HOT, f"broker {' '.join(argv)} imports {every & NOT_HOT}"
        if argv[:2] != ["msg", "send"]:
            assert not every & SENDING, f"broker {' '.join(argv)} imports {every & SENDING}"
        seen_pending |= heavy
    turn = json.loads(out)  # the last one: otter's turn
    every, _ = loaded_modules(["inbox", "seen", turn["id"]], {**env, **p.env["otter#1"]})
    assert {m.split(".")[0] for m in every} & HEAVY <= LIBRARY_PENDING
    assert not every & NOT_HOT, f"broker inbox seen imports {every & NOT_HOT}"
    assert seen_pending == LIBRARY_PENDING, "the library no longer loads these: shrink the list"
