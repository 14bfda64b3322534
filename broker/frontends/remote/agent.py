"""``RemoteAgent``: ``broker.api.handles.Agent`` over HTTP (client mode)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from broker import errors
from broker.api.declaration import Operation, operation
from broker.frontends.remote.codec import decode, from_dict, list_of
from broker.frontends.remote.operations import carried, derived, route
from broker.frontends.remote.reservations import RemoteAgentPaths
from broker.frontends.remote.wire import TIMEOUT_S, Connection, space_path
from broker.model.fields import Input
from broker.model.typecheck import checked, self_checked


# --- the agent ---------------------------------------------------------------------------
@checked
@derived("agent")
class RemoteAgent(RemoteAgentPaths):
    """``broker.api.handles.Agent`` over HTTP: the token is the only credential.

    The same methods with the same parameters as ``Agent`` (a test compares
    their signatures), but ``tx`` (a served call is its own transaction),
    ``join`` (in served mode the operator joins agents: ``RemoteOperator.join``)
    and the teammates runtime's turn bookkeeping (see ``NOT_SERVED`` in
    tests/frontends/remote/test_remote_parity.py)."""

    def __init__(
        self,
        conn: Connection,
        token: str,
        space: str | None = None,
        address: str | None = None,
        *,
        transient: bool = False,
    ) -> None:
        if not token:
            raise errors.token_refused()
        self.conn = conn
        self.token = token
        self._space = space
        self._address = address
        self._base: str | None = None  # the path of this agent's routes, once its space is known
        # Kept for parity with Agent: a served lease is held by the server's
        # process and ends by ack, release or expiry whatever this process does.
        self.transient = transient

    @classmethod
    def connect(
        cls,
        conn: Connection,
        space: str | None,
        address: str | None,
        token: str | None,
        *,
        transient: bool = False,
    ) -> RemoteAgent:
        """Like ``Agent.connect``; the server checks the token (space and address
        only shape the path: the server derives who is calling)."""
        return cls(conn, token or "", space, address, transient=transient)

    @classmethod
    def from_token(cls, conn: Connection, token: str | None) -> RemoteAgent:
        """Like ``Agent.from_token``: the participant the token belongs to
        (asked of the server on first use)."""
        return cls(conn, token or "")

    def _who(self) -> None:
        me = self.conn.call("GET", "/api/me", secret=self.token)
        self._space, self._address = me["space_id"], me["address"]

    @property
    def space_id(self) -> str:
        if self._space is None:
            self._who()
        assert self._space is not None
        return self._space

    @property
    def address(self) -> str:
        if self._address is None:
            self._who()
        assert self._address is not None
        return self._address

    def _call(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        if self._base is None:
            self._base = f"{space_path(self.space_id)}/agent"
        return self.conn.call(method, self._base + path, secret=self.token, body=body, **kw)

    def _one(self, cls: type, data: Any) -> Any:
        """Decoding for the path-reservation methods (broker.frontends.remote.reservations)."""
        return from_dict(cls, data)

    def _many(self, cls: type, data: Any) -> list[Any]:
        return list_of(cls, data)

    @property
    def process(self) -> str | None:
        """None: a served lease is held by the server's process, and ends by ack,
        release or expiry whatever this process does."""
        return None

    @self_checked
    def call(self, op: Operation, inp: Input | Mapping[str, Any]) -> Any:
        """Send the declared operation ``op`` with its checked input record to
        the server; its result, decoded. A lease owner not given names this
        process, as in embedded mode: a restart on this host gets its own work
        back at once (S32)."""
        op = operation(op)
        record: Input = op.accept("agent", inp)
        if op.http is None:
            raise errors.InvalidInput(f"{op.name} is not served over HTTP", field="op")
        values = record.values()
        if values.get("owner", "") is None:
            values["owner"] = self._owner()
        timeout = _poll_timeout(values[op.waits]) if op.waits is not None else TIMEOUT_S
        path, rest = route(op, values)
        data = self._call(op.http.method, path, timeout=timeout, **carried(op, rest))
        return decode(op, data)

    def _owner(self) -> str:
        # The claiming process, as in embedded mode: a restart on this host
        # gets its own work back at once (S32).
        return f"{self.address}:{os.getpid()}"


def _poll_timeout(wait: float) -> float | None:
    return None if not wait or wait <= 0 else float(wait) + TIMEOUT_S
