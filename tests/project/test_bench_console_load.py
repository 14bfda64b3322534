"""``python -m bench.console_load``: a busy server's cost of an open console,
measured against a real ``broker serve`` (a scratch store, a real stream)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.console_load import run

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("console", [True, False], ids=["console", "no console"])
def test_the_console_load_counts_readings_only_with_the_stream_open(
    tmp_path: Path, console: bool
) -> None:
    got = run(tmp_path, participants=3, seconds=1.0, every=0.02, console=console)
    assert got["participants"] == 3 and got["console"] is console
    assert got["sends"] >= 10  # every one answered 200, or run() raised
    assert 0 < got["send_p50_ms"] <= got["send_p99_ms"]
    assert got["server_cpu_pct"] > 0
    if console:
        assert got["readings_per_s"] > 0  # the sends ring the view: it reads again
    else:
        assert got["readings_per_s"] == 0
