"""``python -m bench.send_phases --layers``: a send with its layers taken off one
at a time, each variant a real send of one message to the same inbox."""

from __future__ import annotations

from pathlib import Path

import sqlrows

from bench.peers.broker_queue import warmed_sender
from bench.send_phases import layers
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
