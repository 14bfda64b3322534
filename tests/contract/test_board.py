"""The board (S21-S23, S9): posts, standing directives, key claims with fenced
leases, and the claim journal. Real SQLite files; an injected clock expires
claims without sleeping; 16 real processes race for keys."""

from __future__ import annotations

import multiprocessing as mp
import random
import sqlite3
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlrows
import trusted
from conftest import Clock, open_store

from broker import Agent, Operator, Store, errors
from broker.board import claims, posts
from broker.ids import fmt_ts
from broker.model.records import to_dict

FORK = mp.get_context("fork")


@pytest.fixture
def store(db_url: str, clock: Clock) -> Iterator[Store]:
    s = open_store(db_url, clock=clock)
    yield s
    s.close()


def deliveries_of(store: Store, agent: Agent) -> list[tuple[str, str]]:
    with store.read() as t:
        rows = t.all(
            "SELECT m.kind, m.body FROM deliveries d JOIN messages m ON m.rowid = d.rowid >> 20 "
            f"WHERE d.recipient_no = {sqlrows.RECIPIENT_NO} ORDER BY d.rowid",
            (agent.identity.participant_id,),
        )
    return [tuple(r) for r in rows]


def directives_for(store: Store, agent: Agent) -> list[str]:
    with store.read() as t:
        me = t.one(
            "SELECT address, agent, step FROM participants WHERE id = ?",
            (agent.identity.participant_id,),
        )
        return [
            d.body
            for d in posts.active_directives(
                t,
                agent.space_id,
                agent.identity.participant_id,
                me["address"],
                me["agent"],
                me["step"],
            )
        ]


def journal_events(store: Store, space: str, key: str | None = None) -> list[tuple[Any, ...]]:
    return [(j.event, j.key, j.owner, j.fence) for j in claims.journal(store, space, key=key)]


# --- S21: posts ---------------------------------------------------------------------------
def test_S21_channel_post_reaches_no_inbox_and_is_on_the_board(join: Callable[..., Agent]) -> None:
    lynx, otter = join("lynx"), join("otter")
    result = lynx.post("found the bug in parser.py")
    assert result.kind == "post" and result.reached == [] and result.not_reached == []
    assert deliveries_of(lynx.store, otter) == []
    entries = otter.board_read()
    assert [(e.kind, e.sender, e.to, e.body) for e in entries] == [
        ("post", "lynx", [], "found the bug in parser.py")
    ]


def test_S21_addressed_post_lands_in_each_addressee_inbox_as_a_board_post(
    join: Callable[..., Agent],
) -> None:
    lynx, otter, heron, crow = join("lynx"), join("otter"), join("heron"), join("crow")
    result = lynx.post("review my patch", addressed_to=["otter", "heron"])
    assert sorted(result.reached) == ["heron", "otter"]
    assert deliveries_of(lynx.store, otter) == [("post", "review my patch")]
    assert deliveries_of(lynx.store, heron) == [("post", "review my patch")]
    assert deliveries_of(lynx.store, crow) == []  # on the board, not in crow's inbox
    assert [e.to for e in crow.board_read()] == [["otter", "heron"]]


def test_S21_an_addressed_post_is_framed_as_a_board_post_in_the_addressees_turn(
    join: Callable[..., Agent], store: Store
) -> None:
    from broker.delivery import turns

    lynx, otter = join("lynx"), join("otter")
    lynx.post("the build is red", addressed_to=["otter"])
    (item,) = turns.next_turn(store, otter.identity).items
    assert (item.kind, item.group, item.body) == ("post", "message", "the build is red")
    assert "board post" in item.content and "lynx" in item.content


def test_S21_addressed_post_obeys_the_inbox_cap(operator: Operator, store: Store) -> None:
    # one sender may fill the inbox here (its S30 share is all of it)
    space = operator.create_space("workflow", inbox_cap=2, sender_share=1).id
    lynx, _ = trusted.join(store, space, "lynx")
    otter, _ = trusted.join(store, space, "otter")
    lynx.post("one", addressed_to=["otter"])
    lynx.send("otter", "two")
    with pytest.raises(errors.NotDelivered, match="otter: inbox_full"):
        lynx.post("three", addressed_to=["otter"])
    assert len(deliveries_of(store, otter)) == 2
    # Still on the board and in the log with its reason: nothing dropped silently.
    third = [e for e in otter.board_read() if e.body == "three"]
    assert third and third[0].reached == []


def test_S21_read_after_a_cursor_returns_only_newer_entries_in_order(
    join: Callable[..., Agent],
) -> None:
    lynx, otter = join("lynx"), join("otter")
    for i in range(5):
        lynx.post(f"post {i}")
        lynx.send("otter", f"direct {i}")  # not on the board
    first = otter.board_read(limit=2)
    assert [e.body for e in first] == ["post 0", "post 1"]
    rest = otter.board_read(after=first[-1].id)
    assert [e.body for e in rest] == ["post 2", "post 3", "post 4"]
    assert [e.seq for e in rest] == sorted(e.seq for e in rest)
    assert otter.board_read(after=rest[-1].id) == []
    with pytest.raises(errors.MessageNotFound, match="no message"):
        otter.board_read(after="01NOSUCHMESSAGE0000000000")
    with pytest.raises(errors.InvalidInput, match="limit"):
        otter.board_read(limit=0)


def test_S21_board_read_shows_directives_in_force_and_their_retractions(
    join: Callable[..., Agent],
) -> None:
    boss = join("boss", tools=["board.*", "msg.send"])
    worker = join("worker")
    d = boss.directive("worker", "run the tests before every commit")
    boss.post("status: green")
    (entry, _) = worker.board_read()
    assert (entry.kind, entry.in_force, entry.to) == ("directive", True, ["worker"])
    boss.retract(d.id)
    entries = worker.board_read()
    assert [(e.kind, e.in_force) for e in entries] == [
        ("directive", False),
        ("post", None),
        ("retract", None),
    ]
    assert entries[2].ref == d.id


# --- S9 / S17: directives -------------------------------------------------------------------
def test_S9_directive_is_in_every_turn_of_its_addressees_until_retracted(
    join: Callable[..., Agent], store: Store
) -> None:
    boss = join("boss", lead=True)
    worker, other = join("w1", agent="worker"), join("scout", agent="scout")
    d = boss.directive("role:worker", "write tests first")
    # Re-shown at every turn, however many, until lifted.
    for _ in range(3):
        assert directives_for(store, worker) == ["write tests first"]
    assert directives_for(store, other) == []
    assert directives_for(store, boss) == []  # a role directive skips its sender
    boss.retract(d.id)
    assert directives_for(store, worker) == []


def test_S17_directive_is_reshown_every_turn_after_urgent_operator_messages_until_retracted(
    join: Callable[..., Agent], store: Store, operator: Operator, space: str
) -> None:
    from broker.delivery import turns

    boss = join("boss", lead=True)
    worker = join("w1", agent="worker")
    d = boss.directive("role:worker", "never push to main")
    boss.send("w1", "please look at issue 7")
    operator.send(space, "stop and report", to=["w1"], urgent=True)
    first = turns.next_turn(store, worker.identity)
    assert [(i.group, i.body) for i in first.items] == [
        ("urgent", "stop and report"),
        ("directive", "never push to main"),
        ("message", "please look at issue 7"),
    ]
    assert first.id is not None
    turns.seen(store, worker.identity, first.id)
    # Nothing new: still re-shown, not recorded again, not kept in the delivered history.
    for _ in range(2):
        again = turns.next_turn(store, worker.identity)
        assert [(i.group, i.body, i.recorded) for i in again.items] == [
            ("directive", "never push to main", False)
        ]
    with store.read() as t:
        recorded = t.all(
            "SELECT direction FROM transcript WHERE participant_id = ? AND message_id = ?",
            (worker.identity.participant_id, d.id),
        )
        inbox_rows = t.one(
            f"SELECT count(*) FROM {sqlrows.delivery_rows()} WHERE message_id = ?", (d.id,)
        )[0]
    assert sorted(r[0] for r in recorded) == ["injected", "received"]  # once, when first seen
    assert inbox_rows == 0
    boss.retract(d.id)
    assert turns.next_turn(store, worker.identity).items == []


def test_S9_directive_writes_no_inbox_row_and_records_whom_it_reached(
    join: Callable[..., Agent], store: Store
) -> None:
    boss = join("boss", lead=True)
    w1, w2 = join("w1", agent="worker"), join("w2", agent="worker")
    result = boss.directive("role:worker", "keep diffs small")
    assert result.kind == "directive" and sorted(result.reached) == ["w1", "w2"]
    assert deliveries_of(store, w1) == [] and deliveries_of(store, w2) == []
    (entry,) = Operator(store).log(boss.space_id, kinds=["directive"])
    assert entry.to == ["role:worker"] and sorted(entry.reached) == ["w1", "w2"]


def test_S9_role_and_step_directives_apply_to_participants_that_join_later(
    join: Callable[..., Agent], store: Store
) -> None:
    boss = join("boss", lead=True)
    for to, text in (
        ("role:worker", "use the staging database"),
        ("step:scan", "skip vendored code"),
    ):
        with pytest.raises(errors.NotDelivered):  # nobody yet (S8), but logged and in force
            boss.directive(to, text)
    late = join("w9", agent="worker", step="scan")
    assert directives_for(store, late) == ["use the staging database", "skip vendored code"]


def test_S9_directive_forms_resolve_like_S6(join: Callable[..., Agent], store: Store) -> None:
    boss = join("boss", lead=True)
    kid = join("kid", parent="lead")
    lynx = join("lynx", agent="scout")
    scout = join("s1", agent="lynx")  # runs agent "lynx", but "lynx" is an address
    boss.directive("lynx", "to the participant named lynx")
    boss.directive("broadcast", "to everyone but me")
    kid.post("hi")
    lead_dir = join("helper", parent="lead", tools=["board.directive"])
    lead_dir.directive("parent", "to my parent")
    lead_dir.directive("lead", "to the lead")
    assert directives_for(store, lynx) == ["to the participant named lynx", "to everyone but me"]
    assert directives_for(store, scout) == ["to everyone but me"]
    assert directives_for(store, kid) == ["to everyone but me"]
    assert directives_for(store, boss) == ["to my parent", "to the lead"]


def test_S8_a_directive_that_reaches_nobody_is_logged_in_force_and_an_error_to_its_sender(
    join: Callable[..., Agent], store: Store
) -> None:
    boss = join("boss", lead=True)
    refusals = {}
    for to in ("role:reviewer", "step:audit", "auditor", "broadcast", "nobody#1"):
        with pytest.raises(errors.NotDelivered, match="reached nobody.*stays in force") as info:
            boss.directive(to, f"to {to}")
        refusals[to] = [n["reason"] for n in info.value.fields["result"]["not_reached"]]
    assert refusals == {
        "role:reviewer": ["no_live_participant"],
        "step:audit": ["no_live_participant"],
        "auditor": ["no_live_participant"],
        "broadcast": ["no_live_participant"],
        "nobody#1": ["unknown_participant"],
    }
    # Logged (S8: after it is logged) and in force for whoever joins later and matches.
    assert [e.body for e in boss.board_read()] == [f"to {to}" for to in refusals]
    assert all(e.in_force for e in boss.board_read())
    late = join("r1", agent="reviewer", step="audit")
    assert directives_for(store, late) == ["to role:reviewer", "to step:audit", "to broadcast"]


def test_S9_directive_input_is_checked(join: Callable[..., Agent]) -> None:
    boss = join("boss", lead=True)
    with pytest.raises(errors.InvalidInput, match="operator"):
        boss.directive("operator", "x")
    with pytest.raises(errors.InvalidInput, match="needs text"):
        boss.directive("lynx", "   ")
    with pytest.raises(errors.InvalidInput, match="broadcast"):
        boss.directive(["broadcast", "lynx"], "x")
    assert boss.board_read() == []


def test_S9_retract_by_anyone_but_the_author_is_refused(
    join: Callable[..., Agent], store: Store
) -> None:
    boss = join("boss", lead=True)
    deputy = join("deputy", tools=["board.*"])  # has board.retract, is not the author
    worker = join("w1", agent="worker")
    d = boss.directive("role:worker", "stay in src/")
    with pytest.raises(errors.NotAuthor, match=r"only the author of directive .* \(lead\)"):
        deputy.retract(d.id)
    assert directives_for(store, worker) == ["stay in src/"]
    assert [e.kind for e in boss.board_read()] == ["directive"]  # nothing written


def test_S9_retracting_twice_or_an_unknown_id_is_a_clear_error(join: Callable[..., Agent]) -> None:
    boss = join("boss", lead=True)
    join("w1", agent="worker")
    d = boss.directive("role:worker", "x")
    post = boss.post("not a directive")
    boss.retract(d.id)
    with pytest.raises(errors.AlreadyRetracted, match="already retracted"):
        boss.retract(d.id)
    with pytest.raises(errors.DirectiveNotFound):
        boss.retract(post.id)
    with pytest.raises(errors.DirectiveNotFound):
        boss.retract("01NOSUCHDIRECTIVE00000000")


def test_S9_the_operator_lifts_anyones_directive_once(
    join: Callable[..., Agent], store: Store, space: str
) -> None:
    boss = join("boss", lead=True)
    worker = join("w1", agent="worker")
    d = boss.directive("role:worker", "stay in src/")
    op = Operator(store, via="cp")
    lifted = op.retract(space, d.id)
    assert (lifted.kind, lifted.reached, lifted.not_reached) == ("retract", [], [])
    assert directives_for(store, worker) == []
    row = op.log(space)[-1]
    assert (row.kind, row.sender, row.ref, row.via, row.to) == (
        "retract",
        "operator",
        d.id,
        "cp",
        [],
    )
    assert [(e.kind, e.in_force) for e in boss.board_read()] == [
        ("directive", False),
        ("retract", None),
    ]
    # once, and only a directive; the author cannot lift it again either
    with pytest.raises(errors.AlreadyRetracted, match=f"by {lifted.id}"):
        op.retract(space, d.id)
    with pytest.raises(errors.AlreadyRetracted):
        boss.retract(d.id)
    post = boss.post("not a directive")
    for wrong in (post.id, "01NOSUCHDIRECTIVE00000000"):
        with pytest.raises(errors.DirectiveNotFound):
            op.retract(space, wrong)
    for bad, field in (("  ", "directive_id"), (7, "directive_id")):
        with pytest.raises(errors.InvalidInput) as info:
            op.retract(space, bad)  # type: ignore[arg-type]
        assert info.value.fields["field"] == field
    assert len(op.log(space)) == 3  # the refusals wrote nothing


def test_S9_the_operators_lift_needs_a_running_space_and_survives_export_and_import(
    join: Callable[..., Agent], store: Store, space: str, tmp_path: Path
) -> None:
    boss = join("boss", lead=True)
    join("w1", agent="worker")
    kept = boss.directive("role:worker", "stay in src/")
    gone = boss.directive("role:worker", "pause the deploys")
    op = Operator(store)
    op.retract(space, gone.id)
    op.export_space(space, tmp_path / "out")
    op.stop_space(space)
    with pytest.raises(errors.SpaceNotRunning):
        op.retract(space, kept.id)
    other = open_store(f"sqlite:///{tmp_path / 'copy.db'}")
    try:
        summary = Operator(other).import_dir(tmp_path / "out")
        (copied,) = [b for b in Operator(other).board(summary.spaces[0]) if b.kind == "retract"]
        assert (copied.sender, copied.ref) == ("operator", gone.id)
        in_force = {b.id: b.in_force for b in Operator(other).board(summary.spaces[0])}
        assert (in_force[kept.id], in_force[gone.id]) == (True, False)
    finally:
        other.close()


def test_S3_a_rejoined_run_keeps_its_directives_and_its_authorship(
    store: Store, space: str
) -> None:
    boss, lead = trusted.join(store, space, "boss", lead=True)
    w, first = trusted.join(store, space, "flow/w1@1", agent="worker")
    d = boss.directive("w1", "resume from checkpoint 3")
    # the retry (the first attempt is still live: it presents its token, S27)
    w2, _ = trusted.join(store, space, "flow/w1@2", agent="worker", token=first.token)
    assert directives_for(store, w2) == ["resume from checkpoint 3"]
    boss2, _ = trusted.join(store, space, "boss", lead=True, token=lead.token)
    boss2.retract(d.id)  # same address: still its author
    assert directives_for(store, w2) == []


# --- S22: claims ----------------------------------------------------------------------------
def test_S22_claim_returns_a_fencing_token_that_grows_with_every_grant(
    join: Callable[..., Agent],
) -> None:
    lynx, otter = join("lynx"), join("otter")
    tokens = []
    for who in (lynx, otter, lynx, otter):
        g = who.claim_key("task/42", ttl=60)
        assert g.holder == who.address and g.key == "task/42"
        tokens.append(g.fence)
        who.release_key("task/42", g.fence)
    assert tokens == [1, 2, 3, 4]
    assert lynx.claim_key("task/43", ttl=60).fence == 1  # per key


def test_S22_a_conflicting_claim_is_refused_with_holder_and_expiry(
    join: Callable[..., Agent],
) -> None:
    lynx, otter = join("lynx"), join("otter")
    g = lynx.claim_key("db/migrate", ttl=30)
    with pytest.raises(errors.ClaimHeld) as info:
        otter.claim_key("db/migrate", ttl=30)
    assert info.value.fields == {
        "key": "db/migrate",
        "holder": "lynx",
        "expires_at": g.expires_at,
    }
    assert "held by lynx until " + g.expires_at in str(info.value)
    assert info.value.exit_code == 5


def test_S22_release_and_renew_need_the_holders_current_token(
    join: Callable[..., Agent], clock: Clock
) -> None:
    lynx, otter = join("lynx"), join("otter")
    g = lynx.claim_key("k", ttl=10)
    with pytest.raises(errors.LeaseLost, match="held by lynx"):
        otter.release_key("k", g.fence)  # right token, wrong participant
    with pytest.raises(errors.LeaseLost, match="stale"):
        lynx.release_key("k", g.fence + 1)
    clock.advance(5)
    renewed = lynx.renew_key("k", g.fence, ttl=10)
    assert renewed.fence == g.fence and renewed.expires_at > g.expires_at
    assert renewed.claimed_at_utc == g.claimed_at_utc
    clock.advance(9)  # past the first lease, inside the renewed one
    with pytest.raises(errors.ClaimHeld):
        otter.claim_key("k")
    lynx.release_key("k", g.fence)
    with pytest.raises(errors.LeaseLost, match="nobody holds it"):
        lynx.release_key("k", g.fence)
    with pytest.raises(errors.LeaseLost):
        lynx.renew_key("k", g.fence)


def test_S22_a_stale_token_cannot_release_or_renew_after_expiry(
    join: Callable[..., Agent], clock: Clock
) -> None:
    lynx, otter = join("lynx"), join("otter")
    old = lynx.claim_key("k", ttl=10)
    clock.advance(10)  # the lease ends at exactly this instant
    with pytest.raises(errors.LeaseLost, match="expired"):
        lynx.renew_key("k", old.fence)
    with pytest.raises(errors.LeaseLost, match="expired"):
        lynx.release_key("k", old.fence)
    new = otter.claim_key("k", ttl=10)
    assert new.fence == old.fence + 1
    with pytest.raises(errors.LeaseLost, match="held by otter"):
        lynx.release_key("k", old.fence)
    with pytest.raises(errors.LeaseLost, match="held by otter"):
        lynx.renew_key("k", old.fence)
    otter.release_key("k", new.fence)


def test_S22_an_expired_claim_is_expired_lazily_and_journaled_once(
    join: Callable[..., Agent], clock: Clock, store: Store, space: str
) -> None:
    lynx, otter, heron = join("lynx"), join("otter"), join("heron")
    g = lynx.claim_key("k", ttl=10)
    clock.advance(11)
    assert claims.live(store, space) == []  # listing hides it and writes nothing
    with store.read() as t:
        assert [tuple(r) for r in t.all("SELECT event FROM claim_journal")] == [("claimed",)]
    g2 = otter.claim_key("k", ttl=10)  # the claim expires it, then grants
    events = journal_events(store, space, "k")
    assert events == [
        ("claimed", "k", "lynx", g.fence),
        ("expired", "k", "lynx", g.fence),
        ("claimed", "k", "otter", g2.fence),
    ]
    clock.advance(11)
    # The sweep (run by the journal view) expires it once; nothing expires twice.
    assert claims.expire_claims(store, space) == 1
    assert claims.expire_claims(store, space) == 0
    heron.claim_key("k", ttl=10)
    assert [e[0] for e in journal_events(store, space, "k")] == [
        "claimed",
        "expired",
        "claimed",
        "expired",
        "claimed",
    ]


def test_S22_the_holder_claiming_again_gets_a_new_token_and_fences_the_old_one(
    join: Callable[..., Agent], store: Store, space: str
) -> None:
    lynx = join("lynx")
    first = lynx.claim_key("k", ttl=10)
    second = lynx.claim_key("k", ttl=10)
    assert second.fence == first.fence + 1
    with pytest.raises(errors.LeaseLost, match="stale"):
        lynx.release_key("k", first.fence)
    lynx.release_key("k", second.fence)
    assert [e[0] for e in journal_events(store, space, "k")] == [
        "claimed",
        "released",
        "claimed",
        "released",
    ]


def test_S22_claims_lists_only_live_claims(
    join: Callable[..., Agent], clock: Clock, store: Store, space: str
) -> None:
    lynx, otter = join("lynx"), join("otter")
    lynx.claim_key("a", ttl=5)
    g = otter.claim_key("b", ttl=50)
    c = lynx.claim_key("c", ttl=50)
    lynx.release_key("c", c.fence)
    clock.advance(6)
    live = claims.live(store, space)
    assert [(x.key, x.holder, x.fence, x.expires_at) for x in live] == [
        ("b", "otter", g.fence, g.expires_at)
    ]


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("", "empty"),
        ("x" * 201, "at most 200"),
        ("has space", "' '"),
        ("semi;colon", "';'"),
        ("ünïcode", "'ü'"),
        ("a/../b", "'..'"),
        ("..", "'..'"),
    ],
)
def test_S22_claim_keys_are_validated(join: Callable[..., Agent], key: str, why: str) -> None:
    lynx = join("lynx")
    with pytest.raises(errors.InvalidInput, match=why):
        lynx.claim_key(key)


def test_S22_claim_keys_accept_letters_digits_and_dot_underscore_colon_slash_dash(
    join: Callable[..., Agent],
) -> None:
    lynx = join("lynx")
    for key in ("a", "x" * 200, "repo:src/board.py", "task-1.2_b", "A/B/C"):
        assert lynx.claim_key(key).key == key


@pytest.mark.parametrize("ttl", [0, -1, 86400.5, float("nan"), float("inf"), True])
def test_S22_ttl_is_bounded(join: Callable[..., Agent], ttl: float) -> None:
    lynx = join("lynx")
    with pytest.raises(errors.InvalidInput, match="ttl"):
        lynx.claim_key("k", ttl)


# --- waiting for a key (--wait) -----------------------------------------------------------------
def _watch_key_waits(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], threading.Event]:
    """How the waits on a board key's doorbell end (``woke``), and an event set
    when one goes to sleep (the test hook of broker.delivery.wake)."""
    from broker.delivery import wake

    woke: list[str] = []
    asleep = threading.Event()

    def hook(waiter: Any, event: str) -> None:
        if not waiter.keys[0].startswith("k"):  # board keys' doorbells only
            return
        if event == "sleep":
            asleep.set()
        elif event == "woke":
            woke.append(waiter.woke)

    monkeypatch.setattr(wake, "_hook", hook)
    return woke, asleep


def test_S22_S20_a_claim_that_waits_gets_the_key_when_its_holder_releases_it_rung_not_polled(
    join: Callable[..., Agent], monkeypatch: pytest.MonkeyPatch
) -> None:
    lynx, otter = join("lynx"), join("otter")
    held = lynx.claim_key("build/lock", ttl=600)
    woke, asleep = _watch_key_waits(monkeypatch)
    got: dict[str, Any] = {}
    waiter = threading.Thread(
        target=lambda: got.update(grant=otter.claim_key("build/lock", ttl=60, wait=120))
    )
    waiter.start()
    try:
        assert asleep.wait(60), "the claim never went to sleep on the key's doorbell"
        assert "grant" not in got  # parked while lynx holds it
        lynx.release_key("build/lock", held.fence)
    finally:
        waiter.join(120)
    grant = got["grant"]
    assert (grant.holder, grant.fence) == ("otter", held.fence + 1)
    assert woke == ["rung"]  # one wake-up, by the release's ring: no tick, no poll
    journal = [(j.event, j.owner, j.fence) for j in Operator(lynx.store).claim_journal(
        lynx.space_id, key="build/lock")]  # fmt: skip
    assert journal == [("claimed", "lynx", 1), ("released", "lynx", 1), ("claimed", "otter", 2)]


def test_S22_a_claim_that_waits_takes_the_key_when_the_holders_claim_runs_out(
    join: Callable[..., Agent], clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    lynx, otter = join("lynx"), join("otter")
    lynx.claim_key("db/migrate", ttl=0.5)  # an expiry rings nobody: the waiter's own timer
    woke, asleep = _watch_key_waits(monkeypatch)
    got: dict[str, Any] = {}
    waiter = threading.Thread(
        target=lambda: got.update(grant=otter.claim_key("db/migrate", wait=120))
    )
    waiter.start()
    try:
        assert asleep.wait(60)
        clock.advance(1)  # the store's clock: lynx's claim is over
    finally:
        waiter.join(120)
    assert got["grant"].holder == "otter" and got["grant"].fence == 2
    assert woke and woke[-1] in ("timeout", "rung", "tick")
    events = [(j.event, j.owner) for j in Operator(lynx.store).claim_journal(lynx.space_id)]
    assert events == [("claimed", "lynx"), ("expired", "lynx"), ("claimed", "otter")]


def test_S22_a_claim_that_waits_in_vain_is_claim_held_and_writes_nothing(
    join: Callable[..., Agent], store: Store
) -> None:
    lynx, otter = join("lynx"), join("otter")
    g = lynx.claim_key("k", ttl=600)
    before = Operator(store).claim_journal(lynx.space_id)
    with pytest.raises(errors.ClaimHeld) as held:
        otter.claim_key("k", wait=0.2)
    assert held.value.fields == {"key": "k", "holder": "lynx", "expires_at": g.expires_at}
    assert Operator(store).claim_journal(lynx.space_id) == before


@pytest.mark.parametrize("wait", [-1, 86400.5, float("nan"), float("inf"), True, "5"])
def test_S33_a_claims_wait_is_bounded(join: Callable[..., Agent], wait: Any) -> None:
    lynx = join("lynx")
    with pytest.raises(errors.InvalidInput, match="wait"):
        lynx.claim_key("k", wait=wait)
    assert Operator(lynx.store).claim_journal(lynx.space_id) == []


def test_S22_a_claim_cannot_wait_inside_a_transaction(
    join: Callable[..., Agent], store: Store
) -> None:
    lynx = join("lynx")
    with store.transaction() as tx, pytest.raises(errors.InvalidInput, match="transaction"):
        lynx.claim_key("k", wait=1, tx=tx)
    assert lynx.claim_key("k", wait=1).fence == 1  # free: granted at once, no wait


def test_S22_S20_the_async_claim_waits_on_the_keys_doorbell_without_a_thread(
    join: Callable[..., Agent],
) -> None:
    import asyncio

    from broker.api.aio import AsyncAgent

    lynx, otter = join("lynx"), AsyncAgent.wrap(join("otter"))
    held = lynx.claim_key("k", ttl=600)

    async def race() -> Any:
        waiting = asyncio.ensure_future(otter.claim_key("k", wait=120))
        await asyncio.sleep(0.2)
        assert not waiting.done()
        await asyncio.to_thread(lynx.release_key, "k", held.fence)
        return await waiting

    assert asyncio.run(race()).fence == held.fence + 1
    with pytest.raises(errors.ClaimHeld):
        asyncio.run(AsyncAgent.wrap(lynx).claim_key("k", wait=0.1))


def test_S22_a_claim_joins_the_callers_transaction(
    join: Callable[..., Agent], store: Store, space: str
) -> None:
    lynx = join("lynx")

    class Boom(Exception):
        pass

    with pytest.raises(Boom), store.transaction() as tx:
        lynx.claim_key("k", tx=tx)
        raise Boom
    assert claims.live(store, space) == [] and journal_events(store, space) == []
    # A refused claim inside a transaction writes nothing; the caller may go on.
    otter = join("otter")
    otter.claim_key("k")
    with store.transaction() as tx:
        with pytest.raises(errors.ClaimHeld):
            lynx.claim_key("k", tx=tx)
        lynx.post("then I did something else", tx=tx)
    assert [e[0] for e in journal_events(store, space, "k")] == ["claimed"]


# --- S22 under contention: 16 processes --------------------------------------------------
RACE_KEYS = ("alpha", "beta", "gamma")
RACE_TTL = 0.4
RACE_GRANTS = 6  # each racer runs until it was granted this many (a condition, not a time)
RACE_GUARD_S = 120.0  # a racer granted fewer by then was starved: a failure


def _racer(
    url: str,
    space: str,
    address: str,
    token: str,
    seed: int,
    barrier: Any,
    out: Any,
) -> None:
    store = Store(url)
    me = Agent.connect(store, space, address, token)
    rnd = random.Random(seed)
    grants: list[dict[str, Any]] = []
    stale_accepted: list[str] = []
    unexpected: list[str] = []
    barrier.wait()
    end = time.monotonic() + RACE_GUARD_S
    while len(grants) < RACE_GRANTS:
        if time.monotonic() > end:
            unexpected.append(f"starved: {len(grants)} grants in {RACE_GUARD_S:.0f} s")
            break
        key = rnd.choice(RACE_KEYS)
        try:
            g = me.claim_key(key, RACE_TTL)
        except errors.ClaimHeld:
            time.sleep(rnd.random() * 0.002)
            continue
        except errors.BrokerError as exc:
            unexpected.append(f"claim: {exc!r}")
            continue
        rec = {"key": key, "token": g.fence, "holder": g.holder, "stalled": False}
        grants.append(rec)
        roll = rnd.random()
        try:
            if len(grants) == 1 or roll < 0.12:  # each racer's first grant outlives its lease
                rec["stalled"] = True
                time.sleep(RACE_TTL + 0.05)  # hold past the lease: it must be fenced off
                try:
                    me.release_key(key, g.fence)
                    stale_accepted.append(f"release after expiry {key}#{g.fence}")
                except errors.LeaseLost:
                    pass
                continue
            if roll < 0.4:
                time.sleep(0.001)
                me.renew_key(key, g.fence, RACE_TTL)
                rec["renewed"] = True
            me.release_key(key, g.fence)
            rec["released"] = True
        except errors.LeaseLost:
            rec["lost"] = True  # descheduled past the lease: legitimate, the journal says so
        except errors.BrokerError as exc:
            unexpected.append(f"hold: {exc!r}")
        # The token is stale now, whatever happened: it must never work again.
        for attempt in (me.release_key, me.renew_key):
            try:
                attempt(key, g.fence)
                stale_accepted.append(f"{attempt.__name__} with stale {key}#{g.fence}")
            except errors.LeaseLost:
                pass
            except errors.BrokerError as exc:
                unexpected.append(f"stale: {exc!r}")
    out.put({"address": address, "grants": grants, "stale": stale_accepted, "bad": unexpected})
    store.close()


def test_S22_16_processes_racing_for_the_same_keys_hold_them_one_at_a_time(
    db_url: str, operator: Operator
) -> None:
    space = operator.create_space("workflow").id
    real = Store(db_url)  # the system clock, like the racers
    try:
        joined = [trusted.join(real, space, f"racer{i}")[1] for i in range(16)]
        barrier, out = FORK.Barrier(16), FORK.Queue()
        procs = [
            FORK.Process(target=_racer, args=(db_url, space, j.address, j.token, i, barrier, out))
            for i, j in enumerate(joined)
        ]
        for p in procs:
            p.start()
        reports = [out.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(timeout=30)
            assert p.exitcode == 0
        time.sleep(RACE_TTL + 0.05)  # let every lease end, then sweep the rest into the journal
        journal = claims.journal(real, space)
    finally:
        real.close()

    assert [r["bad"] for r in reports if r["bad"]] == []
    assert [r["stale"] for r in reports if r["stale"]] == []
    grants = {(g["key"], g["token"]): g for r in reports for g in r["grants"]}
    assert len(grants) == sum(len(r["grants"]) for r in reports)  # each token granted once
    assert len(grants) == 16 * RACE_GRANTS  # nobody starved

    by_key: dict[str, list[Any]] = defaultdict(list)
    for j in journal:
        by_key[j.key].append(j)
    claimed = {(j.key, j.fence): j.owner for j in journal if j.event == "claimed"}
    # Every grant a process got is journaled with its owner, and nothing else was granted.
    assert claimed == {k: g["holder"] for k, g in grants.items()}

    for key, events in by_key.items():
        # Tokens are granted 1, 2, 3... in time order: strictly increasing.
        grant_tokens = [e.fence for e in events if e.event == "claimed"]
        assert grant_tokens == list(range(1, len(grant_tokens) + 1)), key
        life: dict[int, list[Any]] = defaultdict(list)
        for e in events:
            life[e.fence].append(e)
        for tok, evs in life.items():
            kinds = [e.event for e in evs]
            # claimed, renewed*, then exactly one end: released or expired (journaled once).
            assert kinds[0] == "claimed" and kinds[-1] in ("released", "expired"), (key, kinds)
            assert set(kinds[1:-1]) <= {"renewed"}, (key, kinds)
            end = evs[-1]
            lease_end = evs[-2].expires_at if len(evs) > 1 else evs[0].expires_at
            if end.event == "released":
                assert end.at_utc < lease_end  # released while its lease still held
            if grants[(key, tok)]["stalled"]:
                assert end.event == "expired", (key, tok, kinds)
            nxt = life.get(tok + 1)
            if nxt:
                # Exactly one holder at a time: the next grant starts after this one
                # ended, and after its lease if it ended by expiry.
                start = nxt[0].at_utc
                assert start >= end.at_utc
                if end.event == "expired":
                    assert start >= lease_end
    assert any(g["stalled"] for g in grants.values())
    events = [j.event for j in journal]
    print(  # the number this test reports (spec §Reliability): run with -s
        f"16 processes, {len(RACE_KEYS)} keys: {len(grants)} grants, "
        f"{events.count('renewed')} renewals, {events.count('released')} releases, "
        f"{events.count('expired')} expiries, 0 overlaps, 0 stale tokens accepted"
    )


# --- S23: the claim journal -------------------------------------------------------------------
def test_S23_the_journal_records_each_claim_event_with_key_owner_time_expiry_and_token(
    join: Callable[..., Agent], clock: Clock, store: Store, space: str
) -> None:
    lynx, otter = join("lynx"), join("otter")
    t0 = fmt_ts(clock.now)
    g1 = lynx.claim_key("k", ttl=10)
    clock.advance(1)
    r1 = lynx.renew_key("k", g1.fence, ttl=10)
    clock.advance(1)
    lynx.release_key("k", g1.fence)
    g2 = otter.claim_key("k", ttl=5)
    clock.advance(6)
    rows = [
        {k: v for k, v in to_dict(j).items() if k != "id"} for j in claims.journal(store, space)
    ]
    t1, t2, t3 = (fmt_ts(datetime.fromisoformat(t0) + timedelta(seconds=s)) for s in (1, 2, 8))
    assert rows == [
        {"key": "k", "event": "claimed", "owner": "lynx", "fence": 1, "at_utc": t0,
         "expires_at": g1.expires_at, "reason": None},
        {"key": "k", "event": "renewed", "owner": "lynx", "fence": 1, "at_utc": t1,
         "expires_at": r1.expires_at, "reason": None},
        {"key": "k", "event": "released", "owner": "lynx", "fence": 1, "at_utc": t2,
         "expires_at": r1.expires_at, "reason": None},
        {"key": "k", "event": "claimed", "owner": "otter", "fence": 2, "at_utc": t2,
         "expires_at": g2.expires_at, "reason": None},
        {"key": "k", "event": "expired", "owner": "otter", "fence": 2, "at_utc": t3,
         "expires_at": g2.expires_at, "reason": None},
    ]  # fmt: skip


@pytest.mark.sqlite_only  # the SQLite file itself (tests/unit/store/test_pg.py: the same on PostgreSQL)
@pytest.mark.parametrize("table", ["claim_journal", "messages"])
@pytest.mark.parametrize("op", ["UPDATE {t} SET id = id", "DELETE FROM {t}"])
def test_S23_the_journal_and_the_log_refuse_update_and_delete(
    join: Callable[..., Agent], store: Store, table: str, op: str
) -> None:
    lynx = join("lynx")
    g = lynx.claim_key("k")
    lynx.release_key("k", g.fence)
    lynx.post("on the log")
    with store.read() as t:
        before = t.all(f"SELECT * FROM {table}")
    with (
        pytest.raises(errors.AppendOnly, match=f"append-only: {table} refuses"),
        store.write() as t,
    ):
        t.execute(op.format(t=table))
    # Not even a raw connection, outside the broker's code, can do it.
    raw = sqlite3.connect(store.path)
    try:
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            raw.execute(op.format(t=table))
    finally:
        raw.close()
    with store.read() as t:
        assert t.all(f"SELECT * FROM {table}") == before != []


# --- CLI ---------------------------------------------------------------------------------------
def _env(joined: dict[str, Any]) -> dict[str, str]:
    return {
        "BROKER_SPACE": joined["space_id"],
        "BROKER_AS": joined["address"],
        "BROKER_TOKEN": joined["token"],
    }


def test_cli_board_claim_release_renew_claims_and_journal(cli: Callable[..., Any]) -> None:
    space = cli("space", "create", "--kind", "workflow", "--json").json()["id"]
    lynx = _env(cli("join", space, "lynx", "--json").json())
    otter = _env(cli("join", space, "otter", "--json").json())

    got = cli("board", "claim", "build/lock", "--ttl", "60", "--json", env=lynx)
    assert got.code == 0, got.err
    grant = got.json()
    assert set(grant) == {"key", "fence", "holder", "claimed_at_utc", "expires_at"}
    assert grant["key"] == "build/lock" and grant["fence"] == 1 and grant["holder"] == "lynx"

    held = cli("board", "claim", "build/lock", "--json", env=otter)
    assert held.code == 5 and "held by lynx until" in held.err

    renewed = cli(
        "board", "renew", "build/lock", "--fence", "1", "--ttl", "120", "--json", env=lynx
    )
    assert renewed.code == 0, renewed.err
    assert renewed.json()["expires_at"] > grant["expires_at"]

    live = cli("board", "claims", space, "--json")
    assert [(c["key"], c["holder"], c["fence"]) for c in live.lines()] == [
        ("build/lock", "lynx", 1)
    ]

    stale = cli("board", "release", "build/lock", "--fence", "7", env=lynx)
    assert stale.code == 5 and "lease_lost" in stale.err
    released = cli("board", "release", "build/lock", "--fence", "1", "--json", env=lynx)
    assert released.code == 0 and released.json()["fence"] == 1

    journal = cli("board", "journal", space, "--json")
    assert [(j["event"], j["owner"], j["fence"]) for j in journal.lines()] == [
        ("claimed", "lynx", 1),
        ("renewed", "lynx", 1),
        ("released", "lynx", 1),
    ]
    text = cli("board", "claims", space)
    assert text.code == 0 and text.out.strip() == "(none)"
    bad = cli("board", "claim", "../etc", env=lynx)
    assert bad.code == 2 and "'..'" in bad.err


def test_cli_board_post_read_directive_retract(cli: Callable[..., Any]) -> None:
    space = cli("space", "create", "--kind", "workflow", "--json").json()["id"]
    boss = _env(
        cli("join", space, "boss", "--tool", "board.*", "--tool", "msg.send", "--json").json()
    )
    worker = _env(cli("join", space, "w1", "--agent", "worker", "--json").json())

    d = cli(
        "board", "directive", "--to", "role:worker", "--json", "always", "run", "tests", env=boss
    )
    assert d.code == 0, d.err
    directive_id = d.json()["id"]
    assert d.json()["reached"] == ["w1"]
    refused = cli("board", "directive", "--to", "boss", "obey me", env=worker)
    assert refused.code == 4 and "tool_unavailable" in refused.err
    assert cli("board", "post", "green build", env=worker).code == 0

    entries = cli("board", "read", "--json", env=worker).lines()
    assert [(e["kind"], e["body"], e["in_force"]) for e in entries] == [
        ("directive", "always run tests", True),
        ("post", "green build", None),
    ]
    assert (
        cli("board", "read", "--after", entries[0]["id"], "--json", env=worker).lines()[0]["body"]
        == "green build"
    )

    not_author = cli("board", "retract", directive_id, env=worker)
    assert not_author.code == 4  # no board.retract grant at all
    ok = cli("board", "retract", directive_id, "--json", env=boss)
    assert ok.code == 0 and ok.json()["kind"] == "retract"
    again = cli("board", "retract", directive_id, env=boss)
    assert again.code == 5 and "already retracted" in again.err
    text = cli("board", "read", env=worker)
    assert "(retracted)" in text.out and "lifts " + directive_id in text.out


def test_cli_board_commands_have_help() -> None:
    from click.testing import CliRunner

    from broker.frontends.cli import main

    runner = CliRunner()
    for sub in ("post", "read", "directive", "retract", "claim", "release", "renew"):
        r = runner.invoke(main, ["board", sub, "--help"])
        assert r.exit_code == 0 and "Usage:" in r.output, sub
    for sub in ("view", "claims", "journal"):
        r = runner.invoke(main, ["board", sub, "--help"])
        assert r.exit_code == 0 and "RUN_ID" in r.output, sub
    release = runner.invoke(main, ["board", "release", "--help"]).output
    assert "fencing token" in release and "--fence" in release and "--token" in release
