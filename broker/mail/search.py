"""Full-text search over the log (S36).

SQLite: an FTS5 external-content index on ``messages`` (body and thread),
kept by triggers in batches (``broker.store.dialect.FTS_BATCH``), ranked by ``bm25``
with highlighted snippets. A search first indexes the rows still waiting for
their batch, so it finds every sent message; one that cannot write (a
read-only store, a caller's read transaction) matches those few rows on a
private TEMP index instead. PostgreSQL: a GIN index over the same words
(``broker_search_text``, revision 0012), ranked by ``ts_rank``. The operator
searches one whole space; an agent only what it sent or what reached it. The
space is a condition of the one statement, so no search returns another
space's text.

The query language is the broker's own, parsed here for both backends
(``broker.mail.search_query``): words (all must match), ``"a phrase"``, ``OR``,
``NOT``/``-word``, ``prefix*``, ``thread:word``, parentheses. Case and
diacritics never matter. The parsed query reaches the engine as a bound
parameter with every word quoted, so the same query finds the same messages
on both; a query outside the language is ``invalid_input`` (``field="query"``)
before anything is read or written, never an engine's error.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from broker import errors
from broker.mail import search_query
from broker.model.records import SearchHit
from broker.record_type import from_row
from broker.spaces.auth import Identity, caller
from broker.spaces.spaces import resolve_id
from broker.store.sql import stmt
from broker.store.sqlite import Store, Tx
from broker.vocab import MESSAGE_KINDS, SEARCH_DEFAULT, SEARCH_MAX

_QUERY = stmt("search.query")
_SNIPPETS = stmt("search.snippets")
_INDEX_SIZE = stmt("search.index_size")
_INTEGRITY = stmt("search.integrity")
_PENDING = stmt("search.pending")
_INDEX_PENDING = stmt("search.index_pending")
_MARK_INDEXED = stmt("search.mark_indexed")
_TAIL_INDEX = stmt("search.tail_index")
_TAIL_FILL = stmt("search.tail_fill")
_TAIL_DROP = stmt("search.tail_drop")
MAX_QUERY = 1000
# Matches ranked per query: the newest this many (S36). Rare words are ranked
# in full; a word in most of a huge log costs this many bm25 scores, not one
# per message (100,000-message bench: spec §Targets, 50 ms p95).
RANK_WINDOW = 2000


def _check(
    store: Store, query: str, kinds: Iterable[str] | None, limit: int
) -> tuple[str, str | None]:
    """The engine's text of ``query`` and the kinds as JSON; refuses bad input
    before anything is read or written (S33: not even the index's waiting rows)."""
    if not isinstance(query, str) or not query.strip():
        raise errors.InvalidInput("bad query: empty", field="query")
    if len(query) > MAX_QUERY or not query.isprintable():
        raise errors.InvalidInput(
            f"bad query: at most {MAX_QUERY} printable characters (no control characters)",
            field="query",
        )
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= SEARCH_MAX:
        raise errors.InvalidInput(
            f"bad limit {limit!r}: a whole number from 1 to {SEARCH_MAX}", field="limit"
        )
    kind_list = list(kinds or [])
    for k in kind_list:
        if k not in MESSAGE_KINDS or k == "seen":
            raise errors.InvalidInput(
                f"bad kind {k!r}: one of {', '.join(MESSAGE_KINDS[:-1])}", field="kinds"
            )
    node = search_query.parse(query)
    text = search_query.fts5(node) if store.dialect == "sqlite" else search_query.tsquery(node)
    return text, json.dumps(kind_list) if kind_list else None


def _matches(t: Tx, params: dict[str, object]) -> tuple[list[Any], dict[Any, str]]:
    """The query's best rows and their snippets, on the index the names resolve to."""
    rows = t.all(_QUERY, params)
    if not rows:
        return rows, {}
    rowids = json.dumps([r["rid"] for r in rows])
    return rows, dict(t.all(_SNIPPETS, {"query": params["query"], "rowids": rowids}))


def _run(t: Tx, params: dict[str, object]) -> list[SearchHit]:
    # The engine parses only what search_query wrote (every word quoted): an
    # error here is the store's, which the transaction reports as a StoreError.
    rows, snips = _matches(t, params)
    if t.store.dialect == "sqlite" and t.one(_PENDING)[0]:
        # Rows this search could not index (see index_pending): matched on
        # a TEMP index of this connection, ranked there, merged by rank.
        t.execute(_TAIL_INDEX)
        try:
            t.execute(_TAIL_FILL)
            more, more_snips = _matches(t, params)
        finally:
            t.execute(_TAIL_DROP)
        rows = sorted([*rows, *more], key=lambda r: (r["rank"], r["seq"]))[: int(str(params["n"]))]
        snips.update(more_snips)
    return [
        from_row(
            SearchHit,
            r,
            to=json.loads(r["recipients"]),
            snippet=snips.get(r["rid"], ""),
            rank=round(float(r["rank"]), 6),
        )
        for r in rows
    ]


def search(
    store: Store,
    who: str | Identity,
    query: str,
    *,
    sender: str | None = None,
    to: str | None = None,
    kinds: Iterable[str] | None = None,
    since: str | None = None,
    limit: int = SEARCH_DEFAULT,
    tx: Tx | None = None,
) -> list[SearchHit]:
    """Full-text search of a space (S36), best match first, as ``who`` sees it:
    the operator (``who`` a space reference) the whole log; an agent (``who``
    its ``Identity``, ``agent_search``) only messages it sent or that reached it."""
    query, kind_json = _check(store, query, kinds, limit)

    def viewer(t: Tx) -> tuple[str, str | None]:
        """The space searched and the agent it is searched for (None: the operator)."""
        if not isinstance(who, Identity):
            return resolve_id(t, who), None
        caller(t, who)
        return who.space_id, who.address

    with store.read(tx) as t:
        viewer(t)  # refused before the index is touched (S33)
    index_pending(store, tx)
    with store.read(tx) as t:
        space_id, address = viewer(t)
        return _run(t, _params(space_id, query, sender, to, kind_json, since, limit, address))


agent_search = search  # an agent's search: ``search`` with the agent's Identity


def _params(
    space_id: str,
    query: str,
    sender: str | None,
    to: str | None,
    kinds: str | None,
    since: str | None,
    limit: int,
    viewer: str | None,
) -> dict[str, object]:
    return {
        "space_id": space_id,
        "query": query,
        "sender": sender,
        "to": to,
        "kinds": kinds,
        "since": since,
        "n": limit,
        "viewer": viewer,
        "window": RANK_WINDOW,
    }


def index_pending(store: Store, tx: Tx | None = None) -> None:
    """Index the log rows the insert trigger has not batched yet (S36), if any
    and if this process may write: in ``tx`` when it is a write transaction,
    else in a short write transaction of its own (a read finds out first, so a
    search of an indexed log takes no write lock). A search that cannot write
    here matches those rows on its own TEMP index (``_run``)."""
    if store.dialect != "sqlite":
        return  # PostgreSQL's GIN index is never behind
    if tx is not None:
        if tx.write:
            _index(tx)
        return
    if store.read_only is not None:
        return
    with store.read() as t:
        if not t.one(_PENDING)[0]:
            return
    with store.write() as t:
        _index(t)


def _index(t: Tx) -> None:
    """The pending rows into the index, and its mark to the log's last row."""
    t.execute(_INDEX_PENDING)
    t.execute(_MARK_INDEXED)


def index_bytes(store: Store) -> int:
    """Bytes the search index takes in the store file (its text is the log's)."""
    with store.read() as t:
        return int(t.one(_INDEX_SIZE)[0])


def integrity_check(store: Store) -> None:
    """FTS5 ``integrity-check``: raises ``StoreError`` if the index and the log
    differ (the rows waiting for their batch are indexed first)."""
    with store.write() as t:
        _index(t)
        t.execute(_INTEGRITY)
