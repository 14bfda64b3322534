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

Two patterns *overlap* (two reservations conflict) iff some path matches
both: ``broker.board.overlap`` decides it, from the patterns' *shapes* read
here. A shape is a pattern's segments of tokens (a character set for each
``?``, class or plain character, and ``*``), with ``**`` as "zero or more
whole segments" (a last ``**`` is a ``*`` segment followed by one).

Matching a path places the pattern's fixed-width pieces leftmost: inside a
segment, the pieces between stars, as regular expressions of fixed width;
in a path, the runs of segments between ``**``. The earliest place of a piece
never hurts the pieces after it, so there is no backtracking, and no pattern
makes a match slow (S41).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

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
SEGMENT: CharSet = ((0x01, 0x2E), (0x30, 0xD7FF), (0xE000, TOP))
SLASH_SET: CharSet = ((_SLASH, _SLASH),)
DOT_SET: CharSet = ((_DOT, _DOT),)
_PREFERRED = "abcdefghijklmnopqrstuvwxyz0123456789_-"  # readable witnesses first

# A token is a character set, or STAR ('*'); a segment a tuple of tokens; an
# item of a shape a segment, or DSTAR ('**': zero or more whole segments).
STAR = None
DSTAR = None
Token = CharSet | None
Seg = tuple[Token, ...]
Item = Seg | None


@lru_cache(maxsize=65536)
def meet(a: CharSet, b: CharSet) -> CharSet:
    """The characters in both sets."""
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


def minus(a: CharSet, b: CharSet) -> CharSet:
    """``a`` without ``b``: ``a`` met with the complement of ``b``."""
    comp: list[tuple[int, int]] = []
    start = 0
    for lo, hi in b:
        if lo > start:
            comp.append((start, lo - 1))
        start = hi + 1
    if start <= TOP:
        comp.append((start, TOP))
    return meet(a, tuple(comp))


def _union(ranges: Iterable[tuple[int, int]]) -> CharSet:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return tuple(out)


@lru_cache(maxsize=4096)
def pick(s: CharSet) -> str:
    """One character of the set, a readable one if it has any."""
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
    return (minus(SEGMENT, chosen) if negate else meet(SEGMENT, chosen)), j + 1


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
            label, i = SEGMENT, i + 1
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
    ok = all(item is DSTAR or _possible(item) for item in items)
    return Shape(tuple(items), ok, _literal(items), _literal(items[::-1], reverse=True))


def _possible(seg: Seg) -> bool:
    """Whether some valid segment matches: every set has a character, and a
    segment without a star is not bound to be '.' or '..' (a star can always
    take one more character)."""
    if any(tok is not STAR and not tok for tok in seg):
        return False
    return STAR in seg or len(seg) > 2 or any(tok != DOT_SET for tok in seg)


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


def pieces_of(seg: Seg) -> list[tuple[CharSet, ...]]:
    """A segment split at its stars: fixed-width pieces (one more than stars)."""
    out: list[list[CharSet]] = [[]]
    for tok in seg:
        if tok is STAR:
            out.append([])
        else:
            out[-1].append(tok)
    return [tuple(p) for p in out]


def groups_of(items: Sequence[Item]) -> list[tuple[Seg, ...]]:
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
    pieces = pieces_of(seg)
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
    head = first.pattern and len(pieces_of(seg)[0])
    tail = len(text) - len(pieces_of(seg)[-1])
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
    groups = groups_of(sh.items)
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
