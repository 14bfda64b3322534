"""Which tests run each line of the mutated files: the map scripts/mutation.sh
hands mutmut 2, so a mutant runs only the tests that can reach it.

    python scripts/mutation_map.py OUT.json FILES PYTEST_ARGS...

Runs the module's test selection once, in this process, under coverage.py with
one coverage context per test (the test's node id), and writes

- ``lines``: for each mutated file, line number -> the node ids that ran it;
- ``seconds``: each test's time (setup + call + teardown), so the fastest
  tests run first and a killed mutant costs the least;
- ``preload``: the modules the run imported that are neither the broker nor
  the tests (for scripts/mutation_forkserver.py to import once).

A line run only at import (module constants, ``def`` lines) or only in a
subprocess a test starts (CLI calls, forked workers) has no test in the map:
its mutants run the whole selection, as without the map. A mutant that
survives its mapped tests runs the whole selection again (``--rerun-all``),
so the map can make a run faster but never turns a kill into a survival.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import coverage
import pytest


class _PerTest:
    """Switches the coverage context to each test's node id and times it."""

    def __init__(self, cov: coverage.Coverage) -> None:
        self.cov = cov
        self.seconds: dict[str, float] = {}
        self.failed: set[str] = set()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: Any) -> Any:
        self.cov.switch_context(item.nodeid)
        start = time.perf_counter()
        yield
        self.seconds[item.nodeid] = time.perf_counter() - start
        self.cov.switch_context("")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self.failed.add(report.nodeid)


def main(argv: list[str]) -> int:
    out, files, args = Path(argv[0]), argv[1].split(","), argv[2:]
    root = Path.cwd()
    cov = coverage.Coverage(data_file=None, include=[str(root / f) for f in files], branch=False)
    cov.start()
    plugin = _PerTest(cov)
    code = pytest.main(["-q", "-p", "no:cacheprovider", *args], plugins=[plugin])
    cov.stop()
    if code != 0 or plugin.failed:
        print(f"mutation map: the selection does not pass ({code}): no map", file=sys.stderr)
        return 1
    data = cov.get_data()
    lines: dict[str, dict[str, list[str]]] = {}
    for measured in data.measured_files():
        rel = str(Path(measured).relative_to(root))
        by_line = data.contexts_by_lineno(measured)
        lines[rel] = {
            str(n): sorted(c for c in ctxs if c) for n, ctxs in by_line.items() if any(ctxs)
        }
    preload = sorted(
        name
        for name in sys.modules
        if not name.startswith(("broker", "tests", "conftest", "test_", "__main__"))
        and "mutation_map" not in name
    )
    out.write_text(
        json.dumps({"lines": lines, "seconds": plugin.seconds, "preload": preload}, indent=0)
    )
    mapped = sum(len(v) for v in lines.values())
    print(f"mutation map: {len(plugin.seconds)} tests, {mapped} lines mapped -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
