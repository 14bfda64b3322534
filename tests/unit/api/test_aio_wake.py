"""S20 for the asyncio API: no lost wake-up in ``broker.api.aio.Doorbell`` either.

The async twins of the window tests in ``tests/unit/delivery/test_wake.py``: a commit that
lands between the caller's check and its ``await wait()`` — made by a writer
process killed before it rings, so only the change marker can tell — must
wake the waiter at once, on entry, without sleeping. The Doorbell reads the
marker when it is made (through the Waiter's own steps), not when ``wait()``
is entered; with the old baseline taken at ``wait()`` these tests sleep
through the commit and fail (``wait(12)`` returns False, the claim comes back
empty). The steps are observed through the same hook (``wake._hook``) as the
sync tests; no assertion is about time.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from broker import Store
from broker.api.aio import AsyncAgent, AsyncOperator, Doorbell
from broker.delivery import doorbells, wake
from tests.unit.delivery.test_wake import Pair, killed_writer


@pytest.fixture
def two(store: Store) -> Pair:
    return Pair(store)


def test_S20_async_doorbell_a_commit_that_rang_nobody_before_wait_wakes_it_on_entry(
    store: Store, db_url: str, two: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []
    monkeypatch.setattr(wake, "_hook", lambda w, e: events.append(e))

    async def main() -> tuple[bool, str]:
        async with Doorbell(store, [two.b_key]) as bell:
            assert two.b.claim().deliveries == []  # the check: nothing yet
            killed_writer(db_url, two, "in the window")  # ... then a commit that rings nobody
            return await bell.wait(12), bell.waiter.woke

    assert asyncio.run(main()) == (True, "changed")
    assert events == ["enter", "woke"]  # never went to sleep
    assert [d.body for d in two.b.claim().deliveries] == ["in the window"]


def test_S20_async_claim_wait_sees_a_commit_that_rang_nobody_landing_just_before_its_wait(
    store: Store, db_url: str, two: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []

    def hook(w: wake.Waiter, event: str) -> None:
        events.append(event)
        if events == ["enter"]:  # claim checked the inbox and is about to wait: commit now
            killed_writer(db_url, two, "in the window")

    monkeypatch.setattr(wake, "_hook", hook)
    got = asyncio.run(AsyncAgent.wrap(two.b).claim(wait=12))
    assert [d.body for d in got.deliveries] == ["in the window"]
    assert events == ["enter", "woke"]  # woken on entry, without sleeping


def test_S20_async_next_turn_wait_sees_a_commit_that_rang_nobody_landing_just_before_its_wait(
    store: Store, db_url: str, two: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []

    def hook(w: wake.Waiter, event: str) -> None:
        events.append(event)
        if events == ["enter"]:
            killed_writer(db_url, two, "in the window")

    monkeypatch.setattr(wake, "_hook", hook)
    turn = asyncio.run(AsyncAgent.wrap(two.b).next_turn(wait=12))
    assert [i.body for i in turn.items] == ["in the window"]
    assert events == ["enter", "woke"]


def test_S20_async_follow_sees_a_commit_that_rang_nobody_landing_just_before_its_wait(
    store: Store, db_url: str, two: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []

    def hook(w: wake.Waiter, event: str) -> None:
        events.append(event)
        if events == ["enter"]:  # the follower read an empty log and is about to wait
            killed_writer(db_url, two, "in the window")

    monkeypatch.setattr(wake, "_hook", hook)

    async def main() -> list[str]:
        follow = AsyncOperator(store).follow(two.space, idle_timeout=12)
        try:
            batch = await anext(follow)
        finally:
            await follow.aclose()
        return [e.body for e in batch]

    assert asyncio.run(main()) == ["in the window"]
    assert events[:2] == ["enter", "woke"]


def test_S20_async_doorbell_sleeps_until_rung_and_says_so(
    store: Store, two: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other half: with nothing in the window the Doorbell sleeps, and the
    ring (not the safety tick, not the entry check) wakes it."""
    events: list[str] = []
    asleep = threading.Event()

    def hook(w: wake.Waiter, event: str) -> None:
        events.append(event)
        if event == "sleep":
            asleep.set()

    monkeypatch.setattr(wake, "_hook", hook)

    async def main() -> tuple[bool, str]:
        async with Doorbell(store, [two.b_key]) as bell:
            assert two.b.claim().deliveries == []

            def send() -> None:
                assert asleep.wait(30)
                two.a.send("b", "after the sleep")

            sender = threading.Thread(target=send)
            sender.start()
            try:
                return await bell.wait(30), bell.waiter.woke
            finally:
                sender.join(30)

    assert asyncio.run(main()) == (True, "rung")
    assert events == ["enter", "sleep", "woke"]


@pytest.fixture
def no_sockets(monkeypatch: pytest.MonkeyPatch) -> None:
    """A place where Unix sockets cannot be bound (some network file systems)."""

    def refuse(path: str) -> None:
        raise OSError(95, "Operation not supported", path)

    monkeypatch.setattr(doorbells, "_bind", refuse)


@pytest.mark.usefixtures("no_sockets")
def test_S20_async_without_sockets_a_commit_in_the_window_is_seen_at_once(
    store: Store, two: Pair
) -> None:
    async def main() -> tuple[bool, str]:
        async with Doorbell(store, [two.b_key]) as bell:
            assert bell.waiter.polling is True
            assert two.b.claim().deliveries == []
            th = threading.Thread(target=two.a.send, args=("b", "in the window"))
            th.start()
            th.join(30)  # committed on another connection before the wait
            return await bell.wait(12), bell.waiter.woke

    assert asyncio.run(main()) == (True, "changed")
    assert [d.body for d in two.b.claim().deliveries] == ["in the window"]


@pytest.mark.usefixtures("no_sockets")
def test_S20_async_without_sockets_a_quiet_wait_times_out(store: Store, two: Pair) -> None:
    async def main() -> tuple[bool, str]:
        async with Doorbell(store, [two.b_key]) as bell:
            return await bell.wait(0.05), bell.waiter.woke

    assert asyncio.run(main()) == (False, "timeout")
