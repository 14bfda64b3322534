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
That is decided exactly, and in time close to linear in the patterns' lengths
whatever they hold (S41: it runs for every live reservation a request meets).
A pattern is read into its *shape*: segments of tokens (a character set for
each ``?``, class or plain character, and ``*``), with ``**`` as "zero or more
whole segments" (a last ``**`` is a ``*`` segment followed by one). The same
argument decides both levels, characters inside a segment (around ``*``) and
segments inside a path (around ``**``):

- neither side has the wildcard: same length, and each position admits a
  common character (segment);
- one side has it: the other has a fixed length, and the wildcard side's
  pieces are placed on it leftmost first, each position independently (the
  earliest place never hurts the pieces after it);
- both have it: some string matches both iff their heads agree and their
  tails agree, since the text between can hold the pieces of both, one after
  the other.

Matching a path is the same placement against a concrete path: pieces are
regular expressions of fixed width, searched leftmost (no backtracking, so
no pattern makes a match slow). ``overlap`` returns a witness path that
matches both; it is a shortest one when the segments facing each other are
short (a breadth-first search of their automata decides those, ``_search``),
and otherwise a path built from the parts above. The property tests check
both functions against an independent matcher.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Generic, TypeVar

from broker import errors
from broker.model import bounds

PATTERN_MAX = 180  # characters; a journal key is "path " + the pattern (200 at most)
# Wildcards (* ? [..] **) per pattern: a pattern is a label a person reads,
# and the shape's work grows with them.
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
# Segments this short (tokens of one times the other's) get the breadth-first
# search's shortest witness; longer ones the shape's.
_SEARCH_MAX = 64

# A token is a character set, or STAR ('*'); a segment a tuple of tokens; an
# item of a shape a segment, or DSTAR ('**': zero or more whole segments).
STAR = None
DSTAR = None
Token = CharSet | None
Seg = tuple[Token, ...]
Item = Seg | None
E = TypeVar("E")


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
    shape(checked)  # syntax: classes closed, no trailing '\', wildcards bounded
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


# --- the shape of a pattern ---------------------------------------------------------------
@dataclass(frozen=True)
class Shape:
    """A pattern read into segments of tokens (see the module's docstring)."""

    items: tuple[Item, ...]
    # False when no valid path matches it (an empty class such as ``[/]``, or
    # a segment that can only be '.' or '..').
    satisfiable: bool
    prefix: str  # every matching path starts with this text
    suffix: str  # ... and ends with this


def _tokens(seg: str, pattern: str, wild: int) -> tuple[Seg, int]:
    """One segment's tokens, and the wildcard count so far."""
    out: list[Token] = []
    i = 0
    while i < len(seg):
        c = seg[i]
        if c in "*?[":
            wild += 1
            if wild > WILDCARDS_MAX:
                raise _bad(pattern, f"more than {WILDCARDS_MAX} wildcards")
        if c == "*":
            if not out or out[-1] is not STAR:  # '**' inside a segment is '*'
                out.append(STAR)
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
        out.append(label)
    return tuple(out), wild


@lru_cache(maxsize=4096)
def shape(pattern: str) -> Shape:
    """The shape of a pattern whose text is checked (``check_pattern``):
    refuses a bad class, a trailing ``\\`` and too many wildcards."""
    segs = pattern.split("/")
    items: list[Item] = []
    wild = 0
    for n, seg in enumerate(segs):
        if seg == "**":
            wild += 1
            if wild > WILDCARDS_MAX:
                raise _bad(pattern, f"more than {WILDCARDS_MAX} wildcards")
            if n == len(segs) - 1:
                items.append((STAR,))  # last, it is one segment or more
            if not items or items[-1] is not DSTAR:
                items.append(DSTAR)
            continue
        tokens, wild = _tokens(seg, pattern, wild)
        items.append(tokens)
    ok = all(item is DSTAR or _sat(item) is not None for item in items)
    return Shape(tuple(items), ok, _literal(items), _literal(items[::-1], reverse=True))


def _literal(items: Sequence[Item], *, reverse: bool = False) -> str:
    """The text every match starts with (or, ``reverse``, ends with)."""
    out: list[str] = []
    for n, item in enumerate(items):
        if item is DSTAR:
            break
        for tok in item[::-1] if reverse else item:
            if tok is STAR or len(tok) != 1 or tok[0][0] != tok[0][1]:
                return "".join(out[::-1] if reverse else out)
            out.append(chr(tok[0][0]))
        if any(later is not DSTAR for later in items[n + 1 :]):
            out.append("/")  # a segment follows, whatever a '**' between takes
    return "".join(out[::-1] if reverse else out)


def _pieces(seg: Seg) -> list[tuple[CharSet, ...]]:
    """A segment split at its stars: fixed-width pieces (one more than stars)."""
    out: list[list[CharSet]] = [[]]
    for tok in seg:
        if tok is STAR:
            out.append([])
        else:
            out[-1].append(tok)
    return [tuple(p) for p in out]


def _groups(items: Sequence[Item]) -> list[tuple[Seg, ...]]:
    """A shape split at its ``**``: runs of segments (one more than ``**``)."""
    out: list[list[Seg]] = [[]]
    for item in items:
        if item is DSTAR:
            out.append([])
        else:
            out[-1].append(item)
    return [tuple(g) for g in out]


# --- matching ---------------------------------------------------------------------------
def _char_class(s: CharSet) -> str:
    if len(s) == 1 and s[0][0] == s[0][1]:
        return re.escape(chr(s[0][0]))
    return "[" + "".join(f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in s) + "]"


@lru_cache(maxsize=8192)
def _piece_regex(piece: tuple[CharSet, ...]) -> re.Pattern[str]:
    return re.compile("".join(_char_class(s) for s in piece), re.S)


@lru_cache(maxsize=8192)
def _segment_matcher(seg: Seg) -> tuple[int, list[re.Pattern[str]]]:
    """(the segment's least length, its pieces as fixed-width expressions)."""
    pieces = _pieces(seg)
    return sum(len(p) for p in pieces), [_piece_regex(p) for p in pieces]


def _segment_matches(seg: Seg, text: str) -> bool:
    least, rx = _segment_matcher(seg)
    if len(rx) == 1:
        return rx[0].fullmatch(text) is not None
    if len(text) < least:
        return False
    first, last = rx[0], rx[-1]
    if first.match(text) is None:
        return False
    head = first.pattern and len(_pieces(seg)[0])
    tail = len(text) - len(_pieces(seg)[-1])
    if last.fullmatch(text, tail) is None:
        return False
    pos = head or 0
    for piece in rx[1:-1]:  # leftmost first: the earliest place never hurts the rest
        found = piece.search(text, pos, tail)
        if found is None:
            return False
        pos = found.end()
    return True


def _run_matches(run: tuple[Seg, ...], segs: Sequence[str], at: int) -> bool:
    return all(_segment_matches(s, segs[at + k]) for k, s in enumerate(run))


def matches(pattern: str, path: str) -> bool:
    """Whether ``path`` matches ``pattern`` (both checked by the caller)."""
    sh = shape(pattern)
    if not sh.satisfiable or not path.startswith(sh.prefix) or not path.endswith(sh.suffix):
        return False
    segs = path.split("/")
    groups = _groups(sh.items)
    if len(groups) == 1:
        return len(segs) == len(groups[0]) and _run_matches(groups[0], segs, 0)
    first, last = groups[0], groups[-1]
    end = len(segs) - len(last)
    if end < len(first) or not _run_matches(first, segs, 0):
        return False
    if not _run_matches(last, segs, end):
        return False
    pos = len(first)
    for run in groups[1:-1]:  # leftmost first, as inside a segment
        while pos + len(run) <= end and not _run_matches(run, segs, pos):
            pos += 1
        if pos + len(run) > end:
            return False
        pos += len(run)
    return True


# --- overlap ----------------------------------------------------------------------------
def _valid(word: str) -> bool:
    return word not in ("", ".", "..")


def _word(sets: Sequence[CharSet]) -> str | None:
    """A valid segment choosing one character of each set, or None if every
    choice is '.' or '..' (the positions are independent)."""
    chars = [_pick(s) for s in sets]
    if _valid("".join(chars)):
        return "".join(chars)
    for i, s in enumerate(sets):
        other = _minus(s, _DOT_SET)
        if other:
            chars[i] = _pick(other)
            return "".join(chars)
    return None


def _meet_all(a: Sequence[CharSet], b: Sequence[CharSet]) -> list[CharSet] | None:
    out = [_meet(x, y) for x, y in zip(a, b, strict=True)]
    return None if any(not m for m in out) else out


class _Slots(Generic[E]):
    """Where pieces of one side may lie on the other side's fixed list, as bit
    masks: bit q of ``mask(x)`` is set when position q admits ``x``. Literal
    elements are grouped by value, so building the masks costs the positions
    times the wildcards, and finding a piece's leftmost place costs a few
    integer operations per element of the piece (no quadratic search)."""

    def __init__(
        self,
        fixed: Sequence[E],
        literal: Callable[[E], object],
        compat: Callable[[E, E], bool],
    ) -> None:
        self.fixed, self.literal, self.compat = fixed, literal, compat
        self.by_value: dict[object, int] = {}
        self.other: list[tuple[int, E]] = []  # positions holding a wildcard
        for q, x in enumerate(fixed):
            key = literal(x)
            if key is None:
                self.other.append((q, x))
            else:
                self.by_value[key] = self.by_value.get(key, 0) | 1 << q
        self.masks: dict[E, int] = {}

    def mask(self, x: E) -> int:
        got = self.masks.get(x)
        if got is None:
            key = self.literal(x)
            if key is not None:
                got = self.by_value.get(key, 0)
                spots: Iterable[tuple[int, E]] = self.other
            else:
                got = 0
                spots = enumerate(self.fixed)
            for q, y in spots:
                if self.compat(y, x):
                    got |= 1 << q
            self.masks[x] = got
        return got

    def first(self, piece: Sequence[E], pos: int, end: int) -> int | None:
        """The leftmost q, ``pos <= q <= end - len(piece)``, where ``piece`` fits."""
        last = end - len(piece)
        if last < pos:
            return None
        fit = ((1 << (last + 1)) - 1) >> pos << pos
        for i, x in enumerate(piece):
            fit &= self.mask(x) >> i
            if not fit:
                return None
        return (fit & -fit).bit_length() - 1


def _char(s: CharSet) -> int | None:
    return s[0][0] if len(s) == 1 and s[0][0] == s[0][1] else None


def _chars_meet(a: CharSet, b: CharSet) -> bool:
    return bool(_meet(a, b))


def _place(fixed: Sequence[CharSet], pieces: list[tuple[CharSet, ...]]) -> list[CharSet] | None:
    """The starred side's pieces on the fixed side: its sets narrowed where a
    piece lies, or None when they do not fit. The first and last pieces are
    anchored; the others go leftmost first."""
    first, last = pieces[0], pieces[-1]
    n = len(fixed)
    if len(first) + len(last) > n:
        return None
    sets = list(fixed)
    head = _meet_all(fixed[: len(first)], first)
    tail = _meet_all(fixed[n - len(last) :], last)
    if head is None or tail is None:
        return None
    sets[: len(first)] = head
    sets[n - len(last) :] = tail
    pos, end = len(first), n - len(last)
    slots = _Slots(fixed, _char, _chars_meet)
    for piece in pieces[1:-1]:
        at = slots.first(piece, pos, end)
        if at is None:
            return None
        pos = at + len(piece)
        sets[at:pos] = _meet_all(fixed[at:pos], piece) or []
    return sets


def _ends(a: Sequence[CharSet], b: Sequence[CharSet], *, tail: bool) -> list[CharSet] | None:
    """Two heads (or tails) laid over each other: the common part met, the
    longer one's rest as it is; None when a position admits no character."""
    if tail:
        got = _ends(a[::-1], b[::-1], tail=False)
        return None if got is None else got[::-1]
    short, long_ = (a, b) if len(a) <= len(b) else (b, a)
    common = _meet_all(short, long_[: len(short)])
    return None if common is None else common + list(long_[len(short) :])


@lru_cache(maxsize=65536)
def _segment_overlap(a: Seg, b: Seg, shortest: bool = True) -> str | None:
    """A valid segment matching both segments, or None if there is none; the
    shortest one when both are short (and ``shortest``)."""
    pa, pb = _pieces(a), _pieces(b)
    if len(pa) > 1 and len(pb) > 1 and (not shortest or len(a) * len(b) > _SEARCH_MAX):
        head = _ends(pa[0], pb[0], tail=False)
        tail = _ends(pa[-1], pb[-1], tail=True)
        if head is None or tail is None:
            return None
        middle = [c for p in pa[1:-1] + pb[1:-1] for c in p]
        start = "".join(_pick(s) for s in head + middle)
        end = "".join(_pick(s) for s in tail)
        # Both stars take any character: one more keeps a segment from being '.'.
        return start + end if _valid(start + end) else start + "a" + end
    if len(pa) == 1 and len(pb) == 1:
        sets = _meet_all(pa[0], pb[0]) if len(pa[0]) == len(pb[0]) else None
        return None if sets is None else _word(sets)
    if len(pa) > 1 and len(pb) > 1:
        return _search(_segment_nfa(a), _segment_nfa(b))
    fixed, starred = (pa[0], pb) if len(pa) == 1 else (pb[0], pa)
    placed = _place(fixed, starred)
    if placed is None:
        return None
    word = _word(placed)
    if word is None:  # '.' or '..' as placed: another placement may do (1 or 2 characters)
        return _search(_segment_nfa(a), _segment_nfa(b))
    return word


_ANY: Seg = (STAR,)


def _sat(seg: Seg, shortest: bool = True) -> str | None:
    """A valid segment that ``seg`` matches (a shortest one), or None."""
    return _segment_overlap(seg, _ANY, shortest)


def _run_overlap(a: Sequence[Seg], b: Sequence[Seg], shortest: bool) -> list[str] | None:
    """Runs of equal length laid over each other: a segment for each, or None."""
    if len(a) != len(b):
        return None
    return _every([_segment_overlap(x, y, shortest) for x, y in zip(a, b, strict=True)])


def _every(words: list[str | None]) -> list[str] | None:
    """The words, or None if one is missing (no segment matches there)."""
    return None if None in words else words  # type: ignore[return-value]


def _run_ends(
    a: Sequence[Seg], b: Sequence[Seg], shortest: bool, *, tail: bool
) -> list[str] | None:
    """``_ends`` for runs of segments: the common part overlapped, the longer
    run's rest each by a segment of its own."""
    if tail:
        got = _run_ends(a[::-1], b[::-1], shortest, tail=False)
        return None if got is None else got[::-1]
    short, long_ = (a, b) if len(a) <= len(b) else (b, a)
    common = _run_overlap(short, long_[: len(short)], shortest)
    rest = _every([_sat(s, shortest) for s in long_[len(short) :]])
    return None if common is None or rest is None else common + rest


def _fixed_runs(
    fixed: Sequence[Seg], groups: list[tuple[Seg, ...]], shortest: bool
) -> list[str] | None:
    """``_place`` for segments: the ``**`` side's runs on a fixed list of segments."""
    first, last = groups[0], groups[-1]
    n = len(fixed)
    if len(first) + len(last) > n:
        return None
    chosen = _every([_sat(s, shortest) for s in fixed])
    head = _run_overlap(fixed[: len(first)], first, shortest)
    tail = _run_overlap(fixed[n - len(last) :], last, shortest)
    if head is None or tail is None or chosen is None:
        return None
    chosen[: len(first)] = head
    chosen[n - len(last) :] = tail
    pos, end = len(first), n - len(last)
    slots = _Slots(fixed, _text, lambda y, x: _segment_overlap(y, x, shortest) is not None)
    for run in groups[1:-1]:
        at = slots.first(run, pos, end)
        if at is None:
            return None
        pos = at + len(run)
        chosen[at:pos] = _run_overlap(fixed[at:pos], run, shortest) or []
    return chosen


def _text(seg: Seg) -> str | None:
    """A segment's text when it has no wildcard."""
    chars = [None if tok is STAR else _char(tok) for tok in seg]
    return None if None in chars else "".join(map(chr, chars))  # type: ignore[arg-type]


@lru_cache(maxsize=65536)
def overlap(a: str, b: str) -> str | None:
    """A path matching both patterns, or None when no path does: the exact
    overlap rule of S37 (both patterns checked by the caller). The witness is
    a shortest one when the patterns are short (``_SEARCH_MAX``)."""
    return shape_overlap(a, b, shortest=True)


def shape_overlap(a: str, b: str, *, shortest: bool) -> str | None:
    """``overlap``; ``shortest=False`` builds every witness from the shapes,
    as long patterns get it (the property tests check both ways)."""
    sa, sb = shape(a), shape(b)
    if not (sa.satisfiable and sb.satisfiable):
        return None
    if not (sa.prefix.startswith(sb.prefix) or sb.prefix.startswith(sa.prefix)):
        return None
    if not (sa.suffix.endswith(sb.suffix) or sb.suffix.endswith(sa.suffix)):
        return None
    if shortest and len(sa.items) * len(sb.items) <= _SEARCH_MAX:
        segs = _shortest_segments(sa.items, sb.items)
        return None if segs is None else "/".join(segs)
    ga, gb = _groups(sa.items), _groups(sb.items)
    if len(ga) == 1 and len(gb) == 1:
        segs = _run_overlap(ga[0], gb[0], shortest)
    elif len(ga) > 1 and len(gb) > 1:
        head = _run_ends(ga[0], gb[0], shortest, tail=False)
        tail = _run_ends(ga[-1], gb[-1], shortest, tail=True)
        middle = _every([_sat(s, shortest) for g in ga[1:-1] + gb[1:-1] for s in g])
        if head is None or tail is None or middle is None:
            return None
        segs = head + middle + tail
    elif len(ga) == 1:
        segs = _fixed_runs(ga[0], gb, shortest)
    else:
        segs = _fixed_runs(gb[0], ga, shortest)
    return None if segs is None else "/".join(segs)


def _shortest_segments(a: tuple[Item, ...], b: tuple[Item, ...]) -> list[str] | None:
    """The fewest characters of segments matching both shapes, item by item
    (for short shapes: |a| x |b| steps): a ``**`` takes no segment, or one the
    other side's segment matches; two segments meet in one."""
    memo: dict[tuple[int, int], tuple[int, tuple[str, ...]] | None] = {}

    def best(i: int, j: int) -> tuple[int, tuple[str, ...]] | None:
        if (i, j) in memo:
            return memo[(i, j)]
        if i == len(a) and j == len(b):
            return 0, ()
        steps: list[tuple[str | None, int, int]] = []  # (segment taken, next i, next j)
        x = a[i] if i < len(a) else ()
        y = b[j] if j < len(b) else ()
        if i < len(a) and x is DSTAR:
            steps.append((None, i + 1, j))
            if j < len(b) and y is not DSTAR:
                steps.append((_sat(y) or "", i, j + 1))
        if j < len(b) and y is DSTAR:
            steps.append((None, i, j + 1))
            if i < len(a) and x is not DSTAR:
                steps.append((_sat(x) or "", i + 1, j))
        if i < len(a) and j < len(b) and x is not DSTAR and y is not DSTAR:
            steps.append((_segment_overlap(x, y) or "", i + 1, j + 1))
        found: tuple[int, tuple[str, ...]] | None = None
        for seg, ni, nj in steps:
            if seg == "":
                continue  # no segment matches both
            rest = best(ni, nj)
            if rest is None:
                continue
            got = rest if seg is None else (rest[0] + len(seg) + 1, (seg, *rest[1]))
            if found is None or got[0] < found[0]:
                found = got
        memo[(i, j)] = found
        return found

    got = best(0, 0)
    return None if got is None else list(got[1])


# --- short segments: a breadth-first search for the shortest witness -----------------------
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


@lru_cache(maxsize=4096)
def _segment_nfa(seg: Seg) -> _Nfa:
    """The automaton of one segment: a chain, with a loop at each star."""
    nfa = _Nfa()
    cur = nfa.new()
    for tok in seg:
        if tok is STAR:
            nfa.edges[cur].append((_SEGMENT, cur))
        else:
            nxt = nfa.new()
            nfa.edges[cur].append((tok, nxt))
            cur = nxt
    nfa.accept = frozenset({cur})
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


def _search(a: _Nfa, b: _Nfa) -> str | None:
    """A shortest string both automata and the valid-path automaton accept,
    or None: a breadth-first search over triples of their states (a character
    step needs one edge from each whose sets meet; an epsilon step moves one
    automaton alone, explored first). At most |A| x |B| x 4 triples: used for
    short segments only."""
    autos = (a, b, _PATHS)
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
