"""The ``pages`` bench scenario counts what a send writes, and counts it right.

Run on real stores: the minimal queue's figures are known from SQLite itself
(an INSERT into a table and its one index writes about two pages; a 100-byte
row takes about 110 bytes of the table), so the counting is checked against
them; the broker's per-object frames add up to its total.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.core import Ctx, Sizes  # noqa: E402
from bench.scenarios.pages import pages  # noqa: E402


def test_pages_counts_frames_and_bytes_per_table_and_index(tmp_path: Path) -> None:
    ctx = Ctx(sizes=Sizes.quick(), work=tmp_path, quick=True, redis_url="", log=lambda m: None)
    sc = pages(ctx)
    floor = sc.get("raw_floor")
    broker = sc.get("broker")
    assert floor is not None and broker is not None
    assert floor.value is not None and 1.9 <= floor.value <= 2.3  # q + q_ready, page 1 rarely
    assert 100 <= floor.stats["bytes_per_msg"] <= 180
    assert broker.value is not None and broker.value >= floor.value
    assert broker.stats["bytes_per_msg"] > floor.stats["bytes_per_msg"]
    objects = sc.counts["objects"]
    assert set(objects["raw_floor"]) >= {"q", "q_ready"}
    for system, row in (("broker", broker), ("raw_floor", floor)):
        total = sum(v["frames_per_send"] for v in objects[system].values())
        assert abs(total - row.value) < 0.05 * row.value + 0.02
    assert "messages" in objects["broker"] and "deliveries" in objects["broker"]
    assert {t.text for t in sc.targets} == {
        "WAL frames per single send ≤ 4",
        "bytes per message ≤ 2.5× the minimal queue's",
    }
