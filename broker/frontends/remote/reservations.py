"""Path reservations (S37) on the served-mode handles: ``RemoteAgent`` and
``RemoteOperator`` inherit these, the same methods as ``broker.api.reservations``
over HTTP."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from broker.model import records
from broker.model.records import JournalEntry
from broker.model.typecheck import checked

if TYPE_CHECKING:  # built on first use (broker.model.records loads them lazily)
    from broker.model.records import PathCheck, Reservation


class _Host:
    """What the host class (broker.frontends.remote) provides: the request and the decoding."""

    def _call(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        raise NotImplementedError

    def _one(self, cls: type, data: Any) -> Any:
        raise NotImplementedError

    def _many(self, cls: type, data: Any) -> list[Any]:
        raise NotImplementedError


@checked
class RemoteAgentPaths(_Host):
    """``AgentPaths`` over HTTP (the endpoints of broker/frontends/http/routes_agent.py)."""

    def reserve(
        self,
        patterns: str | Sequence[str],
        *,
        shared: bool = False,
        ttl: float = 300.0,
        reason: str | None = None,
    ) -> list[Reservation]:
        items = [patterns] if isinstance(patterns, str) else list(patterns)
        body = {"patterns": items, "shared": shared, "ttl": ttl, "reason": reason}
        return self._many(records.Reservation, self._call("POST", "/board/reserve", body))

    def release_reservation(self, fence: int) -> JournalEntry:
        data = self._call("POST", "/board/unreserve", {"fence": fence})
        return self._one(JournalEntry, data)  # type: ignore[no-any-return]

    def renew_reservation(self, fence: int, ttl: float = 300.0) -> Reservation:
        data = self._call("POST", "/board/renew-reservation", {"fence": fence, "ttl": ttl})
        return self._one(records.Reservation, data)  # type: ignore[no-any-return]

    def check_paths(self, paths: str | Sequence[str]) -> list[PathCheck]:
        items = [paths] if isinstance(paths, str) else list(paths)
        return self._many(records.PathCheck, self._call("POST", "/board/check", {"paths": items}))


@checked
class RemoteOperatorPaths(_Host):
    """``OperatorPaths`` over HTTP (broker/frontends/http/routes_operator.py)."""
