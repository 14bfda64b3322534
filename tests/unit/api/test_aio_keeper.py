"""The keeper of parked asyncio waits (``broker.delivery.waits.Keeper``, S20, S27).

Every wait an event loop parks (a served long-poll, MCP's waiting tools) is
kept by one thread per store: the waiting callers' heartbeats written together,
and one safety tick for them all. These tests hold what that must not cost:

- a parked wait is not woken while nothing else commits, whatever the beats
  written meanwhile (they are the keeper's own: an idle server stays idle);
- a commit that rang nobody wakes, at the tick, the wait it concerns and no
  other (the probe reads who has something);
- the beats keep every parked caller live, and a caller refused at its beat
  (it left) has its wait ended with that refusal.

Real SQLite files; the writer that rings nobody is a killed process.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
import trusted

from broker import Operator, Store, errors
from broker.api.aio import AsyncAgent
from broker.delivery import inbox, waits, wake
from broker.spaces import participants
from tests.unit.delivery.test_wake import Pair, killed_writer

claimable_among = inbox.claimable_among  # the probe itself, under the counting one

LIVE = 3.0  # live_seconds: a waiter beats every second (S27: a third, at least 1 s)


def _woke_by_address(events: list[tuple[str, str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for who, why in events:
        out.setdefault(who, []).append(why)
    return out


def test_S20_idle_parked_waits_are_not_woken_by_the_beats_that_keep_them_live(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wake, "SAFETY_S", 0.05)  # many ticks in the test's span
    space = Operator(store).create_space("workflow", live_seconds=LIVE).id
    agents = [AsyncAgent.wrap(trusted.join(store, space, f"w/p{i}")[0]) for i in range(5)]
    keys = {wake.participant_key(a.identity.participant_id): a.address for a in agents}
    woke: list[tuple[str, str]] = []

    def hook(w: wake.Waiter, event: str) -> None:
        if event == "woke":
            woke.append((keys.get(w.keys[0], "?"), w.woke))

    monkeypatch.setattr(wake, "_hook", hook)
    seen_before = {
        a.address: participants.get(store, space, a.address).last_seen_utc for a in agents
    }

    async def main() -> list[int]:
        claims = [asyncio.create_task(a.claim(wait=3.5)) for a in agents]
        done = await asyncio.gather(*claims)
        return [len(lease.deliveries) for lease in done]

    assert asyncio.run(main()) == [0] * 5
    # Each wait slept to its end: never woken by a tick although the keeper
    # wrote their beats (three or so each) meanwhile. (The neighbours' first
    # claims, committed as each parked, may send one back once on entry.)
    for who, whys in _woke_by_address(woke).items():
        assert whys[-1] == "timeout" and set(whys) <= {"changed", "timeout"}, who
        assert whys.count("changed") <= 1, who
    for a in agents:
        after = participants.get(store, space, a.address).last_seen_utc
        assert after > seen_before[a.address], a.address  # beaten while parked


def test_S20_a_commit_that_rang_nobody_wakes_at_the_tick_only_the_wait_it_concerns(
    store: Store, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wake, "SAFETY_S", 0.2)
    two = Pair(store)
    bystander = AsyncAgent.wrap(trusted.join(store, two.space, "w/c")[0])
    b = AsyncAgent.wrap(two.b)
    keys = {two.b_key: "b", wake.participant_key(bystander.identity.participant_id): "c"}
    woke: list[tuple[str, str]] = []
    asleep = threading.Event()

    def hook(w: wake.Waiter, event: str) -> None:
        if event == "woke":
            woke.append((keys.get(w.keys[0], "?"), w.woke))
        if event == "sleep" and keys.get(w.keys[0]) == "b":
            asleep.set()

    monkeypatch.setattr(wake, "_hook", hook)
    probed: list[list[str]] = []  # each probe statement's inboxes

    def probe(t: Any, ids: list[str]) -> set[str]:
        probed.append(sorted(ids))
        return claimable_among(t, ids)

    monkeypatch.setattr(inbox, "claimable_among", probe)

    async def main() -> tuple[list[str], int]:
        other = asyncio.create_task(bystander.claim(wait=4))
        mine = asyncio.create_task(b.claim(wait=30))
        await asyncio.get_running_loop().run_in_executor(None, asleep.wait, 30)
        await asyncio.to_thread(killed_writer, db_url, two, "rang nobody")
        got = await asyncio.wait_for(mine, 20)
        rest = await other
        return [d.body for d in got.deliveries], len(rest.deliveries)

    assert asyncio.run(main()) == (["rang nobody"], 0)
    seen = _woke_by_address(woke)
    # Woken by the keeper's tick (not a doorbell, not its timeout); the
    # bystander's probe found nothing: it slept on to its end.
    assert seen["b"][-1] == "tick" and "rung" not in seen["b"]
    assert seen["c"][-1] == "timeout" and "tick" not in seen["c"]
    # The tick probed both parked inboxes in one statement, not one each.
    both = sorted([two.b.identity.participant_id, bystander.identity.participant_id])
    assert both in probed, probed


def test_S27_a_parked_caller_refused_at_its_beat_has_its_wait_ended_with_the_refusal(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wake, "SAFETY_S", 3600.0)  # only the beat can end it
    space = Operator(store).create_space("workflow", live_seconds=LIVE).id
    agent, _ = trusted.join(store, space, "w/gone")
    twin = AsyncAgent.wrap(agent)

    async def main() -> float:
        task = asyncio.create_task(twin.claim(wait=60))
        while waits.keeper(store).parked() < 1:
            await asyncio.sleep(0.01)
        # It leaves from another connection, with no ring for its inbox.
        await asyncio.to_thread(participants.leave, store, agent.identity)
        t0 = time.monotonic()
        with pytest.raises(errors.ParticipantLeft):
            await asyncio.wait_for(task, 20)
        return time.monotonic() - t0

    assert asyncio.run(main()) < 20


def test_S27_beats_due_together_are_written_in_rounds_that_keep_the_writer_lock_short(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thousand waits parked together come due together; their beats go in
    rounds of ``BEAT_ROUND`` transactions, never one long one, and every
    caller is beaten all the same."""
    monkeypatch.setattr(waits, "BEAT_ROUND", 2)
    space = Operator(store).create_space("workflow", live_seconds=LIVE).id
    agents = [AsyncAgent.wrap(trusted.join(store, space, f"w/r{i}")[0]) for i in range(5)]
    seen_before = {
        a.address: participants.get(store, space, a.address).last_seen_utc for a in agents
    }
    keeper = waits.keeper(store)
    rounds = keeper.rounds

    async def main() -> None:
        await asyncio.gather(*(a.claim(wait=3.5) for a in agents))

    asyncio.run(main())
    for a in agents:
        after = participants.get(store, space, a.address).last_seen_utc
        assert after > seen_before[a.address], a.address  # beaten while parked
    assert keeper.largest_round <= 2, keeper.largest_round
    assert keeper.rounds - rounds >= 3  # five beats, two at most at a time
