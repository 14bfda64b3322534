"""Results are plain records (``broker.model.records``): no pydantic on the hot path,
one field name per concept (the sender is ``sender``), ``to_dict`` JSON-ready."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import sqlrows
from pydantic import TypeAdapter

from broker import Agent, Operator, Store
from broker.delivery import turns
from broker.model import records
from broker.model.record_json import RECORD_MODULES
from broker.model.records import Lease, to_dict


def _delivery_rows(store: Store, recipient: str) -> dict[str, Any]:
    """message id -> (delivery id, created_at_utc) of the inbox's deliveries, from SQL."""
    with store.read() as t:
        rows = t.all(
            f"SELECT d.message_id, d.id, d.created_at_utc FROM {sqlrows.delivery_rows('d')} "
            "JOIN participants p ON p.id = d.recipient_id WHERE p.address = ?",
            (recipient,),
        )
    return {r[0]: (r[1], r[2]) for r in rows}


def test_importing_records_imports_no_pydantic() -> None:
    # A fresh interpreter: this test process has pydantic loaded already.
    code = (
        "import sys, broker.model.records\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('pydantic', 'pydantic_core', 'sqlalchemy')))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_records_are_frozen_and_slotted(join: Callable[..., Agent]) -> None:
    a, b = join("a"), join("b")
    a.send("b", "hi")
    lease = b.claim(limit=1, lease=60)
    with pytest.raises(dataclasses.FrozenInstanceError):
        lease.lease_token = "forged"  # type: ignore[misc]
    assert not hasattr(lease, "__dict__") and not hasattr(lease.deliveries[0], "__dict__")
    assert dataclasses.replace(lease, lease_token="t2").lease_token == "t2"


def test_S13_to_dict_of_a_lease_nests_its_deliveries(
    store: Store, join: Callable[..., Agent]
) -> None:
    a, b = join("a"), join("b")
    with store.transaction() as t:
        m0 = a.send("b", "m0", tx=t).id
        m1 = a.send("b", "m1 <<<", tx=t).id
    lease = b.claim(limit=2, lease=60)
    rows = _delivery_rows(store, "b")
    data = to_dict(lease)
    assert data == {
        "lease_token": lease.lease_token,
        "owner": lease.owner,
        "expires_at": lease.expires_at,
        "deliveries": [
            {
                "id": mid,
                "delivery_id": rows[mid][0],
                "kind": "direct",
                "sender": "a",
                "body": body,
                "urgent": False,
                "created_at_utc": rows[mid][1],
                "deliveries": 1,
                "thread": None,
                "importance": "normal",
            }
            for mid, body in ((m0, "m0"), (m1, "m1 <<<"))
        ],
    }
    assert json.loads(json.dumps(data)) == data
    # New containers: changing the dict does not change the record.
    data["deliveries"].clear()
    assert len(lease.deliveries) == 2


def test_S17_to_dict_of_a_turn_nests_its_items_and_omits_the_content_property(
    store: Store, space: str, join: Callable[..., Agent]
) -> None:
    a, b = join("a"), join("b")
    mid = a.send("b", "hello").id
    urgent = Operator(store).send(space, "stop now", to=["b"], urgent=True).id
    turn = b.next_turn()
    assert turn.id is not None
    rows = _delivery_rows(store, "b")
    data = to_dict(turn)
    assert data == {
        "id": turn.id,
        "address": "b",
        "created_at_utc": turn.created_at_utc,
        "expires_at": turn.expires_at,
        "items": [
            {
                "group": "urgent",
                "id": urgent,
                "kind": "operator",
                "sender": "operator",
                "body": "stop now",
                "urgent": True,
                "created_at_utc": rows[urgent][1],
                "deliveries": 1,
                "content": turns.render_operator("stop now", True),
                "recorded": True,
            },
            {
                "group": "message",
                "id": mid,
                "kind": "direct",
                "sender": "a",
                "body": "hello",
                "urgent": False,
                "created_at_utc": rows[mid][1],
                "deliveries": 1,
                "content": turns.render_agent("a", "direct", mid, rows[mid][1], "hello"),
                "recorded": True,
            },
        ],
    }
    assert turn.content == "\n\n".join(i["content"] for i in data["items"])


def test_a_schema_derived_from_a_record_agrees_with_to_dict(
    store: Store, space: str, join: Callable[..., Agent]
) -> None:
    # What a server will do at its edge: pydantic over the plain records.
    a = join("a", tools=["msg.send", "board.post", "board.claim"])
    b = join("b")
    op = Operator(store)
    a.send(["b", "ghost"], "hi")
    a.post("on the board")
    turn = b.next_turn()
    assert turn.id is not None
    seen = b.seen(turn.id)
    got: list[Any] = [
        op.create_space("session", inbox_cap=8),
        turn,
        seen,
        a.claim_key("k", ttl=30),
        *op.log(space),
        *op.participants(space),
        *op.transcript(space, "b"),
        *b.board_read(),
    ]
    for record in got:
        assert TypeAdapter(type(record)).dump_python(record, mode="json") == to_dict(record)
    delivery = TypeAdapter(Lease).json_schema()["$defs"]["Delivery"]["properties"]
    assert "sender" in delivery and "from" not in delivery
    assert delivery["deliveries"]["description"] == "times this message was claimed from this inbox"


def test_no_record_has_a_second_name_for_the_sender() -> None:
    # dir(records) names the records of every concept module too (built on first use).
    classes = [
        c
        for c in (getattr(records, name) for name in dir(records))
        if isinstance(c, type) and dataclasses.is_dataclass(c) and c.__module__ in RECORD_MODULES
    ]
    assert (
        len(classes) == 38
    )  # + ops, queue, purge, trust (S27), usage (S30), mail (S35-S38), reservations (S37), activity,
    # a turn's bookkeeping by its id (TurnMessages)
    for cls in classes:
        names = {f.name for f in dataclasses.fields(cls)}
        assert not names & {"from", "from_"}, cls


def test_records_of_other_calls_load_on_first_use() -> None:
    # A fresh interpreter: importing broker.model.records builds no class; each
    # concept's records (spaces', the store maintenance's...) come with the first
    # use of one of their names, and are the same classes either way.
    code = (
        "import sys, pickle, broker.model.records as r\n"
        "later = ('broker.store.maintenance', 'broker.model.records.spaces')\n"
        "print([m in sys.modules for m in later])\n"
        "f, s = r.Finding('sqlite', 'ok', 'fine', None), r.JoinKey('s', 'k')\n"
        "print([m in sys.modules for m in later], 'Finding' in dir(r), 'Space' in dir(r))\n"
        "print(pickle.loads(pickle.dumps(f)) == f, pickle.loads(pickle.dumps(s)) == s)\n"
        "print(r.Finding is sys.modules[later[0]].Finding, r.Space is sys.modules[later[1]].Space)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "[False, False]",
        "[True, True] True True",
        "True True",
        "True True",
    ]
    with pytest.raises(AttributeError):
        _ = records.NoSuchRecord  # type: ignore[attr-defined]


def test_record_behaves_as_a_frozen_slotted_dataclass() -> None:
    # broker.record_type builds __repr__/__eq__/__hash__ without compiling them:
    # the results are dataclasses' own.
    ours = records.NotReached("bob", "inbox_full")
    assert repr(ours) == "NotReached(address='bob', reason='inbox_full')"
    assert ours == records.NotReached("bob", "inbox_full")
    assert ours != records.NotReached("bob", "sender_share")
    assert hash(ours) == hash(("bob", "inbox_full"))
    assert ours.__eq__(("bob", "inbox_full")) is NotImplemented
    params = type(ours).__dataclass_params__  # type: ignore[attr-defined]
    assert params.eq and params.repr and params.frozen
    with pytest.raises(dataclasses.FrozenInstanceError):
        ours.address = "eve"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del ours.address  # type: ignore[misc]
    lease = records.Lease("t", "o", "e", [])
    lease.deliveries.append(lease)  # type: ignore[arg-type]
    assert repr(lease) == "Lease(lease_token='t', owner='o', expires_at='e', deliveries=[...])"
    with pytest.raises(TypeError):
        hash(lease)  # a list field: unhashable, as a dataclass's


def test_record_is_made_as_dataclasses_would_make_it() -> None:
    """``record`` sets the slots itself (no ``object.__setattr__`` a field):
    the same signature, defaults, fresh factory values, keyword-only fields
    and a base record's fields, with every way a call can be wrong refused
    as dataclasses' ``__init__`` refuses it."""
    from broker.record_type import record

    @record
    class Base:
        a: int
        b: str = "b"

    @record
    class Made(Base):
        c: list[int] = dataclasses.field(default_factory=list)
        d: int = dataclasses.field(default=4, kw_only=True)

    @dataclasses.dataclass(frozen=True, slots=True)
    class Plain(Base):
        c: list[int] = dataclasses.field(default_factory=list)
        d: int = dataclasses.field(default=4, kw_only=True)

    import inspect

    assert str(inspect.signature(Made)) == str(inspect.signature(Plain))
    first, second = Made(1), Made(2, "x", [3], d=5)
    assert (first.a, first.b, first.c, first.d) == (1, "b", [], 4)
    assert (second.a, second.b, second.c, second.d) == (2, "x", [3], 5)
    assert first.c is not Made(1).c  # a fresh list each time, as the factory makes it
    assert dataclasses.replace(second, a=9) == Made(9, "x", [3], d=5)
    for bad in ((), (1, "b", [], 4), (1,), (1, "b", [], "extra")):
        kwargs = {"e": 1} if bad == (1,) else {}
        with pytest.raises(TypeError) as ours:
            Made(*bad, **kwargs)
        with pytest.raises(TypeError) as theirs:
            Plain(*bad, **kwargs)
        assert str(ours.value) == str(theirs.value).replace("Plain", "Made")
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.a = 2  # type: ignore[misc]


@pytest.mark.parametrize("option", [{"compare": False}, {"repr": False}, {"hash": False}])
def test_record_refuses_field_options_its_methods_would_ignore(option: dict[str, bool]) -> None:
    from broker.record_type import record

    with pytest.raises(TypeError, match="no compare/repr/hash field options"):

        @record
        class Bad:
            a: int
            b: int = dataclasses.field(default=0, **option)  # type: ignore[call-overload]


def test_from_row_reads_each_field_by_name_and_refuses_a_missing_column() -> None:
    # The one row mapper (broker.record_type.from_row): a field is the column of
    # its name unless given; a query out of step with its record is a KeyError.
    from broker.record_type import from_row

    row = {"address": "bob", "why": "inbox_full", "extra": 1}
    assert from_row(records.NotReached, row, reason=row["why"]) == records.NotReached(
        "bob", "inbox_full"
    )
    with pytest.raises(KeyError, match="reason"):
        from_row(records.NotReached, row)
