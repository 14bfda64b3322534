"""S2-S5: joining, addresses, re-joining, leaving, the journal, statuses, and
the identity every agent call is checked against (S10)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest
import sqlrows
import trusted
from conftest import Clock, open_store

from broker import Agent, Operator, Store, errors
from broker.delivery import transcript
from broker.ids import fmt_ts, parse_ts
from broker.mail import messages
from broker.model.inputs import JoinInput, SendInput
from broker.model.records import Joined, to_dict
from broker.spaces import participants
from broker.spaces.addressing import address_of
from broker.spaces.auth import Identity


def count(store: Store, table: str, where: str = "1 = 1", params: tuple[object, ...] = ()) -> int:
    with store.read() as t:
        return int(t.one(f"SELECT count(*) FROM {table} WHERE {where}", params)[0])


def all_rows(store: Store) -> dict[str, int]:
    return {
        table: count(store, table)
        for table in ("messages", "deliveries", "transcript", "participants", "participant_events")
    }


# --- S3: addresses ------------------------------------------------------------------------
SEED_TABLE = [
    # (space kind, codename, lead flag, address) — the derivation table of S3
    ("workflow", "cobalt-harbor/lynx", False, "lynx"),
    ("workflow", "cobalt-harbor/lynx#2", False, "lynx#2"),
    ("workflow", "cobalt-harbor/lynx>otter#1", False, "lynx>otter#1"),
    ("agentiflow", "cobalt-harbor/heron", True, "lead"),
    ("agentiflow", "cobalt-harbor/heron>lynx#1", False, "lynx#1"),
]


@pytest.mark.parametrize(("kind", "codename", "lead", "address"), SEED_TABLE)
def test_S3_address_is_the_codename_below_the_root(
    store: Store, operator: Operator, kind: str, codename: str, lead: bool, address: str
) -> None:
    assert address_of(codename, lead=lead, agentiflow=kind == "agentiflow") == address
    sid = operator.create_space(kind).id  # type: ignore[arg-type]
    agent, joined = trusted.join(store, sid, codename, lead=lead)
    assert joined.address == agent.address == address
    p = participants.get(store, sid, address)
    assert p.codename == codename
    assert p.is_lead is lead


@pytest.mark.parametrize(
    ("codename", "address"),
    [
        ("cobalt-harbor/lynx@2", "lynx"),
        ("cobalt-harbor/lynx#2@3", "lynx#2"),
        ("cobalt-harbor/lynx@2>otter#1@4", "lynx>otter#1"),
        ("lynx", "lynx"),  # no root given: the codename is the address
    ],
)
def test_S3_retry_attempts_are_dropped_from_the_address(codename: str, address: str) -> None:
    assert address_of(codename) == address


@pytest.mark.parametrize(
    "codename",
    [
        "cobalt-harbor/operator",
        "cobalt-harbor/broadcast",
        "cobalt-harbor/parent",
        "cobalt-harbor/lead",
        "operator",
        "operator@2",
    ],
)
def test_S3_reserved_addresses_cannot_be_taken(store: Store, space: str, codename: str) -> None:
    with pytest.raises(errors.InvalidInput, match="reserved") as info:
        trusted.join(store, space, codename)
    assert info.value.fields == {"field": "codename"}  # named by the join (S33)
    assert count(store, "participants") == 0
    assert count(store, "participant_events") == 0


def test_S3_reserved_address_refused_for_agentiflow_units(store: Store, operator: Operator) -> None:
    af = operator.create_space("agentiflow").id
    with pytest.raises(errors.InvalidInput, match="reserved"):
        trusted.join(store, af, "cobalt-harbor/heron>operator")
    with pytest.raises(errors.InvalidInput, match="reserved"):
        trusted.join(store, af, "cobalt-harbor/heron>broadcast@2")


@pytest.mark.parametrize(
    "codename", ["", "  ", "flow/", "flow/ly nx", "flow/lynx>>otter", "flow/-x"]
)
def test_S3_malformed_codenames_are_refused(store: Store, space: str, codename: str) -> None:
    with pytest.raises(errors.InvalidInput):
        trusted.join(store, space, codename)
    assert count(store, "participants") == 0


# --- S2: join -----------------------------------------------------------------------------
def test_S2_join_records_the_fields_and_returns_a_token_stored_only_as_a_hash(
    store: Store, space: str
) -> None:
    agent, joined = trusted.join(
        store,
        space,
        "flow/lynx",
        agent="scanner",
        run_id="run-77",
        step="scan",
        parent="heron",
        role="recon",
        archetype="surveyor",
        task="map the repo",
    )
    p = participants.get(store, space, "lynx")
    assert (p.agent, p.run_id, p.step, p.parent, p.role, p.archetype, p.task) == (
        "scanner",
        "run-77",
        "scan",
        "heron",
        "recon",
        "surveyor",
        "map the repo",
    )
    assert p.status == "running" and p.messaging and not p.is_lead
    assert len(joined.token) >= 32
    with store.read() as t:
        row = t.row("SELECT * FROM participants WHERE id = ?", (joined.participant_id,))
    assert row is not None
    assert row["token_hash"] == hashlib.sha256(joined.token.encode()).hexdigest()
    assert joined.token not in {str(v) for v in row.values()}
    assert "token" not in to_dict(p)


def test_S2_join_defaults_agent_to_the_last_segment_and_run_id_to_the_codename(
    store: Store, space: str
) -> None:
    _, joined = trusted.join(store, space, "flow/lynx>otter#1")
    p = participants.get(store, space, joined.address)
    assert p.agent == "otter"
    assert p.run_id == "flow/lynx>otter#1"


def test_S2_join_refuses_unknown_fields(store: Store, space: str) -> None:
    for field in ("address", "token", "status", "sender", "from"):
        with pytest.raises(errors.InvalidInput, match="unknown field"):
            JoinInput.parse({"codename": "flow/lynx", field: "x"})
        if field == "token":
            continue  # Agent.join's token is the holder's, for a retry (S27)
        with pytest.raises(errors.InvalidInput, match="unknown field"):
            trusted.join(store, space, "flow/lynx", **{field: "x"})
    with pytest.raises(errors.InvalidInput):
        JoinInput.parse({"codename": "flow/lynx", "archetype": "wizard"})
    assert count(store, "participants") == 0


def test_S2_join_an_unknown_space_is_not_found(store: Store) -> None:
    with pytest.raises(errors.SpaceNotFound):
        trusted.join(store, "run_nothing", "flow/lynx")


def test_S2_second_live_lead_is_refused(store: Store, operator: Operator) -> None:
    af = operator.create_space("agentiflow").id
    trusted.join(store, af, "cobalt-harbor/heron", lead=True)
    with pytest.raises(errors.Conflict, match="lead"):
        trusted.join(store, af, "cobalt-harbor/falcon", lead=True)


def test_S3_retried_lead_rejoins_as_lead(store: Store, operator: Operator) -> None:
    af = operator.create_space("agentiflow").id
    _, first = trusted.join(store, af, "cobalt-harbor/heron", lead=True)
    operator.send(af, "plan the work")  # default target: the lead
    # The lead is live: its retry presents its token (S27).
    _, again = trusted.join(store, af, "cobalt-harbor/heron@2", lead=True, token=first.token)
    assert again.address == "lead"
    assert again.participant_id == first.participant_id
    assert (
        count(
            store,
            "deliveries",
            f"recipient_no = {sqlrows.RECIPIENT_NO}",
            (first.participant_id,),
        )
        == 1
    )


# --- S3: re-join keeps the inbox ------------------------------------------------------------
def test_S3_retried_codename_rejoins_with_inbox_intact_and_new_token(
    store: Store, space: str, join: Callable[..., Agent]
) -> None:
    lynx, first = trusted.join(store, space, "flow/lynx")
    otter = join("flow/otter")
    for i in range(3):
        otter.send("lynx", f"before the retry {i}")
    otter.send("broadcast", "a broadcast lynx has not read")
    with store.read() as t:
        cursor_before = t.one(
            "SELECT bcast_seen FROM participants WHERE id = ?", (first.participant_id,)
        )[0]

    retried, again = trusted.join(store, space, "flow/lynx@2", token=first.token)
    assert again.address == "lynx"
    assert again.participant_id == first.participant_id
    assert again.token != first.token
    assert count(store, "participants", "address = 'lynx'") == 1
    with store.read() as t:
        inbox = [
            tuple(r)
            for r in t.all(
                "SELECT m.body, d.state FROM deliveries d JOIN messages m ON m.rowid = d.rowid >> 20 "
                f"WHERE d.recipient_no = {sqlrows.RECIPIENT_NO} ORDER BY d.rowid",
                (again.participant_id,),
            )
        ]
        cursor_after = t.one(
            "SELECT bcast_seen FROM participants WHERE id = ?", (again.participant_id,)
        )[0]
        codename = t.one("SELECT codename FROM participants WHERE id = ?", (again.participant_id,))[
            0
        ]
    assert inbox == [(f"before the retry {i}", "ready") for i in range(3)]
    assert cursor_after == cursor_before  # the unread broadcast stays unread
    assert codename == "flow/lynx@2"

    # The new token works, the old one is refused, as a token and as a live handle.
    assert (
        Agent.connect(store, space, "lynx", again.token).identity.participant_id
        == again.participant_id
    )
    with pytest.raises(errors.AuthError):
        Agent.connect(store, space, "lynx", first.token)
    before = all_rows(store)
    with pytest.raises(errors.AuthError):
        lynx.send("otter", "from the stale handle")
    assert all_rows(store) == before
    assert retried.send("otter", "from the retried run").reached == ["otter"]


def test_S3_rejoin_after_leaving_is_running_again_with_inbox(
    store: Store, space: str, join: Callable[..., Agent]
) -> None:
    lynx, first = trusted.join(store, space, "flow/lynx")
    otter = join("flow/otter")
    otter.send("lynx", "one")
    lynx.leave()
    assert participants.get(store, space, "lynx").status == "left"
    _, again = trusted.join(store, space, "flow/lynx@2")
    p = participants.get(store, space, "lynx")
    assert p.status == "running" and p.left_at_utc is None
    assert again.participant_id == first.participant_id
    assert (
        count(
            store,
            "deliveries",
            f"recipient_no = {sqlrows.RECIPIENT_NO}",
            (p.id,),
        )
        == 1
    )


# --- S4: leaving and the journal -----------------------------------------------------------
@pytest.fixture
def clocked(clocked_url: str) -> Iterator[tuple[Store, list[datetime]]]:
    """A store whose clock the test moves."""
    now = [datetime(2026, 11, 30, 12, 0, 0, 123456, tzinfo=UTC)]
    s = open_store(clocked_url, clock=lambda: now[0])
    yield s, now
    s.close()


def test_S4_journal_holds_joined_and_left_with_agent_run_id_step_parent_and_time(
    clocked: tuple[Store, list[datetime]],
) -> None:
    store, now = clocked
    sid = Operator(store).create_space("workflow").id
    t0 = now[0]
    heron, _ = trusted.join(store, sid, "flow/heron", agent="planner", run_id="r-1")
    now[0] = t0 + timedelta(seconds=1)
    lynx, _ = trusted.join(
        store, sid, "flow/heron>lynx#1", agent="scanner", run_id="r-2", step="scan", parent="heron"
    )
    now[0] = t0 + timedelta(seconds=2)
    lynx.leave()
    now[0] = t0 + timedelta(seconds=3)
    trusted.join(
        store,
        sid,
        "flow/heron>lynx#1@2",
        agent="scanner",
        run_id="r-3",
        step="scan",
        parent="heron",
    )

    got = [
        (e.event, e.address, e.codename, e.agent, e.run_id, e.step, e.parent, e.reason, e.at_utc)
        for e in participants.journal(store, sid)
    ]
    assert got == [
        ("joined", "heron", "flow/heron", "planner", "r-1", None, None, "operator key", fmt_ts(t0)),
        (
            "joined",
            "heron>lynx#1",
            "flow/heron>lynx#1",
            "scanner",
            "r-2",
            "scan",
            "heron",
            "operator key",  # how it was admitted (S42)
            fmt_ts(t0 + timedelta(seconds=1)),
        ),
        (
            "left",
            "heron>lynx#1",
            "flow/heron>lynx#1",
            "scanner",
            "r-2",
            "scan",
            "heron",
            "leave",
            fmt_ts(t0 + timedelta(seconds=2)),
        ),
        (
            "joined",
            "heron>lynx#1",
            "flow/heron>lynx#1@2",
            "scanner",
            "r-3",
            "scan",
            "heron",
            "operator key",
            fmt_ts(t0 + timedelta(seconds=3)),
        ),
    ]
    p = participants.get(store, sid, "heron>lynx#1")
    assert parse_ts(p.joined_at_utc) == t0 + timedelta(seconds=1)  # first join time stays
    assert heron.address == "heron"


def test_S4_leave_records_left_and_the_token_stops_working(
    store: Store, space: str, join: Callable[..., Agent]
) -> None:
    lynx, joined = trusted.join(store, space, "flow/lynx")
    join("flow/otter")
    lynx.leave()
    p = participants.get(store, space, "lynx")
    assert p.status == "left" and p.left_at_utc is not None
    with pytest.raises(errors.ParticipantLeft):
        Agent.connect(store, space, "lynx", joined.token)
    before = all_rows(store)
    with pytest.raises(errors.ParticipantLeft):
        lynx.send("otter", "after leaving")
    with pytest.raises(errors.ParticipantLeft):
        lynx.leave()
    assert all_rows(store) == before


def test_S4_journal_is_append_only(store: Store, space: str, join: Callable[..., Agent]) -> None:
    join("flow/lynx").leave()
    with pytest.raises(errors.AppendOnly), store.write() as t:
        t.execute("UPDATE participant_events SET event = 'joined'")
    with pytest.raises(errors.AppendOnly), store.write() as t:
        t.execute("DELETE FROM participant_events")
    assert [e.event for e in participants.journal(store, space)] == ["joined", "left"]


# --- S5: statuses ---------------------------------------------------------------------------
def test_S5_participant_status_running_idle_failed_shutdown_and_left(
    store: Store, space: str, join: Callable[..., Agent]
) -> None:
    lynx = join("flow/lynx")
    pid = lynx.identity.participant_id
    for status in ("idle", "failed", "shutdown", "running"):
        participants.set_status(store, pid, status)
        assert participants.get(store, space, "lynx").status == status
    with pytest.raises(errors.InvalidInput):
        participants.set_status(store, pid, "left")  # only leave() records left
    with pytest.raises(errors.InvalidInput, match="^bad status 'sleeping'$") as info:
        participants.set_status(store, pid, "sleeping")
    assert info.value.fields == {"field": "status"}
    lynx.leave()
    participants.set_status(store, pid, "running")  # a left participant stays left
    assert participants.get(store, space, "lynx").status == "left"


def test_S5_list_participants_in_join_order_with_and_without_left(
    store: Store, space: str, join: Callable[..., Agent]
) -> None:
    join("flow/lynx")
    join("flow/otter").leave()
    join("flow/heron")
    assert [p.address for p in participants.list_participants(store, space)] == [
        "lynx",
        "otter",
        "heron",
    ]
    assert [
        p.address for p in participants.list_participants(store, space, include_left=False)
    ] == [
        "lynx",
        "heron",
    ]
    with pytest.raises(errors.ParticipantNotFound) as info:
        participants.get(store, space, "nobody")
    assert (info.value.message, info.value.fields) == (
        f"no participant 'nobody' in space {space}",
        {"address": "nobody"},
    )


# --- S10: identity ---------------------------------------------------------------------------
def test_S10_wrong_missing_or_someone_elses_token_is_refused_and_writes_nothing(
    store: Store, space: str, join: Callable[..., Agent]
) -> None:
    _, lynx = trusted.join(store, space, "flow/lynx")
    _, otter = trusted.join(store, space, "flow/otter")
    join("flow/heron")
    before = all_rows(store)
    one = errors.TOKEN_REFUSED  # S10: the same words whichever case it was
    for address, token, why in [
        ("lynx", "not-a-token", one),  # wrong
        ("lynx", None, one),  # missing
        ("lynx", "", one),  # missing
        ("lynx", otter.token, one),  # someone else's
        ("nobody", lynx.token, one),
        ("", lynx.token, "no address: pass --as or set BROKER_AS"),
    ]:
        with pytest.raises(errors.AuthError) as info:
            Agent.connect(store, space, address, token)
        assert info.value.exit_code == 4 and info.value.message == why
        assert lynx.token not in str(info.value) and otter.token not in str(info.value)
    # A forged identity (someone else's token hash under my id) fails inside the send.
    forged = Identity(
        space, lynx.participant_id, "lynx", hashlib.sha256(otter.token.encode()).hexdigest()
    )
    for call in (
        lambda: messages.send(store, forged, SendInput(to="heron", text="spoofed")),
        lambda: messages.post(store, forged, "spoofed"),
        lambda: participants.leave(store, forged),
    ):
        with pytest.raises(errors.AuthError) as info:
            call()
        assert info.value.message == one
    assert all_rows(store) == before
    # Superseded: lynx re-joins (a retry with its token); the old handle's next
    # call is refused in the same words, not "re-joined with a new one".
    old = Agent.connect(store, space, "lynx", lynx.token)
    trusted.join(store, space, "flow/lynx@2", token=lynx.token)
    with pytest.raises(errors.AuthError) as info:
        old.send("heron", "after the re-join")
    assert (info.value.exit_code, info.value.message) == (4, one)
    with pytest.raises(errors.AuthError) as info:
        Agent.connect(store, space, "lynx", lynx.token)
    assert info.value.message == one


def test_S10_identity_is_bound_to_its_space(store: Store, operator: Operator) -> None:
    one = operator.create_space("workflow").id
    two = operator.create_space("workflow").id
    _, lynx = trusted.join(store, one, "flow/lynx")
    trusted.join(store, two, "flow/lynx")
    with pytest.raises(errors.AuthError):
        Agent.connect(store, two, "lynx", lynx.token)


def test_S10_sender_of_every_send_is_the_callers_own_address(
    store: Store, space: str, join: Callable[..., Agent]
) -> None:
    lynx = join("flow/lynx")
    join("flow/otter")
    lynx.send("otter", "hi")
    lynx.post("on the board")
    assert [(e.sender, e.kind) for e in Operator(store).log(space)] == [
        ("lynx", "direct"),
        ("lynx", "post"),
    ]


# --- S27, S28 at the library's edge (the CLI's attacks are in tests/unit/spaces/test_trust.py) -----------
@pytest.fixture
def keyed(operator: Operator) -> tuple[str, str]:
    """A running workflow space's id and its join key."""
    created = operator.create_space("workflow")
    return created.id, created.join_key


def join_with(
    store: Store, space: str, codename: str, credential: participants.Credential, **fields: object
) -> Joined:
    inp = JoinInput.parse({"codename": codename, **fields})
    return participants.join(store, space, inp, credential=credential)


def refusal(error: type[errors.BrokerError], call: Callable[[], object]) -> tuple[str, dict]:
    with pytest.raises(error) as info:
        call()
    return info.value.message, info.value.fields


def test_S27_a_credential_is_exactly_one_non_empty_string(
    store: Store, keyed: tuple[str, str]
) -> None:
    space, key = keyed
    Credential = participants.Credential
    for name in ("join_key", "operator_key", "parent_token", "token"):
        bad = Credential(**{"join_key": key, name: ""})
        assert refusal(errors.InvalidInput, bad.check) == (
            f"{name} must be a non-empty string",
            {"field": name},
        )
    assert refusal(errors.AuthError, Credential().check) == (
        "joining needs a credential: the space's join key (--join-key or BROKER_JOIN_KEY), "
        "the operator key, or a parent's token (--parent-token); an address that joined "
        "before, its last token (--token)",
        {},
    )
    assert refusal(errors.InvalidInput, Credential(key, "op").check) == (
        "give one credential to join, not join_key and operator_key",
        {"field": "operator_key"},
    )
    assert refusal(errors.InvalidInput, Credential(key, "op", "parent").check) == (
        "give one credential to join, not join_key and operator_key and parent_token",
        {"field": "operator_key"},
    )
    # Each one alone is enough: the fields left out default to "not given".
    lynx = join_with(store, space, "flow/lynx", Credential(join_key=key))
    join_with(store, space, "flow/otter", trusted.credential(store))
    join_with(store, space, "flow/kid", Credential(parent_token=lynx.token))
    assert [p.address for p in participants.list_participants(store, space)] == [
        "lynx",
        "otter",
        "kid",
    ]


def test_S28_a_child_of_a_parent_with_no_tool_is_told_so_in_one_line(
    store: Store, keyed: tuple[str, str]
) -> None:
    # Messaging on, an empty grant: the parent has no tool (messaging is not off).
    space, key = keyed
    bare = join_with(store, space, "flow/bare", participants.Credential(join_key=key), tools=[])
    assert refusal(
        errors.Forbidden,
        lambda: join_with(
            store,
            space,
            "flow/bare>kid",
            participants.Credential(parent_token=bare.token),
            tools=["msg.send"],
        ),
    ) == ("cannot grant msg.send: more than its parent bare has (no tool)", {"tools": ["msg.send"]})


def test_S28_a_child_joins_with_its_parents_token_bounded_by_its_grant(
    store: Store, operator: Operator, keyed: tuple[str, str]
) -> None:
    space, key = keyed
    Credential = participants.Credential
    lynx = join_with(
        store, space, "flow/lynx", Credential(join_key=key), tools=["msg.send", "board.post"]
    )
    by_lynx = Credential(parent_token=lynx.token)
    other = operator.create_space("workflow").id
    stranger = trusted.join(store, other, "flow/stranger")[1]  # a token of another space
    before = all_rows(store)
    assert refusal(
        errors.InvalidInput, lambda: join_with(store, space, "flow/kid", by_lynx, parent="otter")
    ) == (
        "parent 'otter' is not the holder of the parent token ('lynx'): "
        "leave --parent out or name that one",
        {"field": "parent"},
    )
    assert refusal(
        errors.Forbidden,
        lambda: join_with(store, space, "flow/kid", by_lynx, tools=["board.directive"]),
    ) == (
        "cannot grant board.directive: more than its parent lynx has (board.post, msg.send)",
        {"tools": ["board.directive"]},
    )
    for token in ("forged", stranger.token):
        assert refusal(
            errors.AuthError,
            lambda t=token: join_with(store, space, "flow/kid", Credential(parent_token=t)),
        ) == (f"the parent token does not belong to a participant present in space {space}", {})
    assert all_rows(store) == before
    kid = join_with(store, space, "flow/kid", by_lynx, tools=["msg.send"])
    named = join_with(store, space, "flow/pup", by_lynx, parent="lynx", tools=["msg.send"])
    assert [participants.get(store, space, j.address).parent for j in (kid, named)] == [
        "lynx",
        "lynx",
    ]
    participants.leave(store, participants.authenticate(store, space, "lynx", lynx.token))
    assert refusal(errors.AuthError, lambda: join_with(store, space, "flow/late", by_lynx)) == (
        f"the parent token does not belong to a participant present in space {space}",
        {},
    )


def test_S28_a_rejoin_with_the_join_key_never_widens_what_the_address_held(
    store: Store, keyed: tuple[str, str]
) -> None:
    space, key = keyed
    lynx = join_with(
        store, space, "flow/lynx", participants.Credential(join_key=key), tools=["msg.send"]
    )
    again = participants.Credential(join_key=key, token=lynx.token)
    assert refusal(
        errors.Forbidden,
        lambda: join_with(store, space, "flow/lynx@2", again, tools=["msg.send", "board.post"]),
    ) == (
        "cannot grant board.post: a re-join never widens a grant, and lynx held only msg.send "
        "before",
        {"tools": ["board.post"]},
    )
    assert join_with(store, space, "flow/lynx@2", again, tools=["msg.send"]).address == "lynx"
    pair = join_with(
        store,
        space,
        "flow/pair",
        participants.Credential(join_key=key),
        tools=["msg.send", "board.post"],
    )
    assert refusal(
        errors.Forbidden,
        lambda: join_with(
            store,
            space,
            "flow/pair@2",
            participants.Credential(join_key=key, token=pair.token),
            tools=["board.claim"],
        ),
    ) == (
        "cannot grant board.claim: a re-join never widens a grant, and pair held only "
        "board.post, msg.send before",
        {"tools": ["board.claim"]},
    )
    quiet = join_with(
        store, space, "flow/quiet", participants.Credential(join_key=key), messaging=False
    )
    on_again = participants.Credential(join_key=key, token=quiet.token)
    assert refusal(errors.Forbidden, lambda: join_with(store, space, "flow/quiet@2", on_again)) == (
        "cannot grant board.claim, board.post, board.read, board.release, msg.send: a re-join "
        "never widens a grant, and quiet held no tool before",
        {"tools": ["board.claim", "board.post", "board.read", "board.release", "msg.send"]},
    )


def test_S24_S28_a_child_of_a_receive_only_parent_is_told_its_tools_are_off(
    store: Store, keyed: tuple[str, str]
) -> None:
    space, key = keyed
    Credential = participants.Credential
    assert refusal(
        errors.InvalidInput,
        lambda: join_with(
            store, space, "flow/x", Credential(join_key=key), messaging=False, tools=["msg.send"]
        ),
    ) == (
        "messaging is off but messaging tools are named: the two contradict, pick one",
        {"field": "tools"},
    )
    quiet = join_with(store, space, "flow/quiet", Credential(join_key=key), messaging=False)
    join_with(
        store,
        space,
        "flow/kid",
        Credential(parent_token=quiet.token),
        tools=["msg.send", "board.post"],
    )
    (notice,) = transcript.rebuild(store, space, "kid")[0].notices
    assert (notice.kind, notice.content) == (
        "tool_unavailable",
        "kid cannot use msg.send, board.post: messaging is off, inherited from its parent "
        "quiet (receive-only)",
    )


def test_S27_an_idle_holder_is_live_and_a_stopped_space_takes_no_join(
    store: Store, operator: Operator, keyed: tuple[str, str]
) -> None:
    space, key = keyed
    Credential = participants.Credential
    # The operator key may continue an address (S40), but not while its holder is live.
    op_key = trusted.credential(store)
    lynx = join_with(store, space, "flow/lynx", Credential(join_key=key))
    participants.set_status(store, lynx.participant_id, "idle")  # between turns: still live
    assert refusal(errors.Conflict, lambda: join_with(store, space, "flow/lynx@2", op_key)) == (
        "lynx is held by 'flow/lynx' (its heartbeat is fresh): a re-join presents its token "
        "(--token), or waits until it has left or its heartbeat is older than 3600 s",
        {},
    )
    otter = join_with(store, space, "flow/otter", Credential(join_key=key), pid=os.getpid())
    not_its = Credential(operator_key=op_key.operator_key, token=otter.token)
    assert refusal(errors.Conflict, lambda: join_with(store, space, "flow/lynx@2", not_its)) == (
        "lynx is held by 'flow/lynx' (its heartbeat is fresh) and the token given is not its "
        "token: nothing was changed",
        {},
    )
    assert refusal(errors.Conflict, lambda: join_with(store, space, "flow/otter@2", op_key)) == (
        f"otter is held by 'flow/otter' (its process {os.getpid()} is alive): a re-join presents "
        "its token (--token), or waits until it has left or its process has exited",
        {},
    )
    operator.stop_space(space)
    assert refusal(
        errors.SpaceNotRunning,
        lambda: join_with(store, space, "flow/otter", participants.Credential(join_key=key)),
    ) == (f"space {space} is stopped: nobody can join it", {"space_id": space})


def test_S10_a_token_alone_names_its_holder(store: Store, space: str) -> None:
    """Served mode's Bearer token: ``authenticate_token`` finds the holder in any space."""
    agent, joined = trusted.join(store, space, "flow/lynx")
    assert participants.authenticate_token(store, joined.token) == agent.identity
    for token, why in [
        ("not-a-token", errors.TOKEN_REFUSED),
        ("", errors.TOKEN_REFUSED),
    ]:
        assert refusal(
            errors.AuthError, lambda t=token: participants.authenticate_token(store, t)
        ) == (
            why,
            {},
        )


def test_S27_S40_a_holder_silent_for_live_seconds_may_be_continued_by_the_operator(
    clocked_url: str, clock: Clock
) -> None:
    """A served or CLI holder (no process recorded) in a model call makes no call
    for minutes: it stays live for the space's live_seconds (3600), not a lease."""
    store = open_store(clocked_url, clock=clock)
    try:
        created = Operator(store).create_space("workflow")  # lease_seconds 30
        key = participants.Credential(join_key=created.join_key)
        op_key = trusted.credential(store)
        first = join_with(store, created.id, "flow/lynx", key)
        for step in (30, 600, 2969):  # a lease, a long model call, just under an hour
            clock.advance(step)
            with pytest.raises(errors.Conflict):
                join_with(store, created.id, "flow/lynx@2", op_key)
        clock.advance(1)  # its heartbeat is exactly live_seconds old: gone
        with pytest.raises(errors.Forbidden):  # the join key never continues it (S40)
            join_with(store, created.id, "flow/lynx@2", key)
        second = join_with(store, created.id, "flow/lynx@2", op_key)
        assert (second.address, second.participant_id) == ("lynx", first.participant_id)
    finally:
        store.close()
