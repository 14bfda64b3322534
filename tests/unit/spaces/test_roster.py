"""The participants' one row mapper (``broker.spaces.roster.to_model``) reads a
database row once into a dict (by-name reads of a wide ``sqlite3.Row`` scan
its columns), and a row given as a mapping as it is: both make the same
participant as the library's listing."""

from __future__ import annotations

from broker import Operator, Store
from broker.spaces import roster
from broker.store.sql import stmt


def test_a_participant_reads_the_same_from_a_database_row_and_from_a_mapping(store: Store) -> None:
    op = Operator(store)
    sid = op.create_space("workflow").id
    op.join(sid, "ivy", role="reviewer", tools=["msg.send"])
    with store.read() as t:
        [row] = t.all(stmt("participants.list_all"), {"space_id": sid})
    from_row = roster.to_model(row)
    assert from_row == roster.to_model(dict(row))  # by its keys()
    assert (from_row.address, from_row.role, from_row.tools) == ("ivy", "reviewer", ["msg.send"])
    assert from_row == op.participants(sid)[0]
