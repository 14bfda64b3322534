"""Write broker/store/search_fold.py: how SQLite's FTS5 ``unicode61`` tokenizer
(``remove_diacritics 2``, the search index's) splits and folds text, read
from SQLite itself, so the query parser (broker/mail/search_query.py) and
PostgreSQL's search text (revision 0012) split and fold exactly as FTS5 does
(S36). Run: ``python scripts/gen_search_fold.py`` (a few seconds); the tests
(tests/contract/test_search_query.py) check the table against the running SQLite.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "broker" / "store" / "search_fold.py"


def read_unicode61(top: int = 0x110000) -> tuple[list[tuple[int, int]], dict[int, str], list[int]]:
    """(runs of word characters, char -> folded char, chars folded away)."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE f USING fts5(b, tokenize='unicode61 remove_diacritics 2')")
    conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(f, 'instance')")
    points = [c for c in range(top) if not 0xD800 <= c <= 0xDFFF]
    conn.executemany("INSERT INTO f (rowid, b) VALUES (?, ?)", ((c + 1, f"x{chr(c)}y") for c in points))
    found: dict[int, list[str]] = {}
    for term, doc in conn.execute("SELECT term, doc FROM v"):
        found.setdefault(doc - 1, []).append(term)
    conn.close()
    word: list[int] = []
    fold: dict[int, str] = {}
    drop: list[int] = []
    for c in points:
        terms = found.get(c, [])
        if len(terms) != 1:
            continue  # a separator: "x" and "y" apart
        word.append(c)
        middle = terms[0][1:-1]
        if middle == "":
            drop.append(c)
        elif middle != chr(c):
            fold[c] = middle
    runs: list[tuple[int, int]] = []
    for c in word:
        if runs and runs[-1][1] == c - 1:
            runs[-1] = (runs[-1][0], c)
        else:
            runs.append((c, c))
    return runs, fold, drop


def _esc(c: int) -> str:
    return f"\\u{c:04x}" if c <= 0xFFFF else f"\\U{c:08x}"


def _wrap(name: str, parts: list[str], width: int = 96) -> list[str]:
    lines = [f"{name} = ("]
    cur = '    "'
    for p in parts:
        if len(cur) + len(p) + 1 > width:
            lines.append(cur + '"')
            cur = '    "'
        cur += p
    lines.append(cur + '"')
    lines.append(")")
    return lines


def render() -> str:
    runs, fold, drop = read_unicode61()
    out = [
        '"""How FTS5\'s ``unicode61`` tokenizer (``remove_diacritics 2``) splits and',
        "folds text (S36), read from SQLite " + sqlite3.sqlite_version + " by",
        "scripts/gen_search_fold.py: generated, do not edit. A word is a run of",
        "``WORD`` characters; each character is then folded (lower case, no",
        "diacritic): ``FOLD_FROM[i]`` becomes ``FOLD_TO[i]``, ``DROPPED`` ones vanish.",
        '"""',
        "",
        "# fmt: off",
        "# ruff: noqa: E501",
    ]
    out += _wrap("WORD", [f"{_esc(a)}-{_esc(b)}" if a != b else _esc(a) for a, b in runs])
    keys = sorted(fold)
    out += _wrap("FOLD_FROM", [_esc(c) for c in keys])
    out += _wrap("FOLD_TO", [_esc(ord(fold[c])) for c in keys])
    out += _wrap("DROPPED", [_esc(c) for c in drop])
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    OUT.write_text(render(), encoding="utf-8")
    print(f"wrote {OUT}")
