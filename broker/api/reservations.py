"""Path reservations on the public handles (S37), kept out of broker/api/handles.py
(which is long enough): ``Agent`` and ``Operator`` inherit these methods, and
the async twins (broker.api.aio) wrap them like the others."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from broker.api.declaration import Operation, declared
from broker.api.operations import CHECK_PATHS, RENEW_RESERVATION, RESERVE, UNRESERVE
from broker.model.fields import Input
from broker.model.typecheck import checked

if TYPE_CHECKING:
    from broker.model.records import JournalEntry, PathCheck, Reservation
    from broker.spaces.auth import Identity
    from broker.store.sqlite import Store

from broker.store.sqlite import Tx


@checked
class AgentPaths:
    """An agent's reservations: reserve, release, renew, check."""

    store: Store
    identity: Identity

    @declared(RESERVE)
    def reserve(
        self,
        patterns: str | Sequence[str],
        *,
        shared: bool = False,
        ttl: float = 300.0,
        reason: str | None = None,
        tx: Tx | None = None,
    ) -> list[Reservation]:
        """Reserve path patterns (``src/**``, ``*.md``), exclusive unless
        ``shared``, for ``ttl`` seconds: one grant with a fencing token per
        pattern, all or none. Overlapping a live grant of someone else (both
        exclusive, or one of them): ``Conflict`` naming holder, pattern, expiry."""
        return self.call(RESERVE, RESERVE.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(UNRESERVE)
    def release_reservation(self, fence: int, *, tx: Tx | None = None) -> JournalEntry:
        """Release the reservation with ``fence`` (else ``LeaseLost``)."""
        return self.call(UNRESERVE, UNRESERVE.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(RENEW_RESERVATION)
    def renew_reservation(
        self, fence: int, ttl: float = 300.0, *, tx: Tx | None = None
    ) -> Reservation:
        """Extend the live reservation with ``fence`` to ``ttl`` seconds from now."""
        op = RENEW_RESERVATION
        return self.call(op, op.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(CHECK_PATHS)
    def check_paths(self, paths: str | Sequence[str], *, tx: Tx | None = None) -> list[PathCheck]:
        """Who holds what covers each path; ``blocked`` when someone else holds
        a covering pattern exclusively (what the git guard refuses)."""
        return self.call(CHECK_PATHS, CHECK_PATHS.take(locals()), tx)  # type: ignore[no-any-return]

    def call(self, op: Operation, inp: Input | Mapping[str, Any], tx: Tx | None = None) -> Any:
        raise NotImplementedError  # the handle's own (broker.api.agent.Agent.call)


@checked
class OperatorPaths:
    """The operator's view of reservations."""

    store: Store
