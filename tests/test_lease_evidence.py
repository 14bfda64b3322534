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

import subprocess
import sys
from collections.abc import Iterator

import pytest
import trusted
from conftest import Clock, open_store

from broker import Agent, Operator, Store, inbox, procs


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


def dead_process() -> str:
    """A ``host:pid:start`` of a process that has exited (restart recovery, S32)."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead = f"{procs.host()}:{int(done.stdout)}:1"
    assert procs.gone(dead)
    return dead


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
        last = inbox.claim(cstore, b.identity, owner="worker-8", process=dead_process())
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
