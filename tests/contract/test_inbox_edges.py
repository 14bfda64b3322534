"""S13-S15, S20, S33 at the edges of the inbox, from the mutation run over inbox.py
(docs/mutation.md): the documented bounds exactly, what a claim returns when
poison sits at the head, the delivery id it reports, its defaults, and the
wake-up at a lease expiry that nobody rings.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlrows
import trusted
from conftest import Clock
from wakeprobe import WakeProbe

from broker import Agent, Operator, Store, errors
from broker.delivery import inbox, waits, wake
from broker.ids import fmt_ts
from broker.model.inputs import ClaimInput
from broker.model.records import QueueStats
from broker.spaces import auth

WEEK_S = 7 * 24 * 3600.0


@pytest.fixture
def cstore(tmp_path: Path, clock: Clock) -> Iterator[Store]:
    s = Store(f"sqlite:///{tmp_path / 'clocked.db'}", clock=clock)
    yield s
    s.close()


def pair(store: Store, **settings: Any) -> tuple[Agent, Agent]:
    sid = Operator(store).create_space("workflow", **settings).id
    a, _ = trusted.join(store, sid, "a")
    b, _ = trusted.join(store, sid, "b")
    return a, b


def test_S33_claim_limit_is_1_to_10000_exactly(store: Store) -> None:
    a, b = pair(store)
    a.send("b", "one")
    assert len(b.claim(limit=10_000).deliveries) == 1
    for bad in (0, 10_001):
        with pytest.raises(errors.InvalidInput, match=f"^bad limit {bad}: 1 to 10000$"):
            b.claim(limit=bad)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"limit": True}, "bad limit True: a whole number is needed"),
        ({"limit": "2"}, "bad limit '2': a whole number is needed"),
        ({"limit": 2.0}, "bad limit 2.0: a whole number is needed"),
        ({"wait": True}, "bad wait True: a number of seconds is needed"),
        ({"wait": "1"}, "bad wait '1': a number of seconds is needed"),
    ],
)
def test_S33_the_library_claim_under_the_handle_refuses_a_limit_or_wait_of_another_type(
    store: Store, kw: dict[str, Any], message: str
) -> None:
    # The input record is the one check, whoever builds it, before anything is claimed.
    a, b = pair(store)
    a.send("b", "x")
    with pytest.raises(errors.InvalidInput) as info:
        inbox.claim(store, b.identity, ClaimInput(**kw))
    assert (str(info.value), info.value.fields) == (message, {"field": next(iter(kw))})
    assert len(b.claim().deliveries) == 1  # nothing was claimed


def test_S33_a_lease_is_more_than_0_and_at_most_7_days_exactly(store: Store) -> None:
    a, b = pair(store)
    a.send("b", "one")
    lease = b.claim(lease=WEEK_S)
    assert len(lease.deliveries) == 1
    week = "at least 0.001 and at most 604800 seconds$"
    for bad in (0.0, WEEK_S + 1):
        with pytest.raises(errors.InvalidInput, match=f"^bad lease .*: {week}"):
            b.claim(lease=bad)
        with pytest.raises(errors.InvalidInput, match=f"^bad seconds .*: {week}"):
            b.extend(lease.lease_token, bad)
    assert b.extend(lease.lease_token, WEEK_S) >= lease.expires_at  # accepted at the bound


def test_S33_a_lease_owner_is_text_of_at_most_200_characters_exactly(store: Store) -> None:
    a, b = pair(store)
    a.send("b", "one")
    a.send("b", "two")
    lease = b.claim(owner="o" * 200)
    assert lease.owner == "o" * 200 and len(lease.deliveries) == 1
    too_long = "^bad owner: at most 200 characters, not 201$"
    with pytest.raises(errors.InvalidInput, match=too_long):
        b.claim(owner="o" * 201)
    # The same bound when acking and claiming at once; the refusal acks nothing.
    with pytest.raises(errors.InvalidInput, match=too_long):
        inbox.ack_and_claim(store, b.identity, lease.lease_token, None, 1, None, "p" * 201)
    following = inbox.ack_and_claim(store, b.identity, lease.lease_token, None, 1, None, "p" * 200)
    assert following.owner == "p" * 200
    assert [d.body for d in following.deliveries] == ["two"]


def test_S15_release_and_quarantine_evidence_is_at_most_8000_characters_exactly(
    store: Store,
) -> None:
    a, b = pair(store)
    a.send("b", "one")
    lease = b.claim()
    mid = lease.deliveries[0].id
    with pytest.raises(errors.InvalidInput, match="^bad error: at most 8000 characters, not 8001$"):
        b.release(lease.lease_token, error="e" * 8001)
    assert b.release(lease.lease_token, error="e" * 8000) == 1
    lease = b.claim()
    with pytest.raises(
        errors.InvalidInput, match="^bad reason: at most 8000 characters, not 8001$"
    ):
        b.quarantine(lease.lease_token, mid, "r" * 8001)
    with pytest.raises(errors.InvalidInput, match="^bad error: at most 8000 characters, not 8001$"):
        b.quarantine(lease.lease_token, mid, "r", error="e" * 8001)
    b.quarantine(lease.lease_token, mid, "r" * 8000, error="f" * 8000)
    [q] = Operator(store).quarantined(b.identity.space_id)
    assert (q.id, q.reason, q.last_error) == (mid, "r" * 8000, "f" * 8000)


def test_S13_queue_stats_count_deliveries_by_state_and_the_redeliveries(store: Store) -> None:
    a, b = pair(store)
    for body in ("one", "two", "three", "four"):
        a.send("b", body)
    op = Operator(store)
    space = b.identity.space_id
    assert op.queue_stats(space) == QueueStats(
        ready=4, processing=0, done=0, quarantine=0, redeliveries=0
    )
    first = b.claim(limit=2)
    assert [d.body for d in first.deliveries] == ["one", "two"]
    b.release(first.lease_token, [first.deliveries[1].id])  # "two" goes back
    b.ack(first.lease_token, [first.deliveries[0].id])  # "one" is done
    again = b.claim()
    assert [d.body for d in again.deliveries] == ["two"]  # its second delivery
    b.quarantine(again.lease_token, again.deliveries[0].id, "bad")
    b.claim()  # "three" in processing; "four" still ready
    assert op.queue_stats(space) == QueueStats(
        ready=1, processing=1, done=1, quarantine=1, redeliveries=1
    )


def test_S33_a_lease_token_is_text_of_1_to_100_characters(store: Store) -> None:
    a, b = pair(store)
    a.send("b", "one")
    lease = b.claim()
    with pytest.raises(errors.InvalidInput, match="^bad lease_token: not empty$") as e:
        b.ack("")  # the input record's words, the same on every surface
    assert e.value.fields == {"field": "lease_token"}
    with pytest.raises(
        errors.InvalidInput, match="^bad lease_token: at most 100 characters, not 101$"
    ):
        b.ack("x" * 101)
    with pytest.raises(errors.InvalidInput, match="^bad lease token 7: the token the claim"):
        inbox.ack(store, b.identity, 7)  # type: ignore[arg-type]  # below the API's own check
    with pytest.raises(errors.LeaseLost):  # well-formed, but no lease of this recipient's
        b.ack("x" * 100)
    assert b.ack(lease.lease_token) == 1


def test_S33_message_ids_are_one_id_or_a_list_and_never_an_empty_one(store: Store) -> None:
    a, b = pair(store)
    a.send("b", "one")
    a.send("b", "two")
    lease = b.claim(limit=2)
    first, second = (d.id for d in lease.deliveries)
    empty = r"^no message ids given \(omit them to mean the whole lease\)$"
    with pytest.raises(errors.InvalidInput, match=empty) as e:
        b.ack(lease.lease_token, [])
    assert e.value.fields == {"field": "ids"}
    with pytest.raises(errors.InvalidInput, match=r"^bad ids\.0: at most 100 characters, not 101$"):
        b.ack(lease.lease_token, ["x" * 101])
    # One id as a plain string (the API's own check wants a list; the module takes both).
    assert inbox.ack(store, b.identity, lease.lease_token, first) == 1
    assert b.ack(lease.lease_token, [second, second]) == 1  # a repeated id counts once


def test_S33_a_wait_is_0_to_one_day_and_a_bad_one_is_named_wait(store: Store) -> None:
    a, b = pair(store)
    assert inbox.check_wait(0) == 0.0  # 0: do not wait
    for bad in (-1, 86_401):
        with pytest.raises(errors.InvalidInput, match=f"^bad wait {bad}: "):
            b.claim(wait=bad)


def test_S13_a_claimed_delivery_reports_its_own_delivery_id(store: Store) -> None:
    a, b = pair(store)
    mid = a.send("b", "one").id
    (got,) = b.claim().deliveries
    with store.read() as t:
        row = t.one(f"SELECT id FROM {sqlrows.delivery_rows()} WHERE message_id = ?", (mid,))
    assert (got.id, got.delivery_id) == (mid, row["id"])
    assert got.delivery_id != got.id


def test_S15_poison_at_the_head_is_quarantined_and_the_claim_still_returns_its_limit(
    cstore: Store, clock: Clock
) -> None:
    a, b = pair(cstore, max_deliveries=1)
    poison = [a.send("b", f"poison {i}").id for i in range(2)]
    assert len(b.claim(limit=2, lease=1).deliveries) == 2  # delivered once: the maximum
    clock.advance(2)  # ... and never acked
    good = [a.send("b", f"good {i}").id for i in range(5)]
    got = b.claim(limit=3, lease=60).deliveries
    assert [d.id for d in got] == good[:3]  # exactly the limit, oldest first
    with cstore.read() as t:
        states = {
            r[0]: r[1] for r in t.all(f"SELECT message_id, state FROM {sqlrows.delivery_rows()}")
        }
    assert [states[m] for m in poison] == ["quarantine", "quarantine"]
    assert [states[m] for m in good] == ["processing"] * 3 + ["ready"] * 2


def assert_claim_agrees_with_the_model(store: Store, layout: str, limit: int) -> None:
    """S15 on one inbox: ``layout`` is the inbox oldest first, ``P`` a poison
    message (handed out max_deliveries times) and ``G`` a good one. A claim of
    ``limit`` returns the oldest ``limit`` good ones in order, quarantines the
    poison among the candidates it passed (and possibly more, never a good
    one), and leaves every other good message ready and untouched."""
    a, b = pair(store, max_deliveries=1, inbox_cap=5000)
    with store.transaction() as t:
        ids = [a.send("b", f"{kind}{i}", tx=t).id for i, kind in enumerate(layout)]
    poison = [m for m, kind in zip(ids, layout, strict=True) if kind == "P"]
    good = [m for m, kind in zip(ids, layout, strict=True) if kind == "G"]
    with store.transaction() as t:  # handed out once already: poison at max_deliveries=1
        for m in poison:
            t.execute(f"UPDATE deliveries SET attempts = 1 WHERE {sqlrows.delivery_of('?')}", (m,))
    got = [d.id for d in b.claim(limit=limit).deliveries]
    assert got == good[:limit], layout
    with store.read() as t:
        state = {
            r[0]: r[1] for r in t.all(f"SELECT message_id, state FROM {sqlrows.delivery_rows()}")
        }
    passed = ids[: ids.index(got[-1])] if len(got) == limit and got else ids
    assert all(state[m] == "quarantine" for m in poison if m in passed), layout
    assert all(state[m] in ("quarantine", "ready") for m in poison), layout
    assert all(state[m] == "ready" for m in good[limit:]), layout


@pytest.mark.parametrize(
    ("layout", "limit"),
    [
        # Poison fills the first claim, the sweep reaches one good message, and the
        # next claim meets poison again: the window grows on from where it was.
        ("PPPP" + "G" + "P" * 7 + "GGG" + "PPPPP" + "G", 4),
        ("P" * 9 + "G" + "P" * 20 + "GG", 3),
        ("GPGPPGPPPGPPPPG", 5),
        ("G" * 3 + "P" * 40, 4),  # fewer good messages than the limit
        ("P" * 33, 2),  # nothing good at all
    ],
)
def test_S15_a_claim_through_poison_laid_out_any_way_returns_the_oldest_good_messages(
    store: Store, layout: str, limit: int
) -> None:
    assert_claim_agrees_with_the_model(store, layout, limit)


def test_S15_random_layouts_of_poison_and_good_messages_agree_with_the_model(store: Store) -> None:
    rnd = random.Random(1715)
    for _ in range(12):
        n = rnd.randrange(1, 60)
        share = rnd.choice((0.3, 0.7, 0.95))
        layout = "".join("P" if rnd.random() < share else "G" for _ in range(n))
        assert_claim_agrees_with_the_model(store, layout, rnd.randrange(1, 8))


def test_S13_a_claim_hands_out_each_message_with_its_importance_normal_by_default(
    store: Store,
) -> None:
    a, b = pair(store)
    ids = {
        a.send("b", "plain").id: "normal",  # stored as NULL: normal is the default (S35)
        a.send("b", "low", importance="low").id: "low",
        a.send("b", "normal", importance="normal").id: "normal",
        a.send("b", "high", importance="high").id: "high",
    }
    got = b.claim(limit=10).deliveries
    assert {d.id: d.importance for d in got} == ids


def test_S13_inbox_claim_defaults_to_one_message_and_no_waiting(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = pair(store)
    events: list[str] = []
    monkeypatch.setattr(wake, "_hook", lambda w, e: events.append(e))
    assert (
        inbox.claim(store, b.identity, ClaimInput()).deliveries == []
    )  # returns at once: never waits
    a.send("b", "one")
    a.send("b", "two")
    assert [d.body for d in inbox.claim(store, b.identity, ClaimInput()).deliveries] == ["one"]
    assert events == []


def test_S13_an_empty_claim_says_when_its_lease_would_end(cstore: Store, clock: Clock) -> None:
    """An empty inbox answers with an empty lease whose expiry is what a full
    one's would be, on the first claim (a write: the heartbeat is due) and on
    the next (a read-only snapshot)."""
    _, b = pair(cstore)
    for _ in range(2):
        got = b.claim(lease=45)
        assert got.deliveries == []
        assert got.expires_at == fmt_ts(clock.now + timedelta(seconds=45))
        assert b.claim().expires_at == fmt_ts(clock.now + timedelta(seconds=30))  # lease_seconds


@pytest.mark.parametrize(
    "first_limit", [1, 2]
)  # filled: the next claim writes; not: it reads first
def test_S20_a_lease_expiry_wakes_the_waiter_that_can_claim_it(
    store: Store, monkeypatch: pytest.MonkeyPatch, first_limit: int
) -> None:
    """Nobody commits when a lease expires: the waiter sleeps just until the
    inbox's next expiry. Its wait is an hour and the safety tick too, so only
    that can end it here (on the write path and on the read-only snapshot).
    The heartbeat a blocked caller writes (S27) is an hour apart too: each beat
    re-checks the inbox, and would find the expired lease without the expiry."""
    monkeypatch.setattr(wake, "SAFETY_S", 3600.0)
    monkeypatch.setattr(auth, "HEARTBEAT_S", 3600.0)
    a, b = pair(store)
    mid = a.send("b", "job").id
    b.claim(limit=first_limit, lease=0.3)  # the holder goes silent
    got: list[Any] = []
    th = threading.Thread(target=lambda: got.append(b.claim(wait=3600)), daemon=True)
    th.start()
    th.join(60)
    assert not th.is_alive(), "the waiter slept past the lease expiry"
    assert [(d.id, d.deliveries) for d in got[0].deliveries] == [(mid, 2)]


def test_S16_waiting_inside_a_transaction_is_refused_saying_why(store: Store) -> None:
    # One refusal (waits.block) for every wait: the inbox's, a turn's, a board key's.
    _, b = pair(store)
    why = "^cannot wait inside a transaction: it would hold the write lock$"
    waits = [
        lambda t: b.claim(wait=1, tx=t),
        lambda t: b.next_turn(wait=1, tx=t),
        lambda t: b.claim_key("k", wait=1, tx=t),
    ]
    for wait in waits:
        with pytest.raises(errors.InvalidInput, match=why) as got, store.transaction() as t:
            wait(t)
        assert got.value.fields == {"field": "wait"}
    assert b.claim_key("k").fence == 1  # the refused claim wrote nothing


# --- S14: what a lost lease says -------------------------------------------------------------
def test_S14_a_lost_lease_names_each_message_and_what_became_of_it_in_one_exact_line(
    cstore: Store, clock: Clock
) -> None:
    a, b = pair(cstore)
    ids = [a.send("b", f"m{i}").id for i in range(4)]
    held = b.claim(limit=4, lease=10)
    # Each message moves on a different way under the holder's feet.
    b.release(held.lease_token, [ids[1]])  # ready again: released for replay
    b.quarantine(held.lease_token, ids[2], "bad input")  # set aside
    clock.advance(11)  # the lease runs out ...
    other = b.claim(limit=4, lease=60)  # ... and another lease takes 0, 1 and 3
    assert {d.id for d in other.deliveries} == {ids[0], ids[1], ids[3]}
    b.ack(other.lease_token, [ids[3]])  # done, under the other lease
    with pytest.raises(errors.LeaseLost) as info:
        b.ack(held.lease_token, ids)
    token = held.lease_token
    assert str(info.value) == (
        f"lease {token[:8]}... no longer holds {ids[0]} (claimed again under another lease), "
        f"{ids[1]} (claimed again under another lease), {ids[2]} (quarantined), "
        f"{ids[3]} (acked under another lease): do not ack; the messages were redelivered"
    )
    assert info.value.fields == {"lease_token": token, "lost": ids}
    # Released by its holder and not claimed again: "released for replay".
    b.release(other.lease_token, [ids[0]])
    with pytest.raises(errors.LeaseLost) as info:
        b.ack(other.lease_token, [ids[0]])
    assert str(info.value) == (
        f"lease {other.lease_token[:8]}... no longer holds {ids[0]} (released for replay): "
        "do not ack; the messages were redelivered"
    )


def test_S14_a_lease_that_holds_nothing_and_ids_that_are_not_in_the_inbox_say_so_exactly(
    store: Store,
) -> None:
    a, b = pair(store)
    mid = a.send("b", "m").id
    lease = b.claim()
    with pytest.raises(errors.MessageNotFound) as nf:
        b.ack(lease.lease_token, [mid, "0" * 26, "1" * 26])
    assert str(nf.value) == f"no delivery of {'0' * 26}, {'1' * 26} in the inbox of b"
    assert nf.value.fields == {"ids": ["0" * 26, "1" * 26]}
    wrong = "w" * 32
    with pytest.raises(errors.LeaseLost) as lost:
        b.ack(wrong)
    assert str(lost.value) == (
        "lease wwwwwwww... holds nothing in the inbox of b: it expired and its messages "
        "were claimed again, or the token is wrong"
    )
    assert lost.value.fields == {"lease_token": wrong, "lost": []}
    assert b.ack(lease.lease_token) == 1  # the refusals wrote nothing


# --- S15: quarantine takes one message, for a reason -------------------------------------------
def test_S15_a_quarantine_sets_aside_only_the_message_it_names_and_needs_a_reason(
    store: Store,
) -> None:
    a, b = pair(store)
    first, second = a.send("b", "bad").id, a.send("b", "good").id
    lease = b.claim(limit=2)
    for blank in ("", "   "):
        with pytest.raises(errors.InvalidInput) as info:
            b.quarantine(lease.lease_token, first, blank)
        assert (str(info.value), info.value.fields) == (
            "bad reason: a quarantine needs a reason",
            {"field": "reason"},
        )
    b.quarantine(lease.lease_token, first, "cannot parse")
    with store.read() as t:
        states = dict(t.all(f"SELECT message_id, state FROM {sqlrows.delivery_rows()}"))
    assert states == {first: "quarantine", second: "processing"}
    assert b.ack(lease.lease_token, [second]) == 1  # the rest of the lease is still held


# --- S13: extend ---------------------------------------------------------------------------
def test_S13_extend_without_seconds_pushes_the_lease_to_lease_seconds_from_now(
    cstore: Store, clock: Clock
) -> None:
    a, b = pair(cstore, lease_seconds=45)
    a.send("b", "m")
    lease = b.claim(lease=5)
    clock.advance(3)
    expected = fmt_ts(clock.now + timedelta(seconds=45))
    assert b.extend(lease.lease_token) == expected
    with cstore.read() as t:
        assert t.one("SELECT lease_expires_at FROM deliveries")[0] == expected


# --- S20: waiting ---------------------------------------------------------------------------
def test_S20_a_release_wakes_a_claim_waiting_on_the_same_inbox(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The wait and the safety tick are an hour: only the release's ring can end it.
    monkeypatch.setattr(wake, "SAFETY_S", 3600.0)
    probe = WakeProbe.install(monkeypatch)
    a, b = pair(store)
    mid = a.send("b", "job").id
    held = b.claim(lease=3600)
    got: list[Any] = []
    th = threading.Thread(target=lambda: got.append(b.claim(wait=3600)), daemon=True)
    th.start()
    assert probe.asleep.wait(60), "the waiter never went to sleep"
    b.release(held.lease_token)
    th.join(60)
    assert not th.is_alive(), "a release rang nobody"
    assert [d.id for d in got[0].deliveries] == [mid]
    assert "rung" in probe.woke


def test_S20_a_claim_that_waits_for_nothing_returns_no_sooner_than_its_wait(store: Store) -> None:
    # A lower bound only (the loop ends when its deadline has passed): never early.
    _, b = pair(store)
    for wait in (0.3, 1.2):
        t0 = time.monotonic()
        assert b.claim(wait=wait).deliveries == []
        assert time.monotonic() - t0 >= wait
        t0 = time.monotonic()
        assert b.next_turn(wait=wait).id is None
        assert time.monotonic() - t0 >= wait


def test_S20_a_waiter_sleeps_until_its_wait_ends_or_just_past_the_next_lease_expiry(
    cstore: Store, clock: Clock
) -> None:
    in_10s = fmt_ts(clock.now + timedelta(seconds=10))
    assert waits.until(cstore, None, 7.5) == 7.5  # no lease running: the whole wait
    assert waits.until(cstore, in_10s, 60.0) == pytest.approx(10.001)  # just past the expiry
    assert waits.until(cstore, in_10s, 4.0) == 4.0  # the wait ends first
    long_ago = fmt_ts(clock.now - timedelta(seconds=30))
    assert waits.until(cstore, long_ago, 60.0) == 0.001  # already expired: at once, not negative


# --- S13: ack_and_claim acks what it names, once ---------------------------------------------
def test_S13_ack_and_claim_acks_only_the_ids_named_and_a_repeat_is_no_lost_lease(
    store: Store,
) -> None:
    a, b = pair(store)
    ids = [a.send("b", f"m{i}").id for i in range(4)]
    first = b.claim(limit=2)
    nxt = b.ack_and_claim(first.lease_token, [ids[0]], limit=1)
    assert [d.id for d in nxt.deliveries] == [ids[2]]
    with store.read() as t:
        states = dict(t.all(f"SELECT message_id, state FROM {sqlrows.delivery_rows()}"))
    assert [states[m] for m in ids] == ["done", "processing", "processing", "ready"]
    # The holder repeating itself: the ack is already done under its token.
    again = b.ack_and_claim(first.lease_token, [ids[0]], limit=1)
    assert [d.id for d in again.deliveries] == [ids[3]]
    assert b.ack(first.lease_token, [ids[1]]) == 1  # the rest of the first lease held on


# --- S15: requeue, the operator's way back from quarantine -------------------------------------
def test_S15_requeue_refusals_say_why_in_one_exact_line_and_write_nothing(
    store: Store, operator: Operator
) -> None:
    a, b = pair(store)
    sid = a.identity.space_id
    mid = a.send("b", "bad").id
    lease = b.claim()
    b.quarantine(lease.lease_token, mid, "cannot parse")
    cases: list[tuple[list[str], type[errors.BrokerError], str, dict[str, Any]]] = [
        ([], errors.InvalidInput, "no ids given", {"field": "ids"}),
        (
            ["x" * 101],
            errors.InvalidInput,
            "bad id: at most 100 characters, not 101",
            {"field": "id"},
        ),
        (
            [mid, "y" * 100, "z"],
            errors.MessageNotFound,
            f"not quarantined in space {sid}: {'y' * 100}, z",
            {"ids": ["y" * 100, "z"]},
        ),
    ]
    for ids, cls, message, fields in cases:
        with pytest.raises(cls) as info:
            operator.requeue(sid, ids)
        assert (str(info.value), info.value.fields) == (message, fields)
    with store.read() as t:
        assert (
            t.one(f"SELECT state FROM {sqlrows.delivery_rows()} WHERE message_id = ?", (mid,))[0]
            == "quarantine"
        )


def test_S20_a_requeue_wakes_a_claim_waiting_on_the_inbox(
    store: Store, operator: Operator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wake, "SAFETY_S", 3600.0)
    probe = WakeProbe.install(monkeypatch)
    a, b = pair(store)
    mid = a.send("b", "bad").id
    lease = b.claim()
    b.quarantine(lease.lease_token, mid, "cannot parse")
    got: list[Any] = []
    th = threading.Thread(target=lambda: got.append(b.claim(wait=3600)), daemon=True)
    th.start()
    assert probe.asleep.wait(60), "the waiter never went to sleep"
    assert operator.requeue(a.identity.space_id, [mid]) == 1
    th.join(60)
    assert not th.is_alive(), "a requeue rang nobody"
    assert [(d.id, d.deliveries) for d in got[0].deliveries] == [(mid, 1)]  # a fresh count
    assert "rung" in probe.woke


def test_S13_ack_and_claim_takes_one_by_default_and_the_lease_it_is_given(
    cstore: Store, clock: Clock
) -> None:
    a, b = pair(cstore, lease_seconds=30)
    ids = [a.send("b", f"m{i}").id for i in range(3)]
    first = b.claim()
    # The library call under the handle: one message unless told, for `lease` seconds.
    nxt = inbox.ack_and_claim(cstore, b.identity, first.lease_token, lease=45)
    assert [d.id for d in nxt.deliveries] == [ids[1]]
    assert nxt.expires_at == fmt_ts(clock.now + timedelta(seconds=45))
    last = inbox.ack_and_claim(cstore, b.identity, nxt.lease_token, owner="night shift")
    assert last.owner == "night shift"
    assert last.expires_at == fmt_ts(clock.now + timedelta(seconds=30))  # lease_seconds


def test_S33_the_inbox_library_under_the_handle_checks_its_own_bounds_and_names_each_field(
    store: Store,
) -> None:
    # Callers inside the broker (turns, the served workers) reach these functions
    # with no handle's declared input in front: each checks its own input, with the
    # same bounds and field names as the handle, before anything is settled.
    a, b = pair(store)
    a.send("b", "one")
    a.send("b", "two")
    lease = b.claim()
    token = lease.lease_token
    me = b.identity
    mid = lease.deliveries[0].id
    refusals: list[tuple[Any, str, str]] = [
        (
            lambda: inbox.ack_and_claim(store, me, token, limit=10_001),
            "limit",
            "bad limit 10001: 1 to 10000",
        ),
        (
            lambda: inbox.ack_and_claim(store, me, token, lease=0.0),
            "lease",
            "bad lease 0.0: at least 0.001 and at most 604800 seconds",
        ),
        (
            lambda: inbox.release(store, me, token, error="e" * 8001),
            "error",
            "bad error: at most 8000 characters, not 8001",
        ),
        (
            lambda: inbox.quarantine(store, me, token, mid, "r" * 8001),
            "reason",
            "bad reason: at most 8000 characters, not 8001",
        ),
        (
            lambda: inbox.quarantine(store, me, token, mid, " \t"),
            "reason",
            "a quarantine needs a reason",
        ),
        (
            lambda: inbox.quarantine(store, me, token, mid, "r", error="e" * 8001),
            "error",
            "bad error: at most 8000 characters, not 8001",
        ),
        (
            lambda: inbox.extend(store, me, token, 0.0),
            "seconds",
            "bad seconds 0.0: at least 0.001 and at most 604800 seconds",
        ),
        (
            lambda: inbox.ack(store, me, ""),
            "lease_token",
            "bad lease token '': the token the claim returned",
        ),
        (
            lambda: inbox.ack(store, me, "t" * 101),
            "lease_token",
            "bad lease_token: at most 100 characters, not 101",
        ),
        *(
            (
                lambda nul=nul: inbox.ack(store, me, nul),
                "lease_token",
                "lease_token is not valid text (a NUL (U+0000) character)",
            )
            for nul in ("\x00", "t\x00", "t" * 99 + "\x00")  # the fast path's length bounds
        ),
        (
            lambda: inbox.ack(store, me, token, ["m" * 101]),
            "message id",
            "bad message id: at most 100 characters, not 101",
        ),
    ]
    for call, field, message in refusals:
        with pytest.raises(errors.InvalidInput) as info:
            call()
        assert (str(info.value), info.value.fields) == (message, {"field": field}), message
    # Nothing was settled, and each bound itself is taken.
    assert inbox.release(store, me, token, error="e" * 8000) == 1
    again = inbox.claim(store, me, ClaimInput(limit=1))
    nxt = inbox.ack_and_claim(store, me, again.lease_token, limit=10_000)
    assert [d.body for d in nxt.deliveries] == ["two"]


def test_S20_a_waiter_sleeps_to_the_earliest_lease_expiry_of_its_inbox_and_none_when_none_is_held(
    store: Store,
) -> None:
    # Expiry rings no doorbell (nobody commits): a claim that waits sleeps just
    # past this time. Without it the waiter would sleep to its next heartbeat,
    # which still wakes it, only later, so the wake-up test cannot tell.
    a, b = pair(store)
    a.send("b", "one")
    a.send("b", "two")
    pid = b.identity.participant_id
    with store.read() as t:
        assert inbox.next_expiry(t, pid) is None
    long = b.claim(lease=600)
    short = b.claim(lease=60)
    with store.read() as t:
        assert inbox.next_expiry(t, pid) == short.expires_at
    b.ack(short.lease_token)
    with store.read() as t:
        assert inbox.next_expiry(t, pid) == long.expires_at
