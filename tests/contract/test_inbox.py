"""S13-S16, S20: every inbox is a transactional queue. Claims, leases, acks,
releases, expiry inside the claim predicate, quarantine, outer transactions,
waiting on the doorbell. Real SQLite files, real threads and processes."""

from __future__ import annotations

import math
import multiprocessing as mp
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
import sqlrows
import trusted
from conftest import Clock, open_store
from sqlrows import waiting_sql
from wakeprobe import WakeProbe

from broker import Agent, Operator, Store, errors
from broker.delivery import inbox, inbox_view
from broker.ids import parse_ts
from broker.model.inputs import ClaimInput, SendInput
from broker.model.records import to_dict
from broker.store.sql import stmt
from broker.store.sqlite import Tx

FORK = mp.get_context("fork")


@pytest.fixture
def cstore(clocked_url: str, clock: Clock) -> Iterator[Store]:
    s = open_store(clocked_url, clock=clock)
    yield s
    s.close()


def pair(store: Store, **settings: Any) -> tuple[str, Agent, Agent]:
    """A space with a sender ``a`` and a recipient ``b``."""
    sid = Operator(store).create_space("workflow", **settings).id
    a, _ = trusted.join(store, sid, "a")
    b, _ = trusted.join(store, sid, "b")
    return sid, a, b


def send_n(a: Agent, n: int, to: str = "b") -> list[str]:
    with a.store.transaction() as t:
        return [a.send(to, f"m{i}", tx=t).id for i in range(n)]


def row(store: Store, sql: str, params: tuple[Any, ...] = ()) -> Any:
    with store.read() as t:
        return t.one(sql, params)


def delivery(store: Store, message_id: str) -> dict[str, Any]:
    with store.read() as t:
        r = t.row(f"SELECT * FROM {sqlrows.delivery_rows()} WHERE message_id = ?", (message_id,))
    assert r is not None
    return r


def waiting(store: Store, agent: Agent) -> int:
    return int(
        row(store, f"{waiting_sql(store)} WHERE id = ?", (agent.identity.participant_id,))[0]
    )


# --- S13: claims -------------------------------------------------------------------------
def test_S13_claim_moves_the_oldest_ready_deliveries_to_processing_under_a_lease(
    store: Store,
) -> None:
    _, a, b = pair(store)
    ids = send_n(a, 3)
    lease = b.claim(limit=2, lease=60)
    assert [d.id for d in lease.deliveries] == ids[:2]
    assert lease.owner.startswith("b:")
    d0 = lease.deliveries[0]
    assert (d0.kind, d0.sender, d0.body, d0.deliveries) == ("direct", "a", "m0", 1)
    assert to_dict(d0)["sender"] == "a"
    for mid in ids[:2]:
        r = delivery(store, mid)
        assert r["state"] == "processing"
        assert r["lease_token"] == lease.lease_token
        assert r["lease_owner"] == lease.owner
        assert r["lease_expires_at"] == lease.expires_at
        assert r["attempts"] == 1
    assert delivery(store, ids[2])["state"] == "ready"
    assert waiting(store, b) == 3  # processing still counts against the inbox cap


def test_S13_fifo_is_by_created_at_then_id_with_equal_timestamps(
    cstore: Store, clock: Clock
) -> None:
    _, a, b = pair(cstore)
    ids = send_n(a, 30)  # all with the same frozen created_at_utc
    assert len({delivery(cstore, m)["created_at_utc"] for m in ids}) == 1
    got = [b.claim().deliveries[0].id for _ in range(30)]
    assert got == ids


def test_S13_S44_a_clock_stepped_back_stamps_no_message_before_the_last(
    cstore: Store, clock: Clock
) -> None:
    _, a, b = pair(cstore)
    clock.advance(10)
    first = a.send("b", "sent first").id
    clock.advance(-5)  # the clock steps back: the store's time does not (S44)
    second = a.send("b", "sent second").id
    assert delivery(cstore, second)["created_at_utc"] >= delivery(cstore, first)["created_at_utc"]
    assert [d.id for d in b.claim(limit=2).deliveries] == [first, second]


def test_S13_twelve_concurrent_thread_claims_get_twelve_distinct_messages(store: Store) -> None:
    sid, a, b = pair(store)
    ids = send_n(a, 12)
    barrier = threading.Barrier(12)
    got: list[str] = []
    lock = threading.Lock()
    failures: list[BaseException] = []

    def claimer() -> None:
        try:
            me = Agent(store, b.identity)
            barrier.wait()
            lease = me.claim(limit=1, lease=60)
            with lock:
                got.extend(d.id for d in lease.deliveries)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    threads = [threading.Thread(target=claimer) for _ in range(12)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not failures
    assert sorted(got) == sorted(ids)
    assert len(set(got)) == 12


def _process_claimer(url: str, ident: Any, barrier: Any, out: Any) -> None:
    s = Store(url)
    barrier.wait()
    lease = inbox.claim(s, ident, ClaimInput(limit=1, lease=60))
    out.put([d.id for d in lease.deliveries])
    s.close()


def test_S13_twelve_concurrent_process_claims_get_twelve_distinct_messages(
    store: Store, db_url: str
) -> None:
    _, a, b = pair(store)
    ids = send_n(a, 12)
    barrier = FORK.Barrier(12)
    out = FORK.Queue()
    procs = [
        FORK.Process(target=_process_claimer, args=(db_url, b.identity, barrier, out))
        for _ in range(12)
    ]
    for p in procs:
        p.start()
    got = [mid for _ in procs for mid in out.get(timeout=60)]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert sorted(got) == sorted(ids)
    assert len(set(got)) == 12


@pytest.mark.sqlite_only  # the SQLite file itself (tests/unit/store/test_pg.py: the same on PostgreSQL)
def test_S13_claim_is_one_statement_on_the_partial_indexes_without_a_full_scan(
    store: Store,
) -> None:
    _, a, b = pair(store)
    send_n(a, 5)
    claim = stmt("inbox.claim")
    params = {
        "recipient_id": b.identity.participant_id,
        "n": 1,
        "now": "now",
        "max_deliveries": 5,
        "token": "tok",
        "owner": "owner",
        "expires": "exp",
        "process": None,
    }
    with store.read() as t:
        plan = [r["detail"] for r in t.all("EXPLAIN QUERY PLAN " + claim, params)]
    text = "\n".join(plan)
    assert "ix_deliveries_ready" in text
    assert "ix_deliveries_leased" in text
    assert not [p for p in plan if p.startswith("SCAN deliveries")], text
    assert claim.startswith("UPDATE deliveries") and "RETURNING" in claim


def test_S20_a_parked_waits_probe_answers_as_a_claim_would_and_sees_a_lapsed_lease(
    cstore: Store, clock: Clock
) -> None:
    """The probe a parked wait runs at its tick (``inbox.claimable_among``, one
    statement for every parked claim): nothing in an empty inbox or under a
    running lease; something once a message is ready or its lease has lapsed,
    by the store's clock. An inbox beside it answers for itself, and an id
    that names nobody is simply not in the answer."""
    _, a, b = pair(cstore)
    pid = b.identity.participant_id
    other = a.identity.participant_id

    def probe() -> bool:
        with cstore.read() as t:
            hit = inbox.claimable_among(t, [other, pid, "p" + "0" * 26])
        assert other not in hit  # a's inbox stays empty throughout
        return pid in hit

    assert not probe()
    a.send("b", "m")
    assert probe()
    b.claim(lease=30)
    assert not probe()
    clock.advance(31)
    assert probe()
    assert len(b.claim().deliveries) == 1  # and a claim takes it, as the probe said


def test_S13_claim_refreshes_the_heartbeat(cstore: Store, clock: Clock) -> None:
    _, a, b = pair(cstore)
    clock.advance(120)
    b.claim()
    seen = row(
        cstore, "SELECT last_seen_utc FROM participants WHERE id = ?", (b.identity.participant_id,)
    )[0]
    assert parse_ts(seen) == clock.now


def test_S13_an_empty_inbox_gives_an_empty_lease(store: Store) -> None:
    _, _, b = pair(store)
    lease = b.claim(limit=5)
    assert lease.deliveries == []
    assert lease.lease_token


def test_S13_claim_refuses_bad_limits_and_leases(store: Store) -> None:
    _, _, b = pair(store)
    with pytest.raises(errors.InvalidInput):
        b.claim(limit=0)
    with pytest.raises(errors.InvalidInput):
        b.claim(lease=0)


def test_S10_claim_with_a_replaced_token_is_refused(store: Store) -> None:
    sid = Operator(store).create_space("workflow").id
    a, _ = trusted.join(store, sid, "a")
    b, first = trusted.join(store, sid, "b")
    send_n(a, 1)
    trusted.join(store, sid, "b", token=first.token)  # re-join: a new token replaces the old one
    with pytest.raises(errors.AuthError):
        b.claim()


# --- S14: ack, release, extend ------------------------------------------------------------
def test_S14_ack_moves_processing_to_done_and_is_idempotent_for_the_holder(store: Store) -> None:
    _, a, b = pair(store)
    ids = send_n(a, 2)
    lease = b.claim(limit=2)
    assert b.ack(lease.lease_token, [ids[0]]) == 1
    assert b.ack(lease.lease_token, [ids[0]]) == 0  # a repeat: no error, nothing new
    assert b.ack(lease.lease_token) == 1  # the rest of the lease
    assert b.ack(lease.lease_token) == 0
    for mid in ids:
        r = delivery(store, mid)
        assert r["state"] == "done"
        assert r["acked_at_utc"]
    assert waiting(store, b) == 0


def test_S14_a_stale_ack_after_the_lease_was_reclaimed_is_refused_with_lease_lost(
    cstore: Store, clock: Clock
) -> None:
    _, a, b = pair(cstore)
    (mid,) = send_n(a, 1)
    first = b.claim(lease=10)
    clock.advance(11)
    second = Agent(cstore, b.identity).claim(lease=10)
    assert [d.id for d in second.deliveries] == [mid]
    with pytest.raises(errors.LeaseLost) as info:
        b.ack(first.lease_token, [mid])
    assert mid in str(info.value)
    assert info.value.fields["lost"] == [mid]
    with pytest.raises(errors.LeaseLost):
        b.ack(first.lease_token)  # the whole (lost) lease
    with pytest.raises(errors.LeaseLost):
        b.extend(first.lease_token, 30)
    with pytest.raises(errors.LeaseLost):
        b.release(first.lease_token)
    assert delivery(cstore, mid)["state"] == "processing"
    assert b.ack(second.lease_token) == 1


def test_S14_ack_of_an_expired_lease_that_nobody_reclaimed_still_succeeds(
    cstore: Store, clock: Clock
) -> None:
    _, a, b = pair(cstore)
    (mid,) = send_n(a, 1)
    lease = b.claim(lease=10)
    clock.advance(60)
    assert b.ack(lease.lease_token) == 1  # stale = expired AND claimed by someone else
    assert delivery(cstore, mid)["state"] == "done"


def test_S14_a_lost_id_in_a_batch_ack_acks_nothing(cstore: Store, clock: Clock) -> None:
    _, a, b = pair(cstore)
    ids = send_n(a, 2)
    lease = b.claim(limit=2, lease=10)
    clock.advance(5)
    b.extend(lease.lease_token, 30, [ids[0]])  # only the first is kept
    clock.advance(10)
    other = Agent(cstore, b.identity).claim(limit=2)
    assert [d.id for d in other.deliveries] == [ids[1]]
    with pytest.raises(errors.LeaseLost) as info:
        b.ack(lease.lease_token, ids)
    assert info.value.fields["lost"] == [ids[1]]
    assert delivery(cstore, ids[0])["state"] == "processing"  # all or nothing
    assert b.ack(lease.lease_token, [ids[0]]) == 1


def test_S14_ack_of_an_id_not_in_the_inbox_is_not_found(store: Store) -> None:
    _, a, b = pair(store)
    send_n(a, 1)
    lease = b.claim()
    with pytest.raises(errors.MessageNotFound):
        b.ack(lease.lease_token, ["01NOTAMESSAGE0000000000000"])


def test_S14_another_participant_cannot_ack_my_lease(store: Store) -> None:
    sid, a, b = pair(store)
    send_n(a, 1)
    lease = b.claim()
    with pytest.raises(errors.LeaseLost):
        a.ack(lease.lease_token)
    assert b.ack(lease.lease_token) == 1


def test_S14_release_puts_messages_back_for_replay(store: Store) -> None:
    _, a, b = pair(store)
    ids = send_n(a, 2)
    lease = b.claim(limit=2)
    assert b.release(lease.lease_token, [ids[0]], error="tool crashed") == 1
    assert b.release(lease.lease_token, [ids[0]]) == 0  # idempotent for the holder
    r = delivery(store, ids[0])
    assert (r["state"], r["lease_expires_at"], r["last_error"]) == ("ready", None, "tool crashed")
    replay = b.claim()
    assert [(d.id, d.deliveries) for d in replay.deliveries] == [(ids[0], 2)]
    with pytest.raises(errors.LeaseLost):
        b.ack(lease.lease_token, [ids[0]])  # released, then claimed again
    assert b.ack(lease.lease_token, [ids[1]]) == 1


def test_S14_extend_keeps_a_lease_past_its_first_expiry(cstore: Store, clock: Clock) -> None:
    _, a, b = pair(cstore)
    (mid,) = send_n(a, 1)
    lease = b.claim(lease=10)
    clock.advance(8)
    new_expiry = b.extend(lease.lease_token, 30)
    assert parse_ts(new_expiry) == clock.now + timedelta(seconds=30)
    clock.advance(20)  # past the first expiry, inside the extension
    assert Agent(cstore, b.identity).claim().deliveries == []
    assert b.ack(lease.lease_token) == 1


# --- S15: expiry, quarantine ----------------------------------------------------------------
def test_S15_an_expired_lease_is_redelivered_by_the_claim_with_its_count_raised(
    cstore: Store, clock: Clock
) -> None:
    _, a, b = pair(cstore)
    (mid,) = send_n(a, 1)
    first = b.claim(lease=10)
    assert first.deliveries[0].deliveries == 1
    clock.advance(5)
    assert b.claim().deliveries == []  # not expired yet
    clock.advance(6)
    again = b.claim(lease=10)  # no sweeper ran: the claim predicate took it back
    assert [(d.id, d.deliveries) for d in again.deliveries] == [(mid, 2)]
    assert "expired" in (delivery(cstore, mid)["last_error"] or "")


def test_S15_a_poison_message_is_quarantined_after_exactly_max_deliveries(
    cstore: Store, clock: Clock
) -> None:
    sid, a, b = pair(cstore, max_deliveries=3)
    poison, good = send_n(a, 2)
    counts = []
    for _ in range(3):
        lease = b.claim(lease=10)
        counts.append([(d.id, d.deliveries) for d in lease.deliveries])
        clock.advance(11)  # the holder "crashes" every time
    assert counts == [[(poison, 1)], [(poison, 2)], [(poison, 3)]]
    nxt = b.claim()  # the 4th claim quarantines it and hands out the next one
    assert [d.id for d in nxt.deliveries] == [good]
    q = Operator(cstore).quarantined(sid)
    assert [(x.id, x.recipient, x.deliveries, x.reason) for x in q] == [
        (poison, "b", 3, "max_deliveries")
    ]
    assert "expired" in (q[0].last_error or "")
    assert delivery(cstore, poison)["state"] == "quarantine"
    with pytest.raises(errors.LeaseLost):
        b.ack(lease.lease_token)  # the last holder's token no longer holds it


def test_S15_a_released_message_also_quarantines_after_max_deliveries(store: Store) -> None:
    sid, a, b = pair(store, max_deliveries=2)
    (mid,) = send_n(a, 1)
    for _ in range(2):
        lease = b.claim()
        b.release(lease.lease_token, error="cannot parse")
    assert b.claim().deliveries == []
    (q,) = Operator(store).quarantined(sid)
    assert (q.id, q.deliveries, q.reason, q.last_error) == (
        mid,
        2,
        "max_deliveries",
        "cannot parse",
    )


def test_S15_quarantine_keeps_evidence_and_does_not_block_later_messages(store: Store) -> None:
    sid, a, b = pair(store)
    bad, good = send_n(a, 2)
    lease = b.claim()
    b.quarantine(lease.lease_token, bad, "schema mismatch", error="KeyError: 'x'")
    b.quarantine(lease.lease_token, bad, "schema mismatch")  # idempotent for the holder
    assert [d.id for d in b.claim().deliveries] == [good]
    (q,) = Operator(store).quarantined(sid)
    assert (q.id, q.reason, q.last_error, q.deliveries) == (
        bad,
        "schema mismatch",
        "KeyError: 'x'",
        1,
    )
    assert waiting(store, b) == 1  # quarantine leaves the inbox count


def test_S15_quarantined_deliveries_can_be_requeued(store: Store) -> None:
    sid, a, b = pair(store, max_deliveries=1)
    (mid,) = send_n(a, 1)
    lease = b.claim()
    b.quarantine(lease.lease_token, mid, "bad")
    op = Operator(store)
    with pytest.raises(errors.MessageNotFound):
        op.requeue(sid, ["nothing-like-that"])
    assert op.requeue(sid, [mid]) == 1
    assert op.quarantined(sid) == []
    again = b.claim()
    assert [(d.id, d.deliveries) for d in again.deliveries] == [(mid, 1)]  # a fresh count


# --- batches and outer transactions (S16) -----------------------------------------------------
def test_S13_batch_claim_n_ack_n_and_ack_and_claim_next(store: Store) -> None:
    _, a, b = pair(store)
    ids = send_n(a, 7)
    first = b.claim(limit=3)
    assert [d.id for d in first.deliveries] == ids[:3]
    nxt = b.ack_and_claim(first.lease_token, limit=3)
    assert [d.id for d in nxt.deliveries] == ids[3:6]
    assert all(delivery(store, m)["state"] == "done" for m in ids[:3])
    last = b.ack_and_claim(nxt.lease_token, [d.id for d in nxt.deliveries], limit=3)
    assert [d.id for d in last.deliveries] == ids[6:]
    assert b.ack(last.lease_token, ids[6:]) == 1


def test_S13_ack_and_claim_with_a_lost_lease_claims_nothing(cstore: Store, clock: Clock) -> None:
    _, a, b = pair(cstore)
    ids = send_n(a, 2)
    old = b.claim(lease=5)
    clock.advance(6)
    Agent(cstore, b.identity).claim(lease=60)  # takes ids[0] back
    with pytest.raises(errors.LeaseLost):
        b.ack_and_claim(old.lease_token)
    assert delivery(cstore, ids[1])["state"] == "ready"  # the claim rolled back with the ack


def _history(store: Store) -> list[str]:
    with store.read() as t:
        return [r[0] for r in t.all("SELECT message_id FROM work_log ORDER BY message_id")]


def test_S16_history_first_then_ack_commit_or_fail_together(cstore: Store, clock: Clock) -> None:
    _, a, b = pair(cstore)
    ids = send_n(a, 2)
    with cstore.transaction() as t:
        t.execute("CREATE TABLE work_log (message_id TEXT PRIMARY KEY, body TEXT)")

    def consume(agent: Agent, lease: Any) -> None:
        with cstore.transaction() as t:
            for d in lease.deliveries:
                # De-duplicate by the stable message id (S16).
                t.execute(
                    "INSERT INTO work_log VALUES (?, ?) ON CONFLICT DO NOTHING", (d.id, d.body)
                )
            agent.ack(lease.lease_token, [d.id for d in lease.deliveries], tx=t)

    lease = b.claim(lease=5)
    consume(b, lease)
    assert _history(cstore) == [ids[0]]
    assert delivery(cstore, ids[0])["state"] == "done"

    stale = b.claim(lease=5)
    clock.advance(6)
    fresh = Agent(cstore, b.identity).claim(lease=60)  # the lease was lost meanwhile
    with pytest.raises(errors.LeaseLost):
        consume(b, stale)
    assert _history(cstore) == [ids[0]]  # the history append was rolled back with the ack
    consume(b, fresh)
    assert _history(cstore) == ids
    # A duplicate delivery (e.g. after a crash between commit and reply) is harmless.
    consume(b, fresh)
    assert _history(cstore) == ids


def test_S16_a_claim_joined_to_a_failing_outer_transaction_is_undone(store: Store) -> None:
    _, a, b = pair(store)
    (mid,) = send_n(a, 1)
    with pytest.raises(RuntimeError), store.transaction() as t:
        got = b.claim(tx=t)
        assert [d.id for d in got.deliveries] == [mid]
        raise RuntimeError("the caller's own work failed")
    assert delivery(store, mid)["state"] == "ready"
    assert delivery(store, mid)["attempts"] == 0


def test_S16_cannot_wait_inside_a_transaction(store: Store) -> None:
    _, _, b = pair(store)
    with pytest.raises(errors.InvalidInput), store.transaction() as t:
        b.claim(wait=1, tx=t)


# --- S20: waiting --------------------------------------------------------------------------
def _send_later(url: str, ident: Any, go: Any) -> None:
    s = Store(url)
    go.wait()
    from broker.mail import messages

    messages.send(s, ident, SendInput(to="b", text="woken"))
    s.close()


def test_S20_claim_wait_wakes_when_another_process_sends(
    store: Store, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, a, b = pair(store)
    go = FORK.Event()
    proc = FORK.Process(target=_send_later, args=(db_url, a.identity, go))
    proc.start()
    probe = WakeProbe.install(monkeypatch)
    result: list[Any] = []
    th = threading.Thread(target=lambda: result.append(b.claim(wait=30)))
    th.start()
    try:
        assert probe.asleep.wait(30)  # checked, found nothing, about to block: send now
        go.set()
        th.join(timeout=60)
    finally:
        go.set()
        proc.join(timeout=60)
    assert proc.exitcode == 0
    assert [d.body for d in result[0].deliveries] == ["woken"]
    assert probe.woke == ["rung"]  # the doorbell woke it, not the safety tick


def test_S20_claim_wait_takes_an_expired_lease_back_without_a_ring(store: Store) -> None:
    _, a, b = pair(store)
    (mid,) = send_n(a, 1)
    b.claim(lease=0.3)  # the holder goes silent: no commit will ring anyone
    again = Agent(store, b.identity).claim(wait=30)
    assert [(d.id, d.deliveries) for d in again.deliveries] == [(mid, 2)]


def test_S20_claim_wait_times_out_with_an_empty_lease(store: Store) -> None:
    _, _, b = pair(store)
    assert b.claim(wait=0.05).deliveries == []


# --- CLI -----------------------------------------------------------------------------------
@pytest.fixture
def cli_pair(
    cli: Callable[..., Any], store: Store
) -> tuple[str, Agent, dict[str, str], Callable[..., Any]]:
    """A space with ``a`` and ``b`` made through the library (the CLI's space create,
    join and msg send have their own tests): ``a`` as an Agent, ``b``'s environment."""
    sid = Operator(store).create_space("workflow").id
    a, _ = trusted.join(store, sid, "a")
    _, jb = trusted.join(store, sid, "b")
    eb = {"BROKER_SPACE": sid, "BROKER_AS": jb.address, "BROKER_TOKEN": jb.token}
    return sid, a, eb, cli


def test_cli_inbox_claim_ack_release_extend_quarantine_requeue(
    cli_pair: tuple[str, Agent, dict[str, str], Callable[..., Any]],
) -> None:
    sid, a, eb, cli = cli_pair
    m1 = a.send("b", "first").id
    m2 = a.send("b", "second").id
    r = cli("inbox", "claim", "--limit", "2", "--ttl", "60", "--json", env=eb)
    assert r.code == 0, r.err
    got = r.json()
    assert set(got) == {"lease_token", "owner", "expires_at", "deliveries"}
    assert [
        (m["id"], m["sender"], m["body"], m["kind"], m["deliveries"]) for m in got["deliveries"]
    ] == [
        (m1, "a", "first", "direct", 1),
        (m2, "a", "second", "direct", 1),
    ]
    token = got["lease_token"]
    r = cli("inbox", "extend", "--lease-token", token, "--ttl", "120", "--json", env=eb)
    assert r.code == 0, r.err
    assert "expires_at" in r.json()
    assert cli("inbox", "ack", "--lease-token", token, m1, "--json", env=eb).json() == {"acked": 1}
    assert cli("inbox", "ack", "--lease-token", token, m1, "--json", env=eb).json() == {"acked": 0}
    assert cli("inbox", "release", "--lease-token", token, "--json", env=eb).json() == {
        "released": 1
    }
    again = cli("inbox", "claim", "--json", env=eb).json()
    assert [(m["id"], m["deliveries"]) for m in again["deliveries"]] == [(m2, 2)]
    stale = cli("inbox", "ack", "--lease-token", token, m2, env=eb)
    assert stale.code == 5 and "lease_lost" in stale.err
    r = cli(
        "inbox", "quarantine", "--lease-token", again["lease_token"], m2, "--reason", "bad input",
        env=eb,
    )  # fmt: skip
    assert r.code == 0, r.err
    q = cli("queue", "quarantined", sid, "--json").lines()
    assert [(x["id"], x["recipient"], x["reason"]) for x in q] == [(m2, "b", "bad input")]
    assert cli("queue", "quarantined", sid).code == 0
    assert cli("queue", "requeue", sid, m2, "--json").json() == {"requeued": 1}
    assert cli("queue", "quarantined", sid, "--json").out == ""
    text = cli("inbox", "claim", env=eb)
    assert text.code == 0 and "second" in text.out


def test_cli_inbox_needs_an_identity(cli: Callable[..., Any]) -> None:
    r = cli("inbox", "claim")  # no identity at all: a usage mistake (issue 27)
    assert r.code == 2
    assert r.err.startswith("broker: usage: no identity: set BROKER_TOKEN")


# --- S15: poison never hides a good message -----------------------------------------------
def _poison(b: Agent, n: int) -> None:
    """Hand out ``n`` messages once and give them back: with max_deliveries=1
    each is poison now (delivered max_deliveries times)."""
    lease = b.claim(limit=n)
    assert len(lease.deliveries) == n
    assert b.release(lease.lease_token) == n


def _statements(store: Store, fn: Callable[[], Any]) -> tuple[Any, int]:
    """``fn()`` and how many statements this thread's connection ran for it."""
    seen: list[str] = []
    if store.dialect == "postgresql":  # every statement goes through PgConn.execute
        from broker.store.postgres import PgConn

        plain = PgConn.execute

        def counting(self: PgConn, sql: str, params: Any = ()) -> Any:
            seen.append(sql)
            return plain(self, sql, params)

        PgConn.execute = counting  # type: ignore[method-assign]
        try:
            return fn(), len(seen)
        finally:
            PgConn.execute = plain  # type: ignore[method-assign]
    # Every statement the library runs goes through one of Tx's methods: count
    # the calls (SQLite's trace callback repeats a statement for each trigger
    # step, and identical statements cannot be told from those repeats).
    plain_methods = {
        name: getattr(Tx, name) for name in ("execute", "many", "one", "all", "rows", "row")
    }

    def counting(name: str) -> Any:
        def run(self: Tx, sql: str, *args: Any) -> Any:
            seen.append(sql)
            return plain_methods[name](self, sql, *args)

        return run

    for name in plain_methods:
        setattr(Tx, name, counting(name))
    try:
        return fn(), len(seen)
    finally:
        for name, method in plain_methods.items():
            setattr(Tx, name, method)


@pytest.mark.parametrize(("limit", "poisoned"), [(1, 1000), (3, 16 * 3 + 5)])
def test_S15_a_claim_reaches_good_messages_behind_any_amount_of_poison(
    store: Store, limit: int, poisoned: int
) -> None:
    sid, a, b = pair(store, max_deliveries=1, inbox_cap=5000)
    # The poison is only the setting: sent as one batch (one transaction, batched
    # statements), not a round trip per message.
    a.send_many({"to": "b", "text": f"m{i}"} for i in range(poisoned))
    _poison(b, poisoned)
    good = send_n(a, limit)
    lease, statements = _statements(store, lambda: b.claim(limit=limit))
    assert [d.id for d in lease.deliveries] == good
    # The poison was quarantined on the way, in windows that double: one
    # statement per doubling (about log2 of the poison per message wanted) and
    # a few fixed ones (the caller's check, the claim), not one round per
    # poison message nor a window that stops growing.
    assert statements <= math.ceil(math.log2(poisoned / limit)) + 4
    quarantined = inbox_view.quarantined(store, sid)
    assert len(quarantined) == poisoned
    assert {(q.reason, q.deliveries) for q in quarantined} == {("max_deliveries", 1)}


def test_S15_expired_poison_leases_do_not_hide_a_good_message(cstore: Store, clock: Clock) -> None:
    sid, a, b = pair(cstore, max_deliveries=1, inbox_cap=5000)
    send_n(a, 70)
    assert len(b.claim(limit=70, lease=1).deliveries) == 70
    clock.advance(5)  # every lease ran out: processing, expired, handed out once
    good = a.send("b", "good").id
    assert [d.id for d in b.claim().deliveries] == [good]
    quarantined = inbox_view.quarantined(cstore, sid)
    assert len(quarantined) == 70
    assert all("expired" in (q.last_error or "") for q in quarantined)


def test_S15_poison_between_good_messages_keeps_fifo_and_fills_the_batch(store: Store) -> None:
    sid, a, b = pair(store, max_deliveries=1, inbox_cap=5000)
    first = send_n(a, 2)
    assert b.claim(limit=2).deliveries
    send_n(a, 40)
    middle = b.claim(limit=40)
    b.release(middle.lease_token)  # 40 poison behind ...
    later = send_n(a, 3)  # ... and good ones after them
    got = b.claim(limit=3)
    assert [d.id for d in got.deliveries] == later
    assert len(inbox_view.quarantined(store, sid)) == 40
    assert [delivery(store, m)["state"] for m in first] == ["processing", "processing"]


# --- the operator's view of each inbox (the console) -------------------------------------------
def test_S15_activity_counts_each_inbox_as_a_queue_and_the_last_minutes_sends(
    cstore: Store, clock: Clock
) -> None:
    op = Operator(cstore)
    space = op.create_space("workflow").id
    lead, _ = trusted.join(cstore, space, "heron", lead=True)
    lynx, _ = trusted.join(cstore, space, "lynx")
    otter, _ = trusted.join(cstore, space, "otter")
    ids = [lead.send("lynx", f"task {i}").id for i in range(3)]
    otter.send("lynx", "from otter")
    op.send(space, "from the operator", to=["lynx"])

    def queue(address: str) -> tuple[int, int, int, int, int]:
        (row,) = [i for i in op.activity(space).inboxes if i.address == address]
        return (row.waiting, row.in_flight, row.retried, row.quarantined, row.sent_last_minute)

    assert queue("lynx") == (5, 0, 0, 0, 0)
    assert (queue("lead")[4], queue("otter")[4], op.activity(space).sent_last_minute) == (3, 1, 5)
    lease = lynx.claim(limit=3, lease=60)
    assert queue("lynx") == (2, 3, 0, 0, 0)
    lynx.release(lease.lease_token, [ids[0]])  # handed out once, back: waiting, retried
    assert queue("lynx") == (3, 2, 1, 0, 0)
    lynx.quarantine(lease.lease_token, ids[1], "cannot parse")
    assert queue("lynx") == (3, 1, 1, 1, 0)
    clock.advance(61)  # the lease ran out: waiting again, and retried; the sends are old
    assert queue("lynx") == (4, 0, 2, 1, 0)
    assert op.activity(space).sent_last_minute == 0
    turn = lynx.next_turn()
    assert turn.id is not None
    lynx.seen(turn.id)  # a receipt is no send
    assert op.activity(space).sent_last_minute == 0
    lynx.leave()
    activity = op.activity(space)
    assert [(i.address, i.status) for i in activity.inboxes] == [
        ("lead", "running"),
        ("lynx", "left"),
        ("otter", "running"),
    ]
    assert activity.space_id == space and activity.at_utc == cstore.now_ts()


def test_S13_a_claim_reads_the_ready_index_and_the_unfolded_tail_in_log_order(
    store: Store,
) -> None:
    """Revision 0019: a send's delivery enters the ready index only when the
    waiting fold takes it (every 32 messages, SQLite); until then a claim finds
    it in the short tail past the fold. Across that boundary, released rows
    of both sides included, an inbox is claimed in log order."""
    _, a, b = pair(store)
    ids = [a.send("b", f"m{i}").id for i in range(40)]
    with store.read() as t:
        unqueued = [r[0] for r in t.all("SELECT rowid FROM deliveries WHERE queued = 0")]
        if store.dialect == "sqlite":  # the 32nd message folded the rows before it in
            (upto,) = t.one("SELECT upto FROM folds WHERE name = 'waiting'")
            assert len(unqueued) == 8 and min(unqueued) > upto
        else:  # PostgreSQL pays round trips, not pages: every row is in the index at once
            assert unqueued == []
    lease = b.claim(limit=36)
    assert [d.body for d in lease.deliveries] == [f"m{i}" for i in range(36)]
    assert b.release(lease.lease_token, [ids[1], ids[34]]) == 2
    assert [d.body for d in b.claim(limit=10).deliveries] == [
        "m1",
        "m34",
        *map("m{}".format, range(36, 40)),
    ]
    assert b.claim(limit=10).deliveries == []
