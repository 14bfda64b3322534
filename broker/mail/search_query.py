"""The search query language (S36), parsed here, in Python, for both backends.

- ``word word``: every word must match (``AND`` between them is allowed);
- ``"a phrase"``: these words, in this order, next to each other;
- ``a OR b``: either; ``NOT x`` or ``-x``: without ``x`` (beside a word to find);
- ``prefix*``: a word starting so (``"a phra"*``: a phrase ending so);
- ``thread:word``, ``thread:"a phrase"``, ``thread:pre*``: in the thread's name;
- ``( ... )``: grouping. ``OR``, ``AND``, ``NOT`` are operators in capitals only.

Words are split and folded as the index splits message text (FTS5's
``unicode61``, ``broker.store.search_fold``): letters and digits make words, any
other character separates them (``parser-bug`` is the phrase ``"parser
bug"``), case and diacritics never matter (``cafe`` finds ``Café``).
Punctuation on its own is ignored. FTS5's own syntax is not the language:
``NEAR(``, other ``name:`` filters (``name::`` and ``name://`` are text), a
``*`` not ending a word are refused,
as is what cannot be read (an unclosed ``"`` or ``(``, an operator with
nothing to apply to, a query with no word to find): ``invalid_input`` with
``field="query"``. A parsed query is written out for FTS5 ``MATCH`` with every
word quoted, and for PostgreSQL's ``to_tsquery('simple', ...)`` with every
word quoted (``:*`` prefixes, ``<->`` phrases); both are bound parameters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NoReturn

from broker import errors
from broker.store.search_fold import DROPPED, FOLD_FROM, FOLD_TO, WORD

_FOLD = {**str.maketrans(FOLD_FROM, FOLD_TO), **{ord(c): None for c in DROPPED}}
_WORDS = re.compile(f"[{WORD}]+")
# name: right before what it applies to (not "::", nor "://": text, as in a URL)
_FILTER = re.compile(r"([A-Za-z_]+):(?=[^:\s/])")
_BARE_FILTER = re.compile(r"[A-Za-z_]+:$")  # name: right before a "phrase" or a (group)
_OPERATORS = ("OR", "AND", "NOT")
MAX_DEPTH = 16  # nested parentheses


def words(text: str) -> list[str]:
    """The words of ``text`` as the index holds them (folded, in order)."""
    return _WORDS.findall(text.translate(_FOLD))


@dataclass(frozen=True)
class Term:
    """A word or a phrase (its words in order), maybe a prefix, maybe thread-only."""

    words: tuple[str, ...]
    prefix: bool = False
    thread: bool = False


@dataclass(frozen=True)
class AllOf:
    """Every ``find`` matches and no ``without`` does (``find`` is never empty)."""

    find: tuple[Node, ...]
    without: tuple[Node, ...] = ()


@dataclass(frozen=True)
class AnyOf:
    either: tuple[Node, ...]


Node = Term | AllOf | AnyOf


class _Refused(Exception):
    pass


def _no(reason: str) -> NoReturn:
    raise _Refused(reason)


def parse(query: str) -> Node:
    """The query's tree, or ``InvalidInput(field="query")`` saying what is wrong."""
    try:
        tokens = _lex(query)
        if not tokens:
            _no("nothing to search for: give a word (letters or digits)")
        node, at = _or(tokens, 0, 0)
        if at < len(tokens):
            _no("a ')' without its '('")
        return node
    except _Refused as why:
        shown = query if len(query) <= 80 else query[:77] + "..."
        raise errors.InvalidInput(f"bad query {shown!r}: {why}", field="query") from None


# --- reading ------------------------------------------------------------------------------
# A token is "(", ")", "OR", "AND", "NOT", "-" (a NOT written before a word) or a Term.
_Token = str | Term


def _lex(q: str) -> list[_Token]:
    out: list[_Token] = []
    i, n = 0, len(q)
    while i < n:
        c = q[i]
        if c.isspace():
            i += 1
        elif c in "()":
            out.append(c)
            i += 1
        elif c == '"':
            term, i = _phrase(q, i, thread=False)
            out.append(term)
        elif c == "-" and i + 1 < n and not q[i + 1].isspace() and q[i + 1] != "-":
            out.append("-")
            i += 1
        else:
            j = i
            while j < n and not q[j].isspace() and q[j] not in '"()':
                j += 1
            run = q[i:j]
            if run in _OPERATORS:
                out.append(run)
            elif run == "NEAR" and q.startswith("(", j):
                _no('NEAR(...) is not part of the query language: use "a phrase" or words')
            elif _FILTER.match(run) or (_BARE_FILTER.match(run) and q[j : j + 1] in ('"', "(")):
                filtered, j = _filter(q, run, j)
                out.append(filtered)
            elif run == "-":
                _no("'-' must be right before what it excludes, as in -word")
            elif (found := _word(run, thread=False)) is not None:
                out.append(found)
            i = j
    return out


def _filter(q: str, run: str, j: int) -> tuple[Term, int]:
    """``name:word`` (``run``), or ``name:`` before a ``"phrase"`` or a ``(``
    at ``q[j]``: the term and where reading goes on."""
    name, _, rest = run.partition(":")
    if name.lower() != "thread":
        _no(f"{name}: is not a filter (the only one is thread:); quote text that has a colon")
    if rest:
        term = _word(rest, thread=True)
        if term is None:
            _no('thread: needs a word or a "phrase" right after it')
        return term, j
    if q[j] == "(":
        _no('thread: applies to one word or one "phrase", not a group')
    return _phrase(q, j, thread=True)


def _phrase(q: str, i: int, *, thread: bool) -> tuple[Term, int]:
    end = q.find('"', i + 1)
    if end < 0:
        _no("unterminated phrase: a '\"' without its closing '\"'")
    found = words(q[i + 1 : end])
    if not found:
        _no('empty phrase: "..." needs a word (letters or digits) inside')
    prefix = q.startswith("*", end + 1)
    return Term(tuple(found), prefix, thread), end + 1 + prefix


def _word(run: str, *, thread: bool) -> Term | None:
    prefix = run.endswith("*")
    stem = run[:-1] if prefix else run
    if "*" in stem:
        _no("'*' only ends a word, as in prefix*")
    found = words(stem)
    if not found:
        if prefix:
            _no("'*' must follow the start of a word, as in prefix*")
        return None  # punctuation alone separates words; nothing to find in it
    return Term(tuple(found), prefix, thread)


def _or(tokens: list[_Token], at: int, depth: int) -> tuple[Node, int]:
    either = []
    while True:
        node, at = _all(tokens, at, depth)
        either.append(node)
        if at < len(tokens) and tokens[at] == "OR":
            at += 1
            continue
        return (either[0] if len(either) == 1 else AnyOf(tuple(either))), at


def _all(tokens: list[_Token], at: int, depth: int) -> tuple[Node, int]:
    find: list[Node] = []
    without: list[Node] = []
    joined = True  # at the start, or right after AND: a unit must come
    while at < len(tokens) and tokens[at] not in ("OR", ")"):
        tok = tokens[at]
        if tok == "AND":
            if joined:
                _no("AND needs something to find on each side")
            joined, at = True, at + 1
            continue
        negate = tok in ("NOT", "-")
        if negate:
            at += 1
            if at >= len(tokens) or tokens[at] in ("OR", "AND", "NOT", "-", ")"):
                _no("NOT (or -) needs a word, a phrase or a group right after it")
        unit, at = _unit(tokens, at, depth)
        (without if negate else find).append(unit)
        joined = False
    if joined and (find or without):
        _no("AND needs something to find on each side")
    if not find:
        if without:
            _no("NOT (or -word) only excludes: give a word to find beside it")
        if at < len(tokens) and tokens[at] == "OR" or at > 0 and tokens[at - 1] == "OR":
            _no("OR needs something to find on each side")
        if at < len(tokens) and tokens[at] == ")":
            _no(
                "empty parentheses" if at > 0 and tokens[at - 1] == "(" else "a ')' without its '('"
            )
        _no("nothing to search for: give a word (letters or digits)")
    if len(find) == 1 and not without:
        return find[0], at
    return AllOf(tuple(find), tuple(without)), at


def _unit(tokens: list[_Token], at: int, depth: int) -> tuple[Node, int]:
    tok = tokens[at]
    if isinstance(tok, Term):
        return tok, at + 1
    if tok != "(":
        _no(f"{tok} cannot start a group of words")  # unreachable: _all consumes the rest
    if depth >= MAX_DEPTH:
        _no(f"parentheses nested deeper than {MAX_DEPTH}")
    node, at = _or(tokens, at + 1, depth + 1)
    if at >= len(tokens) or tokens[at] != ")":
        _no("a '(' is never closed")
    return node, at + 1


# --- writing ------------------------------------------------------------------------------
def fts5(node: Node) -> str:
    """The FTS5 ``MATCH`` text: every word in double quotes, so nothing a user
    types is FTS5 syntax; ``thread : "..."`` is FTS5's column filter."""
    if isinstance(node, Term):
        text = '"' + " ".join(node.words) + '"' + ("*" if node.prefix else "")
        return f"thread : {text}" if node.thread else text
    if isinstance(node, AnyOf):
        return "(" + " OR ".join(fts5(n) for n in node.either) + ")"
    found = "(" + " AND ".join(fts5(n) for n in node.find) + ")"
    if not node.without:
        return found
    return found + " NOT (" + " OR ".join(fts5(n) for n in node.without) + ")"


def tsquery(node: Node) -> str:
    """The ``to_tsquery('simple', ...)`` text over ``broker_search_text``'s
    vector (revision 0012): body words carry weight D, thread words A, so a
    phrase never runs from the body into the thread name (as in FTS5, whose
    phrases stay in one column) and ``thread:`` reads the A words only."""
    if isinstance(node, Term):
        if node.thread:
            return _phrase_ts(node, "A")
        if len(node.words) == 1:
            return _phrase_ts(node, "")
        return f"({_phrase_ts(node, 'D')} | {_phrase_ts(node, 'A')})"
    if isinstance(node, AnyOf):
        return "(" + " | ".join(tsquery(n) for n in node.either) + ")"
    found = " & ".join(tsquery(n) for n in node.find)
    without = "".join(f" & !{tsquery(n)}" for n in node.without)
    return f"({found}{without})"


def _phrase_ts(term: Term, weight: str) -> str:
    # Words are letters and digits only (``words``): quoting is enough.
    last = len(term.words) - 1
    parts = [
        f"'{w}'"
        + (":" if weight or (term.prefix and i == last) else "")
        + ("*" if term.prefix and i == last else "")
        + weight
        for i, w in enumerate(term.words)
    ]
    return " <-> ".join(parts)
