"""Packaging: what ``pyproject.toml`` ships, under which name, and the
project's top-level layout (spec §Module layout).

The package list in ``pyproject.toml`` is explicit (the alembic scripts at the
top of the project are mapped to ``broker._migrations``), so a new package
directory under ``broker/`` must be added there by hand: these tests say so
before a wheel ships without it. ``tests/project/test_wheel.py`` builds and installs
the wheel itself.
"""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import broker

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTION = "swarm-broker"

# The layout the project promises at its top (README "Layout"), and the few
# other things allowed there.
REQUIRED_TOP = {"pyproject.toml", "README.md", "broker", "migrations", "tests", "bench", "docs"}
ALLOWED_TOP = REQUIRED_TOP | {"alembic.ini", "scripts", ".ci", ".gitignore"}


def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def setuptools_cfg() -> dict[str, Any]:
    cfg = pyproject()["tool"]["setuptools"]
    assert isinstance(cfg, dict)
    return cfg


def source_dir(package: str, cfg: dict[str, Any]) -> Path:
    """Where setuptools reads ``package`` from, with the package-dir mapping."""
    mapping: dict[str, str] = cfg.get("package-dir", {})
    parts = package.split(".")
    for i in range(len(parts), 0, -1):
        prefix = ".".join(parts[:i])
        if prefix in mapping:
            return ROOT / mapping[prefix] / Path(*parts[i:])
    return ROOT / Path(*parts)


def test_every_package_directory_under_broker_is_listed_in_pyproject() -> None:
    listed = set(setuptools_cfg()["packages"])
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "broker").rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    assert "broker" in found and "broker.frontends.cli" in found  # the walk works
    missing = found - listed
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {sorted(missing)}"


def test_every_listed_package_exists_where_setuptools_reads_it() -> None:
    cfg = setuptools_cfg()
    for package in cfg["packages"]:
        folder = source_dir(package, cfg)
        assert (folder / "__init__.py").is_file(), f"{package}: no {folder}/__init__.py"
    # The migrations ship from the top-level folder, with their versions as data.
    assert source_dir("broker._migrations", cfg) == ROOT / "migrations"
    data = cfg["package-data"]
    assert "versions/*.py" in data["broker._migrations"]
    assert "*.sql" in data["broker.store.sql"]
    assert list((ROOT / "broker" / "store" / "sql").glob("*.sql")), (
        "the statement catalogue is empty"
    )


def test_distribution_name_is_free_on_the_index_and_the_command_is_broker() -> None:
    project = pyproject()["project"]
    # 'broker' on the public package index is someone else's project.
    assert project["name"] == DISTRIBUTION
    assert project["scripts"] == {"broker": "broker.__main__:run"}
    assert project["version"] == broker.__version__
    readme = (ROOT / "README.md").read_text()
    assert f"`{DISTRIBUTION}`" in readme, "the README names the distribution"


def test_nothing_reads_the_old_distribution_name() -> None:
    # importlib.metadata / click's package_name lookups of "broker" would find
    # nothing once installed as swarm-broker (or someone else's project).
    pattern = re.compile(
        r"""(package_name\s*=|metadata\.version\(|distribution\()\s*["']broker["']"""
    )
    hits = [
        f"{path.relative_to(ROOT)}"
        for folder in ("broker", "bench", "scripts", "tests")
        for path in (ROOT / folder).rglob("*.py")
        if pattern.search(path.read_text())
    ]
    assert not hits, hits


def test_top_level_layout_holds() -> None:
    present = {p.name for p in ROOT.iterdir()}
    assert present >= REQUIRED_TOP, f"missing at the top: {sorted(REQUIRED_TOP - present)}"
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        # Not a git checkout (an unpacked sdist): every non-hidden entry counts.
        listed = [p.name for p in ROOT.iterdir() if not p.name.startswith(".")]
    top = {name.split("/", 1)[0] for name in listed}
    extra = top - ALLOWED_TOP
    assert not extra, f"unexpected at the top of the project: {sorted(extra)}"
