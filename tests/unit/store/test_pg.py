"""PostgreSQL: what the contract suite cannot show on its own (issue 15).

The contract modules (tests/conftest.py ``PG_CONTRACT``) run on both backends;
here, on PostgreSQL only: the migrations equal the metadata, the append-only
triggers hold against a plain psycopg connection (UPDATE, DELETE and
``INSERT ... ON CONFLICT DO UPDATE``), the per-space sequence stays gap-free
under concurrent senders at READ COMMITTED, and 8 processes claiming one inbox
(32 in the soak run) neither lose nor duplicate a message (S7, S11, S13, S14).
"""

from __future__ import annotations

import multiprocessing as mp
import threading
from collections.abc import Iterator
from typing import Any

import pgtest
import pytest
import sqlrows
import trusted
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlrows import spaces_as_read

from broker import Agent, Operator, Store, errors
from broker.ids import parse_ts
from broker.store.dialect import (
    PG_SEARCH_INDEX,
    PG_SEARCH_TEXT,
    UNIQUE_KEYS,
    compare_type,
    pg_hidden,
)
from broker.store.migrate import HEAD, upgrade
from broker.store.tables import metadata
from broker.vocab import APPEND_ONLY

FORK = mp.get_context("fork")


@pytest.fixture
def pg_url() -> Iterator[str]:
    with pgtest.database() as url:
        yield url


@pytest.fixture
def pg(pg_url: str) -> Iterator[Store]:
    s = Store(pg_url)
    yield s
    s.close()


def test_pg_url_opens_the_postgresql_store(pg: Store) -> None:
    assert type(pg).__name__ == "PgStore"
    assert pg.dialect == "postgresql"
    assert pg.schema_version() == HEAD


def test_pg_migration_upgrade_head_equals_the_metadata() -> None:
    """One alembic history for both engines: on an empty PostgreSQL database,
    ``upgrade head`` yields exactly the metadata (booleans as SMALLINT 0/1)."""
    with pgtest.database(template=None) as url:
        s = Store(url, migrate=False)
        try:
            assert s.schema_version() is None
            upgrade(s.engine)
            assert s.schema_version() == HEAD
            with s.engine.connect() as conn:
                ctx = MigrationContext.configure(
                    conn,
                    opts={
                        "compare_type": compare_type,
                        "compare_server_default": False,
                        # The search's GIN index and the rowid columns are not
                        # metadata (as FTS5 and rowids on SQLite): tests below.
                        "include_name": lambda name, kind, parents: (
                            not pg_hidden(name, kind, parents)
                        ),
                    },
                )
                diffs = [d for d in compare_metadata(ctx, metadata) if not _comment_only(d)]
            assert diffs == []
        finally:
            s.close()


def test_pg_S36_search_reads_its_gin_index(pg: Store) -> None:
    """Revisions 0010 and 0012: the GIN index exists, is the one ``search_ddl``
    describes, and the search statement's plan reads it (the same tsvector
    expression)."""
    from broker.store import sql

    sid = Operator(pg).create_space("workflow", inbox_cap=5000).id
    a, _ = trusted.join(pg, sid, "a")
    trusted.join(pg, sid, "b")
    texts = ["hello there" if i == 700 else f"filler {i}" for i in range(1500)]
    for i in range(0, 1500, 250):  # a space where one message in 1500 matches
        a.send_many([{"to": "b", "text": text} for text in texts[i : i + 250]])
    raw = pg.connect()
    try:
        raw.conn.execute("ANALYZE messages")
        found = raw.conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = %s", (PG_SEARCH_INDEX,)
        ).fetchone()
        assert found is not None and "USING gin" in found[0]
        assert found[0].count(PG_SEARCH_TEXT) == 2, found[0]  # body and thread, folded
        query = sql.stmt("search.query").postgresql
        params = {
            "query": "hello",
            "space_id": sid,
            "sender": None,
            "since": None,
            "kinds": None,
            "to": None,
            "viewer": None,
            "window": 100,
            "n": 10,
        }
        plan = "\n".join(r[0] for r in raw.conn.execute("EXPLAIN " + query, params).fetchall())
    finally:
        raw.close()
    assert PG_SEARCH_INDEX in plan, plan


# Texts PostgreSQL's own parser reads differently from FTS5's unicode61: an
# address, a file name, a version, a hyphenated word, markup, diacritics, case
# beyond ASCII, a combining accent, an underscore.
TRICKY = (
    "Café ÉCOLE naïve parser-bug ops@example.com search.py 5.5 v1.2.3 <b>bold</b> "
    "http://x.org/y?q=1 x_y Привет ΣΊΣΥΦΟΣ cafe\u0301x Straße 東京 C++ -- 1e5 $HOME"
)


def test_pg_S36_the_search_text_has_the_words_fts5_finds(pg: Store) -> None:
    """Revision 0012's ``broker_search_text``: PostgreSQL's 'simple' vector of
    a message holds exactly the words FTS5's unicode61 makes of it (and in the
    same order, so phrases match alike)."""
    from broker.mail.search_query import words

    raw = pg.connect()
    try:
        row = raw.conn.execute(
            "SELECT array(SELECT (unnest(to_tsvector('simple', broker_search_text(%s)))).lexeme)",
            (TRICKY,),
        ).fetchone()
        vector = raw.conn.execute(
            "SELECT to_tsvector('simple', broker_search_text(%s))::text", (TRICKY,)
        ).fetchone()
    finally:
        raw.close()
    assert row is not None and vector is not None
    assert sorted(row[0]) == sorted(set(words(TRICKY)))
    positions = {w: i for i, w in enumerate(words(TRICKY), 1)}
    for lexeme, at in positions.items():
        assert f"'{lexeme}':" in vector[0], lexeme
        assert str(at) in vector[0].split(f"'{lexeme}':")[1].split(" ")[0], lexeme


def test_pg_S36_revision_0012_downgrades_to_the_old_index_and_back(pg_url: str) -> None:
    from alembic import command

    from broker.store.migrate import config

    s = Store(pg_url)
    try:
        cfg = config(pg_url)
        with s.engine.connect() as conn:
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, "0011")
            conn.commit()
        raw = s.connect()
        try:
            old = raw.conn.execute(
                "SELECT indexdef FROM pg_indexes WHERE indexname = %s", (PG_SEARCH_INDEX,)
            ).fetchone()
            fn = raw.conn.execute("SELECT to_regproc(%s)", (PG_SEARCH_TEXT,)).fetchone()
        finally:
            raw.close()
        assert old is not None and PG_SEARCH_TEXT not in old[0] and "COALESCE" in old[0]
        assert fn is not None and fn[0] is None
        upgrade(s.engine)
        assert s.schema_version() == HEAD
        sid = Operator(s).create_space("workflow").id
        a, _ = trusted.join(s, sid, "a")
        trusted.join(s, sid, "b")
        a.send("b", "Café au lait", thread="menu-ideas")
        assert [h.thread for h in Operator(s).search(sid, "cafe thread:idea*")] == ["menu-ideas"]
    finally:
        s.close()


def _comment_only(diff: Any) -> bool:
    # Column comments are documentation: SQLite keeps none, and the frozen raw
    # SQL of revision 0004 adds three columns without theirs on PostgreSQL
    # (a difference listed in the README; no query reads a comment).
    if isinstance(diff, list):
        return all(_comment_only(d) for d in diff)
    return isinstance(diff, tuple) and diff[0] == "modify_comment"


def _plain(url: str) -> Any:
    import psycopg

    return psycopg.connect(url.replace("+psycopg", ""), autocommit=True)


def _filled(store: Store) -> str:
    """A space where every append-only table has rows (S11, S23)."""
    op = Operator(store)
    sid = op.create_space("workflow").id
    a, _ = trusted.join(store, sid, "a")
    b, _ = trusted.join(store, sid, "b")
    a.send("b", "hello")
    a.claim_key("k")
    turn = b.next_turn()
    assert turn.id is not None
    b.seen(turn.id)
    with store.read() as t:
        for table in APPEND_ONLY:
            assert t.one(f"SELECT count(*) FROM {table}")[0] > 0, table
    return sid


@pytest.mark.parametrize("table", APPEND_ONLY)
def test_pg_S11_append_only_refuses_update_delete_and_upsert_from_plain_psycopg(
    pg: Store, pg_url: str, table: str
) -> None:
    import psycopg

    _filled(pg)
    with _plain(pg_url) as conn:
        before = conn.execute(f"SELECT * FROM {table} ORDER BY id").fetchall()
        assert before
        first = before[0][0]
        for sql in (
            f"UPDATE {table} SET id = id",
            f"DELETE FROM {table}",
            # An upsert that hits an existing row is an UPDATE: refused too.
            f"INSERT INTO {table} SELECT * FROM {table} WHERE id = %(id)s "
            f"ON CONFLICT ({', '.join(UNIQUE_KEYS[table][0])}) DO UPDATE SET id = EXCLUDED.id",
        ):
            with pytest.raises(psycopg.errors.RaiseException, match=f"append-only: {table}"):
                conn.execute(sql, {"id": first})
        assert conn.execute(f"SELECT * FROM {table} ORDER BY id").fetchall() == before


def test_pg_S11_append_only_through_the_store_is_an_append_only_error(pg: Store) -> None:
    _filled(pg)
    with (
        pytest.raises(errors.AppendOnly, match="append-only: messages refuses UPDATE"),
        pg.write() as t,
    ):
        t.execute("UPDATE messages SET body = 'rewritten'")


def _sender(url: str, ident: Any, n: int, errors_out: Any) -> None:
    s = Store(url)
    try:
        agent = Agent(s, ident)
        for i in range(n):
            agent.send("b", f"{ident.address}-{i}")
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        errors_out.put(repr(exc))
    finally:
        s.close()


def test_pg_S7_sequence_stays_gap_free_under_concurrent_senders(pg: Store, pg_url: str) -> None:
    """8 processes x 25 sends into one space at READ COMMITTED: seq is exactly
    1..200 (the space's counter row is locked per send), every send logged."""
    sid = Operator(pg).create_space("workflow", inbox_cap=1000).id
    trusted.join(pg, sid, "b")
    senders = [trusted.join(pg, sid, f"s{i}")[0] for i in range(8)]
    failures = FORK.Queue()
    procs = [FORK.Process(target=_sender, args=(pg_url, a.identity, 25, failures)) for a in senders]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * 8
    assert failures.empty()
    with pg.read() as t:
        seqs = [
            r[0]
            for r in t.all(
                f"SELECT seq FROM messages WHERE space_no = {sqlrows.SPACE_NO} ORDER BY seq",
                (sid,),
            )
        ]
        last = t.one(f"SELECT last_seq FROM {spaces_as_read(pg)} WHERE id = ?", (sid,))[0]
    assert seqs == list(range(1, 201))
    assert last == 200


def _claimer(url: str, ident: Any, out: Any) -> None:
    s = Store(url)
    got: list[str] = []
    try:
        agent = Agent(s, ident)
        idle = 0
        while idle < 3:
            lease = agent.claim(limit=3)
            if not lease.deliveries:
                idle += 1
                continue
            idle = 0
            got.extend(d.id for d in lease.deliveries)
            agent.ack(lease.lease_token)
        out.put(got)
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        out.put(repr(exc))
    finally:
        s.close()


def test_pg_S13_8_processes_claiming_one_inbox_lose_nothing_and_duplicate_nothing(
    pg: Store, pg_url: str
) -> None:
    """S13/S14 on PostgreSQL: the claim's candidates are locked with FOR UPDATE
    SKIP LOCKED, so concurrent claimers of one inbox take each message once."""
    assert claim_concurrently(pg, pg_url, processes=8, messages=160) == 160


@pytest.mark.soak
def test_pg_S13_32_processes_claiming_one_inbox_lose_nothing_and_duplicate_nothing_soak(
    pg: Store, pg_url: str
) -> None:
    assert claim_concurrently(pg, pg_url, processes=32, messages=640) == 640


def claim_concurrently(pg: Store, pg_url: str, *, processes: int, messages: int) -> int:
    """Returns how many distinct messages the processes claimed (each checked once)."""
    sid = Operator(pg).create_space("workflow", inbox_cap=5000).id
    a, _ = trusted.join(pg, sid, "a")
    b, _ = trusted.join(pg, sid, "b")
    with pg.transaction() as t:
        sent = [a.send("b", f"m{i}", tx=t).id for i in range(messages)]
    out = FORK.Queue()
    procs = [
        FORK.Process(target=_claimer, args=(pg_url, b.identity, out)) for _ in range(processes)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=180) for _ in procs]
    for p in procs:
        p.join(60)
    bad = [r for r in results if isinstance(r, str)]
    assert bad == []
    claimed = [mid for r in results for mid in r]
    assert len(claimed) == len(set(claimed)), "a message was claimed twice"
    assert sorted(claimed) == sorted(sent), "a message was lost"
    with pg.read() as t:
        states = t.all("SELECT state, count(*) FROM deliveries GROUP BY state")
    assert [tuple(r) for r in states] == [("done", messages)]
    return len(set(claimed))


def test_pg_S13_threads_of_one_process_share_the_pool(pg: Store) -> None:
    """One store, many threads: each transaction holds its own pooled connection."""
    sid = Operator(pg).create_space("workflow", inbox_cap=1000).id
    a, _ = trusted.join(pg, sid, "a")
    b, _ = trusted.join(pg, sid, "b")
    for i in range(100):
        a.send("b", f"m{i}")
    got: list[str] = []
    lock = threading.Lock()

    def work() -> None:
        while True:
            lease = b.claim(limit=2)
            if not lease.deliveries:
                return
            with lock:
                got.extend(d.id for d in lease.deliveries)
            b.ack(lease.lease_token)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert len(got) == 100 == len(set(got))


# Statements that cannot run on PostgreSQL by nature (SQLite's pragmas, VACUUM,
# its JSON probe).
SQLITE_ONLY_AREAS: set[str] = set()
SQLITE_ONLY = {
    "store.json_probe",
    # the TEMP index of a search that cannot write (SQLite's batched FTS5 index)
    "search.tail_index",
    "search.tail_fill",
    "search.tail_drop",
}


def test_pg_every_catalogue_statement_prepares_on_postgresql(pg: Store) -> None:
    """Each statement's PostgreSQL text parses and plans against the migrated
    schema (PREPARE: types and names are checked, nothing runs)."""
    import re

    from psycopg import pq

    from broker.store import sql

    checked = 0
    raw = pg.connect()
    try:
        for name, st in sql.all_statements().items():
            if (
                name in SQLITE_ONLY
                or name.partition(".")[0] in SQLITE_ONLY_AREAS
                or re.match(r"\s*(PRAGMA|VACUUM|BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE)\b", st)
            ):
                continue
            order: dict[str, int] = {}

            def number(m: re.Match[str], order: dict[str, int] = order) -> str:
                return f"${order.setdefault(m.group(1), len(order) + 1)}"

            text = re.sub(r"%\((\w+)\)s", number, st.postgresql).replace("%%", "%")
            res = raw.conn.pgconn.prepare(b"", text.encode())
            message = (res.error_message or b"").decode().strip()
            assert res.status == pq.ExecStatus.COMMAND_OK, f"{name}: {message}"
            checked += 1
    finally:
        raw.close()
    assert checked > 60


def test_pg_S20_a_waiter_that_cannot_listen_polls_every_PG_POLL_S_and_says_so(
    pg: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without its LISTEN connection a PostgreSQL waiter has no change marker:
    it returns "polled" every PG_POLL_S so its caller re-checks, and a claim
    that waits still gets what is sent meanwhile."""
    from broker.delivery import pgwake, wake

    def no_listener(store: Store) -> Any:
        raise OSError("the server cannot be listened to")

    monkeypatch.setattr(pgwake, "listener", no_listener)
    sid = Operator(pg).create_space("workflow").id
    a, _ = trusted.join(pg, sid, "a")
    b, _ = trusted.join(pg, sid, "b")
    with wake.Waiter(pg, [wake.participant_key(b.identity.participant_id)]) as waiter:
        assert waiter.polling
        assert waiter.wait(30) is True and waiter.woke == "polled"
    got: list[Any] = []
    th = threading.Thread(target=lambda: got.append(b.claim(wait=30)), daemon=True)
    th.start()
    a.send("b", "polled for")
    th.join(30)
    assert not th.is_alive() and [d.body for d in got[0].deliveries] == ["polled for"]


def test_pg_S20_a_closed_waiter_leaves_no_subscription_on_the_listener(pg: Store) -> None:
    """Each waiter subscribes its bell on the process's one LISTEN
    connection; closing the waiter takes it off, so a long-lived process does
    not ring (and keep) the bells of every waiter it ever had."""
    from broker.delivery import pgwake, wake

    keys = [wake.space_key("s1"), wake.participant_key("p1")]
    listener = pgwake.listener(pg)
    before = [listener.waiting(k) for k in keys]
    with wake.Waiter(pg, keys):
        assert [listener.waiting(k) for k in keys] == [n + 1 for n in before]
    assert [listener.waiting(k) for k in keys] == before


def test_pg_S14_acks_and_sends_into_one_inbox_at_once_never_deadlock(pg: Store) -> None:
    """An ack of several messages updates its inbox's participant row once per
    message, and from the second update on PostgreSQL re-checks that row's key
    to its space; a send holds the space's row while it waits for that
    participant row. The space lock must not block the key check (it is FOR NO
    KEY UPDATE): with FOR UPDATE the two deadlocked within a few rounds."""
    sid = Operator(pg).create_space("workflow", inbox_cap=100_000).id
    a, _ = trusted.join(pg, sid, "a")
    b, _ = trusted.join(pg, sid, "b")
    for i in range(20):
        a.send("b", f"seed {i}")
    stop = threading.Event()
    failures: list[BaseException] = []

    def send() -> None:
        try:
            n = 0
            while not stop.is_set():
                a.send("b", f"m{n}")
                n += 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    try:
        for _ in range(150):
            lease = b.claim(limit=5)
            ids = [d.id for d in lease.deliveries]
            if ids:
                assert b.ack(lease.lease_token, ids) == len(ids)
    finally:
        stop.set()
        sender.join(30)
    assert failures == []


def test_pg_a_rolled_back_transaction_is_store_busy_saying_retry_not_unreachable() -> None:
    import psycopg

    from broker.store.postgres import wrap_pg_error

    for exc in (
        psycopg.errors.DeadlockDetected("deadlock detected"),
        psycopg.errors.SerializationFailure("could not serialize access"),
    ):
        err = wrap_pg_error(exc)
        assert isinstance(err, errors.StoreBusy)
        assert str(err).startswith("the database rolled the transaction back, retry it: ")
    assert "cannot reach the database" in str(
        wrap_pg_error(psycopg.OperationalError("connection refused"))
    )


# --- round trips: what needs no answer goes with the next statement (PgConn) ----------
def _scratch(pg_url: str) -> None:
    with _plain(pg_url) as conn:
        conn.execute("CREATE TABLE scratch (k integer PRIMARY KEY)")


def _scratch_keys(pg_url: str) -> list[int]:
    with _plain(pg_url) as conn:
        return [r[0] for r in conn.execute("SELECT k FROM scratch ORDER BY k")]


def _sent_by(pg: Store, tmp_path: Any, call: Any) -> list[str]:
    """The kinds of the protocol messages the client sends while ``call()``
    runs (``Sync``, ``Parse``, ``Bind``...), from libpq's trace of the pool's one
    connection (``pg.size_pool(1)`` first)."""
    from psycopg import pq

    with pg.read() as t:
        pgconn = t.raw.conn.pgconn  # type: ignore[attr-defined]
    trace = tmp_path / "libpq.trace"
    with open(trace, "w") as f:
        pgconn.trace(f.fileno())
        pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            call()
        finally:
            pgconn.untrace()
    lines = [line.split("\t") for line in trace.read_text().splitlines()]
    return [line[2].split(" ")[0] for line in lines if line[0] == "F"]


def test_pg_a_send_is_two_round_trips_to_the_server(pg: Store, tmp_path: Any) -> None:
    """BEGIN, the space's row lock and the caller check go in one round trip;
    the message, its delivery, the NOTIFY and the COMMIT in a second (the
    libpq protocol trace: one Sync from the client per round trip). Seven
    statements, each its own round trip, before."""
    op = Operator(pg)
    space = op.create_space("workflow").id
    sender, _ = op.join(space, "a")
    receiver, _ = op.join(space, "b")
    sender.send("b", "warm")
    pg.size_pool(1)  # the send takes the one connection traced here
    sent = _sent_by(pg, tmp_path, lambda: sender.send("b", "hello"))
    assert sent.count("Sync") == 2, sent
    lease = receiver.claim(limit=5)
    assert [d.body for d in lease.deliveries] == ["warm", "hello"]


def test_pg_a_claim_is_two_round_trips_with_no_snapshot_before_it(pg: Store, tmp_path: Any) -> None:
    """A claim after one that did not fill its limit: on SQLite a snapshot
    first spares an empty inbox the writer lock; PostgreSQL has no such lock,
    and the snapshot would cost round trips of its own. So the claim is its
    write transaction alone: BEGIN, the caller check and the claim (made with
    the limits the caller's last claim read) in one round trip, COMMIT in a
    second. Three before (the claim waited for the check's answer), six with
    the snapshot."""
    op = Operator(pg)
    space = op.create_space("workflow").id
    sender, _ = op.join(space, "a")
    receiver, _ = op.join(space, "b")
    assert receiver.claim(limit=5).deliveries == []  # did not fill: a snapshot would come next
    sender.send("b", "hello")
    pg.size_pool(1)
    got: list[Any] = []
    sent = _sent_by(pg, tmp_path, lambda: got.append(receiver.claim(limit=5)))
    assert sent.count("Sync") == 2, sent
    assert [d.body for d in got[0].deliveries] == ["hello"]
    sent = _sent_by(pg, tmp_path, lambda: got.append(receiver.claim(limit=5)))
    assert sent.count("Sync") == 2, sent  # an empty inbox: the same two
    assert got[1].deliveries == []


def test_pg_a_claim_made_with_limits_since_changed_is_made_again_with_the_new_ones(
    pg: Store, tmp_path: Any
) -> None:
    """The operator changes the space's lease between two claims: the claim
    sent with the old limits is rolled back and made again (its caller checked
    first), and its lease runs the new length; nothing was claimed twice."""
    op = Operator(pg)
    space = op.create_space("workflow", lease_seconds=30, max_deliveries=5).id
    sender, _ = op.join(space, "a")
    receiver, _ = op.join(space, "b")
    assert receiver.claim(limit=5).deliveries == []  # the limits this caller's claims read
    sender.send("b", "hello")
    op.set_space(space, lease_seconds=600)
    pg.size_pool(1)
    got: list[Any] = []
    sent = _sent_by(pg, tmp_path, lambda: got.append(receiver.claim(limit=5)))
    # More round trips than a claim made with the right limits (two): it was
    # sent, rolled back (a ROLLBACK, a simple query), and made again.
    assert sum(kind in ("Sync", "Query") for kind in sent) > 2, sent
    (lease,) = got
    assert [d.body for d in lease.deliveries] == ["hello"]
    with pg.read() as t:
        now = pg.now()
        rows = t.all("SELECT state, attempts, lease_expires_at FROM deliveries")
    assert [(r[0], r[1]) for r in rows] == [("processing", 1)]
    left = (parse_ts(rows[0][2]) - now).total_seconds()
    assert 500 < left <= 600, left  # the new lease, not the old 30 s
    assert lease.expires_at == rows[0][2]


@pytest.mark.parametrize("settle", ["ack", "release", "extend", "quarantine"])
def test_pg_a_settle_of_a_lease_is_two_round_trips(pg: Store, tmp_path: Any, settle: str) -> None:
    """BEGIN, the caller check and the settle's one statement in one round
    trip, COMMIT in a second (three before: the statement waited for the
    check's answer). No read before it, whatever the dialect does on SQLite."""
    op = Operator(pg)
    space = op.create_space("workflow").id
    sender, _ = op.join(space, "a")
    receiver, _ = op.join(space, "b")
    sent_id = sender.send("b", "hello").id
    lease = receiver.claim(limit=5)
    pg.size_pool(1)
    token = lease.lease_token
    calls = {
        "ack": lambda: receiver.ack(token),
        "release": lambda: receiver.release(token),
        "extend": lambda: receiver.extend(token, 60),
        "quarantine": lambda: receiver.quarantine(token, sent_id, "unreadable"),
    }
    sent = _sent_by(pg, tmp_path, calls[settle])
    assert sent.count("Sync") == 2, sent
    state = {"ack": "done", "release": "ready", "extend": "processing"}.get(settle, "quarantine")
    with pg.read() as t:
        assert [r[0] for r in t.all("SELECT state FROM deliveries")] == [state]


def test_pg_an_ack_and_claim_settles_in_the_round_trip_of_its_caller_check(
    pg: Store, tmp_path: Any
) -> None:
    """The ack of ``ack_and_claim`` goes with BEGIN and the caller check; the
    claim, which needs the limits that check read, follows alone, then COMMIT:
    three round trips (five before: the ack waited for the check's answer, and
    the claim checked the caller again)."""
    op = Operator(pg)
    space = op.create_space("workflow").id
    sender, _ = op.join(space, "a")
    receiver, _ = op.join(space, "b")
    sender.send("b", "one")
    sender.send("b", "two")
    lease = receiver.claim(limit=1)
    pg.size_pool(1)
    got: list[Any] = []
    sent = _sent_by(pg, tmp_path, lambda: got.append(receiver.ack_and_claim(lease.lease_token)))
    assert sent.count("Sync") == 3, sent
    assert [d.body for d in got[0].deliveries] == ["two"]


def test_pg_a_warm_send_parses_no_statement_its_statements_are_prepared_and_reused(
    pg: Store, tmp_path: Any
) -> None:
    """The send's statements are prepared on the server once the driver has seen
    them a few times (psycopg's prepare threshold), then only bound and run: a
    warm send sends no Parse message at all (the libpq protocol trace), and the
    session's prepared statements hold the log row's INSERT."""
    op = Operator(pg)
    space = op.create_space("workflow").id
    sender, _ = op.join(space, "a")
    op.join(space, "b")
    pg.size_pool(1)  # every send below on the one connection traced here
    for i in range(8):
        sender.send("b", f"warm {i}")
    with pg.read() as t:
        prepared = [r[0] for r in t.all("SELECT statement FROM pg_prepared_statements")]
    assert any(p.lstrip().startswith("INSERT INTO messages") for p in prepared), prepared
    sent = _sent_by(pg, tmp_path, lambda: sender.send("b", "hello"))
    assert "Bind" in sent, sent
    assert "Parse" not in sent, sent


def test_pg_a_deferred_write_refused_is_raised_by_the_statement_it_went_with_and_writes_nothing(
    pg: Store, pg_url: str
) -> None:
    _scratch(pg_url)
    with pytest.raises(errors.StoreError, match="integrity error"), pg.write() as t:
        t.defer("INSERT INTO scratch (k) VALUES (?)", (1,))
        t.defer("INSERT INTO scratch (k) VALUES (?)", (1,))  # refused: the same key
        t.one("SELECT 1")
    assert _scratch_keys(pg_url) == []
    # deferred writes are seen by the next statement of their transaction, in order
    with pg.write() as t:
        t.defer("INSERT INTO scratch (k) VALUES (?)", (2,))
        assert t.one("SELECT count(*) FROM scratch")[0] == 1
        t.defer("INSERT INTO scratch (k) VALUES (?)", (3,))  # goes with the COMMIT
    assert _scratch_keys(pg_url) == [2, 3]
    # refused at the COMMIT it went with: the transaction's earlier writes go too
    with pytest.raises(errors.StoreError, match="integrity error"), pg.write() as t:
        t.execute("INSERT INTO scratch (k) VALUES (?)", (4,))
        t.defer("INSERT INTO scratch (k) VALUES (?)", (2,))
    assert _scratch_keys(pg_url) == [2, 3]


def test_pg_in_the_group_committer_a_job_whose_deferred_write_is_refused_fails_alone(
    pg: Store, pg_url: str
) -> None:
    """Each job's deferred writes are sent before its savepoint is let go, so a
    refusal is that job's error; its neighbours in the transaction commit."""
    import asyncio

    from broker.frontends.http.commit import Committer

    _scratch(pg_url)

    def job(k: int) -> Any:
        def fn(t: Any) -> int:
            t.defer("INSERT INTO scratch (k) VALUES (?)", (k,))
            return k

        return fn

    committer = Committer(pg)

    async def main() -> list[Any]:
        return await asyncio.gather(
            *(committer.submit(job(k)) for k in (10, 11, 10, 12)), return_exceptions=True
        )

    try:
        outcomes = asyncio.run(main())
    finally:
        committer.close()
    assert outcomes[:2] == [10, 11] and outcomes[3] == 12
    assert isinstance(outcomes[2], errors.StoreError) and "integrity" in str(outcomes[2])
    assert _scratch_keys(pg_url) == [10, 11, 12]


def test_pg_the_callers_own_work_and_a_send_after_it_commit_or_fail_together(
    pg: Store, pg_url: str
) -> None:
    """The caller's SQLAlchemy work on the transaction's connection, then a send
    whose rows are deferred: the deferred rows are sent before the caller's
    COMMIT, so both are in, or (an error after them) neither."""
    _scratch(pg_url)
    op = Operator(pg)
    space = op.create_space("workflow").id
    sender, _ = op.join(space, "a")
    receiver, _ = op.join(space, "b")
    with pg.write() as t:
        t.connection.exec_driver_sql("INSERT INTO scratch (k) VALUES (7)")
        sender.send("b", "with my work", tx=t)
    with pytest.raises(RuntimeError), pg.write() as t:
        t.connection.exec_driver_sql("INSERT INTO scratch (k) VALUES (8)")
        sender.send("b", "rolled back", tx=t)
        raise RuntimeError("the caller's work failed")
    assert _scratch_keys(pg_url) == [7]
    assert [d.body for d in receiver.claim(limit=5).deliveries] == ["with my work"]
