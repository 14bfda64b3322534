"""A hypothesis stateful model of the queue (S13-S16): send, claim, ack, release,
lease expiry and store restarts, against a pure model, with an injected clock."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import pytest
import sqlrows
import trusted
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from sqlrows import waiting_sql

from broker import Agent, Operator, Store, errors

LEASE = 10.0
MAX_DELIVERIES = 3


@dataclass
class Msg:
    id: str
    order: int
    state: str = "ready"  # ready | processing | done | quarantine
    token: str | None = None
    expires: datetime | None = None
    attempts: int = 0


class QueueModel(RuleBasedStateMachine):
    """One sender, one consumer inbox, many leases; the model predicts every claim."""

    def __init__(self) -> None:
        super().__init__()
        self.msgs: dict[str, Msg] = {}
        self.leases: dict[str, list[str]] = {}  # token -> message ids it was granted
        self.sent = 0

    @initialize(folder=st.just(None))
    def setup(self, folder: Any) -> None:
        import tempfile

        self.dir = Path(tempfile.mkdtemp())
        self.now = datetime(2026, 11, 30, tzinfo=UTC)
        self.url = f"sqlite:///{self.dir / 'model.db'}"
        self._open()
        space = Operator(self.store).create_space(
            "workflow", lease_seconds=LEASE, max_deliveries=MAX_DELIVERIES, inbox_cap=100000
        )
        self.space = space.id
        sender, j1 = trusted.join(self.store, space.id, "w/sender")
        consumer, j2 = trusted.join(self.store, space.id, "w/consumer")
        self.tokens = {"sender": j1.token, "consumer": j2.token}
        self._connect()

    def _open(self) -> None:
        self.store = Store(self.url, clock=lambda: self.now)

    def _connect(self) -> None:
        self.sender = Agent.connect(self.store, self.space, "sender", self.tokens["sender"])
        self.consumer = Agent.connect(self.store, self.space, "consumer", self.tokens["consumer"])

    # --- model helpers -------------------------------------------------------------------
    def _claimable(self) -> list[Msg]:
        live = [
            m
            for m in self.msgs.values()
            if m.state == "ready"
            or (m.state == "processing" and m.expires is not None and m.expires < self.now)
        ]
        return sorted(live, key=lambda m: m.order)

    # --- rules -------------------------------------------------------------------------
    @rule(n=st.integers(1, 3))
    def send(self, n: int) -> None:
        for _ in range(n):
            result = self.sender.send("consumer", f"m{self.sent}")
            self.msgs[result.id] = Msg(result.id, self.sent)
            self.sent += 1

    @rule(limit=st.integers(1, 4))
    def claim(self, limit: int) -> None:
        expected: list[Msg] = []
        for m in self._claimable():
            if len(expected) == limit:
                break
            if m.attempts >= MAX_DELIVERIES:
                m.state, m.token = "quarantine", None  # quarantined by the claim, not returned
                continue
            expected.append(m)
        lease = self.consumer.claim(limit=limit, lease=LEASE)
        assert [d.id for d in lease.deliveries] == [m.id for m in expected]  # S13: FIFO, disjoint
        for m, d in zip(expected, lease.deliveries, strict=True):
            m.state, m.token, m.attempts = "processing", lease.lease_token, m.attempts + 1
            m.expires = self.now + timedelta(seconds=LEASE)
            assert d.deliveries == m.attempts  # S15: the count grows with each delivery
        if expected:
            self.leases[lease.lease_token] = [m.id for m in expected]

    def _held(self, token: str) -> list[Msg]:
        return [self.msgs[i] for i in self.leases[token] if self.msgs[i].token == token]

    @precondition(lambda self: bool(self.leases))
    @rule(data=st.data(), settle=st.sampled_from(["ack", "release"]), by_id=st.booleans())
    def settle_lease(self, data: st.DataObject, settle: str, by_id: bool) -> None:
        token = data.draw(st.sampled_from(list(self.leases)))  # insertion order: tokens are random
        mine = [self.msgs[i] for i in self.leases[token]]
        held = [m for m in mine if m.token == token and m.state == "processing"]
        fn = self.consumer.ack if settle == "ack" else self.consumer.release
        ids = [m.id for m in mine] if by_id else None  # the whole lease, named or not
        if held and len(held) == len(mine):
            assert fn(token, ids) == len(held)  # S14: the holder settles all it holds
            for m in held:
                if settle == "ack":
                    m.state = "done"
                else:
                    m.state, m.token, m.expires = "ready", None, None
            del self.leases[token]
        elif not held and all(m.token != token for m in mine):
            # Every message moved on under another lease (claimed again, acked or
            # released by it, quarantined): the token is stale, even for an ack of
            # messages another lease has acked meanwhile.
            with pytest.raises(errors.LeaseLost):
                fn(token, ids)
            del self.leases[token]

    @rule(seconds=st.sampled_from([1.0, 5.0, 9.0, 10.5, 30.0]))
    def advance_clock(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    @rule()
    def restart(self) -> None:
        """A process restart: a new Store on the same file keeps every state (S16)."""
        self.store.close()
        self._open()
        self._connect()

    # --- invariants --------------------------------------------------------------------
    @invariant()
    def database_matches_model(self) -> None:
        if not hasattr(self, "store"):
            return
        with self.store.read() as t:
            rows = dict(
                t.all(
                    f"SELECT d.message_id, d.state FROM {sqlrows.delivery_rows('d')} JOIN participants p ON p.id = d.recipient_id "
                    "WHERE p.address = 'consumer' AND d.space_id = ?",
                    (self.space,),
                )
            )
            waiting = t.one(
                f"{waiting_sql(self.store)} WHERE space_id = ? AND address = 'consumer'",
                (self.space,),
            )[0]
        assert set(rows) == set(self.msgs)  # nothing lost, nothing invented
        for mid, m in self.msgs.items():
            assert rows[mid] == m.state, (mid, rows[mid], m.state)
        assert waiting == sum(m.state in ("ready", "processing") for m in self.msgs.values())

    def teardown(self) -> None:
        if hasattr(self, "store"):
            self.store.close()
        if hasattr(self, "dir"):
            shutil.rmtree(self.dir, ignore_errors=True)


QueueModel.TestCase.settings = settings(
    max_examples=15,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_S13_S16_queue_matches_its_model = QueueModel.TestCase


class QueueModelSoak(QueueModel):
    """The same model, more and longer runs: ``pytest -m soak`` (.ci/run)."""


QueueModelSoak.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_S13_S16_queue_matches_its_model_soak = pytest.mark.soak(QueueModelSoak.TestCase)
