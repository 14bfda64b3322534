"""``python -m bench.swarm_step`` times one swarm step, call by call.

The swarm's ratios (bench/results, issue "a lean message") are read against
it: the same send, claim, ack and empty claim on the broker, on its own
statements raw and on the minimal queue, with the two agents on one
connection or on two. A call that did not do its work (a claim that found
nothing) fails the run instead of timing nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.swarm_step import CALLS, LAYOUTS, SYSTEMS, measure, report  # noqa: E402


def test_each_system_times_each_call_of_the_step_on_one_and_on_two_connections(
    tmp_path: Path,
) -> None:
    got = {
        (system, layout): measure(tmp_path, system, layout, steps=20, warm=3)
        for system in SYSTEMS
        for layout in LAYOUTS
    }
    for calls in got.values():
        assert list(calls) == list(CALLS)
        assert all(us > 0 for us in calls.values()), calls
    text = report(got)
    assert text.count("\n| ") == len(SYSTEMS) * len(LAYOUTS)  # a row each, past the head
    assert "broker ÷ raw_same" in text and "raw_same ÷ minimal queue" in text
