"""S36 on SQLite: the search index takes the log in batches (revision 0011).

The insert trigger indexes the rows waiting for the index once
``FTS_BATCH`` of them wait; a search indexes the rest first, or, when it
cannot write (a caller's read transaction), matches them on a private TEMP
index. Either way every sent message is found, and the index holds exactly
the log's rows up to its last one (``integrity-check``, after a purge too)."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlrows

from broker.api.handles import Agent, Operator, Store
from broker.errors import BrokerError, InvalidInput
from broker.mail.search import agent_search, integrity_check, search
from broker.spaces import spaces
from broker.store.dialect import FTS_BATCH

pytestmark = pytest.mark.sqlite_only


def indexed(store: Store) -> tuple[int, int]:
    """(rows in the index, rows in the log), read from the file as it is: the
    index holds the log's rows up to its mark (revision 0025), which FTS5's
    integrity-check holds it to (test below)."""
    raw = sqlite3.connect(store.path)
    try:
        got = raw.execute(sqlrows.INDEXED_ROWS).fetchone()[0]
        logged = raw.execute("SELECT count(*) FROM messages").fetchone()[0]
    finally:
        raw.close()
    return int(got), int(logged)


def test_S36_sends_are_indexed_in_batches_and_a_search_finds_the_rest(
    store: Store, space: str, operator: Operator, join: Callable[..., Agent]
) -> None:
    lynx, _ = join("flow/lynx"), join("flow/otter")
    base = indexed(store)[1]
    sent = [lynx.send("otter", f"batch word{i} common").id for i in range(FTS_BATCH + 3)]
    got, logged = indexed(store)
    assert logged == base + len(sent)
    assert 0 < logged - got < FTS_BATCH  # one batch indexed by a send, the rest waiting
    # The newest message, still waiting for its batch, is found all the same...
    assert [h.id for h in operator.search(space, f"word{FTS_BATCH + 2}")] == [sent[-1]]
    assert [h.id for h in lynx.search(f"word{FTS_BATCH + 1}")] == [sent[-2]]
    # ... because the search indexed it first: the index now holds the whole log.
    assert indexed(store)[0] == indexed(store)[1]
    assert {h.id for h in operator.search(space, "common", limit=100)} == set(sent)
    integrity_check(store)


def test_S36_a_search_that_cannot_write_matches_the_waiting_rows_on_its_own_index(
    store: Store, space: str, operator: Operator, join: Callable[..., Agent]
) -> None:
    lynx, _ = join("flow/lynx"), join("flow/otter")
    old = lynx.send("otter", "parser tokens dropped").id
    integrity_check(store)  # everything so far indexed
    new = [lynx.send("otter", f"parser regression {i}").id for i in range(3)]
    assert indexed(store)[1] - indexed(store)[0] == 3
    with store.read() as t:  # a caller's read transaction: no index write possible
        hits = search(store, space, "parser", tx=t)
        mine = agent_search(store, lynx.identity, "regression", tx=t)
    assert {h.id for h in hits} == {old, *new}
    assert all(h.snippet.count("[parser]") == 1 for h in hits)
    assert {h.id for h in mine} == set(new)
    assert indexed(store)[1] - indexed(store)[0] == 3  # nothing was written
    with store.read() as t:  # the private index is gone with its search
        assert t.all("SELECT name FROM sqlite_temp_master") == []
    integrity_check(store)


def test_S36_a_purge_with_rows_waiting_keeps_the_index_consistent(
    store: Store, operator: Operator, join: Callable[..., Agent], tmp_path: Path
) -> None:
    doomed = operator.create_space("workflow").id
    keep = operator.create_space("workflow").id
    a, _ = operator.join(doomed, "flow/a")
    b, _ = operator.join(keep, "flow/b")
    for i in range(FTS_BATCH + 5):  # interleaved, some indexed, some waiting
        a.send("operator", f"doomed tokenizer {i}")
        b.send("operator", f"kept tokenizer {i}")
    spaces.archive(store, doomed)
    operator.purge_space(doomed, tmp_path / "archive")
    integrity_check(store)  # raises if the purge left the index out of step
    hits = operator.search(keep, "tokenizer", limit=100)
    assert len(hits) == FTS_BATCH + 5
    assert indexed(store)[0] == indexed(store)[1]


def test_S36_rowids_a_purge_frees_at_the_top_of_the_log_are_indexed_when_used_again(
    store: Store, operator: Operator, tmp_path: Path
) -> None:
    """The index's mark (revision 0025: a fold's, not the index's last row) goes
    back to the log's last row when a space goes: the top rows a purge freed
    are numbered again, and a new row on one of them is indexed, not taken
    for one the index holds."""
    keep = operator.create_space("workflow").id
    doomed = operator.create_space("workflow").id
    a, _ = operator.join(keep, "flow/a")
    b, _ = operator.join(doomed, "flow/b")
    for i in range(3):
        a.send("operator", f"early word{i}")
    for i in range(2 * FTS_BATCH + 3):  # the top of the log, some waiting for the index
        b.send("operator", f"doomed tokenizer {i}")
    with store.read() as t:
        top = t.one("SELECT max(rowid) FROM messages")[0]
    spaces.archive(store, doomed)
    operator.purge_space(doomed, tmp_path / "archive")
    with store.read() as t:
        assert t.one("SELECT upto FROM folds WHERE name = 'search'")[0] == 3
    for i in range(FTS_BATCH + 3):  # on the freed rowids, a batch and a tail
        a.send("operator", f"reborn tokenizer {i}")
    with store.read() as t:
        assert t.one("SELECT max(rowid) FROM messages")[0] < top
    assert len(operator.search(keep, "reborn", limit=100)) == FTS_BATCH + 3
    assert operator.search(keep, "doomed", limit=100) == []
    integrity_check(store)
    assert indexed(store)[0] == indexed(store)[1]


def test_S33_S36_a_refused_search_indexes_nothing_either(
    store: Store, space: str, operator: Operator, join: Callable[..., Agent]
) -> None:
    """A query outside the language is refused before the search indexes the
    waiting rows: bad input writes nothing (found by the CLI fuzzer)."""
    lynx, _ = join("flow/lynx"), join("flow/otter")
    for i in range(3):
        lynx.send("otter", f"waiting {i}")
    before = indexed(store)
    assert before[0] < before[1]  # rows wait for their batch
    for call in (lambda: operator.search(space, "*"), lambda: lynx.search('"open')):
        with pytest.raises(InvalidInput, match="bad query"):
            call()
        assert indexed(store) == before
    # Nor does a search of a space that does not exist, or by a wrong token.
    with pytest.raises(BrokerError):
        operator.search("run_nosuchspace", "waiting")
    assert indexed(store) == before
    with pytest.raises(BrokerError):
        forged = dataclasses.replace(lynx.identity, token_hash="0" * 64)  # a token since rotated
        Agent(store, forged).search("waiting")
    assert indexed(store) == before


def test_S33_each_search_refusal_names_its_field(
    store: Store, space: str, operator: Operator, join: Callable[..., Agent]
) -> None:
    lynx = join("flow/lynx")
    cases: list[tuple[Callable[[], Any], str]] = [
        (lambda: lynx.search("   "), "query"),
        (lambda: lynx.search("x" * 1001), "query"),
        (lambda: lynx.search('"open'), "query"),  # FTS5 cannot parse it
        (lambda: lynx.search("ok", limit=0), "limit"),
        (lambda: operator.search(space, "ok", limit=1001), "limit"),
        (lambda: lynx.search("ok", kinds=["seen"]), "kinds"),
    ]
    for call, field in cases:
        with pytest.raises(InvalidInput) as info:
            call()
        assert info.value.fields == {"field": field}, str(info.value)
