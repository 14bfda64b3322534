"""Path reservations on the public handles (S37), kept out of broker/api/handles.py
(which is long enough): ``Agent`` and ``Operator`` inherit these methods, and
the async twins (broker.api.aio) wrap them like the others."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from broker.model.typecheck import checked

if TYPE_CHECKING:
    from broker.model.records import JournalEntry, PathCheck, Reservation
    from broker.spaces.auth import Identity
    from broker.store.sqlite import Store, Tx


@checked
class AgentPaths:
    """An agent's reservations: reserve, release, renew, check."""

    store: Store
    identity: Identity

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
        from broker.board import reservations

        return reservations.reserve(
            self.store, self.identity, patterns, shared=shared, ttl=ttl, reason=reason, tx=tx
        )

    def release_reservation(self, fence: int, *, tx: Tx | None = None) -> JournalEntry:
        """Release the reservation with ``fence`` (else ``LeaseLost``)."""
        from broker.board import reservations

        return reservations.release(self.store, self.identity, fence, tx=tx)

    def renew_reservation(
        self, fence: int, ttl: float = 300.0, *, tx: Tx | None = None
    ) -> Reservation:
        """Extend the live reservation with ``fence`` to ``ttl`` seconds from now."""
        from broker.board import reservations

        return reservations.renew(self.store, self.identity, fence, ttl, tx=tx)

    def check_paths(self, paths: str | Sequence[str], *, tx: Tx | None = None) -> list[PathCheck]:
        """Who holds what covers each path; ``blocked`` when someone else holds
        a covering pattern exclusively (what the git guard refuses)."""
        from broker.board import reservations

        return reservations.check(self.store, self.identity, paths, tx=tx)


@checked
class OperatorPaths:
    """The operator's view of reservations."""

    store: Store
