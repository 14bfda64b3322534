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

Python processes the tests start (CLI calls, helper scripts, multiprocessing
workers) are measured too: coverage.py's ``.pth`` hook starts coverage in
each of them (``COVERAGE_PROCESS_START``), with the node id of the test that
was running when they started as their context (``MUTATION_TEST``). A line
run only at import (module constants, ``def`` lines) has no test in the map:
its mutants run the whole selection. What the map can miss (a process killed
by SIGKILL before it saved its data; a process started by one test and
serving later ones) can only make a mutant look like a survivor, never like
a kill; every survivor is then looked at by hand.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
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
        os.environ["MUTATION_TEST"] = item.nodeid  # the context of the processes it starts
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
    include = [str(root / f) for f in files]
    sub = Path(tempfile.mkdtemp(prefix="mutation-map-"))
    rc = sub / "coveragerc"
    rc.write_text(
        "[run]\n"
        f"data_file = {sub / 'sub'}\n"
        "parallel = True\n"
        f"include = {','.join(include)}\n"
        "context = ${MUTATION_TEST}\n"
    )
    os.environ["COVERAGE_PROCESS_START"] = str(rc)
    os.environ["MUTATION_TEST"] = ""
    cov = coverage.Coverage(data_file=None, include=include, branch=False)
    cov.start()
    plugin = _PerTest(cov)
    code = pytest.main(["-q", "-p", "no:cacheprovider", *args], plugins=[plugin])
    cov.stop()
    del os.environ["COVERAGE_PROCESS_START"]
    if code != 0 or plugin.failed:
        print(f"mutation map: the selection does not pass ({code}): no map", file=sys.stderr)
        return 1
    children = coverage.Coverage(data_file=str(sub / "sub"))  # combines sub.*
    children.combine([str(sub)], keep=False)
    tests: dict[str, dict[str, set[str]]] = {}
    at_import: set[tuple[str, str]] = set()
    for data, here in ((cov.get_data(), True), (children.get_data(), False)):
        for measured in data.measured_files():
            rel = str(Path(measured).relative_to(root))
            per_line = tests.setdefault(rel, {})
            for n, ctxs in data.contexts_by_lineno(measured).items():
                per_line.setdefault(str(n), set()).update(c for c in ctxs if c)
                if here and "" in ctxs:
                    # Run by the test process outside any test (at import, at
                    # collection): every test depends on it, so no narrowing.
                    at_import.add((rel, str(n)))
    lines = {
        f: {n: sorted(t) for n, t in ls.items() if t and (f, n) not in at_import}
        for f, ls in tests.items()
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
