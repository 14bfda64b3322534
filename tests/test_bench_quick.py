"""The benchmark harness runs in CI: ``python -m bench --quick`` and its JSON.

No figure is asserted against a time (speed is judged in bench runs, not
tests): only that every scenario ran, every number is a positive measurement
and every message was accounted for (lost 0, no duplicate: no lease expires in
a quick run). A Redis that cannot be reached is a skipped row, not a failure.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.scenarios import SCENARIOS  # noqa: E402

REDIS_SYSTEMS = {"redis", "redis_cli", "redis_lock"}
# Costs that can truly be zero (an idle Redis over a short window).
MAY_BE_ZERO = {"idle_cpu"}


def run_bench(out: Path, *args: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--out", str(out), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    data: dict[str, Any] = json.loads((out / "results.json").read_text())
    return data


def dicts(obj: Any) -> Iterator[dict[str, Any]]:
    """Every dict nested in ``obj`` (counts and stats are nested per system)."""
    if isinstance(obj, dict):
        yield obj
        for v in obj.values():
            yield from dicts(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from dicts(v)


def check_accounting(name: str, blob: Any) -> None:
    for d in dicts(blob):
        if "lost" in d:
            assert d["lost"] == 0, (name, d)
        if "duplicates" in d:
            assert d["duplicates"] == 0, (name, d)
        if "unexpected" in d:
            assert d["unexpected"] == 0, (name, d)
        if {"acked", "unique", "duplicates"} <= d.keys():
            assert d["acked"] == d["unique"] + d["duplicates"], (name, d)
        if "errors" in d and isinstance(d["errors"], int):
            assert d["errors"] == 0, (name, d)
        if "overlaps" in d:
            assert d["overlaps"] == 0, (name, d)


def test_bench_quick_runs_every_scenario_and_accounts_for_every_message(tmp_path: Path) -> None:
    data = run_bench(tmp_path)
    assert data["quick"] is True
    assert set(data["scenarios"]) == set(SCENARIOS)
    for name, sc in data["scenarios"].items():
        assert sc["status"] == "ok", (name, sc["error"])
        assert sc["rows"], name
        for row in sc["rows"]:
            system = row["system"]
            if row["status"] == "skipped":
                # Only a peer this machine may lack is skipped, with its reason: a
                # Redis server not reachable, or the `bench` extra not installed.
                assert not system.startswith("broker"), (name, row)
                assert system in REDIS_SYSTEMS or "not installed" in row["reason"], (name, row)
                continue
            assert row["status"] == "ok", (name, row)
            value = row["value"]
            assert isinstance(value, int | float) and math.isfinite(value), (name, row)
            assert value >= 0 if name in MAY_BE_ZERO else value > 0, (name, row)
            check_accounting(name, row["stats"])
        check_accounting(name, sc["counts"])
        assert any(r["system"].startswith("broker") and r["status"] == "ok" for r in sc["rows"])
        for t in sc["targets"]:
            assert t["met"] in (True, False, None), (name, t)
            if t["value"] is not None:
                assert math.isfinite(t["value"]), (name, t)
    # Every spec §Targets target is measured in a quick run too (unless it
    # compares against a peer that was skipped here).
    for name, sc in data["scenarios"].items():
        if all(r["status"] == "ok" for r in sc["rows"]):
            assert all(t["met"] is not None for t in sc["targets"]), name
    assert (tmp_path / "report.md").read_text().startswith("# broker bench")
    try:
        import matplotlib  # noqa: F401 - plots need the `bench` extra
    except ImportError:
        return
    assert (tmp_path / "send.png").stat().st_size > 0
    assert (tmp_path / "targets.png").stat().st_size > 0


def test_bench_reports_redis_rows_as_skipped_when_redis_is_unreachable(tmp_path: Path) -> None:
    data = run_bench(
        tmp_path, "send", "--messages", "30", "--no-plots", "--redis-url", "redis://127.0.0.1:1/0"
    )
    sc = data["scenarios"]["send"]
    assert sc["status"] == "ok"
    rows = {r["system"]: r for r in sc["rows"]}
    assert rows["redis"]["status"] == "skipped"
    reason = rows["redis"]["reason"]
    assert "not reachable" in reason or "not installed" in reason, reason
    assert rows["broker"]["status"] == "ok"
    assert data["redis"]["reachable"] is False
