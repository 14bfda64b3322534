"""S44: one clock for time and leases. The process's clock (``broker.ids.system_clock``,
what every store reads when no clock is given) steps back one hour in the
middle of a swarm's work, on both backends: FIFO keeps its order, a lease is
neither stretched to an hour nor cut short, a second process that starts
after the step stamps no message before the space's last; on PostgreSQL every
process reads the database's clock, whatever its own says.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest
import trusted
from conftest import open_store

from broker import Agent, Operator, Store, ids
from broker.ids import SteadyClock, parse_ts

HOUR = timedelta(hours=1)


class Stepped:
    """The process's clock, set back by ``behind`` (none at first)."""

    def __init__(self) -> None:
        self.behind = timedelta(0)

    def __call__(self) -> datetime:
        return datetime.now(UTC) - self.behind


@pytest.fixture
def stepped(monkeypatch: pytest.MonkeyPatch) -> Stepped:
    clock = Stepped()
    monkeypatch.setattr(ids, "system_clock", clock)
    return clock


@pytest.fixture
def store(db_url: str, stepped: Stepped) -> Iterator[Store]:
    s = open_store(db_url)  # no clock given: the process's
    yield s
    s.close()


def _pair(store: Store) -> tuple[str, Agent, Agent]:
    sid = Operator(store).create_space("session").id
    a, _ = trusted.join(store, sid, "a")
    b, _ = trusted.join(store, sid, "b")
    return sid, a, b


def _created(store: Store, message_id: str) -> str:
    with store.read() as t:
        return str(t.one("SELECT created_at_utc FROM messages WHERE id = ?", (message_id,))[0])


def test_S44_a_step_back_keeps_fifo_in_this_process_and_in_one_started_after_it(
    store: Store, db_url: str, stepped: Stepped
) -> None:
    sid, a, b = _pair(store)
    first = a.send("b", "sent before the step").id
    stepped.behind = HOUR
    second = a.send("b", "sent after the step").id
    # A process that starts after the step: a store of its own, the same clock.
    later = open_store(db_url)
    try:
        third = Agent(later, a.identity).send("b", "from a process started after it").id
    finally:
        later.close()
    stamps = [_created(store, m) for m in (first, second, third)]
    assert stamps == sorted(stamps), stamps
    assert parse_ts(stamps[2]) > datetime.now(UTC) - timedelta(minutes=5)  # not an hour back
    got = b.claim(limit=3)
    assert [d.id for d in got.deliveries] == [first, second, third]


def test_S44_a_step_back_does_not_stretch_a_lease(store: Store, stepped: Stepped) -> None:
    _, a, b = _pair(store)
    sent = a.send("b", "work").id
    before = time.monotonic()
    lease = b.claim(limit=1, lease=1)
    assert [d.id for d in lease.deliveries] == [sent]
    stepped.behind = HOUR  # the lease would now end an hour and a second from "now"
    time.sleep(1.3)
    again = b.claim(limit=1, lease=30)
    between = time.monotonic() - before
    assert [d.id for d in again.deliveries] == [sent]  # expired after its second, as given
    # The second lease ends 30 s after the second claim, on the clock that went
    # on at its own pace: 29 s plus the time between the claims after the first
    # lease's end. Judged by the monotonic clock, not the wall clock, which a
    # host's time sync may step while the test runs (seen once in CI).
    gap = (parse_ts(again.expires_at) - parse_ts(lease.expires_at)).total_seconds()
    assert 29 + 1.3 <= gap <= 29 + between, (gap, between)


def test_S44_a_step_back_does_not_cut_a_lease_short(store: Store, stepped: Stepped) -> None:
    _, a, b = _pair(store)
    a.send("b", "work")
    lease = b.claim(limit=1, lease=30)
    stepped.behind = HOUR
    assert b.claim(limit=1).deliveries == []  # still held: 30 s have not passed
    assert parse_ts(lease.expires_at) > datetime.now(UTC)


def test_S44_postgresql_judges_time_by_the_database_clock(
    db_url: str, backend: str, stepped: Stepped
) -> None:
    if backend != "postgresql":
        pytest.skip("SQLite has no clock of its own (the writer's, made monotonic)")
    stepped.behind = HOUR  # this process's clock is an hour behind from the start
    s = open_store(db_url)
    try:
        _, a, b = _pair(s)
        a.send("b", "work")
        lease = b.claim(limit=1, lease=30)
        until = parse_ts(lease.expires_at) - datetime.now(UTC)
        assert timedelta(seconds=25) < until < timedelta(seconds=35), until
    finally:
        s.close()


def test_S44_the_steady_clock_goes_on_from_where_it_was_after_a_step_back() -> None:
    wall = [datetime(2026, 12, 1, 12, tzinfo=UTC)]
    tick = [100.0]
    clock = SteadyClock(lambda: wall[0])
    clock.ticks = lambda: tick[0]
    t0 = clock()
    assert clock() == t0  # a frozen clock stays frozen
    wall[0] -= HOUR
    tick[0] += 2.5
    assert clock() == t0 + timedelta(seconds=2.5)  # the step is not taken, the time passed is
    tick[0] += 1
    assert clock() == t0 + timedelta(seconds=3.5)
    wall[0] = t0 + timedelta(seconds=10)  # a step forward is followed
    assert clock() == t0 + timedelta(seconds=10)
    clock.floor(t0 + timedelta(seconds=60))
    assert clock() == t0 + timedelta(seconds=60)


def test_S44_a_stamp_is_the_reading_as_the_store_writes_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The clock keeps a reading as µs and writes it without a datetime: the
    same text ``fmt_ts`` writes, on the process's clock (read without a
    datetime), a given one, one stepped back, and with the database's offset."""
    from broker.ids import fmt_micros, fmt_ts, stamp_after, ts_after

    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    for us in (0, 1, 999_999, 1_000_000, 1_764_806_400_000_000, 1_764_806_399_999_999, -1):
        at = epoch + timedelta(microseconds=us)
        assert fmt_micros(us) == fmt_ts(at), us
        for seconds in (0.001, 0.3, 30, 86_400, 2.5e-7, 1.5e-6):  # a lease's, rounded alike
            assert stamp_after(us, seconds) == ts_after(at, seconds), (us, seconds)
    for us in range(0, 200_000_000, 1_000_000):  # many seconds: their heads stay few
        assert fmt_micros(us + 5) == fmt_ts(epoch + timedelta(microseconds=us + 5))
    assert 0 < len(ids._heads) <= ids._HEADS_MAX
    system = SteadyClock()
    before = datetime.now(UTC)
    stamp, after = system.stamp(), datetime.now(UTC)
    assert fmt_ts(before) <= stamp <= fmt_ts(after)
    system.offset = timedelta(hours=2, microseconds=7)
    assert system.offset == timedelta(hours=2, microseconds=7)
    assert fmt_ts(after + system.offset) <= system.stamp()
    wall = [datetime(2026, 12, 4, 23, 59, 59, 999_999, tzinfo=UTC)]
    tick = [5.0]
    given = SteadyClock(lambda: wall[0])
    given.ticks = lambda: tick[0]
    assert given.stamp() == "2026-12-04T23:59:59.999999Z"
    wall[0] -= HOUR
    tick[0] += 0.3  # a float of seconds rounds to the µs as a timedelta would
    assert given.stamp() == fmt_ts(datetime(2026, 12, 5, 0, 0, 0, 299_999, tzinfo=UTC))
    # a test that replaces the process's clock is read, not time.time_ns
    monkeypatch.setattr(ids, "system_clock", lambda: datetime(2030, 1, 1, tzinfo=UTC) + HOUR)
    assert SteadyClock().stamp() == "2030-01-01T01:00:00.000000Z"


def test_S44_never_before_the_spaces_last_row_when_the_clock_is_given(
    clocked_url: str, backend: str
) -> None:
    wall = [datetime.now(UTC)]
    given: Callable[[], datetime] = lambda: wall[0]  # noqa: E731
    s = open_store(clocked_url, clock=given)
    try:
        _, a, b = _pair(s)
        first = a.send("b", "one").id
        other = open_store(clocked_url, clock=lambda: wall[0] - HOUR)  # another host, behind
        try:
            second = Agent(other, a.identity).send("b", "two").id
        finally:
            other.close()
        assert _created(s, second) >= _created(s, first)
        assert [d.id for d in b.claim(limit=2).deliveries] == [first, second]
    finally:
        s.close()


def test_S44_a_batch_is_never_before_the_spaces_last_row_when_the_clock_is_given(
    clocked_url: str, backend: str
) -> None:
    # The batch path stamps its rows itself (the single send's statement does
    # it in SQL): its first row reads the space's last time, written here by
    # another host after this one opened the store.
    wall = [datetime.now(UTC)]
    s = open_store(clocked_url, clock=lambda: wall[0])
    try:
        _, a, b = _pair(s)
        other = open_store(clocked_url, clock=lambda: wall[0] - HOUR)  # another host, behind
        first = a.send("b", "one").id
        try:
            later = [
                r.id
                for r in Agent(other, a.identity).send_many(
                    [{"to": ["b"], "text": "two"}, {"to": ["b"], "text": "three"}]
                )
            ]
        finally:
            other.close()
        assert all(_created(s, m) >= _created(s, first) for m in later)
        assert [d.id for d in b.claim(limit=3).deliveries] == [first, *later]
    finally:
        s.close()


def test_S44_a_process_started_after_the_step_judges_leases_from_the_stores_time(
    store: Store, db_url: str, stepped: Stepped
) -> None:
    """It only claims (sends nothing): its clock still starts from the store's
    newest row (SQLite) or the database's clock (PostgreSQL), not an hour back."""
    _, a, b = _pair(store)
    sent = a.send("b", "work").id
    assert [d.id for d in b.claim(limit=1, lease=1).deliveries] == [sent]
    stepped.behind = HOUR
    later = open_store(db_url)  # a worker process that starts now
    try:
        time.sleep(1.3)
        again = Agent(later, b.identity).claim(limit=1, lease=30)
        assert [d.id for d in again.deliveries] == [sent]
    finally:
        later.close()
