"""``msg status``: who has seen a message its sender marked ``ack_required``.

"Seen" is the S18 receipt a participant's confirmed turn writes, listing the
message ids the turn showed; the answer is read from the log, nothing new is
stored. A sender may ask about its own messages; the operator about any.
"""

from __future__ import annotations

import json

from broker import errors
from broker.ids import by_id
from broker.model.records import AckStatus
from broker.spaces.auth import Identity, caller
from broker.spaces.spaces import resolve_id
from broker.store.sql import stmt
from broker.store.sqlite import Store, Tx

_MESSAGE = stmt("acks.message")
_SEEN_BY = stmt("acks.seen_by")
_NOT_PEOPLE = {"operator", "broadcast"}


def _status(t: Tx, space_id: str, message_id: str, asker: str | None) -> AckStatus:
    row = t.one(_MESSAGE, {"space_id": space_id, **by_id(message_id)})
    if row is None or (asker is not None and row["sender"] != asker):
        # Another's message is "not found", not "forbidden": no probing for ids.
        raise errors.MessageNotFound(f"no message {message_id!r} of yours in space {space_id}")
    reached = [a for a in json.loads(row["reached"]) if a not in _NOT_PEOPLE]
    receipts = t.all(_SEEN_BY, {"space_id": space_id, "seq": row["seq"], "id": row["id"]})
    seen = {r["sender"] for r in receipts}
    return AckStatus(
        id=row["id"],
        ack_required=bool(row["ack_required"]),
        reached=reached,
        seen=[a for a in reached if a in seen],
        not_seen=[a for a in reached if a not in seen],
    )


def status(store: Store, ident: Identity, message_id: str, *, tx: Tx | None = None) -> AckStatus:
    """Who has seen ``message_id``, a message the caller sent."""
    with store.read(tx) as t:
        caller(t, ident)
        return _status(t, ident.space_id, message_id, ident.address)


def operator_status(
    store: Store, space_ref: str, message_id: str, *, tx: Tx | None = None
) -> AckStatus:
    with store.read(tx) as t:
        return _status(t, resolve_id(t, space_ref), message_id, None)
