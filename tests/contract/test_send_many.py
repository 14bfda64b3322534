"""Batched sends: many messages in one transaction, each with S6-S12 applied."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import sqlrows
import trusted

from broker import Agent, Operator, Store, errors


def count(store: Store, space: str) -> int:
    with store.read() as t:
        return int(
            t.one(
                f"SELECT count(*) FROM messages WHERE space_no = {sqlrows.SPACE_NO}",
                (space,),
            )[0]
        )


def test_send_many_logs_each_message_once_with_consecutive_seqs(
    join: Callable[..., Agent], store: Store, space: str
) -> None:
    a, b = join("w/a"), join("w/b")
    results = a.send_many([{"to": "b", "text": f"m{i}"} for i in range(100)])
    assert [r.seq for r in results] == list(range(1, 101))
    assert all(r.reached == ["b"] for r in results)
    lease = b.claim(limit=100)
    assert [d.body for d in lease.deliveries] == [
        f"m{i}" for i in range(100)
    ]  # FIFO inside the batch


def test_S7_inbox_cap_counts_the_batch_itself(store: Store) -> None:
    space = Operator(store).create_space("workflow", inbox_cap=5, sender_share=1).id
    a, _ = trusted.join(store, space, "w/a")
    trusted.join(store, space, "w/b")
    results = a.send_many([{"to": "b", "text": str(i)} for i in range(8)])
    assert [r.reached for r in results[:5]] == [["b"]] * 5
    assert [n.reason for r in results[5:] for n in r.not_reached] == ["inbox_full"] * 3


def test_S7_broadcast_cap_counts_the_batch_itself(store: Store) -> None:
    space = Operator(store).create_space("workflow", broadcast_cap=3).id
    a, _ = trusted.join(store, space, "w/a")
    trusted.join(store, space, "w/b")
    results = a.send_many([{"to": "broadcast", "text": str(i)} for i in range(5)])
    assert [r.reached for r in results] == [["b"]] * 3 + [[]] * 2
    assert [n.reason for r in results[3:] for n in r.not_reached] == ["broadcast_full"] * 2
    with store.read() as t:
        nos = [
            r[0]
            for r in t.all(
                f"SELECT bcast_no FROM messages WHERE space_no = {sqlrows.SPACE_NO} ORDER BY seq",
                (space,),
            )
        ]
    assert nos == [1, 2, 3, None, None]


def test_S8_an_item_that_reaches_nobody_is_logged_and_not_raised(
    join: Callable[..., Agent], store: Store, space: str
) -> None:
    a = join("w/a")
    join("w/b")
    results = a.send_many([{"to": "b", "text": "ok"}, {"to": "ghost", "text": "lost"}])
    assert results[0].reached == ["b"]
    assert results[1].reached == [] and results[1].not_reached[0].reason == "no_live_participant"
    assert count(store, space) == 2


def test_S10_an_invalid_item_refuses_the_whole_batch(
    join: Callable[..., Agent], store: Store, space: str
) -> None:
    a = join("w/a")
    join("w/b")
    with pytest.raises(errors.InvalidInput, match=r"unknown field 'items\[1\]\.from'"):
        a.send_many([{"to": "b", "text": "ok"}, {"to": "b", "text": "x", "from": "lead"}])
    with pytest.raises(errors.BodyTooLarge):
        a.send_many([{"to": "b", "text": "ok"}, {"to": "b", "text": "x" * 70000}])
    assert count(store, space) == 0


def test_S12_idempotency_keys_inside_and_across_batches(
    join: Callable[..., Agent], store: Store, space: str
) -> None:
    a = join("w/a")
    join("w/b")
    first = a.send_many(
        [
            {"to": "b", "text": "x", "idempotency_key": "k1"},
            {"to": "b", "text": "x", "idempotency_key": "k1"},
        ]
    )
    assert first[1].duplicate and first[1].id == first[0].id
    again = a.send_many([{"to": "b", "text": "x", "idempotency_key": "k1"}])
    assert again[0].duplicate and again[0].id == first[0].id
    assert count(store, space) == 1


def test_S24_receive_only_participant_cannot_send_many(
    join: Callable[..., Agent], store: Store, space: str
) -> None:
    quiet = join("w/quiet", messaging=False)
    join("w/b")
    with pytest.raises(errors.ToolUnavailable):
        quiet.send_many([{"to": "b", "text": "x"}])
    assert count(store, space) == 0


def test_S10_an_empty_or_blank_body_is_refused_and_writes_nothing(
    join: Callable[..., Agent], store: Store, space: str
) -> None:
    a = join("w/a")
    join("w/b")
    for text in ("", "   \n"):
        with pytest.raises(errors.InvalidInput, match="message text is empty"):
            a.send("b", text)
        with pytest.raises(errors.InvalidInput, match="message text is empty"):
            a.post(text)
        with pytest.raises(
            errors.InvalidInput, match=r"bad items\[0\]\.text: message text is empty"
        ):
            a.send_many([{"to": "b", "text": text}])
    assert count(store, space) == 0
    assert a.send("b", "  kept as given  ").reached == ["b"]
