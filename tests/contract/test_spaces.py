"""S1: spaces — kind-prefixed ids, states, settings, and run id resolution."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trusted

from broker import Agent, Operator, Store, errors
from broker.mail import messages
from broker.spaces import participants, spaces


def count(store: Store, table: str) -> int:
    with store.read() as t:
        return int(t.one(f"SELECT count(*) FROM {table}")[0])


def shortest_unique_prefix(target: str, others: list[str]) -> str:
    for n in range(1, len(target) + 1):
        if not any(o.startswith(target[:n]) for o in others):
            return target[:n]
    raise AssertionError("no unique prefix")


@pytest.mark.parametrize(
    ("kind", "prefix"),
    [("agentiflow", "af_"), ("workflow", "run_"), ("session", "ses_"), ("run", "run_")],
)
def test_S1_space_id_carries_the_kind_prefix_and_starts_running(
    operator: Operator, kind: str, prefix: str
) -> None:
    sp = operator.create_space(kind)  # type: ignore[arg-type]
    assert sp.id.startswith(prefix)
    assert sp.kind == kind
    assert sp.state == "running"
    assert sp.settings == {}


def test_S1_unknown_space_kind_is_refused(store: Store) -> None:
    with pytest.raises(errors.InvalidInput, match="unknown space kind"):
        spaces.create(store, "swarm")
    assert count(store, "spaces") == 0


def test_S1_space_settings_are_validated_and_stored(store: Store) -> None:
    sp = spaces.create(store, "session", settings={"inbox_cap": 512, "log_max_mb": 1.5})
    assert sp.settings == {"inbox_cap": 512, "log_max_mb": 1.5}
    assert spaces.get(store, sp.id).settings == {"inbox_cap": 512, "log_max_mb": 1.5}
    with pytest.raises(errors.InvalidInput, match="inbox_cap"):
        spaces.create(store, "session", settings={"inbox_cap": 0})
    with pytest.raises(errors.InvalidInput, match="no_such_limit"):
        spaces.create(store, "session", settings={"no_such_limit": 1})
    assert count(store, "spaces") == 1


def test_S1_run_id_resolves_by_full_id(store: Store, operator: Operator) -> None:
    sid = operator.create_space("agentiflow").id
    operator.create_space("agentiflow")
    assert spaces.get(store, sid).id == sid
    assert spaces.get(store, sid.upper()).id == sid  # ids are case-insensitive
    assert spaces.get(store, f"  {sid} ").id == sid


def test_S1_run_id_resolves_by_compact_form_without_the_kind_prefix(
    store: Store, operator: Operator
) -> None:
    ids = [operator.create_space(k).id for k in ("agentiflow", "session", "workflow")]  # type: ignore[arg-type]
    for sid in ids:
        compact = sid.split("_", 1)[1]
        assert spaces.get(store, compact).id == sid
        assert spaces.get(store, compact.upper()).id == sid


def test_S1_run_id_resolves_by_unique_prefix(store: Store, operator: Operator) -> None:
    ids = [operator.create_space("workflow").id for _ in range(4)]
    for sid in ids:
        others = [o for o in ids if o != sid]
        full_prefix = shortest_unique_prefix(sid, others)
        assert spaces.get(store, full_prefix).id == sid
        compact = sid.split("_", 1)[1]
        compact_prefix = shortest_unique_prefix(compact, [o.split("_", 1)[1] for o in others])
        assert spaces.get(store, compact_prefix).id == sid


def test_S1_ambiguous_prefix_is_an_error_listing_the_candidates(
    store: Store, operator: Operator
) -> None:
    a = operator.create_space("workflow").id
    b = operator.create_space("workflow").id
    c = operator.create_space("session").id
    common = a[: max(n for n in range(len(a)) if b.startswith(a[:n]))]
    with pytest.raises(errors.AmbiguousId) as info:
        spaces.get(store, common)
    assert info.value.fields["candidates"] == sorted([a, b])
    assert a in str(info.value) and b in str(info.value) and c not in str(info.value)
    assert info.value.exit_code == errors.InvalidInput.exit_code
    # The compact form is ambiguous across kinds too: af_X and ses_X prefixes.
    with pytest.raises(errors.AmbiguousId) as info:
        spaces.get(store, "0")
    assert set(info.value.fields["candidates"]) == {a, b, c}


def test_S1_unknown_or_malformed_run_id(store: Store, operator: Operator) -> None:
    operator.create_space("workflow")
    with pytest.raises(errors.SpaceNotFound):
        spaces.get(store, "af_zzzz")
    with pytest.raises(errors.InvalidInput):
        spaces.get(store, "run_%")  # no LIKE wildcards through the prefix match
    with pytest.raises(errors.InvalidInput):
        spaces.get(store, "")


def test_S1_prefix_match_treats_underscore_literally(store: Store, operator: Operator) -> None:
    sid = operator.create_space("session").id
    # "ses_" must not act as "ses" + any one character.
    assert spaces.get(store, "ses_").id == sid
    with pytest.raises(errors.SpaceNotFound):
        spaces.get(store, "sesx")


def test_S1_list_spaces_by_state(store: Store, operator: Operator) -> None:
    a = operator.create_space("workflow").id
    b = operator.create_space("session").id
    spaces.stop(store, b)
    assert [s.id for s in spaces.list_spaces(store)] == sorted([a, b])
    assert [s.id for s in spaces.list_spaces(store, state="running")] == [a]
    assert [s.id for s in spaces.list_spaces(store, state="stopped")] == [b]


def test_S1_stop_then_archive_and_no_way_back(store: Store, space: str) -> None:
    assert spaces.stop(store, space).state == "stopped"
    assert spaces.stop(store, space).state == "stopped"  # idempotent
    assert spaces.archive(store, space).state == "archived"
    assert spaces.archive(store, space).state == "archived"
    with pytest.raises(errors.Conflict):
        spaces.stop(store, space)


def test_S1_archive_from_running(store: Store, space: str) -> None:
    assert spaces.archive(store, space).state == "archived"


def test_S1_stop_records_every_participant_as_left(
    store: Store, space: str, join: Callable[..., Agent]
) -> None:
    join("flow/lynx")
    join("flow/otter").leave()
    spaces.stop(store, space)
    assert {p.address: p.status for p in participants.list_participants(store, space)} == {
        "lynx": "left",
        "otter": "left",
    }
    events = [(e.event, e.address, e.reason) for e in participants.journal(store, space)]
    assert events.count(("left", "lynx", "space stopped")) == 1
    assert events.count(("left", "otter", "leave")) == 1
    assert len([e for e in events if e[0] == "left"]) == 2  # nobody left twice


@pytest.mark.parametrize("end", ["stop", "archive"])
def test_S1_sending_into_a_stopped_or_archived_space_is_refused(
    store: Store, operator: Operator, space: str, join: Callable[..., Agent], end: str
) -> None:
    lynx, joined = trusted.join(store, space, "flow/lynx")
    token = joined.token
    join("flow/otter")
    getattr(spaces, end)(store, space)
    before = count(store, "messages"), count(store, "deliveries")
    with pytest.raises(errors.SpaceNotRunning):
        operator.send(space, "anyone there?", to=["lynx"])
    with pytest.raises(errors.SpaceNotRunning):  # not "left, join again": nobody can join
        lynx.send("otter", "hello")
    with pytest.raises(errors.SpaceNotRunning):
        Agent.connect(store, space, "lynx", token)
    with pytest.raises(errors.SpaceNotRunning), store.write() as t:  # the send itself too
        messages.send_in_tx(store, t, space, messages.Sender("lynx", None), "direct", [], "x")
    with pytest.raises(errors.SpaceNotRunning):
        trusted.join(store, space, "flow/heron")
    assert (count(store, "messages"), count(store, "deliveries")) == before


def test_S1_spaces_do_not_share_messages(store: Store, operator: Operator) -> None:
    one = operator.create_space("workflow").id
    two = operator.create_space("workflow").id
    a, _ = trusted.join(store, one, "flow/lynx")
    trusted.join(store, two, "flow/otter")
    with pytest.raises(errors.NotDelivered, match="no_live_participant"):
        a.send("otter", "across spaces")  # a bare name nobody has here
    with pytest.raises(errors.NotDelivered, match="unknown_participant"):
        a.send("flow/otter", "across spaces")
    assert [e.seq for e in operator.log(one)] == [1, 2]
    assert operator.log(two) == []
