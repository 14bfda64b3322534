"""S14: a stale lease is refused even when the message it lost is already done.

The holder's own repeat is idempotent (it acked, it acks again: 0). A holder
whose lease expired, and whose message another lease claimed *and acked*, must
not take that "done" for its own: its ack is ``LeaseLost`` naming the message
(a mutant that took any "done" row as already settled survived the whole suite
once). Injected clock: nothing sleeps.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlrows
import trusted
from conftest import Clock

from broker import Operator, Store, errors
from broker.model.records import Lease


@pytest.fixture
def cstore(tmp_path: Path, clock: Clock) -> Iterator[Store]:
    s = Store(f"sqlite:///{tmp_path / 'clocked.db'}", clock=clock)
    yield s
    s.close()


class Stale:
    """``b`` claimed one message under ``old``; the lease expired and ``new`` (a
    reclaimer: the same inbox, another process) claimed it again."""

    def __init__(self, store: Store, clock: Clock) -> None:
        sid = Operator(store).create_space("workflow", lease_seconds=10).id
        a, _ = trusted.join(store, sid, "a")
        self.b, _ = trusted.join(store, sid, "b")
        self.mid = a.send("b", "the job").id
        self.old: Lease = self.b.claim(lease=10)
        clock.advance(11)
        self.new: Lease = self.b.claim(lease=10)
        assert [d.id for d in self.new.deliveries] == [self.mid]


@pytest.fixture
def stale(cstore: Store, clock: Clock) -> Stale:
    return Stale(cstore, clock)


def _state(store: Store, mid: str) -> tuple[str, str]:
    with store.read() as t:
        row = t.one(
            f"SELECT state, lease_token FROM {sqlrows.delivery_rows()} WHERE message_id = ?", (mid,)
        )
    return row["state"], row["lease_token"]


def test_S14_a_stale_ack_naming_a_message_the_reclaimer_acked_is_lease_lost_naming_it(
    cstore: Store, stale: Stale
) -> None:
    assert stale.b.ack(stale.new.lease_token) == 1  # the reclaimer finished it
    with pytest.raises(errors.LeaseLost, match=f"{stale.mid} \\(acked under another lease\\)") as e:
        stale.b.ack(stale.old.lease_token, [stale.mid])
    assert e.value.fields["lost"] == [stale.mid]
    assert e.value.fields["lease_token"] == stale.old.lease_token
    assert _state(cstore, stale.mid) == ("done", stale.new.lease_token)


def test_S14_a_stale_ack_of_the_whole_lease_after_the_reclaimer_acked_is_lease_lost(
    cstore: Store, stale: Stale
) -> None:
    assert stale.b.ack(stale.new.lease_token) == 1
    # The old lease's token no longer finds the row, but the row remembers the
    # lease that lost it: the refusal names the message (S14).
    with pytest.raises(errors.LeaseLost, match=f"{stale.mid} \\(acked under another lease\\)") as e:
        stale.b.ack(stale.old.lease_token)
    assert e.value.fields == {"lease_token": stale.old.lease_token, "lost": [stale.mid]}
    assert _state(cstore, stale.mid) == ("done", stale.new.lease_token)


def test_S14_a_stale_release_or_extend_after_the_reclaimer_acked_is_lease_lost(
    cstore: Store, stale: Stale
) -> None:
    assert stale.b.ack(stale.new.lease_token, [stale.mid]) == 1
    with pytest.raises(errors.LeaseLost) as e:
        stale.b.release(stale.old.lease_token, [stale.mid])
    assert e.value.fields["lost"] == [stale.mid]
    with pytest.raises(errors.LeaseLost) as e:
        stale.b.extend(stale.old.lease_token, 30, [stale.mid])
    assert e.value.fields["lost"] == [stale.mid]
    assert _state(cstore, stale.mid) == ("done", stale.new.lease_token)


def test_S14_a_stale_ack_while_the_reclaimer_still_holds_it_is_lease_lost(
    cstore: Store, stale: Stale
) -> None:
    with pytest.raises(errors.LeaseLost, match="claimed again under another lease") as e:
        stale.b.ack(stale.old.lease_token, [stale.mid])
    assert e.value.fields["lost"] == [stale.mid]
    assert _state(cstore, stale.mid) == ("processing", stale.new.lease_token)
    assert stale.b.ack(stale.new.lease_token, [stale.mid]) == 1  # the reclaimer is unaffected


def test_S14_the_holders_own_repeat_ack_naming_the_message_is_idempotent(
    cstore: Store, stale: Stale
) -> None:
    assert stale.b.ack(stale.new.lease_token, [stale.mid]) == 1
    assert stale.b.ack(stale.new.lease_token, [stale.mid]) == 0
    assert stale.b.ack(stale.new.lease_token) == 0
