"""Full-text search over the log (S36).

SQLite: an FTS5 external-content index on ``messages`` (body and thread),
kept by triggers in batches (``broker.dialect.FTS_BATCH``), ranked by ``bm25``
with highlighted snippets. A search first indexes the rows still waiting for
their batch, so it finds every sent message; one that cannot write (a
read-only store, a caller's read transaction) matches those few rows on a
private TEMP index instead. The operator
searches one whole space; an agent only what it sent or what reached it. The
space is a condition of the one statement, so no search returns another
space's text. Query syntax is FTS5's: words (all must match), ``"a phrase"``,
``OR``, ``NOT``, ``prefix*``, ``thread:name``. A query FTS5 cannot parse is
``invalid_input`` naming it, never a traceback.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from typing import Any, NoReturn

from broker import errors
from broker.auth import Identity, caller
from broker.db import Store, Tx
from broker.records import SearchHit
from broker.spaces import resolve_id
from broker.sql import stmt
from broker.vocab import MESSAGE_KINDS, SEARCH_DEFAULT, SEARCH_MAX

_QUERY = stmt("search.query")
_SNIPPETS = stmt("search.snippets")
_INDEX_SIZE = stmt("search.index_size")
_INTEGRITY = stmt("search.integrity")
_PARSE_TABLE = stmt("search.parse_table")
_PARSE_QUERY = stmt("search.parse_query")
_PENDING = stmt("search.pending")
_INDEX_PENDING = stmt("search.index_pending")
_TAIL_INDEX = stmt("search.tail_index")
_TAIL_FILL = stmt("search.tail_fill")
_TAIL_DROP = stmt("search.tail_drop")
MAX_QUERY = 1000
# Matches ranked per query: the newest this many (S36). Rare words are ranked
# in full; a word in most of a huge log costs this many bm25 scores, not one
# per message (100,000-message bench: spec §Targets, 50 ms p95).
RANK_WINDOW = 2000
# How FTS5 words a query it cannot parse (an unknown `col:` prefix is "no such column").
_SYNTAX = ("fts5", "syntax error", "no such column", "unterminated", "unrecognized", "MATCH")


def _check(query: str, kinds: Iterable[str] | None, limit: int) -> tuple[str, str | None]:
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
    _fts5_parse(query)
    return query, json.dumps(kind_list) if kind_list else None


def _fts5_parse(query: str) -> None:
    """Refuse what FTS5 refuses before anything is read or written (S33: a
    refused search writes nothing, not even the index's waiting rows), and
    alike on both backends: an in-memory FTS5 table parses it; the PostgreSQL
    statement then reads it as ``websearch_to_tsquery`` syntax."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute(_PARSE_TABLE)
        conn.execute(_PARSE_QUERY, {"query": query}).fetchall()
    except sqlite3.OperationalError as exc:
        _refuse(query, exc)
    finally:
        conn.close()


def _refuse(query: object, exc: sqlite3.OperationalError) -> NoReturn:
    # FTS5 reports a query it cannot parse as an OperationalError ("fts5:
    # syntax error near", "no such column" for an unknown `col:` prefix).
    text = str(exc)
    if any(w in text for w in _SYNTAX):
        raise errors.InvalidInput(f"bad query {query!r}: {text}", field="query") from None
    raise exc


def _matches(t: Tx, params: dict[str, object]) -> tuple[list[Any], dict[Any, str]]:
    """The query's best rows and their snippets, on the index the names resolve to."""
    rows = t.all(_QUERY, params)
    if not rows:
        return rows, {}
    rowids = json.dumps([r["rid"] for r in rows])
    return rows, dict(t.all(_SNIPPETS, {"query": params["query"], "rowids": rowids}))


def _run(t: Tx, params: dict[str, object]) -> list[SearchHit]:
    try:
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
            rows = sorted([*rows, *more], key=lambda r: (r["rank"], r["seq"]))[
                : int(str(params["n"]))
            ]
            snips.update(more_snips)
    except sqlite3.OperationalError as exc:
        _refuse(params["query"], exc)
    return [
        SearchHit(
            id=r["id"],
            seq=r["seq"],
            kind=r["kind"],
            sender=r["sender"],
            to=json.loads(r["recipients"]),
            thread=r["thread"],
            created_at_utc=r["created_at_utc"],
            snippet=snips.get(r["rid"], ""),
            rank=round(float(r["rank"]), 6),
        )
        for r in rows
    ]


def search(
    store: Store,
    space_ref: str,
    query: str,
    *,
    sender: str | None = None,
    to: str | None = None,
    kinds: Iterable[str] | None = None,
    since: str | None = None,
    limit: int = SEARCH_DEFAULT,
    tx: Tx | None = None,
) -> list[SearchHit]:
    """The operator's search of one whole space (S36), best match first."""
    query, kind_json = _check(query, kinds, limit)
    with store.read(tx) as t:
        space_id = resolve_id(t, space_ref)  # refused before the index is touched (S33)
    index_pending(store, tx)
    with store.read(tx) as t:
        return _run(t, _params(space_id, query, sender, to, kind_json, since, limit, None))


def agent_search(
    store: Store,
    ident: Identity,
    query: str,
    *,
    sender: str | None = None,
    to: str | None = None,
    kinds: Iterable[str] | None = None,
    since: str | None = None,
    limit: int = SEARCH_DEFAULT,
    tx: Tx | None = None,
) -> list[SearchHit]:
    """An agent's search: only messages it sent or that reached it (S36)."""
    query, kind_json = _check(query, kinds, limit)
    with store.read(tx) as t:
        caller(t, ident)  # refused before the index is touched (S33)
    index_pending(store, tx)
    with store.read(tx) as t:
        caller(t, ident)
        params = _params(ident.space_id, query, sender, to, kind_json, since, limit, ident.address)
        return _run(t, params)


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
            tx.execute(_INDEX_PENDING)
        return
    if store.read_only is not None:
        return
    with store.read() as t:
        if not t.one(_PENDING)[0]:
            return
    with store.write() as t:
        t.execute(_INDEX_PENDING)


def index_bytes(store: Store) -> int:
    """Bytes the search index takes in the store file (its text is the log's)."""
    with store.read() as t:
        return int(t.one(_INDEX_SIZE)[0])


def integrity_check(store: Store) -> None:
    """FTS5 ``integrity-check``: raises ``StoreError`` if the index and the log
    differ (the rows waiting for their batch are indexed first)."""
    with store.write() as t:
        t.execute(_INDEX_PENDING)
        t.execute(_INTEGRITY)
