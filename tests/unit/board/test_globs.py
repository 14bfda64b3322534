"""S37: the overlap rule of path reservations, property-tested.

The rule (broker.board.globs): two patterns conflict iff some valid path matches
both. ``overlap`` returns a witness path or None; these tests check it both
ways against ``oracle``, an independent matcher written here with ``re``
(a translation of the documented syntax), over random pattern pairs and random
path sets: every path matching both patterns means "conflict", and every
"conflict" comes with a path that matches both.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker import errors
from broker.board import globs
from broker.board import overlap as overlaps
from broker.board.globs import check_path, check_pattern, matches
from broker.board.overlap import overlap, shape_overlap


def _segment_regex(seg: str) -> str:
    if seg == "**":
        raise AssertionError("handled by the caller")
    out, i = [], 0
    while i < len(seg):
        c = seg[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = seg.index("]", i + 2 if seg[i + 1 : i + 2] in ("!", "^") else i + 1)
            body = seg[i + 1 : j]
            neg = body[:1] in ("!", "^")
            if neg:
                body = body[1:]
            body = body.replace("\\", "\\\\").replace("^", "\\^").replace("[", "\\[")
            out.append(f"(?!/)[{'^' if neg else ''}{body}]")
            i = j
        elif c == "\\":
            i += 1
            out.append(re.escape(seg[i]))
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def oracle(pattern: str) -> re.Pattern[str]:
    """The documented syntax as a regular expression (written independently)."""
    segs = pattern.split("/")
    parts = []
    for n, seg in enumerate(segs):
        last = n == len(segs) - 1
        if seg == "**":
            parts.append("[^/]+(?:/[^/]+)*" if last else "(?:[^/]+/)*")
        else:
            parts.append(_segment_regex(seg) + ("" if last else "/"))
    return re.compile("".join(parts), re.S)


def valid_path(path: str) -> bool:
    return all(seg not in ("", ".", "..") for seg in path.split("/"))


# Small alphabets so random patterns and paths collide often.
PATH_CHARS = "ab.x"
SEGMENTS = st.text(PATH_CHARS, min_size=1, max_size=3).filter(lambda s: s not in (".", ".."))
PATHS = st.lists(SEGMENTS, min_size=1, max_size=4).map("/".join)
ATOMS = st.sampled_from(["a", "b", ".", "x", "*", "?", "[ab]", "[!a]", "[.-b]", "\\*"])
PLAIN = st.lists(ATOMS, min_size=1, max_size=4).map("".join).filter(lambda s: s not in (".", ".."))
PATTERN_SEGMENTS = st.one_of(PLAIN, PLAIN, st.just("**"))
PATTERNS = st.lists(PATTERN_SEGMENTS, min_size=1, max_size=4).map("/".join)


def overlap_iff_some_path_matches_both(a: str, b: str, paths: list[str]) -> None:
    """Random pattern pairs and path sets: a path matching both => conflict;
    a conflict => its witness is a valid path matching both (by the oracle)."""
    witness = overlap(a, b)
    ra, rb = oracle(a), oracle(b)
    for p in paths:
        assert matches(a, p) == bool(ra.fullmatch(p)), (a, p)
        if ra.fullmatch(p) and rb.fullmatch(p):
            assert witness is not None, (a, b, p)
    if witness is not None:
        assert valid_path(witness), witness
        assert ra.fullmatch(witness) and rb.fullmatch(witness), (a, b, witness)
    assert (overlap(b, a) is None) == (witness is None)  # symmetric


# The default run draws 150 pairs, a quarter of the soak run's 600 (.ci/run: -m soak).
test_S37_overlap_iff_some_path_matches_both = settings(max_examples=150, deadline=None)(
    given(PATTERNS, PATTERNS, st.lists(PATHS, max_size=30))(overlap_iff_some_path_matches_both)
)
test_S37_overlap_iff_some_path_matches_both_soak = pytest.mark.soak(
    settings(max_examples=600, deadline=None)(
        given(PATTERNS, PATTERNS, st.lists(PATHS, max_size=30))(overlap_iff_some_path_matches_both)
    )
)


@settings(max_examples=300, deadline=None)
@given(PATTERNS)
def test_S37_a_pattern_overlaps_itself_and_the_witness_matches(a: str) -> None:
    """Every pattern matches some valid path, so it conflicts with itself."""
    w = overlap(a, a)
    assert w is not None and oracle(a).fullmatch(w) and valid_path(w)


@pytest.mark.parametrize(
    ("a", "b", "witness"),
    [
        ("src/**", "src/a.py", "src/a.py"),
        ("src/**", "**/test_*.py", "src/test_.py"),
        ("a/**/b", "a/b", "a/b"),
        ("x/**", "x/**/y", "x/y"),
        ("a?", "?b", "ab"),
        ("\\*", "[*]", "*"),
        ("src/**", "src", None),
        ("**/*.py", "docs/*.md", None),
        ("*.py", "*.md", None),
        ("[a-c]*", "[!a-c]*", None),
        ("src/*", "src/*/x", None),
        (".*", "?", None),  # '.' is not a path, and '.x' has two characters
        ("**", "[.]", None),
    ],
)
def test_S37_documented_examples(a: str, b: str, witness: str | None) -> None:
    """The examples of docs/spec.md S37, with their shortest witnesses."""
    assert overlap(a, b) == witness


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "/abs",
        "a/../b",
        "./a",
        "a//b",
        "a/",
        "a\x00b",
        "a\nb",
        "[abc",
        "a\\",
        "x" * 181,
        "\ud800",
        "*" * 17,  # more than 16 wildcards: the overlap search stays bounded
        "/".join(["**"] * 17),
    ],
)
def test_S37_bad_patterns_are_invalid_input(bad: str) -> None:
    """S33 at the edge: relative, no '..', no controls, bounded, well formed."""
    with pytest.raises(errors.InvalidInput):
        check_pattern(bad)


def test_S37_paths_take_wildcards_literally() -> None:
    assert check_path("src/[x]*.py") == "src/[x]*.py"
    assert matches("src/\\[x\\]\\*.py", "src/[x]*.py")
    with pytest.raises(errors.InvalidInput):
        check_path("../etc/passwd")


# --- S41: a pattern's cost is bounded, whatever it holds ----------------------------------
@settings(max_examples=300, deadline=None)
@given(PATTERNS, PATTERNS, st.lists(PATHS, max_size=30))
def test_S37_S41_the_witness_built_from_shapes_is_exact_too(
    a: str, b: str, paths: list[str]
) -> None:
    """Long patterns get their witness built from their shapes, not searched
    for: the same rule, checked both ways against the oracle on short ones."""
    witness = shape_overlap(a, b, shortest=False)
    ra, rb = oracle(a), oracle(b)
    for p in paths:
        if ra.fullmatch(p) and rb.fullmatch(p):
            assert witness is not None, (a, b, p)
    if witness is not None:
        assert valid_path(witness), witness
        assert ra.fullmatch(witness) and rb.fullmatch(witness), (a, b, witness)
    assert (overlap(a, b) is None) == (witness is None)


LONG_ATOMS = st.sampled_from(["a", "b", "ab", "aaaa", "*", "?", "[ab]"])
LONG_SEG = st.lists(LONG_ATOMS, min_size=1, max_size=12).map("".join)
LONG = (
    st.lists(st.one_of(LONG_SEG, LONG_SEG, st.just("**")), min_size=1, max_size=5)
    .map("/".join)
    .filter(lambda p: len(p) <= 180 and sum(p.count(c) for c in "*?[") <= 16)
)


@settings(max_examples=150, deadline=None)
@given(LONG, LONG, st.lists(st.text("ab", min_size=1, max_size=40), min_size=1, max_size=5))
def test_S37_S41_long_patterns_match_and_overlap_as_the_oracle_says(
    a: str, b: str, segs: list[str]
) -> None:
    """Long literal runs between wildcards (what made the search slow): the
    matcher agrees with the oracle, and a path matching both means overlap."""
    path = "/".join(segs)
    ra, rb = oracle(a), oracle(b)
    assert matches(a, path) == bool(ra.fullmatch(path)), (a, path)
    witness = overlap(a, b)
    if ra.fullmatch(path) and rb.fullmatch(path):
        assert witness is not None, (a, b, path)
    if witness is not None:
        assert ra.fullmatch(witness) and rb.fullmatch(witness), (a, b, witness)


HOSTILE = [
    ("*" + "a" * 170, "*" + "a" * 169 + "b", False),
    ("*" + "ab" * 85, "*" + "ab" * 84 + "ba", False),
    ("*" + "a" * 178 + "*", "*" + "a" * 177 + "b*", True),
    ("a" * 179 + "b", "*" + "a" * 89 + "c*", False),
    ("?" + "a" * 178 + "b", "*" + "a" * 89 + "?" + "a" * 80 + "*", True),
    ("**/" + "a/" * 87 + "b", "**/" + "a/" * 87 + "c", False),
    ("a/" * 89 + "b", "**/" + "a/" * 43 + "c/**", False),
    ("**/" + "a/" * 87 + "**", "a/**/" + "a/" * 86 + "**", True),
    ("?" * 16 + "a" * 150, "*" + "a" * 170, False),
]


@pytest.mark.parametrize(("a", "b", "meet"), HOSTILE)
def test_S41_a_pair_of_hostile_patterns_is_decided_in_few_steps(a: str, b: str, meet: bool) -> None:
    """A pattern's cost is bounded (S41): two patterns of 180 characters with
    long runs after a star are decided exactly with a few hundred character-set
    steps, not the |a| x |b| (tens of thousands) of a product search, which
    held the write lock for seconds against thousands of reservations. The
    steps are counted (calls of the set intersection), not timed."""
    check_pattern(a), check_pattern(b)
    overlap.cache_clear()
    overlaps._segment_overlap.cache_clear()
    globs.meet.cache_clear()
    witness = overlap(a, b)
    info = globs.meet.cache_info()
    assert info.hits + info.misses < 3000, info
    assert (witness is not None) == meet
    if witness is not None:
        assert oracle(a).fullmatch(witness) and oracle(b).fullmatch(witness)
    assert (overlap(b, a) is not None) == meet


@pytest.mark.parametrize(
    ("pattern", "path", "hit"),
    [
        ("*" + "a" * 170, "a" * 4000 + "b", False),
        ("*a" * 16, "a" * 4000, True),
        ("**/a/" * 8 + "x", "a/" * 2000 + "b", False),
        ("src/**", "src/" + "a/" * 2000 + "b", True),
        ("*" + "a?" * 7 + "b*", "a" * 4000, False),
    ],
)
def test_S41_matching_a_long_path_against_a_hostile_pattern_agrees_with_the_oracle(
    pattern: str, path: str, hit: bool
) -> None:
    """Pieces are placed leftmost (no backtracking): the answer is the oracle's."""
    assert matches(pattern, check_path(path)) is hit
