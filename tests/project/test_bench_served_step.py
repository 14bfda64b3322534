"""``python -m bench.served_step`` reads the server's CPU per request of a
swarm step under thin clients (bench/results, issue "a lean message"). Every
answer is checked, so a run that did not do the step's work fails instead of
timing refusals; the lean lane's share is read from the server itself."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.served_step import measure, report  # noqa: E402


@pytest.mark.parametrize("unix", [False, True], ids=["tcp", "unix"])
def test_the_server_is_timed_per_request_and_the_lane_answers_the_steps(
    tmp_path: Path, unix: bool
) -> None:
    # The server's CPU is read from /proc in clock ticks (10 ms): the run is
    # long enough (~480 requests, ~0.1 s of the server's CPU) to span several.
    got = measure(tmp_path / "served", clients=2, steps=60, warm=3, workers=None, unix=unix)
    assert got["requests"] == 2 * 60 * 4
    assert got["over"] == ("unix" if unix else "tcp")
    assert got["server_us_per_request"] > 0 and got["client_us_per_request"] > 0, got
    # The timed window holds the clients' steps: it opens before the first
    # (a window opened after them read millions of requests a second).
    assert got["requests_per_s"] < 100_000, got
    assert got["lean_share"] > 0.9, got  # all but each receiver's first claim
    assert got["writes_per_transaction"] >= 1 and 0 < got["on_loop_share"] <= 1, got
    text = report(got, embedded=400.0)
    assert text.count("\n| ") == 1 and "server ÷ embedded per step" in text
    assert f"| {got['over']} |" in text
    # The server's memory growth is read from /proc (it may even shrink): a
    # column of its own, a leak's figure (tests/frontends/http/test_lane.py
    # holds the lane to one request's objects a connection).
    assert "server KiB / 1,000 requests" in text and f"| {got['rss_kib_per_1000']:.0f} |" in text
