"""Show mutmut 2 mutants of a work folder without touching its run.

    python scripts/mutation_show.py WORKDIR COMMIT [STATUS ...]
    python scripts/mutation_show.py WORKDIR COMMIT --ids 95,209

``mutmut show`` must not run while ``mutmut run`` is going (docs/mutation.md:
it rewrites the cache's table of lines from the module on disk, which may hold
a mutant at that moment). This reads ``.mutmut-cache`` read-only, takes the
module as it was at COMMIT (the checkout the run copied) from git, and makes
each mutant with mutmut's own ``mutate()``. Default statuses: the survivors,
the hung and the slow ones.
"""

from __future__ import annotations

import difflib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from mutmut import Context, RelativeMutationID, mutate

ROOT = Path(__file__).resolve().parent.parent
_QUERY = (
    'SELECT m.id, m.status, l.line, m."index", l.line_number, f.filename FROM Mutant m '
    "JOIN Line l ON l.id = m.line JOIN SourceFile f ON f.id = l.sourcefile "
)


def source_at(commit: str, filename: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{commit}:{filename}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def mutants(work: str, ids: list[int] | None, statuses: list[str]) -> list[tuple]:
    db = sqlite3.connect(f"file:{work}/.mutmut-cache?mode=ro", uri=True)
    try:
        if ids is not None:
            marks = ",".join("?" * len(ids))
            return db.execute(_QUERY + f"WHERE m.id IN ({marks}) ORDER BY m.id", ids).fetchall()
        marks = ",".join("?" * len(statuses))
        return db.execute(
            _QUERY + f"WHERE m.status IN ({marks}) ORDER BY m.id", statuses
        ).fetchall()
    finally:
        db.close()


def mutated(source: str, line: str, index: int, line_number: int, filename: str) -> str:
    mid = RelativeMutationID(line=line, index=index, line_number=line_number)
    return str(mutate(Context(source=source, mutation_id=mid, filename=filename))[0])


def try_mutant(copy: str, filename: str, source: str, args: list[str]) -> tuple[bool, str]:
    """Write ``source`` (a mutant) as ``filename`` in the scratch checkout
    ``copy``, run pytest there on ``args``, put the file back: (whether the
    tests passed, that is the mutant survived; pytest's last line)."""
    path = Path(copy) / filename
    original = path.read_text()
    path.write_text(source)
    try:
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *args],
            cwd=copy,
            env=dict(os.environ, PYTHONPATH=copy),
            capture_output=True,
            text=True,
            timeout=900,
        )
    except subprocess.TimeoutExpired:
        return False, "timeout"  # a hang is a kill
    finally:
        path.write_text(original)
    return run.returncode == 0, (run.stdout.strip().splitlines() or [""])[-1]


def main(argv: list[str]) -> int:
    work, commit, rest = argv[0], argv[1], argv[2:]
    ids = [int(x) for x in rest[1].split(",")] if rest[:1] == ["--ids"] else None
    statuses = rest or ["bad_survived", "bad_timeout", "ok_suspicious"]
    sources: dict[str, str] = {}
    for mid, status, line, index, line_number, filename in mutants(work, ids, statuses):
        src = sources.setdefault(filename, source_at(commit, filename))
        new = mutated(src, line, index, line_number, filename)
        diff = list(difflib.unified_diff(src.splitlines(), new.splitlines(), lineterm="", n=0))
        print(f"### {mid} {status} {filename}:{line_number + 1}")
        print("\n".join(diff[2:]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
