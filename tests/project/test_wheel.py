"""The built wheel works on its own (spec §Storage: migrations ship in the wheel).

Builds the wheel from a copy of the sources, installs it into a fresh virtual
environment (its runtime dependencies come from the package index, as for a
user), and from a folder outside the checkout runs the installed ``broker``:
``db upgrade`` on a new database file, ``db current --json``, ``doctor
--json`` (clean: no warning, no error), then ``demo`` (the README's line for
trying broker: nothing but the runtime dependencies). Nothing of
the checkout is importable there (no PYTHONPATH), so a file missing from the
wheel fails here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

import broker
from broker.store.migrate import HEAD

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTION = "swarm-broker"
# What the wheel is built from: the sdist's content, nothing else of the checkout.
SOURCES = ("pyproject.toml", "README.md", "broker", "migrations")
TIMEOUT = 600  # s per step; a cold pip cache downloads the dependencies
# The README's line for trying broker: the runtime dependencies alone (no extra).
TRY_IT = "python3 -m venv .venv && . .venv/bin/activate && pip install . && broker demo"


def run(
    args: list[str], *, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT, check=False
    )
    assert proc.returncode == 0, (
        f"{' '.join(args)} exited {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    )
    return proc


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without anything pointing at the checkout or a store."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("BROKER_", "PYTHON", "VIRTUAL_ENV", "PIP_REQUIRE"))
    }
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p
    )
    env.update(extra)
    return env


def _build_requirements_here() -> bool:
    """This interpreter has the setuptools pyproject.toml's build requirements ask for."""
    try:
        import setuptools
    except ImportError:
        return False
    required = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    assert required == ["setuptools>=68"], f"update this check for {required}"
    return int(setuptools.__version__.split(".")[0]) >= 68


# A soak run (.ci/run runs it on every landing): a wheel built and installed with
# its dependencies into a fresh venv is ~25 s of pip, most of it not the broker's.
@pytest.mark.soak
def test_wheel_installs_in_a_fresh_venv_and_migrates_a_new_database(tmp_path: Path) -> None:
    started = time.monotonic()
    src, wheels, venv, elsewhere = (tmp_path / n for n in ("src", "wheels", "venv", "elsewhere"))
    src.mkdir()
    elsewhere.mkdir()
    for name in SOURCES:
        origin = ROOT / name
        if origin.is_dir():
            shutil.copytree(
                origin, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
            )
        else:
            shutil.copy2(origin, src / name)
    env = clean_env()

    # 1. Build the wheel with setuptools (the build backend pyproject.toml names). When
    #    this interpreter has a setuptools the build requirements accept, pip builds with
    #    it (no isolated build environment to download and install: the same wheel);
    #    otherwise pip makes that environment, as it does for users.
    here = ["--no-build-isolation", "--check-build-dependencies"]
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            *(here if _build_requirements_here() else []),
        ]
        + [str(src), "-w", str(wheels)],
        cwd=src,
        env=env,
    )
    built = sorted(wheels.glob("swarm_broker-*.whl"))
    assert len(built) == 1, f"expected one swarm_broker wheel, got {list(wheels.iterdir())}"

    # 2. A fresh venv, no pip of its own; this interpreter's pip installs into it.
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path, env=env)
    python = venv / "bin" / "python"
    run(
        # --no-compile: no .pyc written ahead for the dependencies (CPU spent on modules
        # never imported here); what runs below compiles what it imports.
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet"]
        + ["--no-compile", str(built[0])],
        cwd=tmp_path,
        env=env,
    )
    installed_s = time.monotonic() - started

    # 3. The installed package is the one imported, with its data files.
    probe = run(
        [
            str(python),
            "-c",
            "import broker, importlib.metadata as m, json; "
            f"print(json.dumps([broker.__file__, broker.__version__, m.version({DISTRIBUTION!r})]))",
        ],
        cwd=elsewhere,
        env=env,
    )
    init_file, version, dist_version = json.loads(probe.stdout)
    package = Path(init_file).parent
    assert venv in package.parents, f"imported {init_file}, not the installed wheel"
    assert version == dist_version == broker.__version__
    migrations = package / "_migrations"
    assert (migrations / "env.py").is_file()
    shipped = sorted(p.name for p in (migrations / "versions").glob("*.py"))
    assert shipped == sorted(p.name for p in (ROOT / "migrations" / "versions").glob("*.py"))
    sql = sorted(p.name for p in (package / "store" / "sql").glob("*.sql"))
    assert sql and sql == sorted(p.name for p in (ROOT / "broker" / "store" / "sql").glob("*.sql"))
    assert (package / "py.typed").is_file()

    # 4. The installed command, outside the checkout, on a new database file.
    broker_cmd = str(venv / "bin" / "broker")
    home = tmp_path / "home"
    benv = clean_env(BROKER_HOME=str(home))
    shown = run([broker_cmd, "--version"], cwd=elsewhere, env=benv)
    assert shown.stdout.strip() == f"broker, version {dist_version}"

    up = run([broker_cmd, "db", "upgrade", "--json"], cwd=elsewhere, env=benv)
    upgraded = json.loads(up.stdout)
    assert upgraded["before"] is None and upgraded["after"] == HEAD
    db_file = home / "broker.db"
    assert db_file.is_file()
    assert db_file.stat().st_mode & 0o777 == 0o600

    cur = run([broker_cmd, "db", "current", "--json"], cwd=elsewhere, env=benv)
    assert json.loads(cur.stdout) == {
        "url": upgraded["url"],
        "current": HEAD,
        "head": HEAD,
        "up_to_date": True,
    }

    # 5. `broker doctor` on the same store is clean (the acceptance's "broker doctor
    #    clean"): exit 0, and every finding (JSON Lines) ok or informational, the
    #    schema at the head the wheel shipped.
    doc = run([broker_cmd, "doctor", "--json"], cwd=elsewhere, env=benv)
    findings = [json.loads(line) for line in doc.stdout.splitlines()]
    assert findings, "doctor printed no finding"
    not_clean = [f for f in findings if f["severity"] not in ("ok", "info")]
    assert not_clean == [], f"doctor on a fresh store: {not_clean}"
    checks = {f["check"] for f in findings}
    assert {"sqlite", "schema", "integrity", "file"} <= checks, checks
    schema = next(f for f in findings if f["check"] == "schema")
    assert schema["severity"] == "ok" and HEAD in schema["message"], schema

    # 6. The README's "try it" line needs nothing but what `pip install .` installs:
    #    `broker demo`, its swarm of teammate processes included, runs on it.
    assert TRY_IT in (ROOT / "README.md").read_text(), "the README's try-it line changed"
    demo_env = clean_env(BROKER_HOME=str(tmp_path / "demo"))
    demo = json.loads(run([broker_cmd, "demo", "--json"], cwd=elsewhere, env=demo_env).stdout)
    assert demo["tasks_done"] == demo["tasks"] == 40, demo
    # At-least-once: a task is done twice only when its key claim ran out (a
    # killed or slow teammate) and another teammate claimed it again, so every
    # result, the second ones included, has a claim of its own.
    assert demo["claims"] >= demo["results_received"] >= 40, demo
    extras = ("starlette", "uvicorn", "mcp", "psycopg", "httpx", "pytest")
    found = run(
        [sys.executable, "-m", "pip", "--python", str(python), "list", "--format=json"],
        cwd=tmp_path,
        env=env,
    )
    assert not {p["name"].lower() for p in json.loads(found.stdout)} & set(extras)

    # The commands wrote nothing into the folder they ran in: the store is in BROKER_HOME.
    assert list(elsewhere.iterdir()) == []
    print(
        f"wheel build + fresh install {installed_s:.1f} s, total {time.monotonic() - started:.1f} s"
    )
