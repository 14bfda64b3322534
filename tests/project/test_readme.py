"""The README runs as written: the Python example, and the CLI tour, command by
command in one shell, with the output the README shows (ids, tokens, times
and paths compared by shape, everything else exactly)."""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
TOUR_MARK = "<!-- tour: every command below runs in tests/project/test_readme.py -->"


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


# --- the CLI tour -------------------------------------------------------------------------------
# Values that differ from run to run, by shape. Each README value is mapped to
# the run's value where they first meet, and later commands use the run's.
VARIABLE = [
    re.compile(r"\b(?:af|run|ses)_[0-9a-z]{26}\b"),  # space ids
    re.compile(r"\b[0-9A-HJKMNP-TV-Z]{26}\b"),  # ULIDs
    re.compile(r"(?<![\w-])[A-Za-z0-9_-]{32}(?![\w-])"),  # tokens
    re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d{6}Z)?"),  # times
    re.compile(r"(?<=:)\d{2,7}\b(?=[\",\s])"),  # pids in lease owners
]


def tour() -> list[tuple[str, str]]:
    """The README's tour as (command, what it prints)."""
    text = README.read_text()
    assert TOUR_MARK in text, "the README lost its CLI tour"
    block = re.search(r"```console\n(.*?)```", text[text.index(TOUR_MARK) :], re.S)
    assert block is not None
    steps: list[tuple[str, list[str]]] = []
    for line in block.group(1).splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    return [(cmd, "\n".join(out).strip("\n")) for cmd, out in steps]


def shape(text: str) -> str:
    for n, pattern in enumerate(VARIABLE):
        text = pattern.sub(f"<{n}>", text)
    return text


class Shell:
    """One bash for the whole tour: variables and exports carry over."""

    MARK = "__tour_step_done__"

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            ["bash", "--norc", "--noprofile"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
        )

    def run(self, command: str) -> str:
        """Run one command line; what it printed (stdout and stderr)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{command}\necho; echo {self.MARK}\n".encode())
        self.proc.stdin.flush()
        out = b""
        end = f"\n{self.MARK}\n".encode()
        while not out.endswith(end):
            ready, _, _ = select.select([self.proc.stdout], [], [], 120)
            assert ready, f"no end of: {command}"
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            assert chunk, f"the shell ended during: {command}"
            out += chunk
        return out[: -len(end)].decode().strip("\n")

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def test_readme_cli_tour_runs_as_written(tmp_path: Path) -> None:
    steps = tour()
    assert len(steps) > 10
    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
    bindir = Path(sys.executable).parent  # `broker` is the script beside this python
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    home = tmp_path / "home"
    seen: dict[str, str] = {}
    shell = Shell(env)
    try:
        for command, shown in steps:
            for readme_value, run_value in seen.items():
                command = command.replace(readme_value, run_value)
            command = command.replace("/tmp/rd/home", str(home))
            got = shell.run(command).replace(str(home), "/tmp/rd/home")
            assert shape(got) == shape(shown), f"$ {command}\n--- README\n{shown}\n--- run\n{got}"
            for pattern in VARIABLE[:3]:
                for readme_value, run_value in zip(
                    pattern.findall(shown), pattern.findall(got), strict=True
                ):
                    seen.setdefault(readme_value, run_value)
    finally:
        shell.close()
