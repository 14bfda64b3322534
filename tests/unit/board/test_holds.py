"""S4 with S22/S37: a participant that is recorded as left holds nothing on
the board any more, and the operator can end anyone's hold. Real SQLite files
(and PostgreSQL where a fixture says so); an injected clock, no sleeping."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import spacegen
import trusted
from conftest import Clock, open_store

from broker import Agent, Operator, Store, errors
from broker.interchange.export import export_space
from broker.interchange.importer import import_dir
from broker.spaces import directory

BACKENDS = ["sqlite", "postgresql"]


@pytest.fixture
def store(db_url: str, clock: Clock) -> Iterator[Store]:
    s = open_store(db_url, clock=clock)
    yield s
    s.close()


def held(store: Store) -> list[tuple[Any, ...]]:
    """Every board row and journal line (what 'nothing written' compares)."""
    with store.read() as t:
        return (
            [tuple(r) for r in t.all("SELECT * FROM reservations ORDER BY token")]
            + [tuple(r) for r in t.all("SELECT * FROM board_claims ORDER BY key")]
            + [tuple(r) for r in t.all("SELECT * FROM claim_journal ORDER BY id")]
        )


def ends(op: Operator, space: str) -> list[tuple[str, str, str, str | None]]:
    """The journal lines that end a hold: (key, event, owner, reason)."""
    return [
        (j.key, j.event, j.owner, j.reason)
        for j in op.claim_journal(space)
        if j.event in ("released", "expired")
    ]


# --- S4: leaving ends what the participant holds ------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_S4_leaving_ends_the_leavers_reservations_and_key_claims_journaled_left(
    join: Callable[..., Agent], store: Store, space: str
) -> None:
    lynx, otter = join("lynx"), join("otter")
    [g] = otter.reserve("src/**", ttl=86400)
    k = otter.claim_key("deploy", ttl=86400)
    otter.leave()
    op = Operator(store)
    assert op.reservations(space) == [] and op.claims(space) == []
    assert ends(op, space) == [
        ("deploy", "released", "otter", "left"),
        ("path src/**", "released", "otter", "left"),
    ]
    # Nobody is blocked any more: the grants go on from the larger fences.
    assert lynx.reserve("src/x.py")[0].fence == g.fence + 1
    assert lynx.claim_key("deploy").fence == k.fence + 1
    # The old fences are stale for the re-joined holder, as after an expiry.
    again, _ = trusted.join(store, space, "otter")
    with pytest.raises(errors.LeaseLost) as exc:
        again.release_reservation(g.fence)
    assert exc.value.code == "lease_lost" and exc.value.fields["fence"] == g.fence
    with pytest.raises(errors.LeaseLost):
        again.renew_key("deploy", k.fence)


def test_S4_a_hold_already_expired_at_leave_is_journaled_expired_once(
    join: Callable[..., Agent], store: Store, space: str, clock: Clock
) -> None:
    otter = join("otter")
    otter.reserve("docs/**", ttl=5)
    otter.claim_key("k", ttl=5)
    clock.advance(10)
    otter.leave()
    op = Operator(store)
    assert ends(op, space) == [
        ("k", "expired", "otter", None),
        ("path docs/**", "expired", "otter", None),
    ]
    assert ends(op, space) == ends(op, space)  # a later sweep journals nothing more


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_S1_stopping_a_space_ends_every_participants_holds_journaled_left(
    join: Callable[..., Agent], store: Store, space: str
) -> None:
    lynx, otter = join("lynx"), join("otter")
    lynx.reserve(["src/**", "docs/*.md"], shared=True)
    otter.claim_key("deploy")
    op = Operator(store)
    op.stop_space(space)
    assert op.reservations(space) == [] and op.claims(space) == []
    assert sorted(ends(op, space)) == [
        ("deploy", "released", "otter", "left"),
        ("path docs/*.md", "released", "lynx", "left"),
        ("path src/**", "released", "lynx", "left"),
    ]


def test_S25_prune_ends_the_pruned_participants_holds(store: Store, space: str) -> None:
    me, _ = trusted.join(store, space, "me", pid=os.getpid())
    gone, _, _ = trusted.join_gone(store, space, "gone")
    gone.reserve("src/**", ttl=86400)
    gone.claim_key("deploy", ttl=86400)
    me.reserve("docs/**")  # the live one keeps its own
    assert [p.address for p in directory.prune(store, space)] == ["gone"]
    op = Operator(store)
    assert [r.holder for r in op.reservations(space)] == ["me"]
    assert ends(op, space) == [
        ("deploy", "released", "gone", "left"),
        ("path src/**", "released", "gone", "left"),
    ]


def test_S3_S32_a_rejoin_does_not_leave_so_the_participant_keeps_its_holds(
    store: Store, space: str
) -> None:
    """A retried run re-joins its own row (S3, S32): it is never recorded as
    left, so its holds stay, and its fences still work (S22: a lost token is
    taken back by claiming again)."""
    otter, joined = trusted.join(store, space, "otter")
    [g] = otter.reserve("src/**")
    again, _ = trusted.join(store, space, "otter", token=joined.token)
    op = Operator(store)
    assert [r.fence for r in op.reservations(space)] == [g.fence]
    assert again.release_reservation(g.fence).reason is None  # the holder's own release


# --- the operator ends anyone's hold ------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_S22_the_operator_releases_anyones_key_claim_and_its_fence_goes_stale(
    join: Callable[..., Agent], store: Store, space: str
) -> None:
    lynx, otter = join("lynx"), join("otter")
    k = otter.claim_key("deploy", ttl=86400)
    op = Operator(store)
    before = held(store)
    with pytest.raises(errors.LeaseLost) as exc:  # a fence that is not the current grant's
        op.release_key(space, "deploy", fence=k.fence + 1, reason="stuck")
    assert exc.value.fields["holder"] == "otter" and held(store) == before
    entry = op.release_key(space, "deploy", fence=k.fence, reason="otter is stuck")
    assert (entry.key, entry.event, entry.owner, entry.fence, entry.reason) == (
        "deploy",
        "released",
        "otter",
        k.fence,
        "operator: otter is stuck",
    )
    assert op.claims(space) == []
    with pytest.raises(errors.LeaseLost):
        otter.release_key("deploy", k.fence)
    assert lynx.claim_key("deploy").fence == k.fence + 1
    before = held(store)
    with pytest.raises(errors.LeaseLost):  # lynx's claim is live, but a free key is not
        op.release_key(space, "free-key")
    assert held(store) == before
    assert op.release_key(space, "deploy").reason == "operator"


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_S37_the_operator_releases_anyones_reservation_and_its_fence_goes_stale(
    join: Callable[..., Agent], store: Store, space: str, clock: Clock
) -> None:
    lynx, otter = join("lynx"), join("otter")
    [g] = otter.reserve("src/**", ttl=86400, reason="rewrite")
    op = Operator(store)
    entry = op.release_reservation(space, g.fence, reason="blocks the release")
    assert (entry.key, entry.event, entry.owner, entry.fence, entry.reason) == (
        "path src/**",
        "released",
        "otter",
        g.fence,
        "operator: blocks the release",
    )
    assert op.reservations(space) == []
    with pytest.raises(errors.LeaseLost):
        otter.renew_reservation(g.fence)
    lynx.reserve("src/a.py")
    before = held(store)
    for fence in (g.fence, 999):  # ended, and never granted
        with pytest.raises(errors.LeaseLost) as exc:
            op.release_reservation(space, fence)
        assert exc.value.code == "lease_lost" and exc.value.fields["fence"] == fence
    [short] = otter.reserve("docs/**", ttl=5)
    clock.advance(10)
    before = held(store)
    with pytest.raises(errors.LeaseLost):  # expired: nothing live to end
        op.release_reservation(space, short.fence)
    assert held(store) == before


def test_S33_the_operators_release_refuses_bad_input_naming_the_field_and_writes_nothing(
    join: Callable[..., Agent], store: Store, space: str
) -> None:
    otter = join("otter")
    [g] = otter.reserve("src/**")
    otter.claim_key("deploy")
    op = Operator(store)
    before = held(store)
    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: op.release_reservation(space, g.fence, reason="a\x9b[2Jb"), "reason"),
        (lambda: op.release_reservation(space, g.fence, reason="x" * 501), "reason"),
        (lambda: op.release_reservation(space, 0), "fence"),
        (lambda: op.release_reservation(space, True), "fence"),  # type: ignore[arg-type]
        (lambda: op.release_key(space, "deploy", reason="line\nbreak"), "reason"),
        (lambda: op.release_key(space, "a b"), "key"),
        (lambda: op.release_key(space, "deploy", fence=0), "fence"),
    ]
    for call, field in cases:
        with pytest.raises(errors.InvalidInput) as exc:
            call()
        assert exc.value.fields["field"] == field, exc.value
    assert held(store) == before


def test_S23_the_reason_of_an_ended_hold_survives_export_and_import(
    tmp_path: Path,
) -> None:
    store = spacegen.fresh_store(tmp_path / "a")
    op = Operator(store)
    space = op.create_space("workflow").id
    otter, _ = trusted.join(store, space, "otter")
    lynx, _ = trusted.join(store, space, "lynx")
    otter.reserve("src/**")
    lynx.claim_key("deploy")
    otter.leave()
    op.release_key(space, "deploy", reason="handover")
    export_space(store, space, tmp_path / "out")
    other = spacegen.fresh_store(tmp_path / "b")
    import_dir(other, tmp_path / "out")
    assert (
        ends(Operator(other), space)
        == ends(op, space)
        == [
            ("path src/**", "released", "otter", "left"),
            ("deploy", "released", "lynx", "operator: handover"),
        ]
    )


# --- the front ends ---------------------------------------------------------------------------
def test_S22_S37_cli_release_key_and_release_reservation_end_anyones_hold(
    cli: Callable[..., Any],
) -> None:
    space = cli("space", "create", "--kind", "run", "--json").json()["id"]
    data = cli("join", space, "otter", "--json").json()
    otter = {"BROKER_SPACE": space, "BROKER_AS": data["address"], "BROKER_TOKEN": data["token"]}
    assert cli("board", "reserve", "src/**", env=otter).code == 0
    assert cli("board", "claim", "deploy", env=otter).code == 0
    r = cli("board", "release-reservation", space, "--fence", "1", "--reason", "stuck\x1b[2J")
    assert r.code == 2 and r.err.startswith("broker: invalid_input: ") and "\x1b" not in r.err
    r = cli("board", "release-reservation", space, "--fence", "1", "--reason", "stuck")
    assert r.code == 0, r.err
    assert r.out == "released path src/** fence 1 (held by otter)\n"
    r = cli("board", "release-key", space, "deploy", "--fence", "1", "--json")
    assert r.code == 0, r.err
    assert (r.json()["event"], r.json()["reason"], r.json()["owner"]) == (
        "released",
        "operator",
        "otter",
    )
    r = cli("board", "release-key", space, "deploy")
    assert r.code == 5 and r.err.startswith("broker: lease_lost: ") and r.out == ""
    r = cli("board", "journal", space, "--json")
    assert [(j["key"], j["event"], j["reason"]) for j in r.lines()][-2:] == [
        ("path src/**", "released", "operator: stuck"),
        ("deploy", "released", "operator"),
    ]
    assert "WHY" in cli("board", "journal", space).out
    r = cli("board", "unreserve", "--fence", "1", env=otter)
    assert r.code == 5 and "lease_lost" in r.err
