"""The module rules of the spec (§Module layout): one module stays under about
600 lines, and there are no import cycles.

Checked on the source, so it holds for every module whether a test imports
it or not. An import cycle counts only the imports that run when a module is
loaded (its top level, not ``if TYPE_CHECKING:``): an import inside a
function runs later, when both modules exist, and cannot deadlock loading.
"""

from __future__ import annotations

import ast
from pathlib import Path

BROKER = Path(__file__).resolve().parent.parent / "broker"
MAX_LINES = 600

# Modules still over the limit, each with who is splitting it. It may only
# shrink (an entry for a module now under the limit is harmless: remove it).
OVER_LIMIT_PENDING = {
    "messages.py",  # engineer "speed" (issue "One shape", size rule)
    "tables.py",  # engineer "catalog"
}


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(BROKER.rglob("*.py")):
        rel = path.relative_to(BROKER.parent).with_suffix("")
        found[".".join(rel.parts).removesuffix(".__init__")] = path
    return found


def load_time_imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The broker modules ``path`` imports at its top level (TYPE_CHECKING blocks
    aside): what runs when the module is loaded."""
    out: set[str] = set()
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for sub in ast.walk(node) if isinstance(node, ast.If | ast.Try) else [node]:
            if isinstance(sub, ast.Import):
                out |= {a.name for a in sub.names if a.name in known}
            elif isinstance(sub, ast.ImportFrom) and sub.level == 0 and sub.module in known:
                for alias in sub.names:  # `from broker import inbox` loads broker.inbox
                    name = f"{sub.module}.{alias.name}"
                    out.add(name if name in known else sub.module)
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

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
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_is_over_600_lines() -> None:
    over = {
        str(path.relative_to(BROKER)): n
        for path in modules().values()
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert {k: v for k, v in over.items() if k not in OVER_LIMIT_PENDING} == {}


def test_no_import_cycle_when_modules_load() -> None:
    known = modules()
    graph = {name: load_time_imports(path, known) - {name} for name, path in known.items()}
    assert cycles(graph) == []


def test_the_cycle_check_finds_a_cycle_through_from_imports(tmp_path: Path) -> None:
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("from broker import b\n")
    b.write_text("import broker.a\ndef f():\n    from broker import c\n")
    known = {"broker": tmp_path, "broker.a": a, "broker.b": b, "broker.c": tmp_path / "c.py"}
    graph = {"broker.a": load_time_imports(a, known), "broker.b": load_time_imports(b, known)}
    assert graph == {"broker.a": {"broker.b"}, "broker.b": {"broker.a"}}  # not the lazy c
    assert cycles(graph) == [["broker.a", "broker.b"]]
