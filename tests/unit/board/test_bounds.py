"""S41: what one participant, or many, may hold on the board is bounded, and
so is what one request costs. Real SQLite files and PostgreSQL databases, an
injected clock (expiry without sleeping), the real CLI."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conftest import Clock, open_store

from broker import Agent, Operator, Store, errors
from broker.board import reservations

BACKENDS = ["sqlite", "postgresql"]


@pytest.fixture
def store(db_url: str, clock: Clock) -> Iterator[Store]:
    s = open_store(db_url, clock=clock)
    yield s
    s.close()


def board(store: Store) -> list[tuple[Any, ...]]:
    """Every board row and journal line (what 'nothing written' compares)."""
    with store.read() as t:
        return (
            [tuple(r) for r in t.all("SELECT * FROM reservations ORDER BY token")]
            + [tuple(r) for r in t.all("SELECT * FROM board_claims ORDER BY key")]
            + [tuple(r) for r in t.all("SELECT * FROM claim_journal ORDER BY id")]
        )


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_S41_holds_cap_bounds_one_participants_claims_and_reservations_together(
    join: Callable[..., Agent], operator: Operator, store: Store, clock: Clock
) -> None:
    sid = operator.create_space("workflow", holds_cap=3).id
    lynx, otter = join("lynx", space=sid), join("otter", space=sid)
    lynx.claim_key("a", ttl=60)
    lynx.claim_key("b", ttl=60)
    [r] = lynx.reserve("src/**", ttl=60)
    before = board(store)
    with pytest.raises(errors.HoldsFull) as exc:
        lynx.claim_key("c")
    assert exc.value.code == "holds_full" and exc.value.exit_code == 6
    assert exc.value.fields == {"holder": "lynx", "held": 3, "cap": 3, "setting": "holds_cap"}
    with pytest.raises(errors.HoldsFull):
        lynx.reserve("docs/**")
    assert board(store) == before  # a refusal writes nothing
    # What it holds already is granted again (nothing added), and others are not bound by it.
    assert lynx.claim_key("a", ttl=60).fence == 2
    assert lynx.reserve("src/**", ttl=60)[0].fence == r.fence + 1
    otter.claim_key("c")
    # A release, or an expiry, makes room.
    lynx.release_key("b", 1)
    lynx.claim_key("d", ttl=1)
    clock.advance(2)
    assert lynx.claim_key("e").key == "e"


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_S41_space_holds_cap_bounds_what_many_participants_hold_together(
    join: Callable[..., Agent], operator: Operator, store: Store
) -> None:
    """Many identities cannot go round a per-participant bound: the space has
    one of its own."""
    sid = operator.create_space("workflow", space_holds_cap=4).id
    agents = [join(f"s{i}", space=sid) for i in range(5)]
    for i, a in enumerate(agents[:4]):
        a.reserve(f"dir{i}/**")
    before = board(store)
    with pytest.raises(errors.HoldsFull) as exc:
        agents[4].claim_key("k")
    assert exc.value.fields == {"held": 4, "cap": 4, "setting": "space_holds_cap"}
    assert "space_holds_cap is 4" in exc.value.message
    assert board(store) == before
    operator.release_reservation(sid, 1)  # the operator ends one: room again
    assert agents[4].claim_key("k").fence == 1


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_S41_a_reserve_counts_each_new_pattern_all_or_none(
    join: Callable[..., Agent], operator: Operator, store: Store
) -> None:
    sid = operator.create_space("workflow", holds_cap=3).id
    lynx = join("lynx", space=sid)
    lynx.reserve("a/**")
    before = board(store)
    with pytest.raises(errors.HoldsFull) as exc:
        lynx.reserve(["a/**", "b/**", "c/**", "d/**"])  # a/** is a re-grant: 3 new, one too many
    assert exc.value.fields["held"] == 1
    assert board(store) == before
    assert [g.pattern for g in lynx.reserve(["a/**", "b/**", "c/**"])] == ["a/**", "b/**", "c/**"]


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_S41_S30_the_operator_sets_the_hold_bounds_within_theirs(operator: Operator) -> None:
    sid = operator.create_space("workflow").id
    usage = operator.set_space(sid, holds_cap=5, space_holds_cap=50)
    assert (usage.limits["holds_cap"], usage.limits["space_holds_cap"]) == (5, 50)
    for key, bad in (("holds_cap", 0), ("space_holds_cap", 10**7), ("holds_cap", 2.5)):
        with pytest.raises(errors.InvalidInput) as exc:
            operator.set_space(sid, **{key: bad})
        assert exc.value.fields["field"] == key
    assert operator.get_space(sid).settings == {"holds_cap": 5, "space_holds_cap": 50}


def test_S41_cli_holds_full_is_one_line_exit_6(cli: Callable[..., Any]) -> None:
    sid = cli("space", "create", "--kind", "workflow", "--setting", "holds_cap=1", "--json").json()[
        "id"
    ]
    j = cli("join", sid, "lynx", "--json").json()
    env = {"BROKER_SPACE": sid, "BROKER_AS": "lynx", "BROKER_TOKEN": j["token"]}
    assert cli("board", "claim", "a", env=env).code == 0
    r = cli("board", "reserve", "src/**", env=env)
    assert r.code == 6, r
    assert r.err.count("\n") == 1 and r.err.startswith("broker: holds_full: lynx holds 1")
    assert "Traceback" not in r.err


# --- one check's cost ------------------------------------------------------------------------
def test_S41_a_check_takes_at_most_1000_paths(join: Callable[..., Agent]) -> None:
    lynx = join("lynx")
    assert len(lynx.check_paths([f"f{i}" for i in range(1000)])) == 1000
    with pytest.raises(errors.InvalidInput) as exc:
        lynx.check_paths([f"f{i}" for i in range(1001)])
    assert exc.value.fields["field"] == "paths" and "at most 1000" in exc.value.message


def test_S41_agents_checks_at_once_are_bounded_the_next_is_busy_not_queued(
    join: Callable[..., Agent],
) -> None:
    """A server's threads stay free for everyone else: past CHECKS_AT_ONCE
    agents' checks in one process, the next one is refused as busy (HTTP 503
    with Retry-After) at once, not parked on a thread. The running checks are
    stood in for by taking their places."""
    lynx = join("lynx")
    taken = [
        reservations._checking.acquire(blocking=False) for _ in range(reservations.CHECKS_AT_ONCE)
    ]
    try:
        assert all(taken)
        with pytest.raises(errors.StoreBusy) as exc:
            lynx.check_paths(["src/a.py"])
        assert exc.value.code == "store_busy" and "retry" in exc.value.message
    finally:
        for _ in taken:
            reservations._checking.release()
    assert lynx.check_paths(["src/a.py"])[0].blocked is False


def test_S41_a_check_past_its_time_is_busy_not_a_held_thread(
    join: Callable[..., Agent], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A check's time is bounded (CHECK_SECONDS, here 0): it stops and says to
    check fewer paths at a time. The semaphore is given back."""
    lynx = join("lynx")
    join("otter").reserve("*" + "a" * 170)
    monkeypatch.setattr(reservations, "CHECK_SECONDS", 0.0)
    with pytest.raises(errors.StoreBusy) as exc:
        lynx.check_paths(["a" * 300, "b"])
    assert exc.value.fields == {"paths": 2, "reservations": 1}
    monkeypatch.setattr(reservations, "CHECK_SECONDS", 2.0)
    assert [c.blocked for c in lynx.check_paths(["a" * 300, "b"])] == [True, False]


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_S41_S30_space_show_counts_the_holds_and_the_bytes_the_board_keeps(
    join: Callable[..., Agent], operator: Operator, space: str, cli: Callable[..., Any]
) -> None:
    """The board's storage is shown beside the log's: its rows are outside
    the log, and kept (ended reservations and the journal too)."""
    lynx = join("lynx")
    empty = operator.space_usage(space)
    assert (empty.holds, empty.board_bytes) == (0, 0)
    lynx.claim_key("deploy")
    usage = operator.space_usage(space)
    # The claim row (key, holder, fence, two times) and its journal line (id,
    # key, event, owner, fence, two times): the same count on either engine.
    assert usage.board_bytes == (6 + 4 + 8 + 54) + (26 + 6 + 7 + 4 + 8 + 54)
    [g] = lynx.reserve("src/**", reason="why")
    lynx.release_reservation(g.fence)
    after = operator.space_usage(space)
    assert after.holds == 1 and after.board_bytes > usage.board_bytes  # the ended row stays
    assert [(i.address, i.holds) for i in after.inboxes] == [("lynx", 1)]
    shown = cli("space", "show", space).out
    assert "board     1 live holds of 1000 (one participant at most 100)" in shown
    assert "PARTICIPANT  STATUS   WAITING  HOLDS" in shown
