"""A claim's records (S13, S35): each delivery a claim hands out shows its
message as the log holds it.

``inbox.deliveries_of`` reads the claim statement's JSON array of each message
by position (the claim's hot path); the log's own reader (``Operator.log``)
reads the same rows by name. Every value a delivery shows must be the log
entry's, whatever its mail attributes: a plain message (every mail attribute
NULL in its row), one in a thread with its importance and a reply, an urgent
operator message, a board post."""

from __future__ import annotations

import json
from dataclasses import fields

import pytest
import trusted

from broker import Operator
from broker.delivery import inbox
from broker.model.records import Delivery, LogEntry
from broker.store.sqlite import Store

# What a delivery shows of its message: each of its fields the log entry has too
# (a mail attribute added to both is checked here without a word of this test).
SHOWN = sorted({f.name for f in fields(Delivery)} & {f.name for f in fields(LogEntry)})


def test_a_claimed_delivery_shows_its_message_as_the_log_holds_it(store: Store) -> None:
    op = Operator(store)
    sid = op.create_space("session").id
    lynx, _ = trusted.join(store, sid, "lynx", pid=None)
    otter, _ = trusted.join(store, sid, "otter", pid=None)
    first = lynx.send("otter", "plain")
    lynx.send("otter", "in a thread", thread="review", importance="high", ack_required=True)
    lynx.send("otter", "low", importance="low", reply_to=first.id)
    op.send(sid, "stop and read", to="otter", urgent=True)
    lynx.post("on the board", addressed_to=["otter"])

    got = otter.claim(limit=10).deliveries
    logged = {e.id: e for e in op.log(sid)}

    assert [d.body for d in got] == [
        "plain", "in a thread", "low", "stop and read", "on the board",
    ]  # fmt: skip
    assert {"id", "body", "urgent", "created_at_utc", "thread", "importance"} <= set(SHOWN)
    for d in got:
        entry = logged[d.id]
        assert {k: getattr(d, k) for k in SHOWN} == {k: getattr(entry, k) for k in SHOWN}
        assert d.deliveries == 1
        assert d.delivery_id.startswith(d.id[:22]) and d.delivery_id != d.id
    assert [d.importance for d in got] == ["normal", "high", "low", "normal", "normal"]
    assert [d.thread for d in got][:2] == [None, "review"]
    assert [d.urgent for d in got] == [False, False, False, True, False]


def test_a_claimed_row_out_of_step_with_its_names_is_refused() -> None:
    """A statement whose array no longer matches ``CLAIMED`` fails loudly,
    never shifting a value into another field."""
    short = json.dumps(["d", "m", "2026-12-05T00:00:00Z", "direct", "lynx", "hi", 0])
    with pytest.raises(ValueError, match="CLAIMED names"):
        inbox.deliveries_of([{"r": 1, "state": "processing", "attempts": 1, "message": short}])
