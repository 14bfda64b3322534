"""The module rule of the spec (§Module layout): one module stays under about
600 lines. Checked on the source, so it holds for every module whether a test
imports it or not. (No import circles: tests/test_import_graph.py.)
"""

from __future__ import annotations

from pathlib import Path

BROKER = Path(__file__).resolve().parent.parent / "broker"
MAX_LINES = 600


def test_no_module_is_over_600_lines() -> None:
    over = {
        str(path.relative_to(BROKER)): n
        for path in sorted(BROKER.rglob("*.py"))
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert over == {}
