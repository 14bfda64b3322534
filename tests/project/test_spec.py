"""The spec lives in the repository: ``docs/spec.md`` defines every rule the code
cites, and nothing points at documents outside the repository.

- every ``S<n>`` cited by a module, a test, the bench, a migration, a script or
  a doc is a rule that ``docs/spec.md`` defines (``### S<n>. title``);
- every ``spec §Name`` citation names a section of ``docs/spec.md``, and every
  link into it names one of its headings;
- no file of the repository refers to the design notes or the source documents
  the project was started from (they are not in the repository);
- every rule is cited by at least one test (a ratchet: ``UNCITED_ALLOWED``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "docs" / "spec.md"
THIS = Path(__file__).resolve()

# Rules no test cites yet. It may only shrink: when a test starts citing one,
# remove it here (the last test below fails until you do). S43-S45 (Trust II)
# are being implemented in parallel in this round.
UNCITED_ALLOWED: frozenset[int] = frozenset()

# Where rules are cited: the code, its tests, the bench, migrations, scripts, docs.
CITING_DIRS = ("broker", "tests", "bench", "migrations", "scripts", "docs")
CITING_FILES = ("README.md",)
CITING_SUFFIXES = {".py", ".sql", ".md", ".mako", ".ini", ".toml"}

# Never scanned: version control, environments, caches, build outputs, and the
# bench's generated results (they record the labels of the run that made them).
SKIP_DIRS = {
    ".git",
    ".venv",
    "venv",
    "__pycache__",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".hypothesis",
    "build",
    "dist",
    "node_modules",
}
SKIP_PATHS = {ROOT / "bench" / "results", ROOT / "bench" / "out"}
SKIP_SUFFIXES = {".db", ".db-wal", ".db-shm", ".png", ".whl", ".gz", ".pyc"}

# A rule citation: S7, S13-S16, S13–S20 (``test_S27_...`` counts: a letter or a
# digit right before the S or right after the number makes it something else).
CITE = re.compile(r"(?<![A-Za-z0-9])S(\d{1,2})(?:\s?[-–]\s?S?(\d{1,2}))?(?![A-Za-z0-9])")
RULE_HEADING = re.compile(r"^### S(\d+)\. \S.*$", re.M)
HEADING = re.compile(r"^(#{1,4}) (.+?)\s*$", re.M)
SECTION_CITE = re.compile(r"spec §")
SPEC_LINK = re.compile(r"(?:spec\.md)?#([a-z0-9-]+)\)")

# References to documents outside the repository. Written so that this file does
# not match itself (a character class around one letter).
FORBIDDEN = {
    "the design notes": re.compile(r"\bDESIG[N]\b"),
    "the planning folder": re.compile(
        r"\.\./share[d]\b|\bshare[d]/(seeds|DESIG[N])|/wor[k]/(shared|plan)\b"
    ),
    "a source document by number": re.compile(r"(?i)\bseeds?\s*[`'\"]*0\d\d\b"),
    "a source document's file name": re.compile(r"\b00[0-9]_[0-9a-f]{16}\b"),
    "the source documents by nickname": re.compile(
        r"(?i)\bthe seed's\b|\bthe seeds'|\bseeds (protocol|layout|semantics|readme)\b"
    ),
}


def _skipped(path: Path) -> bool:
    if any(part in SKIP_DIRS or part.endswith(".egg-info") for part in path.parts):
        return True
    if path.name == ".git" or path.suffix in SKIP_SUFFIXES:
        return True
    return any(path == p or p in path.parents for p in SKIP_PATHS)


def _text(path: Path) -> str | None:
    data = path.read_bytes()
    if b"\0" in data:
        return None  # binary
    return data.decode("utf-8", errors="replace")


def repository_files() -> Iterator[Path]:
    """Every file of the working tree that a person wrote (text, not generated)."""
    for path in sorted(ROOT.rglob("*")):
        rel = path.relative_to(ROOT)
        if path.is_file() and not _skipped(rel) and not _skipped(path):
            yield path


def citing_files() -> Iterator[Path]:
    for name in CITING_DIRS:
        for path in sorted((ROOT / name).rglob("*")):
            wanted = path.is_file() and path.suffix in CITING_SUFFIXES
            if wanted and not _skipped(path) and path not in (THIS, SPEC):
                yield path
    for name in CITING_FILES:
        yield ROOT / name


def cited_numbers(text: str) -> set[int]:
    """Every rule number a text cites; a range cites each number in it."""
    out: set[int] = set()
    for m in CITE.finditer(text):
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) else first
        out.update(range(first, max(first, last) + 1))
    return out


def defined_rules() -> list[int]:
    return [int(n) for n in RULE_HEADING.findall(SPEC.read_text())]


def spec_headings() -> list[str]:
    """Heading titles of docs/spec.md, '#' marks stripped."""
    return [m.group(2) for m in HEADING.finditer(SPEC.read_text())]


def slug(title: str) -> str:
    """The anchor a Markdown renderer (GitHub's rules) gives a heading."""
    text = re.sub(r"[^\w\- ]", "", title.strip().lower())
    return text.replace(" ", "-")


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


# --- the spec itself -----------------------------------------------------------------
def test_spec_defines_each_rule_once_in_order_with_no_gap() -> None:
    rules = defined_rules()
    assert rules, "docs/spec.md defines no rule heading '### S<n>. title'"
    assert rules == list(range(1, len(rules) + 1)), f"rule headings out of order or gapped: {rules}"
    assert len(rules) >= 38, f"docs/spec.md defines S1-S{len(rules)}; the code needs S1-S38"


def test_spec_has_the_sections_the_code_cites_by_name() -> None:
    titles = spec_headings()
    for name in (
        "Vocabulary",
        "Errors",
        "Module layout",
        "Storage",
        "Served mode",
        "Export layout",
        "Mailbox layout",
        "Targets",
        "Reliability",
        "Habits",
    ):
        assert name in titles, f"docs/spec.md lost its section {name!r}"


def test_links_into_the_spec_name_its_headings() -> None:
    anchors = {slug(t) for t in spec_headings()}
    problems = []
    for path in [SPEC, *citing_files()]:
        text = _text(path) or ""
        if path != SPEC and "spec.md#" not in text:
            continue
        pattern = SPEC_LINK if path == SPEC else re.compile(r"spec\.md#([a-z0-9-]+)")
        problems += [f"{_rel(path)}: #{a}" for a in pattern.findall(text) if a not in anchors]
    assert not problems, "links to headings docs/spec.md does not have:\n" + "\n".join(problems)


# --- citations -----------------------------------------------------------------------
def test_every_cited_rule_is_defined_in_the_spec() -> None:
    defined = set(defined_rules())
    problems = []
    for path in citing_files():
        text = _text(path) or ""
        for lineno, line in enumerate(text.splitlines(), 1):
            for n in sorted(cited_numbers(line) - defined):
                problems.append(f"{_rel(path)}:{lineno}: S{n} is not in docs/spec.md")
    assert not problems, "\n".join(problems)


def test_every_spec_section_citation_names_a_section() -> None:
    titles = sorted(spec_headings(), key=len, reverse=True)
    problems = []
    for path in citing_files():
        # A citation may wrap across lines of a docstring or a comment.
        text = re.sub(r"\s*\n\s*(#\s*)?", " ", _text(path) or "")
        for m in SECTION_CITE.finditer(text):
            rest = text[m.end() :]
            if not any(rest.startswith(t) for t in titles):
                problems.append(f"{_rel(path)}: 'spec §{rest[:30]}' names no section")
    assert not problems, "\n".join(problems)


def test_cite_pattern_reads_rules_ranges_and_test_names() -> None:
    assert cited_numbers("def test_S27_joining(): ...") == {27}
    assert cited_numbers("S13-S16, S20 and S17–S19") == {13, 14, 15, 16, 17, 18, 19, 20}
    # Not rules: ruff codes, ULIDs, words.
    assert cited_numbers("# noqa: S102  01M8N99FDD5HS2B8  AS3 S3x") == set()


# --- nothing outside the repository --------------------------------------------------
def test_no_file_refers_to_documents_outside_the_repository() -> None:
    problems = []
    scanned = 0
    for path in repository_files():
        text = _text(path)
        if text is None:
            continue
        scanned += 1
        for lineno, line in enumerate(text.splitlines(), 1):
            for what, pattern in FORBIDDEN.items():
                if pattern.search(line):
                    problems.append(f"{_rel(path)}:{lineno}: {what}: {line.strip()[:80]}")
    assert scanned > 50, f"only {scanned} files scanned: the walk is broken"
    assert not problems, (
        "cite docs/spec.md instead (a rule 'S<n>' or a section 'spec §Name'):\n"
        + "\n".join(problems)
    )


def test_forbidden_patterns_catch_what_they_are_for() -> None:
    samples = [
        "see " + "DESI" + "GN §4",
        "DESI" + "GN.md section 5",
        "../" + "sha" + "red/README.md",
        "From the " + "se" + "ed ``001``",
        "the " + "se" + "eds' file mailbox",
        "001_" + "f21813b8a33697cc.txt",
    ]
    for sample in samples:
        assert any(p.search(sample) for p in FORBIDDEN.values()), sample
    for fine in ("random seed 7", "seed: int", "_seed_tree(root)", "design of the store"):
        assert not any(p.search(fine) for p in FORBIDDEN.values()), fine


# --- every rule is tested ------------------------------------------------------------
def test_every_rule_is_cited_by_a_test_ratchet() -> None:
    cited: set[int] = set()
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if path != THIS:
            cited |= cited_numbers(path.read_text())
    defined = set(defined_rules())
    uncited = defined - cited
    print("rules no test cites yet:", " ".join(f"S{n}" for n in sorted(uncited)) or "none")
    new = uncited - UNCITED_ALLOWED
    assert not new, (
        "no test cites "
        + ", ".join(f"S{n}" for n in sorted(new))
        + ": name the rule in the test that checks it (test_S<n>_...)"
    )
    now_cited = UNCITED_ALLOWED & cited
    assert not now_cited, (
        "a test cites "
        + ", ".join(f"S{n}" for n in sorted(now_cited))
        + " now: remove it from UNCITED_ALLOWED in tests/project/test_spec.py (the list only shrinks)"
    )
    assert defined >= UNCITED_ALLOWED, "UNCITED_ALLOWED lists rules the spec does not define"
