"""Regroup the flat test suite by layer (issue 24, item 4), with ``git mv``.

    python scripts/regroup_tests.py            # show what it would do, change nothing
    python scripts/regroup_tests.py --apply    # git mv every test file, fix what moving breaks

Run it from a clean checkout (``git status`` empty), then run a sample of the
moved tests and commit. The layout it makes::

    tests/conftest.py, helper modules   stay where they are (trusted.py, pgtest.py, ...)
    tests/unit/<concept>/               one concept of broker/ (store, model, spaces, ...)
    tests/contract/                     the modules that run on both backends (conftest's
                                        PG_CONTRACT; every test module in this folder does)
    tests/frontends/<surface>/          cli, http (the server and its console), mcp, remote
    tests/frontends/test_surfaces.py    the cross-surface test itself
    tests/soak/                         faults and load with real processes (long runs are
                                        marked ``soak`` and left out by default)
    tests/project/                      the repository as a whole: layers, spec, catalogue
                                        of docs, packaging, the wheel, the README, the bench,
                                        the suite's own hygiene

A test file not in ``MAPPING`` (one added on another branch) is placed by
``fallback``: a contract module by conftest's ``PG_CONTRACT``, then by its
name, then by the one concept package of ``broker`` it imports; a file none
of these places is printed and left where it is.

What moving breaks, and what this script does about it:

- Helper modules (``import trusted``, ``from conftest import Clock``) and test
  modules imported by another test module (``from test_guard import World``)
  are found through pytest's ``pythonpath`` (pyproject.toml): ``tests`` and
  the folder of every test module another folder imports. Those imported as
  modules of the ``tests`` namespace package (``from tests.unit.delivery.test_wake import
  Pair``) get their new dotted name (``tests.unit.delivery.test_wake``). No ``__init__.py``
  anywhere (pytest's default ``prepend`` import mode, modules named by their
  file's name): so every file name stays unique under tests/, which is checked.
- ``Path(__file__).resolve().parent.parent`` (the repository root) and
  ``Path(__file__).with_name("wake_waiter.py")`` (a helper next to the test)
  are rewritten for the file's new depth; any other ``__file__`` use left in
  a moved file is printed to be checked by hand.
- Every mention of ``tests/<file>.py`` in the repository's text files
  (scripts/mutation.sh's selections, docs/mutation.md, docstrings, .ci/run,
  README) is rewritten to the file's new path; alembic revisions already
  written (migrations/versions/) are frozen and left as they are.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"

# Modules that are not tests: they stay in tests/ and are imported by name.
HELPERS = {
    "conftest.py", "trusted.py", "mcphelp.py", "served.py", "pgtest.py", "spacegen.py",
    "sqlrows.py", "cli_space.py", "chaos_worker.py", "wake_waiter.py", "wakeprobe.py",
}  # fmt: skip

CONTRACT = "contract"
MAPPING: dict[str, str] = {
    # --- on both backends (conftest.py PG_CONTRACT) ---------------------------------------
    "test_board.py": CONTRACT,
    "test_board_edges.py": CONTRACT,
    "test_child_processes.py": CONTRACT,
    "test_edge_text.py": CONTRACT,
    "test_export.py": CONTRACT,
    "test_grants.py": CONTRACT,
    "test_group_commit.py": CONTRACT,
    "test_import.py": CONTRACT,
    "test_inbox.py": CONTRACT,
    "test_inbox_edges.py": CONTRACT,
    "test_lease_evidence.py": CONTRACT,
    "test_left.py": CONTRACT,
    "test_limits.py": CONTRACT,
    "test_liveness.py": CONTRACT,
    "test_log.py": CONTRACT,
    "test_mail.py": CONTRACT,
    "test_participants.py": CONTRACT,
    "test_private_files.py": CONTRACT,
    "test_purge.py": CONTRACT,
    "test_queue_edges.py": CONTRACT,
    "test_records.py": CONTRACT,
    "test_refusal_fields.py": CONTRACT,
    "test_reservations.py": CONTRACT,
    "test_search_query.py": CONTRACT,
    "test_send.py": CONTRACT,
    "test_send_edges.py": CONTRACT,
    "test_send_many.py": CONTRACT,
    "test_spaces.py": CONTRACT,
    "test_takeover.py": CONTRACT,
    "test_turns.py": CONTRACT,
    "test_append_only.py": CONTRACT,  # on main after e8901fc, like the four below
    "test_trust_attacks.py": CONTRACT,
    "test_trust_clock.py": CONTRACT,
    # --- one concept of broker/ -----------------------------------------------------------
    "test_catalogue.py": "unit/store",
    "test_first_open.py": "unit/store",
    "test_migrations.py": "unit/store",
    "test_ops.py": "unit/store",  # doctor, backup, vacuum (store.maintenance)
    "test_pg.py": "unit/store",
    "test_pg_connections.py": "unit/store",
    "test_pg_ops.py": "unit/store",
    "test_read_only_store.py": "unit/store",
    "test_store.py": "unit/store",
    "test_views.py": "unit/store",
    "test_writer_lock.py": "unit/store",
    "test_lean.py": "unit/store",  # every index earns its pages (revision 0015)
    "test_labels.py": "unit/model",
    "test_validate.py": "unit/model",
    "test_shares.py": "unit/spaces",
    "test_trust.py": "unit/spaces",
    "test_directory.py": "unit/spaces",
    "test_deviations.py": "unit/mail",
    "test_search_batches.py": "unit/mail",
    "test_send_statements.py": "unit/mail",
    "test_doorbell_files.py": "unit/delivery",
    "test_doorbell_shared.py": "unit/delivery",
    "test_model.py": "unit/delivery",  # the stateful model of the queue
    "test_recovery.py": "unit/delivery",
    "test_stale_lease.py": "unit/delivery",
    "test_wake.py": "unit/delivery",
    "test_bounds.py": "unit/board",
    "test_globs.py": "unit/board",
    "test_holds.py": "unit/board",
    "test_aio.py": "unit/api",
    "test_aio_wake.py": "unit/api",
    "test_api_fuzz.py": "unit/api",
    "test_runtime.py": "unit/teammates",
    "test_export_errors.py": "unit/interchange",
    "test_export_safety.py": "unit/interchange",
    "test_import_safety.py": "unit/interchange",
    "test_pg_export.py": "unit/interchange",
    # --- one surface ----------------------------------------------------------------------
    "test_surfaces.py": "frontends",
    "test_cli_contract.py": "frontends/cli",
    "test_cli_core.py": "frontends/cli",
    "test_cli_directory.py": "frontends/cli",
    "test_cli_errors.py": "frontends/cli",
    "test_cli_fuzz.py": "frontends/cli",
    "test_cli_refusals.py": "frontends/cli",
    "test_cli_speed.py": "frontends/cli",
    "test_cli_targets.py": "frontends/cli",
    "test_cli_terminal.py": "frontends/cli",
    "test_first_steps.py": "frontends/cli",
    "test_guard.py": "frontends/cli",  # the git guard's hook runs the CLI
    "test_source_names.py": "frontends/cli",
    "test_console.py": "frontends/http",
    "test_live_views.py": "frontends/http",
    "test_served_limits.py": "frontends/http",
    "test_server.py": "frontends/http",
    "test_server_docs.py": "frontends/http",
    "test_server_edges.py": "frontends/http",
    "test_server_fuzz.py": "frontends/http",
    "test_mcp.py": "frontends/mcp",
    "test_mcp_http.py": "frontends/mcp",
    "test_mcp_http_limits.py": "frontends/mcp",
    "test_mcp_operator.py": "frontends/mcp",
    "test_mcp_resources.py": "frontends/mcp",
    "test_mail_served.py": "frontends/remote",  # client mode: the CLI through broker serve
    "test_remote_parity.py": "frontends/remote",
    "test_reservations_served.py": "frontends/remote",
    "test_served_join.py": "frontends/remote",  # every agent command in client mode
    "test_multihost.py": "frontends/remote",  # agents that hold only the server's URL
    # --- faults and load ------------------------------------------------------------------
    "test_chaos.py": "soak",
    "test_concurrency.py": "soak",
    "test_mcp_swarm.py": "soak",
    "test_pg_net.py": "soak",
    "test_reliability.py": "soak",
    # --- the repository as a whole --------------------------------------------------------
    "test_bench_pages.py": "project",
    "test_bench_quick.py": "project",
    "test_bench_same.py": "project",
    "test_front_ends.py": "project",
    "test_hygiene.py": "project",
    "test_layers.py": "project",
    "test_packaging.py": "project",
    "test_readme.py": "project",
    "test_spacegen.py": "project",
    "test_spec.py": "project",
    "test_wheel.py": "project",
}

# The fallback's name rules, first match wins.
NAME_RULES: list[tuple[str, str]] = [
    (r"^test_cli_", "frontends/cli"),
    (r"^test_mcp_swarm", "soak"),
    (r"^test_mcp", "frontends/mcp"),
    (r"^test_(server|console|http|openapi)", "frontends/http"),
    (r"^test_(remote|client)|_served\.py$", "frontends/remote"),
    (r"^test_(chaos|soak|stress)", "soak"),
    (r"^test_pg", "unit/store"),
    (r"^test_(spec|layers|packaging|readme|wheel|bench)", "project"),
]
CONCEPTS = ("store", "model", "spaces", "mail", "delivery", "board", "api", "teammates",
            "interchange")  # fmt: skip


def pg_contract() -> set[str]:
    """The module names of conftest.py's PG_CONTRACT set."""
    tree = ast.parse((TESTS / "conftest.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "PG_CONTRACT" for t in node.targets
        ):
            return {ast.literal_eval(e) for e in node.value.elts}  # type: ignore[attr-defined]
    return set()


def fallback(path: Path, contract: set[str]) -> str | None:
    """The folder of a test file MAPPING does not name, or None."""
    if path.stem in contract:
        return CONTRACT
    for pattern, folder in NAME_RULES:
        if re.search(pattern, path.name):
            return folder
    text = path.read_text(encoding="utf-8")
    fronts = set(re.findall(r"^\s*(?:from|import) broker\.frontends\.(\w+)", text, re.M))
    if len(fronts) == 1:
        return f"frontends/{fronts.pop()}"
    imported = re.findall(r"^\s*(?:from|import) broker\.(\w+)", text, re.M)
    concepts = {m for m in imported if m in CONCEPTS}
    if len(concepts) == 1:
        return f"unit/{concepts.pop()}"
    return None


def plan() -> tuple[dict[str, str], list[str]]:
    """file name -> new folder (relative to tests/), and the files left unplaced."""
    contract = pg_contract()
    moves: dict[str, str] = {}
    unplaced: list[str] = []
    for path in sorted(TESTS.glob("*.py")):
        if path.name in HELPERS:
            continue
        if not path.name.startswith("test_"):
            print(f"left in tests/ (not a test module, not a known helper): {path.name}")
            continue
        folder = MAPPING.get(path.name) or fallback(path, contract)
        if folder is None:
            unplaced.append(path.name)
        else:
            if path.name not in MAPPING:
                print(f"placed by the fallback rule: {path.name} -> tests/{folder}/")
            moves[path.name] = folder
    gone = sorted(set(MAPPING) - set(moves) - set(unplaced))
    for name in gone:
        print(f"in MAPPING but not in tests/ (renamed or removed?): {name}")
    names = Counter(p.name for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)
    clashes = [n for n, c in names.items() if c > 1]
    if clashes:
        sys.exit(f"two files share a name under tests/ (modules are named by file): {clashes}")
    return moves, unplaced


def depth(folder: str) -> int:
    """How many folders sit between a file in tests/FOLDER and the repository root."""
    return 1 + len(Path(folder).parts)


NEIGHBOUR = re.compile(
    r"(?<![\w.])__file__\)?(\.resolve\(\))?\.(parent\b|with_)|os\.path\.\w+\(__file__"
)


def fix_file_paths(path: Path, folder: str) -> list[str]:
    """Rewrite the root and helper paths a moved test derives from its own
    location; return the ``__file__`` lines left for a person to check."""
    d = depth(folder)
    text = path.read_text(encoding="utf-8")
    new = re.sub(
        r"Path\(__file__\)(\.resolve\(\))?\.parent\.parent(?!\.parent)",
        lambda m: f"Path(__file__){m.group(1) or ''}.parents[{d}]",
        text,
    )
    new = re.sub(
        r"Path\(__file__\)\.with_name\(([\"'][\w.]+[\"'])\)",
        lambda m: f"Path(__file__).parents[{d - 1}].joinpath({m.group(1)})",
        new,
    )
    if new != text:
        path.write_text(new, encoding="utf-8")
    left = []  # any other way from the test's own place to a neighbour
    for n, line in enumerate(new.splitlines(), 1):
        if NEIGHBOUR.search(line):
            left.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    return left


def cross_imports(moves: dict[str, str]) -> set[str]:
    """Folders of test modules that a test module in another folder imports."""
    where = {name.removesuffix(".py"): folder for name, folder in moves.items()}
    folders: set[str] = set()
    for name, folder in moves.items():
        tree = ast.parse((TESTS / folder / name).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            mods: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                mods = [node.module]
            elif isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            for mod in mods:
                if mod in where and where[mod] != folder:
                    folders.add(where[mod])
    return folders


def set_pythonpath(folders: set[str]) -> None:
    """pyproject.toml's pytest ``pythonpath``: tests/ and the given folders."""
    pyproject = ROOT / "pyproject.toml"
    text = pyproject.read_text(encoding="utf-8")
    paths = ["tests", *sorted(f"tests/{f}" for f in folders)]
    line = "pythonpath = [" + ", ".join(f'"{p}"' for p in paths) + "]"
    if re.search(r"^pythonpath = .*$", text, re.M):
        text = re.sub(r"^pythonpath = .*$", line, text, count=1, flags=re.M)
    else:
        text = text.replace('testpaths = ["tests"]\n', f'testpaths = ["tests"]\n{line}\n', 1)
    pyproject.write_text(text, encoding="utf-8")


def tracked_text_files() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True
    ).stdout.decode()
    keep = {".py", ".md", ".sh", ".toml", ".ini", ".cfg", ".txt", ".yml", ".yaml", ""}
    files = []
    for name in filter(None, out.split("\0")):
        path = ROOT / name
        frozen = name.startswith("migrations/versions/")  # written revisions are never edited
        if path.suffix in keep and path.is_file() and "results" not in path.parts and not frozen:
            files.append(path)
    return files


def rewrite_mentions(moves: dict[str, str]) -> list[str]:
    """``tests/test_x.py`` -> ``tests/FOLDER/test_x.py`` in every tracked text file."""
    pattern = re.compile(
        r"(?<![\w/.])tests/(" + "|".join(re.escape(n) for n in sorted(moves)) + r")(?![\w])"
    )
    changed = []
    for path in tracked_text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        new = pattern.sub(lambda m: f"tests/{moves[m.group(1)]}/{m.group(1)}", text)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(str(path.relative_to(ROOT)))
    return changed


def rewrite_dotted(moves: dict[str, str]) -> list[str]:
    """``from tests.unit.delivery.test_wake import Pair`` (the test module imported as a
    module of the ``tests`` namespace package) -> ``tests.unit.delivery.test_wake``."""
    stems = {n.removesuffix(".py"): f for n, f in moves.items()}
    pattern = re.compile(r"(?<![\w.])tests\.(" + "|".join(sorted(stems)) + r")\b")
    changed = []
    for path in tracked_text_files():
        if path.suffix != ".py":
            continue
        text = path.read_text(encoding="utf-8")
        new = pattern.sub(
            lambda m: f"tests.{stems[m.group(1)].replace('/', '.')}.{m.group(1)}", text
        )
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(str(path.relative_to(ROOT)))
    return changed


def main(argv: list[str]) -> int:
    apply = "--apply" in argv
    moves, unplaced = plan()
    for folder, count in sorted(Counter(moves.values()).items()):
        print(f"tests/{folder + '/':<22} {count:3d} files")
    for name in unplaced:
        print(f"COULD NOT PLACE (left in tests/, add it to MAPPING): {name}")
    if not apply:
        print("dry run: nothing changed (--apply moves the files)")
        return 0
    status = subprocess.run(
        ["git", "status", "--porcelain", "--", "tests", "pyproject.toml"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    if status.strip() and "--force" not in argv:
        sys.exit(f"tests/ or pyproject.toml has uncommitted changes (--force to go on):\n{status}")
    for name, folder in moves.items():
        (TESTS / folder).mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["git", "mv", f"tests/{name}", f"tests/{folder}/{name}"], cwd=ROOT, check=True
        )
    by_hand: list[str] = []
    for name, folder in moves.items():
        by_hand += fix_file_paths(TESTS / folder / name, folder)
    extra = cross_imports(moves)
    set_pythonpath(extra)
    changed = sorted(set(rewrite_mentions(moves)) | set(rewrite_dotted(moves)))
    print(f"moved {len(moves)} files; pythonpath: tests + {sorted(extra) or 'nothing else'}")
    print(f"mentions of moved files rewritten in {len(changed)} files: {', '.join(changed)}")
    for line in by_hand:
        print(f"CHECK BY HAND (__file__ in a moved test): {line}")
    print("now: git add -A tests pyproject.toml; run a sample; commit")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
