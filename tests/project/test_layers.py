"""The layers of the package (spec §Module layout): imports run down the stack,
never up, and no modules import each other in a circle.

Checked on the source: every import statement, the lazy ones inside functions
included (a lazy import only hides a circle, it does not remove it); imports
under ``if TYPE_CHECKING:`` are annotations, not imports, and are skipped.
A module is split where a second concept hides in it, never by its size: this
test is the rule, not a line count.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "broker"

# The one circle kept on purpose: ``Store(url)`` hands a PostgreSQL URL to its
# subclass ``PgStore`` (imported only then), which extends ``Store``. This list
# only shrinks.
ALLOWED = [{"broker.store.sqlite", "broker.store.postgres"}]


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                skipped.update(id(n) for n in ast.walk(inner))
    return skipped


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    paths = {_module_name(p, package.parent): p for p in sorted(package.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skipped = _type_checking_nodes(tree)
        deps: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name in paths)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    if full in paths:
                        deps.add(full)  # `from broker import wake`: the module itself
                    elif node.module in paths:
                        deps.add(node.module)
        deps.discard(name)
        graph[name] = deps
    return graph


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circles_among_broker_modules() -> None:
    found = [c for c in circles(import_graph()) if c not in ALLOWED]
    assert not found, "import circles: " + "; ".join(" <-> ".join(sorted(c)) for c in found)


def test_the_allowed_list_only_names_circles_that_still_exist() -> None:
    present = circles(import_graph())
    for allowed in ALLOWED:
        assert allowed in present, f"{sorted(allowed)} is no circle any more: drop it from ALLOWED"


# The stack, bottom first: a module may import its own level and those below.
# The four domain packages share one level (a send appends to an inbox, a turn
# writes a receipt to the log): between them only module circles are refused.
LEVELS: list[set[str]] = [
    # the package's face (``__version__``, and public names it loads by name on
    # first use: no import of it reaches up) with the error root and vocabularies
    {"__init__", "errors", "wording", "vocab", "envvars", "ids", "record_type", "launch", "exits"},
    {"store"},
    {"model"},
    {"spaces", "mail", "delivery", "board"},
    {"interchange"},
    {"api"},
    {"teammates"},
    {"frontends"},
    {"__main__"},  # python -m broker
]
# Imports up the stack still being removed, (importer, imported). Only shrinks.
UPWARD_ALLOWED: set[tuple[str, str]] = {
    # doctor checks the doorbell folder, whose place the doorbells module knows
    ("broker.store.maintenance", "broker.delivery.wake"),
}


def level(module: str) -> int:
    parts = module.split(".")
    name = "__init__" if len(parts) == 1 else parts[1]
    for n, names in enumerate(LEVELS):
        if name in names:
            return n
    raise AssertionError(f"{module} is in no level of the stack: add its package to LEVELS")


def upward(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {(a, b) for a, deps in graph.items() for b in deps if level(b) > level(a)}


def test_imports_run_down_the_layers_never_up() -> None:
    found = upward(import_graph()) - UPWARD_ALLOWED
    assert not found, "imports up the stack: " + "; ".join(f"{a} -> {b}" for a, b in sorted(found))


def test_the_upward_allowed_list_only_names_imports_that_still_exist() -> None:
    gone = UPWARD_ALLOWED - upward(import_graph())
    assert not gone, f"no longer imported: drop {sorted(gone)} from UPWARD_ALLOWED"


def test_every_package_of_broker_sits_in_a_level() -> None:
    levels = {module: level(module) for module in import_graph()}  # raises for one in none
    assert levels and all(0 <= n < len(LEVELS) for n in levels.values())
    with pytest.raises(AssertionError, match="in no level"):
        level("broker.nowhere.module")


def test_the_layer_check_sees_an_import_up_the_stack(tmp_path: Path) -> None:
    pkg = tmp_path / "broker"
    (pkg / "store").mkdir(parents=True)
    (pkg / "api").mkdir()
    for init in (pkg, pkg / "store", pkg / "api"):
        (init / "__init__.py").write_text("")
    (pkg / "store" / "s.py").write_text("def f():\n    from broker.api import a\n")
    (pkg / "api" / "a.py").write_text("from broker.store import s\n")
    assert upward(import_graph(pkg)) == {("broker.store.s", "broker.api.a")}


def test_the_check_sees_lazy_imports_and_skips_type_checking(tmp_path: Path) -> None:
    pkg = tmp_path / "broker"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from broker import b\n")
    (pkg / "b.py").write_text("from broker.a import f\n")
    (pkg / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from broker.d import x\n"
    )
    (pkg / "d.py").write_text("import broker.c\n")
    assert circles(import_graph(pkg)) == [{"broker.a", "broker.b"}]


# --- docs/architecture.md: the page that draws these layers ---------------------------------
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def _layer_rows() -> list[tuple[str, list[str]]]:
    """The layers table: each row's package and the names its "holds" column gives."""
    rows = []
    for line in ARCHITECTURE.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].isdigit():
            found = re.search(r"`([a-z_]+)/?`", cells[1])
            assert found, line
            package = found.group(1)
            rows.append((package, re.findall(r"`([a-z_]+)/?`", cells[2])))
    return rows


def test_architecture_names_every_package_and_every_module_it_names_exists() -> None:
    rows = _layer_rows()
    assert rows, "docs/architecture.md has no layers table"
    packages = {p.relative_to(PACKAGE).parts[0] for p in PACKAGE.glob("*/__init__.py")}
    assert packages <= {pkg for pkg, _ in rows}, "docs/architecture.md misses a package"
    for package, names in rows:
        base = PACKAGE if package == "broker" else PACKAGE / package
        for name in names:
            assert (base / f"{name}.py").is_file() or (base / name / "__init__.py").is_file(), (
                f"docs/architecture.md: {package} holds no {name!r}"
            )
    text = ARCHITECTURE.read_text(encoding="utf-8")
    for path in re.findall(r"`((?:[a-z_]+/)+[a-z_]+\.py)`", text):
        top = path.split("/")[0]
        where = ROOT / path if top in ("tests", "migrations", "broker") else PACKAGE / path
        assert where.is_file(), f"docs/architecture.md names {path}, which does not exist"
