"""Path reservations (S37) on the served-mode handles: ``RemoteAgent`` and
``RemoteOperator`` inherit these, the same methods as ``broker.api.reservations``
over HTTP."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

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
    """``AgentPaths`` over HTTP: its methods are declared operations
    (``broker.frontends.remote.operations.derived``)."""


@checked
class RemoteOperatorPaths(_Host):
    """``OperatorPaths`` over HTTP (broker/frontends/http/routes_operator.py)."""

    def reservations(self, space: str) -> list[Reservation]:
        return self._many(
            records.Reservation,
            self._call("GET", f"/api/spaces/{quote(space, safe='')}" + "/reservations"),
        )

    def release_reservation(
        self, space: str, fence: int, *, reason: str | None = None
    ) -> JournalEntry:
        path = f"/api/spaces/{quote(space, safe='')}" + "/reservations/release"
        data = self._call("POST", path, {"fence": fence, "reason": reason})
        return self._one(JournalEntry, data)  # type: ignore[no-any-return]

    def check_paths(self, space: str, paths: str | Sequence[str]) -> list[PathCheck]:
        items = [paths] if isinstance(paths, str) else list(paths)
        path = f"/api/spaces/{quote(space, safe='')}" + "/reservations/check"
        return self._many(records.PathCheck, self._call("POST", path, {"paths": items}))
