"""Every mutmut mutant of some lines of a file, each applied and its tests run.

    python scripts/mutation_lines.py FILE FIRST-LAST[,FIRST-LAST ...] COPY -- PYTEST-ARGS

For lines changed after a module's last full run: the mutants of just those
lines (line numbers of FILE as it is in this checkout), each written into
COPY (a scratch copy of the checkout), the tests run with ``PYTHONPATH=COPY``,
the file restored. Prints each mutant's verdict and the totals.
"""

from __future__ import annotations

import sys
from pathlib import Path

from mutmut import Context, list_mutations, mutate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutation_show import ROOT, try_mutant  # noqa: E402


def main(argv: list[str]) -> int:
    filename, spans, copy = argv[:3]
    args = argv[argv.index("--") + 1 :]
    lines: set[int] = set()
    for span in spans.split(","):
        first, last = (int(x) for x in span.split("-"))
        lines |= set(range(first, last + 1))
    src = (ROOT / filename).read_text()
    ids = [
        m
        for m in list_mutations(Context(source=src, filename=filename))
        if m.line_number + 1 in lines
    ]
    survived = 0
    for mid in ids:
        new = str(mutate(Context(source=src, mutation_id=mid, filename=filename))[0])
        alive, _ = try_mutant(copy, filename, new, args)
        changed = [x for x in new.splitlines() if x not in src.splitlines()]
        shown = changed[0].strip() if changed else "(line removed)"
        survived += alive
        print(
            f"{'SURVIVED' if alive else 'killed  '} line {mid.line_number + 1}: {shown}", flush=True
        )
    print(f"{len(ids)} mutants, {len(ids) - survived} killed, {survived} survived")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
