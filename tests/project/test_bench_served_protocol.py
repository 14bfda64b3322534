"""``python -m bench.served_protocol`` times the server's HTTP protocol alone:
a kept-alive agent's request fed to ``broker serve``'s protocol class, the
lean lane's answer written back. A run that did not answer every request
through the lane fails instead of timing something else."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import served_protocol  # noqa: E402


def test_the_protocol_is_timed_per_request_with_every_request_answered_by_the_lane() -> None:
    got = served_protocol.measure(200, 3)
    assert 0 < got["least_us"] <= got["median_us"] < 10_000, got


def test_a_request_the_lane_did_not_answer_stops_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(served_protocol._Lane, "run", lambda self, call, body, answer: False)
    with pytest.raises(RuntimeError):  # the app would have had it: not what is timed
        served_protocol.measure(50, 1)
