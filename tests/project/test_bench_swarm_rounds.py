"""``python -m bench swarm --swarm-rounds N``: each point runs N times, the
systems' order reversed every other round, and keeps each system's median
round, with the paired ratios the targets read.

On a noisy machine one run of a swarm point moves 10-20 %, so one served ÷
embedded ratio says little. A round runs every system once, and the ratio of
a pair of systems is taken within each round (the two ran minutes apart on
the same machine), and its median is what a target reads. Nothing a round
lost or duplicated may be hidden behind the kept row, so the kept row sums
every round's accounting.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.core import BROKER, Ctx, Row, Scenario, Sizes  # noqa: E402
from bench.scenarios import swarm  # noqa: E402

HTTP = swarm.served_name(unix=False, workers=None)


def _ctx(tmp_path: Path, logged: list[str]) -> Ctx:
    return Ctx(sizes=Sizes(), work=tmp_path, quick=False, redis_url="", log=logged.append)


def _row(system: str, rate: float, round_no: int, **stats: Any) -> Row:
    counts = {"lost": 0, "duplicates": 0, "unexpected": 0, "errors": 0, "locked_errors": 0}
    return Row(system, rate, "msg/s", point=32, stats={**counts, **stats, "round": round_no})


def test_a_point_keeps_each_systems_median_round_and_the_median_of_its_paired_ratios(
    tmp_path: Path,
) -> None:
    sc = Scenario("swarm", "t", "msg/s")
    # embedded 1000, 1300, 1100; served 900, 1430, 1210: served / embedded per
    # round 0.9, 1.1, 1.1 (median 1.1), where the medians' ratio is 1210 / 1100.
    for k, (b, s) in enumerate([(1000.0, 900.0), (1300.0, 1430.0), (1100.0, 1210.0)]):
        sc.add(_row(BROKER, b, k))
        sc.add(_row(HTTP, s, k, lost=k))  # a round that lost mail is not hidden
    sc.add(Row(BROKER, 5.0, point=8))  # another point: untouched
    logged: list[str] = []
    swarm._keep_medians(_ctx(tmp_path, logged), sc, [BROKER, HTTP], 32)

    kept = {r.system: r for r in sc.rows if r.point == 32}
    assert [r.system for r in sc.rows if r.point == 32] == [BROKER, HTTP]
    assert kept[BROKER].value == 1100.0 and kept[BROKER].stats["round_rates"] == [1000, 1300, 1100]
    assert kept[HTTP].value == 1210.0 and kept[HTTP].stats["round"] == 2
    assert kept[HTTP].stats["lost"] == 0 + 1 + 2  # every round's accounting, summed
    assert [r.point for r in sc.rows].count(8) == 1

    assert sc.params["round_ratios"][f"{HTTP}/{BROKER}@32"] == [0.9, 1.1, 1.1]
    assert swarm._paired(sc, HTTP, BROKER, 32) == 1.1
    assert any("(median 1.10)" in line for line in logged), logged


def test_with_one_round_a_target_reads_the_runs_own_ratio(tmp_path: Path) -> None:
    sc = Scenario("swarm", "t", "msg/s")
    sc.add(_row(BROKER, 1000.0, 0))
    sc.add(_row(HTTP, 950.0, 0))
    assert swarm._paired(sc, HTTP, BROKER, 32) == 0.95
    assert "round_ratios" not in sc.params


def test_rounds_alternate_the_order_of_the_systems(tmp_path: Path, monkeypatch: Any) -> None:
    ran: list[tuple[int, str]] = []

    class _Fake:
        def __init__(self, name: str) -> None:
            self.system = name

        def close(self) -> None:
            pass

    monkeypatch.setattr(swarm, "_Broker", lambda folder, procs, writer_lock: _Fake(BROKER))
    monkeypatch.setattr(swarm, "_served_system", lambda name, folder, procs: _Fake(name))
    monkeypatch.setattr(
        swarm,
        "_run_point",
        lambda ctx, sc, system, procs, m, timeout, round_no: ran.append((round_no, system.system)),
    )
    ctx = _ctx(tmp_path, [])
    sc = Scenario("swarm", "t", "msg/s")
    for k in range(3):
        swarm._run_round(ctx, sc, [BROKER, HTTP], 32, 100, 10.0, k, "", "", None)
    assert ran == [(0, BROKER), (0, HTTP), (1, HTTP), (1, BROKER), (2, BROKER), (2, HTTP)]
