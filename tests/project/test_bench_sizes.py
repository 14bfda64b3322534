"""Every bench command refuses a size it cannot run, before it runs anything.

A count of 0 or less once ran nothing and then fell over computing a median
of no samples (a traceback), or, for ``python -m bench swarm --swarm-procs
0``, wrote a report of nothing. Each size now takes ``bench.core``'s
argparse types: a count from 1 up, a warm-up from 0 up, seconds above 0, a
list of counts. A refusal is argparse's own: exit 2, the option named.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.core import count, counts, seconds, whole  # noqa: E402

# (how the command is run, a size it must refuse, the option the error names)
REFUSED = [
    (["-m", "bench.statements"], ["--sends", "0"], "--sends"),
    (["-m", "bench.statements"], ["--warm", "-1"], "--warm"),
    (["-m", "bench.swarm_step"], ["--steps", "x"], "--steps"),
    (["-m", "bench.send_phases"], ["--sends", "-3"], "--sends"),
    (["-m", "bench.profile_send"], ["--top", "-1"], "--top"),
    (["-m", "bench.served_step"], ["--workers", "0"], "--workers"),
    (["-m", "bench.guards"], ["--batch", "0"], "--batch"),
    (["-m", "bench"], ["swarm", "--swarm-procs", "8,0"], "--swarm-procs"),
    (["-m", "bench"], ["swarm", "--swarm-messages", "0"], "--swarm-messages"),
    (["-m", "bench"], ["swarm", "--swarm-rounds", "0"], "--swarm-rounds"),
    (["-m", "bench"], ["board", "--board-seconds", "nan"], "--board-seconds"),
    ([str(ROOT / "bench" / "board_claims.py")], ["--procs", ","], "--procs"),
    ([str(ROOT / "bench" / "export_memory.py")], ["--messages", "0"], "--messages"),
]


@pytest.mark.parametrize(("how", "args", "option"), REFUSED, ids=lambda v: " ".join(v))
def test_a_bench_command_refuses_a_size_it_cannot_run(
    tmp_path: Path, how: list[str], args: list[str], option: str
) -> None:
    r = subprocess.run(
        [sys.executable, *how, *args, "--out", str(tmp_path / "out")]
        if how == ["-m", "bench"]
        else [sys.executable, *how, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert r.returncode == 2, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert f"argument {option}: " in last and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()  # nothing ran


def test_the_size_types_take_what_they_name_and_nothing_else() -> None:
    assert count("1") == 1 and count("1_000") == 1000 and whole("0") == 0
    assert counts("8, 32,64") == (8, 32, 64) and seconds("0.5") == 0.5
    for kind, text in [
        (count, "0"),
        (count, "2.5"),
        (count, ""),
        (whole, "-1"),
        (counts, ","),
        (counts, "8,-1"),
        (seconds, "0"),
        (seconds, "inf"),
        (seconds, "-1"),
    ]:
        with pytest.raises(argparse.ArgumentTypeError):
            kind(text)
