"""``RemoteJoiner``: ``broker.api.handles.Joiner`` over HTTP (client mode).

An agent on another host that holds only the server's URL and a join
credential (the space's join key, a parent's token, or its address's last
token) joins with it: ``BROKER_URL=http://host:port broker join RUN NAME``.
The credential travels in the body of ``POST /api/spaces/{id}/join`` (a secret
field of the input record: never quoted back, never logged), not as a Bearer
header: the caller has no identity yet.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from broker import errors
from broker.api.declaration import Operation, operation
from broker.frontends.remote.codec import decode
from broker.frontends.remote.operations import derived
from broker.frontends.remote.wire import Connection, space_path
from broker.model.fields import Input
from broker.model.typecheck import checked, self_checked


@checked
@derived("joiner")
class RemoteJoiner:
    """The joiner's operations (``space.join``) over HTTP."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    @self_checked
    def call(self, op: Operation, inp: Input | Mapping[str, Any]) -> Any:
        """Send the declared operation ``op`` (a joiner's) with its checked input
        record; its result, decoded. The space is the path's, not the body's."""
        op = operation(op)
        record: Input = op.accept("joiner", inp)
        if op.http is None:
            raise errors.InvalidInput(f"{op.name} is not served over HTTP", field="op")
        body = record.values()
        space = body.pop("space")
        data = self.conn.call(
            op.http.method, space_path(space) + op.http.path, secret=None, body=body
        )
        return decode(op, data)
