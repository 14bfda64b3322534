"""S36: one query language for both backends (broker/mail/search_query.py).

The same corpus and the same queries find the same messages on SQLite (FTS5)
and on PostgreSQL (tsvector): this module is a contract module
(tests/conftest.py ``PG_CONTRACT``), so each test that takes a store runs on
both, against one table of expected hits. A query outside the language is
``invalid_input`` with ``field="query"`` and writes nothing, whatever the
text (a hypothesis sweep). The word table is SQLite's own unicode61, and
revision 0012 holds the very PostgreSQL function the dialect describes.
"""

from __future__ import annotations

import importlib.util
import re
import string
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker import Agent, Operator, Store, errors
from broker.mail.search_query import fts5, parse, words
from broker.store import search_fold
from broker.store.dialect import PG_SEARCH_VECTOR, pg_search_text_ddl

ROOT = Path(__file__).resolve().parents[2]

# (body, thread): hits below are 1-based positions in this list.
CORPUS = [
    ("the parser drops the last token of every line", "parser-bug"),  # 1
    ("Café au lait on the ÉCOLE menu", None),  # 2
    ("bananas and apples for the planner", None),  # 3
    ("bananas only, please", None),  # 4
    ("see http://search.py and ops@example.com, version 5.5", None),  # 5
    ("design notes for the new tokenizer", "tokenizer-design"),  # 6
    ("parsers parsed it; NEAR the end", None),  # 7
    ("a naïve Привет to the ΣΊΣΥΦΟΣ team", None),  # 8
]

# query -> the messages it finds (any order: ranks are each engine's own).
FOUND: dict[str, set[int]] = {
    # the reviewer's five (SQLite and PostgreSQL disagreed on each)
    "parse*": {1, 7},
    "bananas NOT apples": {4},
    "cafe": {2},
    # words, case, diacritics (both fold as FTS5's unicode61 does)
    "PARSER": {1},
    "parser token": {1},
    "CAFÉ": {2},
    "ecole": {2},
    "Ecole MENU": {2},
    "naive": {8},
    "привет": {8},
    "σίσυφοσ": {8},
    "near": {7},
    # punctuation splits words, in the text as in the query
    "search": {5},
    "py": {5},
    "search.py": {5},
    "example": {5},
    "ops@example.com": {5},
    "5.5": {5},
    "5": {5},
    # phrases
    '"last token"': {1},
    '"token last"': set(),
    '"every line"': {1},
    '"line parser"': set(),  # a phrase never runs from the body into the thread
    '"new tok"*': {6},
    # OR, NOT, -word, AND, parentheses
    "tokenizer OR bananas": {3, 4, 6},
    "bananas -apples": {4},
    "bananas AND apples": {3},
    "(bananas OR cafe) NOT apples": {2, 4},
    "the -(parser OR cafe)": {3, 6, 7, 8},
    "parse* NOT thread:bug": {7},
    # prefixes
    "tok*": {1, 6},
    "ban*": {3, 4},
    "plan*": {3},
    # the thread filter: the thread's name only
    "thread:parser": {1},
    "thread:parser-bug": {1},
    'thread:"parser bug"': {1},
    "thread:pars*": {1},
    "thread:design": {6},
    "thread:notes": set(),
    "design": {6},
    "bug": {1},
    # punctuation alone is ignored, and colons that are not a filter
    "bananas & apples": {3},
    "std::parser": set(),
    "http://search.py": {5},  # a URL is text, not a filter
    "parser:": {1},
}

# Outside the language: refused on both backends, naming the query.
REFUSED = [
    # the reviewer's: raw sqlite3.OperationalError before
    "*",
    "*x",
    "NEAR(a b, x)",
    "NEAR(parser token)",
    "body:bananas",
    # unbalanced, empty, operators with nothing to apply to
    '"unbalanced',
    '""',
    '" , "',
    "(parser",
    "parser)",
    "()",
    "parser OR",
    "OR parser",
    "AND",
    "parser AND",
    "NOT parser",
    "-parser",
    "parser OR NOT apples",
    "parser NOT",
    "parser NOT NOT apples",
    "parser - apples",
    "par*ser",
    "parser**",
    "thread:(parser)",
    "thread:*",
    "thread:&",
    "nosuchcolumn:word",
    "& ; !",
    "(" * 20 + "parser" + ")" * 20,
]


@pytest.fixture
def corpus(store: Store, space: str, join: Callable[..., Agent]) -> dict[str, Any]:
    lynx, otter = join("flow/lynx"), join("flow/otter")
    ids: dict[str, int] = {}
    for n, (body, thread) in enumerate(CORPUS, 1):
        ids[lynx.send("otter", body, thread=thread).id] = n
    return {"space": space, "ids": ids, "otter": otter, "lynx": lynx}


def _found(hits: list[Any], ids: dict[str, int]) -> set[int]:
    return {ids[h.id] for h in hits}


def test_S36_the_same_query_finds_the_same_messages_on_both_backends(
    corpus: dict[str, Any], operator: Operator
) -> None:
    space, ids, otter = corpus["space"], corpus["ids"], corpus["otter"]
    got = {q: _found(operator.search(space, q, limit=100), ids) for q in FOUND}
    assert got == FOUND
    # An agent's search reads the same words (otter received every message).
    mine = {q: _found(otter.search(q, limit=100), ids) for q in FOUND}
    assert mine == FOUND


def _written(store: Store) -> tuple[int, ...]:
    counts = ["SELECT count(*) FROM messages", "SELECT count(*) FROM deliveries"]
    if store.dialect == "sqlite":  # the search index's last row (revision 0025)
        counts.append("SELECT coalesce((SELECT upto FROM folds WHERE name = 'search'), 0)")
    with store.read() as t:
        return tuple(int(t.one(count)[0]) for count in counts)


def test_S33_S36_a_query_outside_the_language_is_refused_naming_the_query_and_writes_nothing(
    corpus: dict[str, Any], operator: Operator, store: Store
) -> None:
    corpus["lynx"].send("otter", "waiting for the index")  # on SQLite: a row waiting
    before = _written(store)
    for query in REFUSED:
        for search in (partial(operator.search, corpus["space"]), corpus["otter"].search):
            with pytest.raises(errors.InvalidInput) as info:
                search(query)
            assert info.value.fields == {"field": "query"}, query
            assert str(info.value).startswith("bad query "), query
            assert "\n" not in str(info.value), query
    assert _written(store) == before


def test_S36_each_refusal_says_what_is_wrong() -> None:
    said = {}
    for query in ("*", "*x", "NEAR(a b, x)", "body:bananas", '"open', "(a", "a)", "NOT a", "a OR"):
        with pytest.raises(errors.InvalidInput) as info:
            parse(query)
        said[query] = str(info.value).partition(": ")[2]
    assert said == {
        "*": "'*' must follow the start of a word, as in prefix*",
        "*x": "'*' only ends a word, as in prefix*",
        "NEAR(a b, x)": 'NEAR(...) is not part of the query language: use "a phrase" or words',
        "body:bananas": "body: is not a filter (the only one is thread:); quote text that has a colon",
        '"open': "unterminated phrase: a '\"' without its closing '\"'",
        "(a": "a '(' is never closed",
        "a)": "a ')' without its '('",
        "NOT a": "NOT (or -word) only excludes: give a word to find beside it",
        "a OR": "OR needs something to find on each side",
    }


def test_S36_fts5_syntax_in_a_word_is_never_fts5_syntax() -> None:
    """Every word reaches FTS5 quoted: ``^``, ``+``, ``:`` and ``NEAR`` are text."""
    assert fts5(parse("^parser +token")) == '("parser" AND "token")'
    assert fts5(parse("NEAR parser")) == '("near" AND "parser")'
    assert fts5(parse("thread:pars* -x")) == '(thread : "pars"*) NOT ("x")'
    assert fts5(parse('"a b"* OR c-d')) == '("a b"* OR "c d")'


@settings(
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(
                [*'"()*-:^+{},.&|!', " ", " OR ", " AND ", " NOT ", "NEAR(", "thread:", "body:"]
                + ["parser", "bananas", "tok", "café", "5.5"]
            ),
            st.characters(codec="utf-8"),
        ),
        max_size=40,
    ).map("".join)
)
def test_S33_S36_any_text_gives_results_or_a_refusal_naming_the_query(
    corpus: dict[str, Any], operator: Operator, text: str
) -> None:
    try:
        hits = operator.search(corpus["space"], text, limit=5)
    except errors.InvalidInput as exc:
        assert exc.fields == {"field": "query"}, str(exc)
    else:
        assert isinstance(hits, list)


def test_S36_many_words_and_deep_groups_still_reach_the_engine(
    corpus: dict[str, Any], operator: Operator
) -> None:
    """A 1000-character query of the language is never too big for the engine."""
    terms = ["ban*"]
    while len(" OR ".join(terms)) < 990:
        terms.insert(0, f"w{len(terms)}")
    ors = " OR ".join(terms)
    assert {corpus["ids"][h.id] for h in operator.search(corpus["space"], ors)} == {3, 4}
    deep = "(" * 16 + "bananas" + ")" * 16
    assert len(operator.search(corpus["space"], deep)) == 2


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_S36_the_word_table_is_sqlite_s_own_unicode61() -> None:
    """broker/store/search_fold.py (generated) splits and folds as the running
    SQLite's FTS5 does, on every character of the Basic Multilingual Plane."""
    gen = _load(ROOT / "scripts" / "gen_search_fold.py", "gen_search_fold")
    runs, fold, drop = gen.read_unicode61(0x10000)
    bmp = [c for a, b in runs for c in range(a, b + 1)]
    word = re.compile(f"[{search_fold.WORD}]")
    assert [c for c in range(0x10000) if word.fullmatch(chr(c))] == bmp  # the rest separate
    assert words(" ".join(f"x{chr(c)}y" for c in bmp)) == [
        f"x{fold.get(c, '' if c in drop else chr(c))}y" for c in bmp
    ]
    table = dict(zip(search_fold.FOLD_FROM, search_fold.FOLD_TO, strict=True))
    assert {c: t for c, t in table.items() if ord(c) < 0x10000} == {
        chr(c): t for c, t in fold.items()
    }
    assert [c for c in search_fold.DROPPED if ord(c) < 0x10000] == [chr(c) for c in drop]
    # ASCII: A-Z only, as PostgreSQL's lower() in the "C" collation (revision 0012).
    assert {c: t for c, t in table.items() if ord(c) < 0x80} == dict(
        zip(string.ascii_uppercase, string.ascii_lowercase, strict=True)
    )


def test_S36_revision_0012_holds_the_search_text_function_the_dialect_describes() -> None:
    rev = _load(ROOT / "migrations" / "versions" / "0012_pg_search_fold.py", "rev_0012")
    assert pg_search_text_ddl() == rev.SEARCH_TEXT
    assert PG_SEARCH_VECTOR == rev.VECTOR  # the index the search statement reads


def test_S36_a_folded_word_is_still_one_word() -> None:
    """What the fold writes is made of word characters: a folded word reaches
    FTS5 and PostgreSQL as the one word it was."""
    for c, folded in zip(search_fold.FOLD_FROM, search_fold.FOLD_TO, strict=True):
        assert words(f"x{c}y") == [f"x{folded}y"]
