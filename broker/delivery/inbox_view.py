"""The operator's read-only views of a space's inboxes (S13-S15): the
quarantined deliveries with their evidence, the deliveries by state, and each
inbox as a queue with the space's send rate (the console's ``activity``).
Writes nothing (``broker.delivery.inbox`` is the one writer of ``deliveries``)."""

from __future__ import annotations

from broker.ids import parse_ts, ts_after
from broker.model.records import InboxStats, QuarantinedDelivery, QueueStats, SpaceActivity
from broker.record_type import from_row
from broker.spaces.spaces import resolve_id
from broker.store.sql import stmt
from broker.store.sqlite import Store, Tx

_QUARANTINED = stmt("inbox.quarantined")
_STATS = stmt("inbox.stats")
_BY_INBOX = stmt("inbox.by_inbox")
_RECENT_SENDERS = stmt("messages.recent_senders")
RATE_WINDOW = 5000  # log rows a send rate is counted among (a bounded read)


def quarantined(store: Store, space_ref: str, *, tx: Tx | None = None) -> list[QuarantinedDelivery]:
    """Every quarantined delivery of a space, oldest first, with its evidence."""
    with store.read(tx) as t:
        space_id = resolve_id(t, space_ref)
        rows = t.all(_QUARANTINED, {"space_id": space_id})
    return [
        from_row(
            QuarantinedDelivery,
            r,
            id=r["message_id"],
            deliveries=r["attempts"],
            reason=r["quarantine_reason"],
        )
        for r in rows
    ]


def stats(store: Store, space_ref: str, *, tx: Tx | None = None) -> QueueStats:
    """A space's deliveries by state, and the redeliveries they took."""
    with store.read(tx) as t:
        space_id = resolve_id(t, space_ref)
        r = t.one(_STATS, {"space_id": space_id})
    return from_row(QueueStats, r)


def activity(store: Store, space_ref: str, *, tx: Tx | None = None) -> SpaceActivity:
    """Each inbox of a space as a queue (waiting, in flight, retried,
    quarantined) and who sent how much in the last minute, in one reading."""
    with store.read(tx) as t:
        space_id = resolve_id(t, space_ref)
        now = store.now_ts()
        since = ts_after(parse_ts(now), -60.0)
        sent = {
            r["sender"]: r["n"]
            for r in t.all(
                _RECENT_SENDERS, {"space_id": space_id, "since": since, "window": RATE_WINDOW}
            )
        }
        rows = t.all(_BY_INBOX, {"space_id": space_id, "at": now})
    return SpaceActivity(
        space_id=space_id,
        at_utc=now,
        sent_last_minute=sum(sent.values()),
        inboxes=[from_row(InboxStats, r, sent_last_minute=sent.get(r["address"], 0)) for r in rows],
    )
