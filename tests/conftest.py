"""Shared fixtures: real SQLite files in a temp folder, real processes for the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

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


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'home' / 'broker.db'}"


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    s = Store(db_url)
    yield s
    s.close()


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
        agent, _ = Agent.join(store, fields.pop("space", space), codename, **fields)
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


@pytest.fixture
def cli(tmp_path: Path) -> Callable[..., Result]:
    """Run ``python -m broker ARGS`` as a real process with BROKER_HOME in tmp."""
    home = tmp_path / "home"

    def _run(*args: str, env: dict[str, str] | None = None, input: str | None = None) -> Result:
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
        full_env["BROKER_HOME"] = str(home)
        full_env.update(env or {})
        proc = subprocess.run(
            [sys.executable, "-m", "broker", *args],
            capture_output=True,
            text=True,
            env=full_env,
            input=input,
            timeout=120,
        )
        return Result(proc.returncode, proc.stdout, proc.stderr)

    return _run
