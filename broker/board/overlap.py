"""The overlap rule of path reservations (S37): two patterns conflict iff some
path matches both.

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

``overlap`` returns a witness path that matches both: a shortest one when
the segments facing each other are short (a breadth-first search of their
automata decides those, ``_search``), and otherwise a path built from the
parts above. The property tests check the rule both ways against an
independent matcher, for the short path and for the built one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Generic, TypeVar

from broker.board.globs import (
    DOT_SET,
    DSTAR,
    SEGMENT,
    SLASH_SET,
    STAR,
    CharSet,
    Item,
    Seg,
    groups_of,
    meet,
    minus,
    pick,
    pieces_of,
    shape,
)

# Segments this short (tokens of one times the other's) get the breadth-first
# search's shortest witness; longer ones the shape's.
_SEARCH_MAX = 64
E = TypeVar("E")


def _valid(word: str) -> bool:
    return word not in ("", ".", "..")


def _word(sets: Sequence[CharSet]) -> str | None:
    """A valid segment choosing one character of each set, or None if every
    choice is '.' or '..' (the positions are independent)."""
    chars = [pick(s) for s in sets]
    if _valid("".join(chars)):
        return "".join(chars)
    for i, s in enumerate(sets):
        other = minus(s, DOT_SET)
        if other:
            chars[i] = pick(other)
            return "".join(chars)
    return None


def _meet_all(a: Sequence[CharSet], b: Sequence[CharSet]) -> list[CharSet] | None:
    out = [meet(x, y) for x, y in zip(a, b, strict=True)]
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
    return bool(meet(a, b))


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
    pa, pb = pieces_of(a), pieces_of(b)
    if len(pa) > 1 and len(pb) > 1 and (not shortest or len(a) * len(b) > _SEARCH_MAX):
        head = _ends(pa[0], pb[0], tail=False)
        tail = _ends(pa[-1], pb[-1], tail=True)
        if head is None or tail is None:
            return None
        middle = [c for p in pa[1:-1] + pb[1:-1] for c in p]
        start = "".join(pick(s) for s in head + middle)
        end = "".join(pick(s) for s in tail)
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
    ga, gb = groups_of(sa.items), groups_of(sb.items)
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
            nfa.edges[cur].append((SEGMENT, cur))
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
    other = minus(SEGMENT, DOT_SET)
    nfa.edges[start] += [(DOT_SET, dot), (other, seg)]
    nfa.edges[dot] += [(DOT_SET, dots), (other, seg)]
    nfa.edges[dots] += [(SEGMENT, seg)]
    nfa.edges[seg] += [(SEGMENT, seg), (SLASH_SET, start)]
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
                ab = meet(sa, sb)
                if not ab:
                    continue
                for sv, tv in autos[2].edges[qv]:
                    chars = meet(ab, sv)
                    nxt = (ta, tb, tv)
                    if chars and nxt not in back:
                        back[nxt] = (state, pick(chars))
                        todo.append(nxt)
    return None
