"""Work per send (issue "Swarm-scale speed"): the statements one send runs.

A single send to one participant is five statements on SQLite: ``BEGIN
IMMEDIATE``; one ``SELECT`` that reads the space's counters (derived from the
log, revision 0017: no space row is written), re-checks the caller (S10,
S24), reads the recipient with its contact policy (S38) and the space's last
log time (S44: a send is never stamped earlier); the log row; the delivery;
``COMMIT``. The rules are unchanged (tests/contract/test_send.py,
test_limits.py, test_grants.py): whether the send lands or not, is refused or
repeated, the counters are its log's. Counted with SQLite's trace
callback on the store's own connection (statements a trigger runs are
reported as ``-- ...`` lines and are not counted: they are part of their
statement).
"""

from __future__ import annotations

import pytest
import trusted
from sqlrows import spaces_as_read

from broker import Agent, Operator, errors
from broker.store.sqlite import Store


def statements(seen: list[str]) -> list[str]:
    """The statements the broker ran (a statement that fires triggers is
    reported again for each; trigger bodies are '-- ' lines)."""
    out: list[str] = []
    for text in seen:
        if text.startswith("--"):
            continue
        if out and out[-1] == text:
            continue
        out.append(text)
    return out


def assert_counters(store: Store, sid: str) -> None:
    """The space's counters are its log's: seq gap-free, log_bytes its sum (S11)."""
    with store.read() as t:
        last_seq, log_bytes = t.one(
            f"SELECT last_seq, log_bytes FROM {spaces_as_read(store)} WHERE id = :id", {"id": sid}
        )
        seqs = [
            r[0]
            for r in t.all(
                "SELECT seq FROM messages WHERE space_no = (SELECT sp.rowid FROM spaces sp WHERE sp.id = :id) ORDER BY seq",
                {"id": sid},
            )
        ]
        size = t.one(
            "SELECT sum(size_bytes) FROM messages WHERE space_no = (SELECT sp.rowid FROM spaces sp WHERE sp.id = :id)",
            {"id": sid},
        )[0]
    assert seqs == list(range(1, last_seq + 1))
    assert log_bytes == size


def agents(store: Store) -> tuple[str, Agent, Agent]:
    sid = Operator(store).create_space("session").id
    lynx, _ = trusted.join(store, sid, "lynx", pid=None)
    otter, _ = trusted.join(store, sid, "otter", pid=None)
    lynx.send("otter", "first: the heartbeat")
    return sid, lynx, otter


@pytest.mark.parametrize("to", ["otter", "swarm/otter"])  # a bare name; a full codename
def test_a_single_send_is_five_statements(traced: tuple[Store, list[str]], to: str) -> None:
    store, seen = traced
    sid, lynx, otter = agents(store)
    seen.clear()
    result = lynx.send(to, "hello")
    ran = statements(seen)
    assert len(ran) <= 5, "\n".join(ran)
    assert ran[0] == "BEGIN IMMEDIATE" and ran[-1] == "COMMIT"
    assert result.reached == ["otter"] and result.seq == 2
    got = otter.claim(limit=10).deliveries
    assert [d.body for d in got] == ["first: the heartbeat", "hello"]
    assert_counters(store, sid)


def test_a_send_inside_a_callers_transaction_reads_once_too(
    traced: tuple[Store, list[str]],
) -> None:
    """``tx=`` (a caller's own transaction, a server's group commit): the same
    one read of caller, recipient and counters, then the two inserts under the
    savepoint that lets a refusal undo the send's writes and keep its notice."""
    store, seen = traced
    sid, lynx, otter = agents(store)
    with store.write() as t:
        seen.clear()
        result = lynx.send("otter", "hello", tx=t)
        ran = statements(seen)
    assert len(ran) <= 5, "\n".join(ran)  # the read, SAVEPOINT, two inserts, RELEASE
    assert ran[0].startswith("SELECT") and "AS to_address" in ran[0], ran
    assert ran[1].startswith("SAVEPOINT") and ran[-1].startswith("RELEASE"), ran
    assert result.reached == ["otter"] and result.seq == 2
    assert [d.body for d in otter.claim(limit=10).deliveries] == ["first: the heartbeat", "hello"]
    assert_counters(store, sid)


def test_the_counters_are_the_logs_whatever_a_send_does(
    traced: tuple[Store, list[str]],
) -> None:
    store, seen = traced
    sid, lynx, _ = agents(store)
    with pytest.raises(errors.NotDelivered):
        lynx.send("nobody", "to an unknown address")  # logged, with its reason (S8)
    lynx.send("otter", "idem", idempotency_key="k1")
    assert lynx.send("otter", "idem", idempotency_key="k1").duplicate  # nothing written (S12)
    mute, _ = trusted.join(store, sid, "mute", pid=None, messaging=False)
    with pytest.raises(errors.ToolUnavailable):  # refused (S24): its notice stays
        mute.send("otter", "may I?")
    assert_counters(store, sid)
