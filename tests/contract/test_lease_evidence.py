"""What a lease leaves behind: the evidence of its owner (S15) and what a late
settle under it is told (S14).

S15: quarantine names the last lease owner however the last lease ended
(released by its holder, expired, returned by restart recovery, S32); a row
back in ``ready`` keeps that name without looking held in the views.
S14: a lease that lost messages to a later claim names exactly those, as
claimed again, never the ones its holder settled itself. Injected clock:
nothing sleeps. SQLite and PostgreSQL (PG_CONTRACT).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import trusted
from conftest import Clock, open_store

from broker import Agent, Operator, Store, errors
from broker.delivery import inbox, turns
from broker.model.inputs import ClaimInput


@pytest.fixture
def cstore(clocked_url: str, clock: Clock) -> Iterator[Store]:
    s = open_store(clocked_url, clock=clock)
    yield s
    s.close()


def crew(store: Store, **settings: object) -> tuple[Operator, str, Agent, Agent]:
    op = Operator(store)
    sid = op.create_space("session", lease_seconds=10, **settings).id
    a, _ = trusted.join(store, sid, "lynx")
    b, _ = trusted.join(store, sid, "otter")
    return op, sid, a, b


# --- S15: the last lease owner ---------------------------------------------------------------
@pytest.mark.parametrize("ended", ["released", "expired", "recovered"])
def test_S15_quarantine_names_the_last_lease_owner_however_the_last_lease_ended(
    cstore: Store, clock: Clock, ended: str
) -> None:
    op, sid, a, b = crew(cstore, max_deliveries=2)
    mid = a.send("otter", "poison").id
    first = b.claim(owner="worker-7")
    assert b.release(first.lease_token, error="failed in worker-7") == 1
    if ended == "recovered":
        last = inbox.claim(
            cstore, b.identity, ClaimInput(owner="worker-8"), process=trusted.dead_process()
        )
    else:
        last = b.claim(owner="worker-8")
    assert [d.id for d in last.deliveries] == [mid]
    if ended == "released":
        assert b.release(last.lease_token, error="failed in worker-8") == 1
        why = "failed in worker-8"
    elif ended == "expired":
        clock.advance(11)
        why = f"lease of worker-8 expired at {last.expires_at}"
    else:
        assert inbox.recover_on_connect(cstore, b.identity.participant_id) == 1
        why = f"lease of worker-8 returned at {cstore.now_ts()}: its process "
    assert b.claim().deliveries == []  # the third delivery would pass max_deliveries
    [q] = op.quarantined(sid)
    assert (q.id, q.deliveries, q.reason, q.lease_owner) == (mid, 2, "max_deliveries", "worker-8")
    assert q.last_error is not None and q.last_error.startswith(why)


def test_S15_a_released_delivery_keeps_its_last_owner_and_nobody_holds_it_in_the_views(
    cstore: Store,
) -> None:
    op, sid, a, b = crew(cstore)
    mid = a.send("otter", "again").id
    held = b.claim(owner="worker-7")
    assert b.release(held.lease_token) == 1

    def views() -> tuple[tuple[object, ...], tuple[object, ...]]:
        with cstore.read() as t:
            one = t.one(
                "SELECT state, lease_owner, lease_expires_at, lease_live FROM v_inbox "
                "WHERE space_id = ? AND message_id = ?",
                (sid, mid),
            )
            inboxes = t.one(
                "SELECT ready, processing, lease_owner, lease_expires_at FROM v_inboxes "
                "WHERE space_id = ? AND address = 'otter'",
                (sid,),
            )
        return tuple(one), tuple(inboxes)

    assert views() == (("ready", "worker-7", None, 0), (1, 0, None, None))
    again = b.claim(owner="worker-9")  # the next lease names its own owner
    assert [d.id for d in again.deliveries] == [mid]
    assert views() == (
        ("processing", "worker-9", again.expires_at, 1),
        (0, 1, "worker-9", again.expires_at),
    )


# --- S14: what a late settle of a lease is told ------------------------------------------------
def deliveries(store: Store) -> list[tuple[object, ...]]:
    with store.read() as t:
        return [tuple(r) for r in t.all("SELECT * FROM deliveries ORDER BY rowid")]


class Reclaimed:
    """``b`` claimed m1 and m2 under ``first``, acked m1 under it; the lease ran
    out and ``second`` claimed m2 again."""

    def __init__(self, store: Store, clock: Clock) -> None:
        _, _, a, self.b = crew(store)
        self.m1, self.m2 = (a.send("otter", f"m{i}").id for i in (1, 2))
        self.first = self.b.claim(limit=2, lease=5)
        assert self.b.ack(self.first.lease_token, [self.m1]) == 1
        clock.advance(6)
        self.second = self.b.claim(limit=2)
        assert [d.id for d in self.second.deliveries] == [self.m2]


@pytest.mark.parametrize("verb", ["ack", "release", "extend"])
def test_S14_a_whole_lease_settled_late_names_the_message_claimed_again_not_the_one_it_acked(
    cstore: Store, clock: Clock, verb: str
) -> None:
    r = Reclaimed(cstore, clock)
    token = r.first.lease_token
    before = deliveries(cstore)
    with pytest.raises(errors.LeaseLost) as info:
        getattr(r.b, verb)(token)
    assert str(info.value) == (
        f"lease {token[:8]}... no longer holds {r.m2} (claimed again under another lease): "
        "do not ack; the messages were redelivered"
    )
    assert info.value.fields == {"lease_token": token, "lost": [r.m2]}
    assert deliveries(cstore) == before
    assert r.b.ack(r.second.lease_token) == 1  # the lease that holds it now is unaffected


def test_S14_named_ids_settled_late_name_only_what_the_lease_lost_or_settled_otherwise(
    cstore: Store, clock: Clock
) -> None:
    r = Reclaimed(cstore, clock)
    token, b = r.first.lease_token, r.b
    before = deliveries(cstore)
    with pytest.raises(errors.LeaseLost) as info:  # m1: the holder's own repeat, not lost
        b.ack(token, [r.m1, r.m2])
    assert info.value.fields == {"lease_token": token, "lost": [r.m2]}
    assert f"{r.m2} (claimed again under another lease)" in str(info.value)
    with pytest.raises(errors.LeaseLost) as info:
        b.quarantine(token, r.m2, "bad input")
    assert info.value.fields == {"lease_token": token, "lost": [r.m2]}
    with pytest.raises(errors.LeaseLost) as info:  # acked by its holder: not replayable
        b.release(token, [r.m1])
    assert str(info.value) == (
        f"lease {token[:8]}... no longer holds {r.m1} (acked under this lease): "
        "this lease has nothing of them left to settle"
    )
    assert info.value.fields == {"lease_token": token, "lost": [r.m1]}
    assert deliveries(cstore) == before
    assert b.ack(token, [r.m1]) == 0  # the holder's repeat stays idempotent


def test_S14_a_whole_lease_its_holder_settled_names_what_it_settled_and_a_repeat_is_idempotent(
    cstore: Store,
) -> None:
    _, _, a, b = crew(cstore)
    mid = a.send("otter", "one").id
    held = b.claim()
    token = held.lease_token
    assert b.ack(token) == 1
    assert b.ack(token) == 0
    with pytest.raises(errors.LeaseLost) as info:
        b.release(token)
    assert str(info.value) == (
        f"lease {token[:8]}... no longer holds {mid} (acked under this lease): "
        "this lease has nothing of them left to settle"
    )


def test_S14_a_lease_that_restart_recovery_ended_or_a_claim_quarantined_is_told_so(
    cstore: Store, clock: Clock
) -> None:
    op, sid, a, b = crew(cstore, max_deliveries=1)
    back, poison = (a.send("otter", text).id for text in ("back", "poison"))
    dead = inbox.claim(
        cstore, b.identity, ClaimInput(owner="worker-8"), process=trusted.dead_process()
    )
    assert [d.id for d in dead.deliveries] == [back]
    assert inbox.recover_on_connect(cstore, b.identity.participant_id) == 1
    with pytest.raises(errors.LeaseLost) as info:
        b.ack(dead.lease_token)
    assert str(info.value) == (
        f"lease {dead.lease_token[:8]}... no longer holds {back} (returned to ready: the "
        "process holding the lease is gone): do not ack; the messages were redelivered"
    )
    assert info.value.fields == {"lease_token": dead.lease_token, "lost": [back]}
    # max_deliveries 1: the next claim quarantines both instead of handing them out again.
    held = b.claim(lease=5)
    assert [d.id for d in held.deliveries] == [poison]
    clock.advance(6)
    assert b.claim().deliveries == []
    assert {q.id for q in op.quarantined(sid)} == {back, poison}
    with pytest.raises(errors.LeaseLost) as info:
        b.extend(held.lease_token, 30)
    assert str(info.value) == (
        f"lease {held.lease_token[:8]}... no longer holds {poison} (quarantined after the "
        "lease expired: delivered max_deliveries times): this lease has nothing of them left "
        "to settle"
    )


# --- S18: what a late confirmation of a turn is told ----------------------------------------------
def test_S18_a_turn_set_aside_or_returned_by_recovery_is_refused_saying_so(
    cstore: Store,
) -> None:
    op, sid, a, b = crew(cstore)
    aside = a.send("otter", "bad").id
    turn = b.next_turn()
    assert turn.id is not None and [i.id for i in turn.items] == [aside]
    assert b.quarantine_turn(turn, "the model choked on it") == 1
    before = deliveries(cstore)
    with pytest.raises(errors.LeaseLost) as info:
        b.seen(turn.id)
    assert (info.value.message, info.value.fields) == (
        f"turn {turn.id} no longer holds {aside} (quarantined): nothing was confirmed",
        {"turn_id": turn.id, "lost": [aside]},
    )
    assert deliveries(cstore) == before
    back = a.send("otter", "again").id
    dead = turns.next_turn(cstore, b.identity, process=trusted.dead_process())
    assert dead.id is not None and [i.id for i in dead.items] == [back]
    assert inbox.recover_on_connect(cstore, b.identity.participant_id) == 1
    before = deliveries(cstore)
    with pytest.raises(errors.LeaseLost) as info:
        b.seen(dead.id)
    assert (info.value.message, info.value.fields) == (
        f"turn {dead.id} no longer holds {back} (returned to ready: the process holding the "
        "lease is gone): nothing was confirmed",
        {"turn_id": dead.id, "lost": [back]},
    )
    assert deliveries(cstore) == before
    assert op.log(sid, kinds=["seen"]) == []  # no receipt for either refusal
    assert b.seen(b.next_turn().id or "").acked == 1  # the redelivered turn confirms it
