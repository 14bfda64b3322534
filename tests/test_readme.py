"""The README's Python example runs as written (on a temp store)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_python_api_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BROKER_HOME", str(tmp_path))
    monkeypatch.delenv("BROKER_URL", raising=False)
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks, "the README lost its Python example"
    scope: dict[str, object] = {}
    exec(compile(blocks[0], "README.md", "exec"), scope)  # noqa: S102 - our own documentation
    store = scope["store"]
    with store.read() as t:  # type: ignore[attr-defined]
        kept = t.all("SELECT body FROM my_history ORDER BY rowid")
    assert [r[0] for r in kept][:2] == ["found 3 failing tests", "part 0"]
