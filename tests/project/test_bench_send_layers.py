"""``python -m bench.send_phases --layers``: a send with its layers taken off one
at a time, each variant a real send of one message to the same inbox; and
``--hold``: the writer lock's hold of a send, through ``send_one`` and through
the ``Batch``."""

from __future__ import annotations

from pathlib import Path

import sqlrows

from bench.peers.broker_queue import warmed_sender
from bench.send_phases import hold, layers
from broker import Operator


def test_each_layer_variant_sends_a_message_to_the_worker(tmp_path: Path) -> None:
    store, sender = warmed_sender(tmp_path, 3)
    try:
        got = layers(store, sender, rounds=2, per=4)
        assert list(got)[0] == "Agent.send (the library method)"
        assert list(got)[-1] == "raw_same: the statements, no store"
        # the seven layers, and the same send through the Batch beside them
        assert "(the same through the Batch, not send_one)" in got
        assert len(got) == 8 and all(us > 0 for us in got.values()), got
        log = Operator(store).log(sender.space_id, limit=1000)
        sent = 3 + 8 * 2 * 4  # the warm-up's, then 8 variants x 2 turns x 4 sends
        assert [e.seq for e in log] == list(range(1, sent + 1))  # one row a send, no gap
        assert all(e.body == "x" * 60 and e.reached == ["worker"] for e in log[3:])
        with store.read() as t:
            inbox = t.all(
                f"SELECT m.message_id, p.address FROM {sqlrows.delivery_rows('m')} "
                "JOIN participants p ON p.id = m.recipient_id ORDER BY m.rowid"
            )
        assert [tuple(r) for r in inbox] == [(e.id, "worker") for e in log]  # each in the inbox
    finally:
        store.close()


def test_the_hold_times_both_ways_and_puts_every_patch_back(tmp_path: Path) -> None:
    from broker.mail import sending
    from broker.store import sqlite as store_sqlite
    from broker.store.writelock import WriterLock

    before = (sending.send_one, WriterLock.acquire, WriterLock.release, store_sqlite._execute)
    store, sender = warmed_sender(tmp_path, 3)
    try:
        got = hold(sender, rounds=2, per=4)
        assert list(got) == ["send_one", "the Batch (send_one declining)"]
        for wall, held, sql in got.values():
            assert wall > held > sql > 0, got  # the hold is inside the send, the statements in it
        log = Operator(store).log(sender.space_id, limit=1000)
        assert [e.seq for e in log] == list(range(1, 3 + 2 * 2 * 4 + 1))  # every send landed
    finally:
        store.close()
    after = (sending.send_one, WriterLock.acquire, WriterLock.release, store_sqlite._execute)
    assert after == before
