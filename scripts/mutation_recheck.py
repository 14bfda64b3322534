"""Apply surviving mutants by hand, one at a time, and run a whole test selection.

    python scripts/mutation_recheck.py WORKDIR COMMIT COPY OUT ID ... -- PYTEST-ARGS

Each mutant (scripts/mutation_show.py reads it from WORKDIR's cache) is
written into COPY, a scratch copy of the checkout; pytest runs there with
``PYTHONPATH=COPY``; the file is restored. OUT gets one line per mutant:
its id, ``killed`` or ``survived``, and pytest's last line. Used to check
survivors against more tests than the run's narrowed ones (docs/mutation.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutation_show import mutants, mutated, source_at, try_mutant  # noqa: E402


def main(argv: list[str]) -> int:
    work, commit, copy, out = argv[:4]
    sep = argv.index("--")
    ids = [int(x) for x in argv[4:sep]]
    args = argv[sep + 1 :]
    with open(out, "a") as log:
        for mid, _, line, index, line_number, filename in mutants(work, ids, []):
            new = mutated(source_at(commit, filename), line, index, line_number, filename)
            alive, last = try_mutant(copy, filename, new, args)
            print(mid, "survived" if alive else "killed", last[:200], file=log, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
