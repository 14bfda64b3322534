"""The benchmark harness runs in CI: ``python -m bench --quick`` and its JSON.

The default suite runs the scenarios that need no process of their own; the
whole quick run (every scenario: ~75 s of servers and agent processes) is a
soak run that ``.ci/run`` runs on every landing.

No figure is asserted against a time (speed is judged in bench runs, not
tests): only that every scenario ran, every number is a positive measurement
and every message was accounted for (lost 0, no duplicate: no lease expires in
a quick run), and every target's verdict agrees with its value.

The Redis peer runs against a ``redis-server`` this test starts on a free port
(never a server that happens to run on the machine); its rows must then be
measured. Without the binary, or without the ``redis`` Python package (the
``bench`` extra; the README's test command installs only ``dev``), the Redis
rows are skipped, and the run says so with a warning naming what is missing.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.peers.redis_streams import own_server  # noqa: E402
from bench.scenarios import SCENARIOS  # noqa: E402

REDIS_SYSTEMS = {"redis", "redis_cli", "redis_lock"}
# Costs that can truly be zero (an idle Redis over a short window).
MAY_BE_ZERO = {"idle_cpu", "served_idle"}  # an idle CPU over half a second may read 0


UNREACHABLE = "redis://127.0.0.1:1/0"  # nothing listens on port 1


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str | None]:
    """A private redis-server for this module (no persistence), or None."""
    binary = shutil.which("redis-server")
    missing = None
    if binary is None:
        missing = "redis-server is not installed"
    elif importlib.util.find_spec("redis") is None:
        missing = "the redis Python package is not installed (pip install -e '.[bench]')"
    if missing:
        warnings.warn(
            pytest.PytestWarning(f"{missing}: the bench's Redis rows are skipped in this run"),
            stacklevel=1,
        )
        yield None
        return
    with own_server(tmp_path_factory.mktemp("redis")) as (url, why):
        assert url is not None, why
        yield url


def run_bench(out: Path, *args: str, pg_url: str | None = None) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BROKER_", "BENCH_"))}
    if pg_url is not None:  # the broker on PostgreSQL and its peers join the run
        env["BENCH_PG_URL"] = pg_url
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


def check_scenarios(data: dict[str, Any], redis_url: str | None) -> None:
    """Every scenario of a run ran, measured every broker row and accounted
    for every message, and every target's verdict agrees with its value."""
    assert data["redis"]["reachable"] is (redis_url is not None)
    assert data["quick"] is True
    for name, sc in data["scenarios"].items():
        assert sc["status"] == "ok", (name, sc["error"])
        assert sc["rows"], name
        for row in sc["rows"]:
            system = row["system"]
            if row["status"] == "skipped":
                # Only a peer this machine may lack is skipped, with its reason: no
                # redis-server binary here, or the `bench` extra not installed.
                assert not system.startswith("broker"), (name, row)
                redis_missing = redis_url is None and system in REDIS_SYSTEMS
                assert redis_missing or "not installed" in row["reason"], (name, row)
                continue
            assert row["status"] == "ok", (name, row)
            value = row["value"]
            assert isinstance(value, int | float) and math.isfinite(value), (name, row)
            assert value >= 0 if name in MAY_BE_ZERO else value > 0, (name, row)
            check_accounting(name, row["stats"])
        check_accounting(name, sc["counts"])
        assert any(r["system"].startswith("broker") and r["status"] == "ok" for r in sc["rows"])
        for t in sc["targets"]:
            # Each figure (the broker's, and its statements' alone where the target
            # has one) is judged by the threshold, or None when it could not be
            # measured here.
            for figure, verdict in (("value", "met"), ("statements", "statements_met")):
                got, limit = t[figure], t["threshold"]
                if got is None:
                    assert t[verdict] is None, (name, t)
                    continue
                assert math.isfinite(got), (name, t)
                want = {">=": got >= limit, "<=": got <= limit, "==": got == limit}[t["op"]]
                assert t[verdict] is want, (name, t)
    # Every spec §Targets target is measured in a quick run too (unless it
    # compares against a peer that was skipped here).
    for name, sc in data["scenarios"].items():
        if all(r["status"] == "ok" for r in sc["rows"]):
            assert all(t["met"] is not None for t in sc["targets"]), name


# The scenarios that run in the bench's own process (no server, agent
# processes or CLI runs to start): the default suite's quick run.
IN_PROCESS = ("send", "claim_ack", "ack_and_claim", "turn", "broadcast", "pages")


def test_bench_quick_runs_the_in_process_scenarios_and_accounts_for_every_message(
    tmp_path: Path, redis_url: str | None
) -> None:
    data = run_bench(tmp_path, *IN_PROCESS, "--no-plots", "--redis-url", redis_url or UNREACHABLE)
    assert set(data["scenarios"]) == set(IN_PROCESS)
    check_scenarios(data, redis_url)
    # A target on the broker's rate against another system carries the broker's
    # statements run raw against that system in the same run, from the same rows.
    for name, den, text in (
        ("send", "raw_floor", "single send >= 0.3x raw sqlite3 (one statement per tx)"),
        ("claim_ack", "persist_queue", "claim+ack >= 8x persist-queue"),
    ):
        sc = data["scenarios"][name]
        rate = {r["system"]: r["value"] for r in sc["rows"] if r["status"] == "ok"}
        (target,) = [t for t in sc["targets"] if t["text"] == text]
        if den in rate:
            assert target["statements"] == pytest.approx(rate["raw_same"] / rate[den], rel=1e-3)
    report = (tmp_path / "report.md").read_text()
    assert "| scenario | target | measured | holds | the statements alone |" in report


@pytest.mark.soak  # every scenario, servers and processes started: ~75 s (.ci/run runs it)
def test_bench_quick_runs_every_scenario_and_accounts_for_every_message(
    tmp_path: Path, redis_url: str | None
) -> None:
    data = run_bench(tmp_path, "--redis-url", redis_url or UNREACHABLE)
    assert set(data["scenarios"]) == set(SCENARIOS)
    check_scenarios(data, redis_url)
    assert (tmp_path / "report.md").read_text().startswith("# broker bench")
    try:
        import matplotlib  # noqa: F401 - plots need the `bench` extra
    except ImportError:
        return
    assert (tmp_path / "send.png").stat().st_size > 0
    assert (tmp_path / "targets.png").stat().st_size > 0


def test_bench_reports_redis_rows_as_skipped_when_redis_is_unreachable(tmp_path: Path) -> None:
    data = run_bench(tmp_path, "send", "--messages", "30", "--no-plots", "--redis-url", UNREACHABLE)
    sc = data["scenarios"]["send"]
    assert sc["status"] == "ok"
    rows = {r["system"]: r for r in sc["rows"]}
    assert rows["redis"]["status"] == "skipped"
    reason = rows["redis"]["reason"]
    assert "not reachable" in reason or "not installed" in reason, reason
    assert rows["broker"]["status"] == "ok"
    assert data["redis"]["reachable"] is False


@pytest.mark.soak  # a PostgreSQL database and three scenarios: ~15 s (.ci/run runs it)
def test_bench_quick_runs_the_postgresql_lanes_and_judges_their_targets(
    tmp_path: Path, redis_url: str | None
) -> None:
    """spec §Targets, PostgreSQL: with a server named, the broker on PostgreSQL,
    raw psycopg running its statements and pgqueuer join send, claim + ack and
    wake, and the report judges the PostgreSQL targets from their rows."""
    import pgtest

    with pgtest.database(template=None) as url:
        data = run_bench(
            tmp_path,
            "send",
            "claim_ack",
            "wake",
            "--no-plots",
            "--redis-url",
            redis_url or UNREACHABLE,
            pg_url=url,
        )
    check_scenarios(data, redis_url)
    for name in ("send", "claim_ack", "wake"):
        rows = {r["system"]: r for r in data["scenarios"][name]["rows"]}
        assert rows["broker_pg"]["status"] == "ok", (name, rows["broker_pg"])
    want = {
        "send": "on PostgreSQL: single send >= 0.9x raw psycopg (same statements)",
        "claim_ack": "on PostgreSQL: single claim+ack >= 0.9x raw psycopg (same statements)",
    }
    for name, text in want.items():
        sc = data["scenarios"][name]
        rate = {r["system"]: r["value"] for r in sc["rows"]}
        (target,) = [t for t in sc["targets"] if t["text"] == text]
        assert target["value"] == pytest.approx(rate["broker_pg"] / rate["raw_pg"], rel=1e-3)
    (wake,) = [t for t in data["scenarios"]["wake"]["targets"] if "PostgreSQL" in t["text"]]
    assert wake["threshold"] == 5.0 and wake["met"] is (wake["value"] <= 5.0)
