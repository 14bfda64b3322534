"""A swarm over MCP: agents, each its own ``broker mcp`` process driven by
the MCP SDK's client, exchange messages through msg_send / inbox_next /
inbox_seen and contend for board keys (S13, S16-S18, S22-S23, spec §Served
mode): every message arrives exactly once, and no key is ever held by two.
The default run is four agents and 200 messages; the soak run (``-m soak``)
is eight agents and 1,000 messages."""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from typing import Any

import pytest
import trusted
from mcphelp import Session, agent_session, text

from broker import Operator, Store
from broker.board import claims

pytest.importorskip("mcp")

KEYS = ["src/a.py", "src/b.py", "docs/c.md"]


def test_S22_four_mcp_agents_exchange_200_messages_and_share_keys_safely(store: Store) -> None:
    assert run_swarm(store, agents=4, per_agent=50, claims_per_agent=6) == 200


@pytest.mark.soak
def test_S22_eight_mcp_agents_exchange_1000_messages_and_share_keys_safely_soak(
    store: Store,
) -> None:
    assert run_swarm(store, agents=8, per_agent=125, claims_per_agent=12) == 1000


def run_swarm(store: Store, *, agents: int, per_agent: int, claims_per_agent: int) -> int:
    """``agents`` MCP processes, each sending ``per_agent`` messages to the
    others while draining its inbox and taking ``claims_per_agent`` of the
    contended keys; every message arrives once, no key is held by two.
    Returns how many messages the log holds once they are done."""
    space = Operator(store).create_space("workflow").id
    names = [f"w{i}" for i in range(agents)]
    tokens = {name: trusted.join(store, space, name)[1].token for name in names}
    plan = {
        name: [
            (names[(i + 1 + n % (agents - 1)) % agents], f"{name}-{n}") for n in range(per_agent)
        ]
        for i, name in enumerate(names)
    }
    expected: dict[str, set[str]] = defaultdict(set)
    for sends in plan.values():
        for to, body in sends:
            expected[to].add(body)
    received: dict[str, list[str]] = defaultdict(list)
    holders: dict[str, str | None] = dict.fromkeys(KEYS)
    overlaps: list[str] = []
    stats: Counter[str] = Counter()

    async def sender(me: str, s: Session) -> None:
        for to, body in plan[me]:
            out = await s.ok("msg_send", to=[to], text=body, idempotency_key=body)
            assert out["reached"] == [to], out

    async def receiver(me: str, s: Session) -> None:
        deadline = asyncio.get_running_loop().time() + 180
        while len(received[me]) < len(expected[me]):
            assert asyncio.get_running_loop().time() < deadline, f"{me} is still missing mail"
            turn = await s.ok("inbox_next", wait=5)
            if turn["id"] is None:
                continue
            received[me] += [i["body"] for i in turn["items"] if i["group"] == "message"]
            await s.ok("inbox_seen", turn_id=turn["id"])

    async def claimer(me: str, s: Session) -> None:
        n = 0
        while n < claims_per_agent:
            key = KEYS[(n + names.index(me)) % len(KEYS)]
            got = await s.call("board_claim", key=key, ttl=120)
            if got.is_error:
                assert text(got).startswith("claim_held: "), text(got)
                stats["refused"] += 1
                await asyncio.sleep(0)
                continue
            assert got.structured_content is not None
            if holders[key] is not None:
                overlaps.append(f"{me} got {key} while {holders[key]} held it")
            holders[key] = me
            await s.ok("board_read", limit=1)  # hold it across another round trip
            holders[key] = None  # stop using it before giving it back
            await s.ok("board_release", key=key, fence=got.structured_content["fence"])
            stats["held"] += 1
            n += 1

    async def agent(me: str) -> None:
        async with agent_session(store, space, me, tokens[me]) as s:
            await asyncio.gather(sender(me, s), receiver(me, s), claimer(me, s))

    async def main() -> None:
        await asyncio.gather(*(agent(me) for me in names))

    asyncio.run(main())

    total = sum(len(v) for v in received.values())
    assert total == agents * per_agent  # 0 lost, 0 extra
    for me in names:
        assert Counter(received[me]) == Counter(expected[me]), me  # each exactly once
    assert overlaps == []  # 0 overlapping holds
    assert stats["held"] == agents * claims_per_agent
    # The journal agrees: per key, claimed/released alternate, fences grow.
    for key in KEYS:
        lines = claims.journal(store, space, key=key)
        assert [j.event for j in lines] == ["claimed", "released"] * (len(lines) // 2), key
        fences = [j.fence for j in lines if j.event == "claimed"]
        assert fences == sorted(fences) and len(set(fences)) == len(fences), key
    log: list[Any] = Operator(store).log(space, kinds=["direct"])
    assert len(log) == agents * per_agent
    return len(log)
