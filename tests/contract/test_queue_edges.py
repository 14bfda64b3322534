"""S33 at the queue's edge: every duration and count of the inbox, the turns,
the board and the directory is checked before anything is read or written.

``nan``, ``inf``, ``1e300``, negative numbers, huge integers, bools and
strings are ``invalid_input`` naming the field, never a traceback, a spin
past a wait, an ``OverflowError`` or a partial write; on the Python API and
through the CLI (one line, exit 2)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import pytest
import trusted

from broker import Agent, Operator, Store, errors
from broker.delivery import inbox, turns
from broker.model.inputs import ClaimInput
from broker.spaces import directory

BAD_SECONDS: list[Any] = [math.nan, math.inf, -math.inf, -1, 1e300, 2**70, "30", True, None]
BAD_COUNTS: list[Any] = [0, -1, 2**70, 2.5, "3", True, math.nan, None]


def snapshot(store: Store) -> list[tuple[Any, ...]]:
    """Everything the queue, the turns, the board and the directory write."""
    with store.read() as t:
        return [
            *(tuple(r) for r in t.all("SELECT * FROM deliveries ORDER BY rowid")),
            *(tuple(r) for r in t.all("SELECT * FROM turns ORDER BY id")),
            *(tuple(r) for r in t.all("SELECT * FROM board_claims ORDER BY key")),
            *(tuple(r) for r in t.all("SELECT * FROM claim_journal ORDER BY id")),
            *(tuple(r) for r in t.all("SELECT id, status FROM participants ORDER BY id")),
            *(tuple(r) for r in t.all("SELECT count(*) FROM messages")),
        ]


@pytest.fixture
def crew(store: Store) -> tuple[str, Agent, Agent]:
    space = Operator(store).create_space("workflow").id
    a, _ = trusted.join(store, space, "a")
    b, _ = trusted.join(store, space, "b")
    a.send("b", "waiting")
    return space, a, b


def assert_refused(store: Store, call: Callable[[], Any], field: str | None = None) -> None:
    before = snapshot(store)
    started = time.monotonic()
    with pytest.raises(errors.InvalidInput) as info:
        call()
    assert time.monotonic() - started < 5  # refused, not waited on (nan once spun here)
    if field is not None:
        assert info.value.fields.get("field") == field, info.value
    assert "\n" not in str(info.value)
    assert snapshot(store) == before


@pytest.mark.parametrize("value", BAD_SECONDS)
def test_S33_claim_refuses_a_bad_wait_or_lease(
    store: Store, crew: tuple[str, Agent, Agent], value: Any
) -> None:
    _, _, b = crew
    assert_refused(store, lambda: b.claim(wait=value), "wait" if value is not None else None)
    if value is not None:
        assert_refused(store, lambda: b.claim(lease=value), "lease")
        assert_refused(store, lambda: b.next_turn(wait=value), "wait")
        assert_refused(store, lambda: b.next_turn(lease=value), "lease")


def test_S33_the_modules_refuse_a_bool_wait_without_the_handles_check(
    store: Store, crew: tuple[str, Agent, Agent]
) -> None:
    """``turns.next_turn`` and ``inbox.claim`` check a wait themselves (callers
    inside the broker have no handle's type check in front): False equals 0 but
    is not a number of seconds."""
    _, _, b = crew
    assert_refused(store, lambda: turns.next_turn(store, b.identity, wait=False), "wait")
    assert_refused(store, lambda: turns.next_turn(store, b.identity, wait=-1), "wait")
    assert_refused(store, lambda: inbox.claim(store, b.identity, ClaimInput(wait=False)), "wait")


@pytest.mark.parametrize("value", BAD_COUNTS)
def test_S33_claim_and_next_turn_refuse_a_bad_limit(
    store: Store, crew: tuple[str, Agent, Agent], value: Any
) -> None:
    _, _, b = crew
    assert_refused(store, lambda: b.claim(limit=value), "limit")
    if value is not None:
        assert_refused(store, lambda: b.next_turn(limit=value), "limit")


def test_S33_settling_refuses_bad_tokens_ids_texts_and_seconds(
    store: Store, crew: tuple[str, Agent, Agent]
) -> None:
    _, _, b = crew
    lease = b.claim(limit=1)
    mid = lease.deliveries[0].id
    for token in (5, "", None, "\ud800"):
        assert_refused(store, lambda t=token: b.ack(t))
    assert_refused(store, lambda: b.ack(lease.lease_token, ["\ud800"]))
    assert_refused(store, lambda: b.ack(lease.lease_token, [5]))  # type: ignore[list-item]
    assert_refused(store, lambda: b.release(lease.lease_token, error="\ud800"))
    assert_refused(store, lambda: b.quarantine(lease.lease_token, mid, "   "))
    assert_refused(store, lambda: b.quarantine(lease.lease_token, mid, "\udfff"))
    assert_refused(store, lambda: b.claim(owner="\ud800"))
    assert_refused(store, lambda: b.claim(owner="x" * 201))
    for seconds in (math.nan, math.inf, 0, -5, 1e300):
        assert_refused(store, lambda s=seconds: b.extend(lease.lease_token, s), "seconds")
    assert b.ack(lease.lease_token) == 1  # the lease was never touched by the refusals


@pytest.mark.parametrize("value", [math.nan, math.inf, 0, -1, 1e300, 2**70, "60", True])
def test_S33_board_claim_and_renew_refuse_a_bad_ttl(
    store: Store, crew: tuple[str, Agent, Agent], value: Any
) -> None:
    _, a, _ = crew
    assert_refused(store, lambda: a.claim_key("k", ttl=value), "ttl")
    grant = a.claim_key("k", ttl=60)
    assert_refused(store, lambda: a.renew_key("k", grant.fence, ttl=value), "ttl")


def test_S33_board_refuses_bad_fences_and_read_limits(
    store: Store, crew: tuple[str, Agent, Agent]
) -> None:
    _, a, _ = crew
    a.claim_key("k", ttl=60)
    for fence in (2**70, -1, 0, True, "1", 1.5):
        assert_refused(store, lambda f=fence: a.release_key("k", f))
    for limit in (0, 1001, math.nan, "5", True, 2**70):
        assert_refused(store, lambda n=limit: a.board_read(limit=n), "limit")


@pytest.mark.parametrize("value", [math.nan, math.inf, -1, 1e300, 2**70, "60", True])
def test_S33_directory_prune_refuses_a_bad_age(
    store: Store, crew: tuple[str, Agent, Agent], value: Any
) -> None:
    space, _, _ = crew
    assert_refused(store, lambda: directory.prune(store, space, older_than=value), "older_than")


@pytest.mark.parametrize("pid", [2**70, -1, 0, True, "123", 1.5])
def test_S33_directory_register_refuses_a_bad_pid(
    store: Store, crew: tuple[str, Agent, Agent], pid: Any
) -> None:
    space, _, _ = crew
    assert_refused(
        store,
        lambda: directory.register(
            store,
            space,
            "x",
            credential=trusted.credential(store),
            role="r",
            archetype="planner",
            task="t",
            pid=pid,
        ),
        "pid",
    )


@pytest.mark.parametrize(
    "args",
    [
        ("inbox", "next", "--wait", "nan"),
        ("inbox", "claim", "--wait", "inf"),
        ("inbox", "claim", "--ttl", "1e300"),
        ("inbox", "claim", "--limit", "0"),
        ("board", "claim", "k", "--ttl", "nan"),
    ],
)
def test_S33_the_cli_refuses_bad_numbers_in_one_line(
    store: Store,
    crew: tuple[str, Agent, Agent],
    cli: Callable[..., Any],
    db_url: str,
    args: tuple[str, ...],
) -> None:
    space, _, _ = crew
    _, joined = trusted.join(store, space, "c", pid=None)
    env = {
        "BROKER_URL": db_url,
        "BROKER_SPACE": space,
        "BROKER_AS": "c",
        "BROKER_TOKEN": joined.token,
    }
    before = snapshot(store)
    out = cli(*args, env=env)
    assert out.code == 2, (out.out, out.err)
    assert out.err.count("\n") == 1 and "invalid_input" in out.err
    assert "Traceback" not in out.err
    assert snapshot(store) == before


def test_S33_dir_prune_refuses_a_huge_age_in_one_line(
    store: Store, crew: tuple[str, Agent, Agent], cli: Callable[..., Any], db_url: str
) -> None:
    space, _, _ = crew
    before = snapshot(store)
    out = cli("dir", "prune", space, "--older-than", "1e300", env={"BROKER_URL": db_url})
    assert out.code == 2 and "invalid_input" in out.err and "--older-than" in out.err
    assert out.err.count("\n") == 1 and "Traceback" not in out.err
    assert snapshot(store) == before
