"""The library is the only boundary (issue "One shape", spec §Module layout):
front ends -- the CLI, the teammates runtime, the demo, and later the server
and MCP -- import only the public surface: ``broker.api.handles``, ``broker.model.records``,
``broker.errors``, ``broker.model.inputs``, ``broker.vocab`` (and each other). No
front end reaches into a domain module (``messages``, ``inbox``, ``db``, ...).

Checked on the source (every import statement, the lazy ones inside
functions too), so it holds for code paths no test happens to run.
"""

from __future__ import annotations

import ast
from pathlib import Path

BROKER = Path(__file__).resolve().parents[2] / "broker"

PUBLIC = {"broker", "broker.api.handles", "broker.model.records", "broker.errors",
          # the operation table, its format and its input records (each operation
          # declared once)
          "broker.api.operations", "broker.api.declaration", "broker.model.inputs", "broker.model.fields",
          "broker.vocab",
          # the async twins (asyncio front ends) and the served-mode twins (client mode)
          "broker.api.aio", "broker.frontends.remote",
          # the BROKER_* variables, read by one rule by the library and every front
          # end (README "Environment"); a leaf module (os only)
          "broker.envvars",
          # the command line's exit statuses and its exit on Ctrl-C; a leaf (sys only)
          "broker.exits"}  # fmt: skip
FRONT_ENDS = ["frontends/cli", "teammates", "frontends/http", "frontends/mcp"]

# Imports past the boundary that are being removed, by file. It may only shrink
# (it is empty: the MCP server's grant, own row and inbox doorbell are
# Agent.granted(), Agent.me() and AsyncAgent.doorbell() now).
PENDING: dict[str, set[str]] = {}


def front_end_files() -> list[Path]:
    files: list[Path] = []
    for name in FRONT_ENDS:
        path = BROKER / name
        if path.is_dir():
            files += sorted(path.rglob("*.py"))
        elif path.exists():
            files.append(path)
    return files


def front_end_modules() -> set[str]:
    mods = set()
    for path in front_end_files():
        rel = path.relative_to(BROKER.parent).with_suffix("")
        mods.add(".".join(rel.parts).removesuffix(".__init__"))
    return mods


def broker_imports(path: Path) -> set[str]:
    """Every broker module ``path`` imports, at the top or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "broker"}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != "broker":
                continue
            for alias in node.names:  # `from broker import inbox` imports a module
                sub = f"{node.module}.{alias.name}"
                where = BROKER.parent / Path(*sub.split("."))
                is_module = where.with_suffix(".py").exists() or (where / "__init__.py").exists()
                found.add(sub if is_module else node.module)
    return found


def crossings() -> dict[str, set[str]]:
    allowed = PUBLIC | front_end_modules()
    out = {}
    for path in front_end_files():
        bad = {m for m in broker_imports(path) if m not in allowed}
        if bad:
            out[str(path.relative_to(BROKER))] = bad
    return out


def test_front_ends_import_only_the_public_surface() -> None:
    found = crossings()
    new = {f: mods - PENDING.get(f, set()) for f, mods in found.items()}
    new = {f: mods for f, mods in new.items() if mods}
    assert new == {}, f"front ends import domain modules: {new}"


def test_the_pending_list_only_names_crossings_that_still_exist() -> None:
    found = crossings()
    stale = {f: mods - found.get(f, set()) for f, mods in PENDING.items()}
    stale = {f: mods for f, mods in stale.items() if mods}
    assert stale == {}, f"gone now: remove from PENDING: {stale}"


def test_the_check_sees_lazy_imports_and_from_imports(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from broker import errors\n"
        "from broker.delivery import inbox\n"
        "import broker.store.sqlite\n"
        "def f():\n"
        "    from broker.mail.messages import log\n"
        "    from broker.api.handles import Agent\n"
    )
    assert broker_imports(sample) == {
        "broker.errors", "broker.delivery.inbox", "broker.store.sqlite", "broker.mail.messages", "broker.api.handles",
    }  # fmt: skip
