"""Path patterns of reservations (S37): syntax, matching, and the overlap rule.

A pattern is a relative path whose segments (split on ``/``) may hold

- ``*``: any run of characters inside one segment (never ``/``), empty included;
- ``?``: one character other than ``/``;
- ``[abc]``, ``[a-z]``, ``[!a-z]`` / ``[^a-z]``: one character of (or not of)
  the class, never ``/``;
- ``\\c``: the character ``c`` itself (``\\*`` is a star in a file name);
- a whole segment ``**``: any number of whole segments. Between segments
  (``a/**/b``) and first (``**/b``) that is zero or more, so ``a/**/b``
  matches ``a/b``; last (``src/**``) it is one or more, so ``src/**`` covers
  everything inside ``src`` but not a file named ``src``. ``**`` alone
  matches every path. ``**`` inside a longer segment is a plain ``*``.

A path is a relative path of non-empty segments, none of them ``.`` or ``..``.
Its characters are whatever a file name can hold but ``/``: control
characters included (git stages ``a\\nb.py`` as readily as ``ab.py``), so
``src/**`` covers ``src/a\\nb.py`` and the guard cannot be slipped past with
a name. A path to check is only matched, never stored; a pattern is a label
that is stored and shown, so it holds no control character (S33).

Two patterns *overlap* (two reservations conflict) iff some path matches both.
That is decided exactly, not guessed from prefixes: each pattern is compiled to
a small automaton over characters whose transitions carry character sets
(intervals of code points), and ``overlap`` searches the product of the two
automata and a third one that accepts exactly the valid paths, breadth first.
The language of the product is empty iff no common path exists; when it is
not, the search returns the shortest witness path, which matches both (the
property test checks both directions against an independent matcher).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache

from broker import errors
from broker.model import bounds

PATTERN_MAX = 180  # characters; a journal key is "path " + the pattern (200 at most)
# Wildcards (* ? [..] **) per pattern: bounds the overlap search, which runs
# under the write lock, to milliseconds whatever an agent sends.
WILDCARDS_MAX = 16
PATH_MAX = 4096  # Linux's PATH_MAX: any path git can stage in a repository fits
TOP = 0x10FFFF
# Character sets are sorted disjoint closed intervals of code points.
CharSet = tuple[tuple[int, int], ...]
_SLASH = ord("/")
_DOT = ord(".")
# Every character a path segment may hold: any a file name can, but '/' (and
# NUL, which no file name holds), never a lone surrogate (it is not text).
_SEGMENT: CharSet = ((0x01, 0x2E), (0x30, 0xD7FF), (0xE000, TOP))
_SLASH_SET: CharSet = ((_SLASH, _SLASH),)
_DOT_SET: CharSet = ((_DOT, _DOT),)
_PREFERRED = "abcdefghijklmnopqrstuvwxyz0123456789_-"  # readable witnesses first


@lru_cache(maxsize=65536)
def _meet(a: CharSet, b: CharSet) -> CharSet:
    out: list[tuple[int, int]] = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo <= hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tuple(out)


def _minus(a: CharSet, b: CharSet) -> CharSet:
    """``a`` without ``b``: ``a`` met with the complement of ``b``."""
    comp: list[tuple[int, int]] = []
    start = 0
    for lo, hi in b:
        if lo > start:
            comp.append((start, lo - 1))
        start = hi + 1
    if start <= TOP:
        comp.append((start, TOP))
    return _meet(a, tuple(comp))


def _union(ranges: Iterable[tuple[int, int]]) -> CharSet:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return tuple(out)


@lru_cache(maxsize=4096)
def _pick(s: CharSet) -> str:
    for c in _PREFERRED:
        if any(lo <= ord(c) <= hi for lo, hi in s):
            return c
    return chr(s[0][0])


@dataclass
class _Nfa:
    """States are ints; ``edges[q]`` lists (charset, target); ``eps[q]`` targets."""

    edges: list[list[tuple[CharSet, int]]] = field(default_factory=list)
    eps: list[list[int]] = field(default_factory=list)
    accept: frozenset[int] = frozenset()

    def new(self) -> int:
        self.edges.append([])
        self.eps.append([])
        return len(self.edges) - 1

    def closure(self, states: Iterable[int]) -> frozenset[int]:
        seen = set(states)
        todo = list(seen)
        while todo:
            for nxt in self.eps[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return frozenset(seen)


def _bad(pattern: str, why: str, what: str = "pattern") -> errors.InvalidInput:
    return errors.InvalidInput(f"bad {what} {pattern!r}: {why}", field=what)


def _check_text(text: object, what: str, top: int, *, controls: bool = False) -> str:
    """S33 at the edge: relative, bounded, no empty/'.'/'..' segment, no lone
    surrogate or NUL; no control character either unless ``controls``."""
    if not isinstance(text, str) or not text:
        raise errors.InvalidInput(f"a {what} must be non-empty text", field=what)
    if len(text) > top:
        raise _bad(text[:40] + "...", f"{len(text)} characters; at most {top}", what)
    if controls:
        bad = next((c for c in text if c == "\0" or 0xD800 <= ord(c) <= 0xDFFF), None)
    else:
        bad = bounds.control_char(text)  # C0, DEL, C1 (0x9b is a CSI), lone surrogates
    if bad is not None:
        raise _bad(text, f"it holds the control or surrogate character {bad!r}", what)
    if text.startswith("/"):
        raise _bad(text, "it must be relative to the repository (no leading '/')", what)
    for seg in text.split("/"):
        if seg in ("", ".", ".."):
            raise _bad(text, "empty, '.' and '..' segments are not allowed", what)
    return text


def check_pattern(pattern: object) -> str:
    """A reservation pattern, checked at the edge; returns it unchanged."""
    checked = _check_text(pattern, "pattern", PATTERN_MAX)
    compile_pattern(checked)  # syntax: classes closed, no trailing '\'
    return checked


def check_path(path: object) -> str:
    """A path to check against reservations (wildcards in it are plain
    characters). Control characters are allowed: a file name can hold them,
    and a path is only matched, never stored (shown escaped, S31)."""
    return _check_text(path, "path", PATH_MAX, controls=True)


def _class(seg: str, i: int, pattern: str) -> tuple[CharSet, int]:
    """The class starting at ``seg[i] == '['``: its set and the index after ``]``."""
    j = i + 1
    negate = j < len(seg) and seg[j] in "!^"
    if negate:
        j += 1
    ranges: list[tuple[int, int]] = []
    first = True
    while True:
        if j >= len(seg):
            raise _bad(pattern, "a character class '[' is not closed")
        c = seg[j]
        if c == "]" and not first:
            break
        if c == "\\":
            j += 1
            if j >= len(seg):
                raise _bad(pattern, "it ends with '\\'")
            c = seg[j]
        lo = hi = ord(c)
        if j + 2 < len(seg) and seg[j + 1] == "-" and seg[j + 2] != "]":
            hi = ord(seg[j + 2])
            j += 2
            if hi < lo:
                raise _bad(pattern, f"the class range {chr(lo)}-{chr(hi)} is reversed")
        ranges.append((lo, hi))
        first = False
        j += 1
    chosen = _union(ranges)
    return (_minus(_SEGMENT, chosen) if negate else _meet(_SEGMENT, chosen)), j + 1


@lru_cache(maxsize=4096)
def compile_pattern(pattern: str) -> _Nfa:
    """The automaton of a (syntactically checked) pattern."""
    nfa = _Nfa()
    cur = nfa.new()
    segs = pattern.split("/")
    wild = 0
    accept: int | None = None
    for n, seg in enumerate(segs):
        last = n == len(segs) - 1
        if seg == "**":
            wild += 1
            if wild > WILDCARDS_MAX:
                raise _bad(pattern, f"more than {WILDCARDS_MAX} wildcards")
            inside = nfa.new()
            nfa.edges[cur].append((_SEGMENT, inside))
            nfa.edges[inside].append((_SEGMENT, inside))
            nfa.edges[inside].append((_SLASH_SET, cur))
            if last:
                accept = inside
            else:
                nxt = nfa.new()
                nfa.eps[cur].append(nxt)
                cur = nxt
            continue
        i = 0
        while i < len(seg):
            c = seg[i]
            if c in "*?[":
                wild += 1
                if wild > WILDCARDS_MAX:
                    raise _bad(pattern, f"more than {WILDCARDS_MAX} wildcards")
            if c == "*":
                nfa.edges[cur].append((_SEGMENT, cur))
                i += 1
                continue
            if c == "?":
                label, i = _SEGMENT, i + 1
            elif c == "[":
                label, i = _class(seg, i, pattern)
            else:
                if c == "\\":
                    i += 1
                    if i >= len(seg):
                        raise _bad(pattern, "it ends with '\\'")
                    c = seg[i]
                label, i = ((ord(c), ord(c)),), i + 1
            nxt = nfa.new()
            nfa.edges[cur].append((label, nxt))
            cur = nxt
        if last:
            accept = cur
        else:
            nxt = nfa.new()
            nfa.edges[cur].append((_SLASH_SET, nxt))
            cur = nxt
    assert accept is not None
    nfa.accept = frozenset({accept})
    return nfa


def _valid_paths() -> _Nfa:
    """Accepts exactly the valid paths: non-empty segments, none '.' or '..'."""
    nfa = _Nfa()
    start, dot, dots, seg = nfa.new(), nfa.new(), nfa.new(), nfa.new()
    other = _minus(_SEGMENT, _DOT_SET)
    nfa.edges[start] += [(_DOT_SET, dot), (other, seg)]
    nfa.edges[dot] += [(_DOT_SET, dots), (other, seg)]
    nfa.edges[dots] += [(_SEGMENT, seg)]
    nfa.edges[seg] += [(_SEGMENT, seg), (_SLASH_SET, start)]
    nfa.accept = frozenset({seg})
    return nfa


_PATHS = _valid_paths()


def matches(pattern: str, path: str) -> bool:
    """Whether ``path`` matches ``pattern`` (both checked by the caller)."""
    nfa = compile_pattern(pattern)
    states = nfa.closure([0])
    for ch in path:
        o = ord(ch)
        states = nfa.closure(
            t for q in states for s, t in nfa.edges[q] if any(lo <= o <= hi for lo, hi in s)
        )
        if not states:
            return False
    return bool(states & nfa.accept)


@lru_cache(maxsize=65536)
def overlap(a: str, b: str) -> str | None:
    """A shortest path matching both patterns, or None when no path does: the
    exact overlap rule of S37.

    A breadth-first search over triples of states (pattern a, pattern b, the
    valid-path automaton): a character step needs one edge from each whose
    character sets intersect; an epsilon step (``**`` skipping segments) moves
    one automaton alone and costs no character (0-1 BFS, so the first
    accepting triple found is reached by a shortest path). At most
    |A| x |B| x 4 triples, so the time is polynomial in the patterns' lengths."""
    autos = (compile_pattern(a), compile_pattern(b), _PATHS)
    Triple = tuple[int, int, int]
    start: Triple = (0, 0, 0)
    back: dict[Triple, tuple[Triple, str] | None] = {start: None}
    todo: deque[Triple] = deque([start])
    while todo:
        state = todo.popleft()
        if all(q in n.accept for q, n in zip(state, autos, strict=True)):
            out: list[str] = []
            step = back[state]
            while step is not None:
                state, ch = step
                out.append(ch)
                step = back[state]
            return "".join(reversed(out))
        for i, nfa in enumerate(autos):  # epsilon steps: no character, explored first
            for nxt_q in nfa.eps[state[i]]:
                moved = list(state)
                moved[i] = nxt_q
                nxt = (moved[0], moved[1], moved[2])
                if nxt not in back:
                    back[nxt] = (state, "")
                    todo.appendleft(nxt)
        qa, qb, qv = state
        for sa, ta in autos[0].edges[qa]:
            for sb, tb in autos[1].edges[qb]:
                ab = _meet(sa, sb)
                if not ab:
                    continue
                for sv, tv in autos[2].edges[qv]:
                    chars = _meet(ab, sv)
                    nxt = (ta, tb, tv)
                    if chars and nxt not in back:
                        back[nxt] = (state, _pick(chars))
                        todo.append(nxt)
    return None
