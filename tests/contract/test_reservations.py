"""S37: path reservations through the API and the CLI. Real SQLite files; an
injected clock expires reservations without sleeping; 16 real processes race
for overlapping patterns (S37 with S22's fencing rules)."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import random
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
import trusted
from conftest import Clock, open_store

from broker import Agent, Operator, Store, errors
from broker.board import globs
from broker.board.overlap import overlap
from broker.model.records import to_dict

FORK = mp.get_context("fork")


@pytest.fixture
def store(db_url: str, clock: Clock) -> Iterator[Store]:
    s = open_store(db_url, clock=clock)
    yield s
    s.close()


def rows(store: Store) -> list[tuple[Any, ...]]:
    with store.read() as t:
        return [tuple(r) for r in t.all("SELECT * FROM reservations ORDER BY token")] + [
            tuple(r) for r in t.all("SELECT key, event, token FROM claim_journal ORDER BY id")
        ]


def test_S37_an_exclusive_reservation_refuses_an_overlapping_one_naming_holder_pattern_expiry(
    join: Callable[..., Agent], store: Store
) -> None:
    lynx, otter = join("lynx"), join("otter")
    [g] = lynx.reserve("src/**", ttl=60, reason="parser rewrite")
    assert (g.fence, g.pattern, g.mode, g.holder, g.reason) == (
        1,
        "src/**",
        "exclusive",
        "lynx",
        "parser rewrite",
    )
    before = rows(store)
    with pytest.raises(errors.Conflict) as exc:
        otter.reserve(["docs/**", "src/broker/*.py"])  # all or none: docs/** is not granted
    err = exc.value
    assert err.code == "conflict" and err.exit_code == 5
    assert err.fields["holder"] == "lynx" and err.fields["held_pattern"] == "src/**"
    assert err.fields["expires_at"] == g.expires_at
    assert globs.matches("src/**", err.fields["witness"])
    assert globs.matches("src/broker/*.py", err.fields["witness"])
    assert "lynx" in err.message and "src/**" in err.message and g.expires_at in err.message
    assert rows(store) == before  # nothing written
    # Patterns that cannot match a common path do not conflict.
    assert [r.pattern for r in otter.reserve(["src", "docs/**", "*.md"])] == [
        "src",
        "docs/**",
        "*.md",
    ]


def test_S37_shared_reservations_never_conflict_with_each_other_but_do_with_exclusive(
    join: Callable[..., Agent],
) -> None:
    lynx, otter, heron = join("lynx"), join("otter"), join("heron")
    lynx.reserve("docs/**", shared=True)
    otter.reserve("docs/*.md", shared=True)
    with pytest.raises(errors.Conflict):
        heron.reserve("docs/a.md")  # exclusive against shared holders
    with pytest.raises(errors.Conflict):
        heron.reserve("**", shared=False)
    # A participant never conflicts with itself.
    assert lynx.reserve("docs/api/*.md")[0].mode == "exclusive"


def test_S37_fences_grow_over_the_whole_space_and_a_regrant_stales_the_old_one(
    join: Callable[..., Agent], operator: Operator, space: str
) -> None:
    lynx, otter = join("lynx"), join("otter")
    tokens = [g.fence for g in lynx.reserve(["a/**", "b/**"])]
    tokens += [g.fence for g in otter.reserve("c/**")]
    [again] = lynx.reserve("a/**")  # re-grant: larger fence, old one released
    tokens.append(again.fence)
    assert tokens == [1, 2, 3, 4]
    with pytest.raises(errors.LeaseLost):
        lynx.release_reservation(1)
    with pytest.raises(errors.LeaseLost):
        lynx.release_reservation(3)  # otter's
    with pytest.raises(errors.LeaseLost):
        lynx.renew_reservation(99)  # none
    released = lynx.release_reservation(2)
    assert (released.key, released.event, released.fence) == ("path b/**", "released", 2)
    with pytest.raises(errors.LeaseLost):
        lynx.renew_reservation(2)  # released: stale
    assert [(r.fence, r.pattern) for r in operator.reservations(space)] == [
        (3, "c/**"),
        (4, "a/**"),
    ]
    assert lynx.reserve("b/**")[0].fence == 5  # never reused


def test_S37_expiry_is_lazy_journaled_once_and_renew_extends_with_the_same_fence(
    join: Callable[..., Agent], operator: Operator, space: str, clock: Clock
) -> None:
    lynx, otter = join("lynx"), join("otter")
    [a] = lynx.reserve("src/**", ttl=10)
    [b] = lynx.reserve("docs/**", ttl=10)
    clock.advance(5)
    renewed = lynx.renew_reservation(b.fence, 60)
    assert renewed.fence == b.fence and renewed.expires_at > b.expires_at
    clock.advance(6)  # a expired, b live
    assert [c.blocked for c in otter.check_paths(["src/x", "docs/x"])] == [False, True]
    with pytest.raises(errors.LeaseLost, match="expired"):
        lynx.renew_reservation(a.fence)
    assert otter.reserve("src/x.py")[0].fence == 3  # the expired grant is no obstacle
    journal = [(j.key, j.event, j.fence) for j in operator.claim_journal(space)]
    assert journal == [
        ("path src/**", "claimed", 1),
        ("path docs/**", "claimed", 2),
        ("path docs/**", "renewed", 2),
        ("path src/**", "expired", 1),
        ("path src/x.py", "claimed", 3),
    ]
    assert operator.claim_journal(space) == operator.claim_journal(space)  # expired once
    assert [j.event for j in operator.claim_journal(space, key="path src/**")] == [
        "claimed",
        "expired",
    ]


def test_S37_check_paths_says_who_holds_what_covers_each_path(
    join: Callable[..., Agent], operator: Operator, space: str
) -> None:
    lynx, otter = join("lynx"), join("otter")
    lynx.reserve("src/**", reason="rewrite")
    otter.reserve("*.md", shared=True)
    mine = lynx.check_paths(["src/a/b.py", "README.md", "setup.cfg"])
    assert [(c.path, [r.pattern for r in c.held_by], c.blocked) for c in mine] == [
        ("src/a/b.py", ["src/**"], False),  # lynx's own
        ("README.md", ["*.md"], False),  # shared: never blocks
        ("setup.cfg", [], False),
    ]
    theirs = otter.check_paths("src/a/b.py")
    assert theirs[0].blocked and theirs[0].held_by[0].reason == "rewrite"
    ops = operator.check_paths(space, ["src/a/b.py", "README.md"])
    assert [c.blocked for c in ops] == [True, False]  # the operator is nobody's holder
    assert to_dict(ops[0])["held_by"][0]["holder"] == "lynx"


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda a: a.reserve([]), "patterns"),
        (lambda a: a.reserve("/etc/**"), "pattern"),
        (lambda a: a.reserve("src/../x"), "pattern"),
        (lambda a: a.reserve("a\x1bb"), "pattern"),
        (lambda a: a.reserve("[abc"), "pattern"),
        (lambda a: a.reserve(["x"] * 101), "patterns"),
        (lambda a: a.reserve("x", ttl=float("nan")), "ttl"),
        (lambda a: a.reserve("x", ttl=86401), "ttl"),
        (lambda a: a.reserve("x", shared="yes"), "shared"),
        (lambda a: a.reserve("x", reason="r" * 501), "reason"),
        (lambda a: a.release_reservation(True), "fence"),
        (lambda a: a.renew_reservation(0), "fence"),
        (lambda a: a.check_paths(["a//b"]), "path"),
        (lambda a: a.check_paths([]), "paths"),
    ],
)
def test_S37_S33_bad_input_is_invalid_input_and_writes_nothing(
    join: Callable[..., Agent], store: Store, call: Callable[[Agent], Any], field: str
) -> None:
    lynx = join("lynx")
    before = rows(store)
    with pytest.raises(errors.InvalidInput) as exc:
        call(lynx)
    assert exc.value.fields.get("field") == field
    assert rows(store) == before


def test_S37_S24_reserving_needs_the_board_claim_grant(
    join: Callable[..., Agent], store: Store
) -> None:
    reader = join("reader", tools=["board.read"])
    with pytest.raises(errors.ToolUnavailable):
        reader.reserve("src/**")
    assert reader.check_paths("src/a")[0].held_by == []


# --- the CLI ----------------------------------------------------------------------------------
def test_S37_cli_reserve_check_unreserve_renew_and_claims(
    cli: Callable[..., Any], store: Store
) -> None:
    # The space and its members through the library (the CLI's space create and join
    # have their own tests).
    space = Operator(store).create_space("run").id

    def ident(name: str) -> dict[str, str]:
        joined = trusted.join(store, space, name)[1]
        return {"BROKER_SPACE": space, "BROKER_AS": joined.address, "BROKER_TOKEN": joined.token}

    lynx, otter = ident("lynx"), ident("otter")
    r = cli("board", "reserve", "src/**", "docs/*.md", "--reason", "rewrite", "--json", env=lynx)
    assert r.code == 0, r.err
    grants = r.lines()
    assert [(g["fence"], g["pattern"], g["mode"]) for g in grants] == [
        (1, "src/**", "exclusive"),
        (2, "docs/*.md", "exclusive"),
    ]
    r = cli("board", "reserve", "src/cli/*.py", env=otter)
    assert r.code == 5 and r.out == ""
    assert r.err.startswith("broker: conflict: ") and r.err.count("\n") == 1
    assert "lynx" in r.err and "'src/**'" in r.err and grants[0]["expires_at"] in r.err
    r = cli("board", "reserve", "a/../b", env=otter)
    assert r.code == 2 and r.err.startswith("broker: invalid_input: ") and "Traceback" not in r.err
    r = cli("board", "reserve", "*.md", "--shared", env=otter)
    assert r.code == 0 and "reserved *.md (shared) fence 3" in r.out

    r = cli("board", "check", "src/cli/main.py", "README.md", "setup.py", "--json", env=otter)
    checks = r.lines()
    assert [(c["path"], c["blocked"]) for c in checks] == [
        ("src/cli/main.py", True),
        ("README.md", False),
        ("setup.py", False),
    ]
    assert checks[0]["held_by"][0]["holder"] == "lynx"
    text = cli("board", "check", "src/cli/main.py", env=otter).out
    assert "BLOCKED" in text and "lynx" in text

    r = cli("board", "renew-reservation", "--fence", "2", "--ttl", "30", "--json", env=lynx)
    assert r.code == 0 and r.json()["fence"] == 2
    assert cli("board", "unreserve", "--fence", "1", env=otter).code == 5  # not otter's
    r = cli("board", "unreserve", "--fence", "1", env=lynx)
    assert r.code == 0 and r.out.strip() == "released src/** fence 1"
    assert cli("board", "reserve", "src/cli/*.py", env=otter).code == 0

    shown = cli("board", "claims", space).out
    assert "docs/*.md" in shown and "src/cli/*.py" in shown and "src/**" not in shown
    lines = cli("board", "claims", space, "--json").lines()
    assert sorted(line["fence"] for line in lines) == [2, 3, 4]
    journal = cli("board", "journal", space, "--key", "path src/**", "--json").lines()
    assert [j["event"] for j in journal] == ["claimed", "released"]
    for cmd in ("reserve", "check", "unreserve", "renew-reservation"):  # help: no process needed
        assert cli("board", cmd, "--help").code == 0


# --- 16 real processes racing for overlapping patterns ----------------------------------------
RACE_PATTERNS = ("src/**", "src/core/*.py", "src/core/db.py", "docs/**", "**/*.md", "*")
RACE_GRANTS = 5
RACE_TTL = 0.3
RACE_GUARD_S = 120.0


def _racer(
    url: str, space: str, address: str, token: str, seed: int, barrier: Any, out: Any
) -> None:
    store = Store(url)
    me = Agent.connect(store, space, address, token)
    rnd = random.Random(seed)
    grants: list[dict[str, Any]] = []
    bad: list[str] = []
    barrier.wait()
    end = time.monotonic() + RACE_GUARD_S
    while len(grants) < RACE_GRANTS and time.monotonic() < end:
        pattern = rnd.choice(RACE_PATTERNS)
        shared = rnd.random() < 0.3
        try:
            [g] = me.reserve(pattern, shared=shared, ttl=RACE_TTL)
        except errors.Conflict:
            time.sleep(rnd.random() * 0.003)
            continue
        except errors.BrokerError as exc:
            bad.append(repr(exc))
            continue
        grants.append({"token": g.fence, "pattern": pattern, "mode": g.mode, "holder": address})
        time.sleep(rnd.random() * 0.01)
        # Descheduled past the lease is legitimate (journaled as expired).
        with contextlib.suppress(errors.LeaseLost):
            me.release_reservation(g.fence)
    if len(grants) < RACE_GRANTS:
        bad.append(f"starved: {len(grants)} grants")
    out.put({"grants": grants, "bad": bad})
    store.close()


def test_S37_16_processes_racing_for_overlapping_patterns_never_overlap_exclusively(
    db_url: str, operator: Operator
) -> None:
    """Each grant's hold is [claimed, released or expired] from the journal; two
    holds by different holders whose patterns overlap, one of them exclusive,
    must never intersect in time; fences are granted strictly growing."""
    space = operator.create_space("workflow").id
    real = Store(db_url)
    try:
        joined = [trusted.join(real, space, f"racer{i}")[1] for i in range(16)]
        barrier, out = FORK.Barrier(16), FORK.Queue()
        procs = [
            FORK.Process(target=_racer, args=(db_url, space, j.address, j.token, i, barrier, out))
            for i, j in enumerate(joined)
        ]
        for p in procs:
            p.start()
        reports = [out.get(timeout=150) for _ in procs]
        for p in procs:
            p.join(timeout=30)
            assert p.exitcode == 0
        time.sleep(RACE_TTL + 0.05)
        journal = Operator(real).claim_journal(space)
    finally:
        real.close()
    assert [r["bad"] for r in reports if r["bad"]] == []
    grants = {g["token"]: g for r in reports for g in r["grants"]}
    assert len(grants) == 16 * RACE_GRANTS

    claimed = [j for j in journal if j.event == "claimed"]
    assert [j.fence for j in claimed] == sorted(j.fence for j in claimed)  # in time order
    assert len({j.fence for j in claimed}) == len(claimed)
    assert {j.fence: j.owner for j in claimed} == {t: g["holder"] for t, g in grants.items()}
    start = {j.fence: j.at_utc for j in claimed}
    ends = {j.fence: j for j in journal if j.event in ("released", "expired")}
    assert set(ends) == set(start)  # every hold ended exactly once
    # An expired hold lasted until its lease, a released one until its release.
    stop = {t: (e.expires_at if e.event == "expired" else e.at_utc) for t, e in ends.items()}
    holds = sorted(grants.values(), key=lambda g: g["token"])
    overlaps = 0
    for i, a in enumerate(holds):
        for b in holds[i + 1 :]:
            if a["holder"] == b["holder"] or (a["mode"] == b["mode"] == "shared"):
                continue
            if overlap(a["pattern"], b["pattern"]) is None:
                continue
            ta, tb = a["token"], b["token"]
            if start[ta] < stop[tb] and start[tb] < stop[ta]:
                overlaps += 1
    assert overlaps == 0
    print(
        f"16 processes: {len(grants)} grants of {len(RACE_PATTERNS)} overlapping patterns, 0 overlaps"
    )


def test_S44_a_grant_after_an_overlapping_release_by_a_process_whose_clock_runs_ahead_is_journaled_after_it(
    db_url: str, operator: Operator
) -> None:
    """Each PostgreSQL process follows the database's clock only to within a
    millisecond; a reservation's grant, release and renewal take the database's
    clock itself (after the space's lock), so a grant that follows an overlapping
    release in fact follows it in the journal too, whatever the releaser's clock
    says. (On SQLite the writers share the host's clock: the same holds.)"""
    space = operator.create_space("workflow").id
    ahead, behind = Store(db_url), Store(db_url)
    try:
        a_id, b_id = (trusted.join(ahead, space, name)[1] for name in ("ahead", "behind"))
        a = Agent.connect(ahead, space, a_id.address, a_id.token)
        b = Agent.connect(behind, space, b_id.address, b_id.token)
        a.me()  # each store has read the database's clock by now
        b.me()
        if db_url.startswith("postgresql"):  # SQLite's writers share the host's clock
            ahead.clock.offset += timedelta(seconds=5)  # a process whose clock runs 5 s fast
        [first] = a.reserve("src/**")
        a.release_reservation(first.fence)
        [second] = b.reserve("src/core/db.py")
        journal = Operator(ahead).claim_journal(space)
    finally:
        ahead.close()
        behind.close()
    at = {(j.event, j.fence): j.at_utc for j in journal}
    assert at[("released", first.fence)] <= at[("claimed", second.fence)]
