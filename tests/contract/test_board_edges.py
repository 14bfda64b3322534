"""The board's edges (S21, S9, S8, S22, S37, S33): the read bounds and claim
defaults at and past the limit on every surface, readers that never take the
writer lock, the exact texts and fields an agent is shown when a board call
is refused, and the directive forms whose matching tests/contract/test_board.py does
not pin. Written from the survivors of the mutation run of broker/board/posts.py and
broker/board/claims.py (docs/mutation.md); a contract module (both backends)."""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import spacegen
import trusted
from click.testing import CliRunner
from conftest import Clock, open_store
from test_board import directives_for

from broker import Agent, Operator, Store, errors, vocab
from broker.board import claims, posts
from broker.ids import parse_ts
from broker.interchange.export import LOG, export_space
from broker.interchange.importer import import_dir


@pytest.fixture
def store(db_url: str, clock: Clock) -> Iterator[Store]:
    s = open_store(db_url, clock=clock)
    yield s
    s.close()


# --- S21: the read bounds -------------------------------------------------------------------
@pytest.mark.sqlite_only  # 1001 posts cost ~10 s on PostgreSQL; the bound is checked in Python
# before any SQL, and the LIMIT statement runs on both engines in test_board's cursor test.
def test_S21_S33_a_read_returns_100_by_default_takes_1000_and_refuses_1001_naming_the_field(
    join: Callable[..., Agent], store: Store
) -> None:
    lynx = join("lynx")
    with store.write() as t:  # one past the largest page, in one transaction
        for i in range(1001):
            lynx.post(f"post {i}", tx=t)
    space, operator = lynx.space_id, Operator(store)
    first_100 = [f"post {i}" for i in range(100)]
    assert [e.body for e in posts.read(store, lynx.identity)] == first_100
    assert [e.body for e in posts.view(store, space)] == first_100
    assert [e.body for e in lynx.board_read()] == first_100
    assert [e.body for e in operator.board(space)] == first_100
    assert len(lynx.board_read(limit=1000)) == 1000
    assert [e.body for e in operator.board(space, limit=1000)][-1] == "post 999"
    for read in (
        lambda n: lynx.board_read(limit=n),
        lambda n: operator.board(space, limit=n),
        # the agent's limit is bounded at the edge first; the library's own check is this one
        lambda n: posts.read(store, lynx.identity, limit=n),
        lambda n: posts.view(store, space, limit=n),
    ):
        for bad in (1001, 0):
            with pytest.raises(errors.InvalidInput) as info:
                read(bad)
            assert info.value.message == f"bad limit {bad}: 1 to 1000"
            assert info.value.fields == {"field": "limit"}


def test_S21_every_surface_states_the_same_read_bounds_as_the_library() -> None:
    from broker.api.agent import Agent as LibraryAgent
    from broker.api.operator import Operator as LibraryOperator
    from broker.frontends.remote.agent import RemoteAgent
    from broker.model.inputs import BoardReadInput

    default, top = vocab.BOARD_READ_DEFAULT, vocab.BOARD_READ_MAX
    assert (default, top) == (100, 1000)  # S21: default 100, at most 1000
    for fn in (LibraryAgent.board_read, LibraryOperator.board, RemoteAgent.board_read):
        assert inspect.signature(fn).parameters["limit"].default == default, fn
    field = BoardReadInput.field("limit")  # every surface's check (the operation table)
    assert (field.default, field.low, field.high) == (default, 1, top)
    from broker.frontends.cli import main

    runner = CliRunner()
    for command in (["board", "read"], ["board", "view", "RUN"]):
        shown = " ".join(runner.invoke(main, [*command, "--help"]).output.split())
        assert f"[default: {default}; 1<=x<={top}]" in shown, command
        past = runner.invoke(main, [*command, "--limit", str(top + 1)])
        assert (
            past.exit_code == 2
            and f"'{top + 1}' is not a whole number from 1 to {top}" in past.output
        )


# --- S21: the cursor --------------------------------------------------------------------------
def test_S21_S33_a_cursor_that_is_not_a_message_id_of_the_space_is_refused_in_plain_words(
    join: Callable[..., Agent], store: Store
) -> None:
    lynx = join("lynx")
    lynx.post("hello")
    for read in (  # both declared: the input record words it, as on every surface
        lambda after: lynx.board_read(after=after),
        lambda after: Operator(store).board(lynx.space_id, after=after),
    ):
        with pytest.raises(errors.InvalidInput) as info:
            read(7)
        said = "bad after: text, not a number"
        assert (info.value.message, info.value.fields) == (said, {"field": "after"})
        with pytest.raises(errors.MessageNotFound) as missing:
            read("01NOSUCHMESSAGE0000000000")
        assert missing.value.message == (
            "no message '01NOSUCHMESSAGE0000000000' in this space: "
            "--after takes the id of a board entry you read"
        )


# --- storage: the board is read from a snapshot --------------------------------------------
@pytest.mark.sqlite_only  # the writer lock is a file lock (spec §Writer lock)
def test_S21_reading_the_board_never_waits_for_a_writer(
    join: Callable[..., Agent], store: Store, space: str
) -> None:
    """Readers never take the writer lock (spec §Writer lock): a board read
    while another connection holds a write transaction returns at once. The
    reader's store waits at most 50 ms for a lock, so a read that took it
    would fail with store_busy instead of hanging."""
    lynx = join("lynx")
    lynx.post("before the writer")
    impatient = open_store(
        store.url, settings=dataclasses.replace(store.settings, busy_timeout_ms=50)
    )
    try:
        reader, _ = trusted.join(impatient, space, "otter")
        with store.write() as t:
            lynx.post("not committed yet", tx=t)
            assert [e.body for e in reader.board_read()] == ["before the writer"]
            assert [e.body for e in posts.view(impatient, space)] == ["before the writer"]
    finally:
        impatient.close()


def test_S21_a_board_read_joins_the_callers_read_transaction(
    join: Callable[..., Agent], store: Store
) -> None:
    lynx = join("lynx")
    lynx.post("one")
    with store.read() as t:  # one snapshot for the caller's own reads and the board
        assert [e.body for e in lynx.board_read(tx=t)] == ["one"]


# --- S9 / S8: directives ----------------------------------------------------------------------
def test_S9_directive_input_is_refused_with_plain_words(join: Callable[..., Agent]) -> None:
    boss = join("boss", lead=True)
    refusals = {
        ("lynx", "   "): ("a directive needs text", "text"),
        ("operator", "x"): ("a directive cannot be addressed to the operator", "to"),
        (("lynx", "broadcast"), "x"): ("'broadcast' cannot be combined with other addresses", "to"),
    }
    for (to, text), (message, field) in refusals.items():
        with pytest.raises(errors.InvalidInput) as info:
            boss.directive(to, text)  # type: ignore[arg-type]
        assert (info.value.message, info.value.fields) == (message, {"field": field})
    assert boss.board_read() == []


def test_S9_a_directive_may_name_several_addressees(
    join: Callable[..., Agent], store: Store
) -> None:
    boss = join("boss", lead=True)
    w1, w2, w3 = join("w1"), join("w2"), join("w3")
    result = boss.directive(["w1", "w2"], "pair on the parser")
    assert sorted(result.reached) == ["w1", "w2"] and result.not_reached == []
    assert directives_for(store, w1) == directives_for(store, w2) == ["pair on the parser"]
    assert directives_for(store, w3) == []


def test_S8_a_directive_that_reaches_some_addressees_is_no_error(
    join: Callable[..., Agent], store: Store
) -> None:
    boss = join("boss", lead=True)
    w1 = join("w1")
    result = boss.directive(["w1", "ghost#1"], "rebase on main")
    assert result.reached == ["w1"]
    assert [(n.address, n.reason) for n in result.not_reached] == [
        ("ghost#1", "unknown_participant")
    ]
    assert directives_for(store, w1) == ["rebase on main"]


def test_S8_a_directive_that_reaches_nobody_names_each_reason_in_its_error(
    join: Callable[..., Agent],
) -> None:
    boss = join("boss", lead=True)
    with pytest.raises(errors.NotDelivered) as info:
        boss.directive(["ghost#1", "role:reviewer"], "review everything")
    result = info.value.fields["result"]
    assert info.value.message == (
        f"directive {result['id']} reached nobody (ghost#1: unknown_participant, "
        "role:reviewer: no_live_participant); it is logged and stays in force until retracted"
    )


def test_S9_a_bare_name_nobody_holds_is_every_runner_of_that_agent(
    join: Callable[..., Agent], store: Store
) -> None:
    boss = join("boss", lead=True, agent="worker")
    w1, scout = join("w1", agent="worker"), join("s1", agent="scout")
    boss.directive("worker", "log every decision")  # no participant is called "worker"
    late = join("w2", agent="worker")
    assert directives_for(store, w1) == directives_for(store, late) == ["log every decision"]
    assert directives_for(store, scout) == []
    assert directives_for(store, boss) == []  # like role:worker, never its own sender


def test_S9_a_step_directive_applies_only_to_that_step_and_never_to_its_sender(
    join: Callable[..., Agent], store: Store
) -> None:
    boss = join("boss", lead=True, step="scan")
    scanner, builder = join("w1", step="scan"), join("w2", step="build")
    boss.directive("step:scan", "skip vendored code")
    assert directives_for(store, scanner) == ["skip vendored code"]
    assert directives_for(store, builder) == []
    assert directives_for(store, boss) == []


def test_S9_a_directive_to_a_full_address_applies_to_its_holder(
    join: Callable[..., Agent], store: Store
) -> None:
    boss = join("boss", lead=True)
    w1, w2 = join("flow/w1@1"), join("flow/w2@1")
    result = boss.directive("flow/w1@1", "you own the parser")  # S3: the address is w1
    assert result.reached == ["w1"]
    assert directives_for(store, w1) == ["you own the parser"]
    assert directives_for(store, w2) == []


def test_S9_an_imported_directive_addressed_to_the_operator_applies_to_nobody(
    tmp_path: Path,
) -> None:
    """Issuing one is refused (above), but an import checks only that ``to`` is
    a list of text: the turns of the importing store must still show it to nobody."""
    store = spacegen.fresh_store(tmp_path / "a")
    space = Operator(store).create_space("workflow").id
    boss, _ = trusted.join(store, space, "boss", lead=True)
    trusted.join(store, space, "w1", agent="worker")
    d = boss.directive("role:worker", "obey the operator")
    export_space(store, space, tmp_path / "out")
    log = next((tmp_path / "out").rglob(LOG.file))
    lines = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    for line in lines:
        if line["id"] == d.id:
            line["to"] = ["operator"]
    log.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    other = spacegen.fresh_store(tmp_path / "b")
    import_dir(other, tmp_path / "out")
    w2 = trusted.join(other, space, "w2", agent="worker")[0]
    scout = trusted.join(other, space, "s1", agent="scout")[0]
    assert directives_for(other, w2) == directives_for(other, scout) == []
    assert [e.to for e in Operator(other).board(space)] == [["operator"]]


# --- S9: retraction ---------------------------------------------------------------------------
def test_S9_retract_refusals_say_why_in_plain_words(join: Callable[..., Agent]) -> None:
    boss = join("boss", lead=True)
    deputy = join("deputy", tools=["board.*"])  # holds board.retract, is not the author
    join("w1", agent="worker")
    d = boss.directive("role:worker", "stay in src/")
    for blank in ("", "   "):
        with pytest.raises(errors.InvalidInput) as bad:
            boss.retract(blank)
        assert bad.value.message == "retract needs the id of a directive"
    with pytest.raises(errors.InvalidInput) as bad:  # the input record's words, every surface
        boss.retract(7)  # type: ignore[arg-type]
    assert (bad.value.message, bad.value.fields) == (
        "bad directive_id: text, not a number",
        {"field": "directive_id"},
    )
    with pytest.raises(errors.DirectiveNotFound) as missing:
        boss.retract(" 01NOSUCHDIRECTIVE00000000 ")
    assert missing.value.message == "no directive '01NOSUCHDIRECTIVE00000000' in this space"
    with pytest.raises(errors.NotAuthor) as not_author:
        deputy.retract(d.id)
    assert not_author.value.message == (
        f"only the author of directive {d.id} (lead) may retract it, not deputy"
    )
    lifted = boss.retract(d.id)
    with pytest.raises(errors.AlreadyRetracted) as again:
        boss.retract(d.id)
    assert again.value.message == f"directive {d.id} was already retracted (by {lifted.id})"
    assert again.value.fields == {"directive_id": d.id, "retract_id": lifted.id}


def test_S21_a_retraction_on_the_board_says_which_directive_it_lifts(
    join: Callable[..., Agent],
) -> None:
    boss = join("boss", lead=True)
    reader = join("w1", agent="worker")
    d = boss.directive("role:worker", "freeze the API")
    lifted = boss.retract(d.id)
    assert (lifted.reached, lifted.not_reached) == ([], [])
    (_, retraction) = reader.board_read()
    assert (retraction.kind, retraction.body, retraction.ref, retraction.to) == (
        "retract",
        f"retracts directive {d.id}",
        d.id,
        [],
    )


# --- S22: claim inputs ------------------------------------------------------------------------
def test_S22_a_claim_and_a_renewal_last_300_seconds_by_default(
    join: Callable[..., Agent], store: Store, clock: Clock
) -> None:
    lynx = join("lynx")
    claimed = (lynx.claim_key("a"), claims.claim(store, lynx.identity, "b"))
    clock.advance(60)
    renewed = (lynx.renew_key("a", 1), claims.renew(store, lynx.identity, "b", 1))
    for grants, at in ((claimed, clock.now - timedelta(seconds=60)), (renewed, clock.now)):
        for grant in grants:
            assert parse_ts(grant.expires_at) - at == timedelta(seconds=300), grant


def test_S22_every_surface_states_the_same_claim_length_as_the_library() -> None:
    from broker.api.agent import Agent as LibraryAgent
    from broker.frontends.cli import board as cli_board
    from broker.frontends.remote.agent import RemoteAgent
    from broker.model.inputs import KeyClaimInput, KeyRenewInput  # HTTP's and MCP's too

    assert (claims.DEFAULT_TTL, claims.MAX_TTL) == (300.0, 86400.0)  # S22
    for fn in (
        LibraryAgent.claim_key,
        LibraryAgent.renew_key,
        RemoteAgent.claim_key,
        RemoteAgent.renew_key,
    ):
        assert inspect.signature(fn).parameters["ttl"].default == claims.DEFAULT_TTL, fn
    for model in (KeyClaimInput, KeyRenewInput):
        assert model.field("ttl").default == claims.DEFAULT_TTL, model
    assert cli_board.DEFAULT_TTL == claims.DEFAULT_TTL
    # and a claim answers at once unless asked to wait, in the library as on the agent
    for fn in (claims.claim, LibraryAgent.claim_key):
        assert inspect.signature(fn).parameters["wait"].default == 0, fn


def test_S22_S33_claim_key_refusals_say_why_and_name_the_key(join: Callable[..., Agent]) -> None:
    lynx = join("lynx")
    assert lynx.claim_key("k" * 200).key == "k" * 200  # exactly the bound
    refusals = {
        "": ("a claim key is empty", {"field": "key"}),
        "k" * 201: (
            "claim key is 201 characters long; at most 200",
            {"field": "key", "key": "k" * 200},
        ),
        "a b": (
            "claim key 'a b' has ' ': use letters, digits and . _ : / -",
            {"field": "key", "key": "a b"},
        ),
        "a/../b": ("claim key 'a/../b' contains '..'", {"field": "key", "key": "a/../b"}),
    }
    for key, (message, fields) in refusals.items():
        for call, args in ((lynx.claim_key, ()), (lynx.release_key, (1,)), (lynx.renew_key, (1,))):
            with pytest.raises(errors.InvalidInput) as info:
                call(key, *args)
            assert (info.value.message, info.value.fields) == (message, fields), key


def test_S22_S33_ttl_and_fence_refusals_name_the_field(
    join: Callable[..., Agent], store: Store
) -> None:
    lynx = join("lynx")
    assert lynx.claim_key("k", 86400).fence == 1  # exactly the bound
    # The surfaces bound these at the edge first; the library's own checks name them too.
    for call, field in (
        (lambda: claims.claim(store, lynx.identity, "w", wait=-1), "wait"),
        (lambda: claims.claim(store, lynx.identity, "w", wait=86401), "wait"),
        (lambda: claims.claim(store, lynx.identity, "w", ttl=86400.5), "ttl"),
        (lambda: claims.release_as_operator(store, lynx.space_id, "k", reason="x" * 501), "reason"),
    ):
        with pytest.raises(errors.InvalidInput) as info:
            call()
        assert info.value.fields == {"field": field}
    for call in (lambda: lynx.claim_key("k", 86400.5), lambda: lynx.renew_key("k", 1, 0)):
        with pytest.raises(errors.InvalidInput) as info:
            call()
        assert info.value.fields == {"field": "ttl"}
        assert info.value.message.endswith(": at least 0.001 and at most 86400 seconds")
    for call in (lambda: lynx.release_key("k", 0), lambda: lynx.renew_key("k", 0)):
        with pytest.raises(errors.InvalidInput) as info:
            call()
        assert (info.value.message, info.value.fields) == (
            "bad fence 0: the fencing token the claim returned",
            {"field": "fence"},
        )


def test_S22_the_largest_fence_is_a_stale_token_and_one_past_it_is_invalid_input(
    join: Callable[..., Agent],
) -> None:
    lynx = join("lynx")
    lynx.claim_key("k")
    top = 2**63 - 1  # SQLite's largest integer (the CLI's --fence says the same)
    with pytest.raises(errors.LeaseLost, match=f"fence {top} is stale"):
        lynx.release_key("k", top)
    with pytest.raises(errors.LeaseLost, match=f"fence {top} is stale"):
        lynx.renew_key("k", top)
    for bad in (top + 1, True):
        with pytest.raises(errors.InvalidInput) as info:
            lynx.release_key("k", bad)
        assert info.value.fields == {"field": "fence"}
    assert lynx.release_key("k", 1).fence == 1


# --- S22: refusals of claim, release and renew ------------------------------------------------
def test_S22_a_held_key_is_refused_with_its_holder_and_expiry(join: Callable[..., Agent]) -> None:
    lynx, otter = join("lynx"), join("otter")
    g = lynx.claim_key("build/lock", ttl=10)
    with pytest.raises(errors.ClaimHeld) as info:
        otter.claim_key("build/lock")
    assert info.value.message == f"key 'build/lock' is held by lynx until {g.expires_at}"
    assert info.value.fields == {"key": "build/lock", "holder": "lynx", "expires_at": g.expires_at}


def test_S22_lease_lost_says_why_the_token_no_longer_holds_the_key(
    join: Callable[..., Agent], clock: Clock
) -> None:
    lynx, otter = join("lynx"), join("otter")
    g = lynx.claim_key("k", ttl=10)
    lynx.claim_key("free")
    lynx.release_key("free", 1)
    cases = [
        (otter, "k", 1, "you do not hold it (it is held by lynx now)", {"holder": "lynx"}),
        (lynx, "k", 2, "fence 2 is stale (your claim has fence 1)", {}),
        (lynx, "free", 1, "you do not hold it (nobody holds it; claim it first)", {}),
    ]
    for who, key, fence, why, extra in cases:
        for verb, call in (("release", who.release_key), ("renew", who.renew_key)):
            with pytest.raises(errors.LeaseLost) as info:
                call(key, fence)
            assert info.value.message == f"cannot {verb} key {key!r}: {why}"
            assert info.value.fields == {"key": key, "fence": fence, **extra}
    clock.advance(10)  # the lease ends at exactly this instant
    for verb, call in (("release", lynx.release_key), ("renew", lynx.renew_key)):
        with pytest.raises(errors.LeaseLost) as info:
            call("k", g.fence)
        assert info.value.message == (
            f"cannot {verb} key 'k': your claim expired at {g.expires_at}; claim it again"
        )
        assert info.value.fields == {"key": "k", "fence": 1, "expires_at": g.expires_at}


def test_S23_release_returns_its_journal_line(
    join: Callable[..., Agent], store: Store, clock: Clock
) -> None:
    lynx = join("lynx")
    g = lynx.claim_key("k", ttl=10)
    clock.advance(1)
    line = lynx.release_key("k", g.fence)
    assert (line.key, line.event, line.owner, line.fence, line.expires_at) == (
        "k",
        "released",
        "lynx",
        g.fence,
        g.expires_at,
    )
    assert Operator(store).claim_journal(lynx.space_id, key="k")[-1] == line


def test_S37_the_claim_journal_of_one_path_reservation_is_asked_for_by_its_path_key(
    join: Callable[..., Agent], store: Store
) -> None:
    lynx = join("lynx")
    lynx.reserve("src/*.py")
    operator = Operator(store)
    lines = operator.claim_journal(lynx.space_id, key="path src/*.py")
    assert [(j.key, j.event, j.owner) for j in lines] == [("path src/*.py", "claimed", "lynx")]
    assert operator.claim_journal(lynx.space_id, key="path s") == []  # a one-letter pattern
    with pytest.raises(errors.InvalidInput, match="no leading '/'"):
        operator.claim_journal(lynx.space_id, key="path /etc")
