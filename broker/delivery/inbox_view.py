"""The operator's read-only views of a space's inboxes (S13-S15): the
quarantined deliveries with their evidence, and the deliveries by state.
Writes nothing (``broker.delivery.inbox`` is the one writer of ``deliveries``)."""

from __future__ import annotations

from broker.model.records import QuarantinedDelivery, QueueStats
from broker.spaces.spaces import resolve_id
from broker.store.sql import stmt
from broker.store.sqlite import Store, Tx

_QUARANTINED = stmt("inbox.quarantined")
_STATS = stmt("inbox.stats")


def quarantined(store: Store, space_ref: str, *, tx: Tx | None = None) -> list[QuarantinedDelivery]:
    """Every quarantined delivery of a space, oldest first, with its evidence."""
    with store.read(tx) as t:
        space_id = resolve_id(t, space_ref)
        rows = t.all(_QUARANTINED, {"space_id": space_id})
    return [
        QuarantinedDelivery(
            delivery_id=r["delivery_id"],
            id=r["message_id"],
            recipient=r["recipient"],
            kind=r["kind"],
            sender=r["sender"],
            body=r["body"],
            created_at_utc=r["created_at_utc"],
            deliveries=r["attempts"],
            reason=r["quarantine_reason"],
            last_error=r["last_error"],
            lease_owner=r["lease_owner"],
        )
        for r in rows
    ]


def stats(store: Store, space_ref: str, *, tx: Tx | None = None) -> QueueStats:
    """A space's deliveries by state, and the redeliveries they took."""
    with store.read(tx) as t:
        space_id = resolve_id(t, space_ref)
        r = t.one(_STATS, {"space_id": space_id})
    return QueueStats(
        ready=r["ready"],
        processing=r["processing"],
        done=r["done"],
        quarantine=r["quarantine"],
        redeliveries=r["redeliveries"],
    )
