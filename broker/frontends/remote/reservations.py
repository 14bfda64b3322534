"""Path reservations (S37) on the served-mode handles: ``RemoteAgent`` and
``RemoteOperator`` inherit these, the same methods as ``broker.api.reservations``
over HTTP."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from broker.model.typecheck import checked

if TYPE_CHECKING:  # built on first use (broker.model.records loads them lazily)
    pass


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
