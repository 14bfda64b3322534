"""mutmut 2's hook (scripts/mutation.sh copies this file into the work folder).

Before each mutant, narrow the test command to the tests that ran the mutated
line in the unmutated code (``MUTATION_MAP``, written by
scripts/mutation_map.py), in the test process or in one a test started,
fastest first. A line with no test in the map (run only at import) keeps the
whole selection. Tests that never run a line cannot see its mutant, so the
map only saves time; what it can miss makes survivors, never kills, and every
survivor is looked at by hand.
"""

from __future__ import annotations

import json
import os
import shlex
from functools import cache
from typing import Any


@cache
def _map() -> dict[str, Any]:
    path = os.environ.get("MUTATION_MAP", "")
    if not path or not os.path.exists(path):
        return {"lines": {}, "seconds": {}}
    with open(path) as f:
        return dict(json.load(f))


def pre_mutation(context: Any) -> None:
    mapping = _map()
    tests = mapping["lines"].get(context.filename, {}).get(str(context.current_line_index + 1))
    if not tests:
        return
    seconds = mapping["seconds"]
    ordered = sorted(tests, key=lambda t: (seconds.get(t, 1e9), t))
    runner = context.config.test_command.split(" -x ", 1)[0]
    context.config.test_command = f"{runner} -x -q -p no:cacheprovider " + " ".join(
        shlex.quote(t) for t in ordered
    )
