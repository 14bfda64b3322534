"""Full-text search (S36) over a big space: query latency p95, index size.

One space holds ``search_messages`` messages (100,000 in the full run) from 20
agents, written through the library (``send_many``, 1,000 per transaction),
bodies drawn from a 2,000-word vocabulary with Zipf-like frequencies so some
words are in a third of the log and others in a handful of messages. A second
space holds the same words: a hit from it would be a leak (``unexpected``).

Timed: ``Operator.search`` (whole space, limit 20) and ``Agent.search`` (one
agent's mail) over a fixed mix of queries (a common word, a rare word, two
words, a phrase, a prefix, an OR), each call end to end. Beside them, what
one would write without an index: ``body LIKE '%word%'`` on the same file
(first 20 in log order, so it does less work than a ranked search). The
FTS5 ``integrity-check`` runs at the end (``errors``).
"""

from __future__ import annotations

import os
import random
import sqlite3
from typing import Any

from bench.core import BROKER, Ctx, Row, Scenario, latency_stats, now_ns, pct

AGENTS = 20
BATCH = 1000
VOCAB = 2000
WORDS_PER_BODY = 14
LIKE = "sqlite3 LIKE scan"
AGENT_SEARCH = "broker (agent)"


def _vocabulary(rng: random.Random) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    seen: set[str] = set()
    out: list[str] = []
    while len(out) < VOCAB:
        w = "".join(rng.choice(letters) for _ in range(rng.randint(4, 9)))
        if w not in seen:
            seen.add(w)
            out.append(w)
    return out


def _bodies(n: int, words: list[str], rng: random.Random) -> list[str]:
    weights = [1.0 / (rank + 1) for rank in range(len(words))]  # Zipf-like
    return [" ".join(rng.choices(words, weights, k=WORDS_PER_BODY)) for _ in range(n)]


def _queries(words: list[str]) -> list[str]:
    common, mid, rare = words[0], words[50], words[VOCAB - 7]
    return [
        common,
        rare,
        f"{mid} {words[3]}",
        f'"{words[1]} {words[2]}"',
        f"{words[20][:3]}*",
        f"{rare} OR {words[VOCAB - 11]}",
        mid,
        f"{common} NOT {words[4]}",
    ]


def search(ctx: Ctx) -> Scenario:
    from broker import Operator, Store
    from broker.mail.search import index_bytes, integrity_check

    n = ctx.sizes.search_messages
    rounds = ctx.sizes.search_rounds
    sc = Scenario(
        "search",
        f"full-text search over {n:,} messages (p95 per query)",
        unit="p95 ms",
        higher_is_better=False,
    )
    sc.params = {"messages": n, "agents": AGENTS, "query_rounds": rounds, "limit": 20}
    rng = random.Random(36)
    words = _vocabulary(rng)
    path = ctx.scratch("search") / "broker.db"
    store = Store(f"sqlite:///{path}")
    try:
        op = Operator(store)
        space = op.create_space("workflow", sender_share=1).id  # the log is one corpus
        agents = [op.join(space, f"flow/a{i}")[0] for i in range(AGENTS)]
        t0 = now_ns()
        bodies = _bodies(n, words, rng)
        for start in range(0, n, BATCH):
            chunk = bodies[start : start + BATCH]
            sender = agents[(start // BATCH) % AGENTS]
            items = [
                {"to": [f"a{(start + i) % AGENTS}"], "text": b}
                for i, b in enumerate(chunk)
                if f"a{(start + i) % AGENTS}" != sender.address
            ] or [{"to": ["operator"], "text": chunk[0]}]
            sender.send_many(items)
            _drain(agents)  # keep the inboxes under their cap: the log is what is searched
        load_s = (now_ns() - t0) / 1e9
        other = op.create_space("workflow").id
        stranger, _ = op.join(other, "flow/x")
        stranger.send_many([{"to": ["operator"], "text": b} for b in bodies[:200]])
        ids_here = _ids(path, space)

        queries = _queries(words)
        lat: dict[str, list[int]] = {BROKER: [], AGENT_SEARCH: [], LIKE: []}
        unexpected = hits = unranked = 0
        reader = agents[1]
        raw = sqlite3.connect(path)
        try:
            for _ in range(rounds):
                for q in queries:
                    s = now_ns()
                    found = op.search(space, q, limit=20)
                    lat[BROKER].append(now_ns() - s)
                    s = now_ns()
                    mine = reader.search(q, limit=20)
                    lat[AGENT_SEARCH].append(now_ns() - s)
                    hits += len(found)
                    unexpected += sum(h.id not in ids_here for h in found + mine)
                    unranked += [h.rank for h in found] != sorted(h.rank for h in found)
                    word = q.strip('"').split()[0].rstrip("*")
                    s = now_ns()
                    raw.execute(
                        "SELECT id, body FROM messages WHERE space_no = (SELECT sp.rowid FROM spaces sp WHERE sp.id = ?) AND body LIKE ? LIMIT 20",
                        (space, f"%{word}%"),
                    ).fetchall()
                    lat[LIKE].append(now_ns() - s)
        finally:
            raw.close()
        errors = 0
        try:
            integrity_check(store)
        except Exception:  # noqa: BLE001 - counted, and the count is checked
            errors = 1
        idx = index_bytes(store)
        db_bytes = os.path.getsize(path) + _size(f"{path}-wal")
        for system, how in (
            (BROKER, "Operator.search(space, q, limit=20): FTS5 MATCH + bm25 + snippet, one space"),
            (AGENT_SEARCH, "Agent.search(q, limit=20): the same, only the agent's own mail"),
            (LIKE, "raw sqlite3: body LIKE '%word%' LIMIT 20 (unranked, first word only)"),
        ):
            stats: dict[str, Any] = {**latency_stats(lat[system]), "calls": len(lat[system])}
            p95 = pct([v / 1e6 for v in lat[system]], 95)
            stats["p95_ms"] = round(p95, 3)
            sc.add(Row(system, round(p95, 3), "p95 ms", how=how, stats=stats))
        sc.counts = {
            "messages": n,
            "hits": hits,
            "unexpected": unexpected,
            "unranked": unranked,
            "errors": errors,
            "index_bytes": idx,
            "db_bytes": db_bytes,
            "load_s": round(load_s, 1),
        }
        sc.notes.append(
            f"index {idx / 1e6:.1f} MB for {n:,} messages ({idx / max(db_bytes, 1):.0%} of the "
            f"store file); the text itself is stored once, in the log (external content)"
        )
        ctx.log(
            f"  search {n:,}: p95 operator {sc.value(BROKER):.2f} ms, agent "
            f"{sc.value(AGENT_SEARCH):.2f} ms, LIKE {sc.value(LIKE):.2f} ms; index {idx:,} B"
        )
        sc.ratio(BROKER, LIKE)
        sc.target(f"search p95 at {n:,} messages <= 50 ms", sc.value(BROKER), "<=", 50.0)
        sc.target("no result from another space", float(unexpected), "==", 0.0)
    finally:
        store.close()
    return sc


def _drain(agents: list[Any]) -> None:
    for a in agents:
        while True:
            lease = a.claim(limit=1000)
            if not lease.deliveries:
                break
            a.ack(lease.lease_token)


def _ids(path: Any, space: str) -> set[str]:
    con = sqlite3.connect(path)
    try:
        return {
            r[0]
            for r in con.execute(
                "SELECT id FROM messages WHERE space_no = (SELECT sp.rowid FROM spaces sp WHERE sp.id = ?)",
                (space,),
            )
        }
    finally:
        con.close()


def _size(p: str) -> int:
    try:
        return os.path.getsize(p)
    except OSError:
        return 0
