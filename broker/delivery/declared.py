"""The inbox's and the turns' operations as the operation table calls them
(``broker.api.operations``): ``fn(store, identity, inp, *, tx, process)``, the
checked input record whole. Each hands its fields to the function that does
the work (``broker.delivery.inbox``, ``broker.delivery.turns``) and returns a
record: a number is a ``Count``, an expiry an ``Expiry``, nothing ``Done``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.model.records import Count, Done, Expiry

if TYPE_CHECKING:
    from broker.model import inputs
    from broker.model.records import HistoryEntry, Lease, Turn, TurnSeen
    from broker.spaces.auth import Identity
    from broker.store.sqlite import Store, Tx


def ack(store: Store, ident: Identity, inp: inputs.AckInput, *, tx: Tx | None = None) -> Count:
    from broker.delivery import inbox

    return Count(inbox.ack(store, ident, inp.lease_token, inp.ids, tx=tx))


def release(
    store: Store, ident: Identity, inp: inputs.ReleaseInput, *, tx: Tx | None = None
) -> Count:
    from broker.delivery import inbox

    return Count(inbox.release(store, ident, inp.lease_token, inp.ids, error=inp.error, tx=tx))


def extend(
    store: Store, ident: Identity, inp: inputs.ExtendInput, *, tx: Tx | None = None
) -> Expiry:
    from broker.delivery import inbox

    return Expiry(inbox.extend(store, ident, inp.lease_token, inp.seconds, inp.ids, tx=tx))


def quarantine(
    store: Store, ident: Identity, inp: inputs.QuarantineInput, *, tx: Tx | None = None
) -> Done:
    from broker.delivery import inbox

    inbox.quarantine(
        store, ident, inp.lease_token, inp.message_id, inp.reason, error=inp.error, tx=tx
    )
    return Done(True)


def ack_and_claim(
    store: Store,
    ident: Identity,
    inp: inputs.AckAndClaimInput,
    *,
    process: str | None = None,
    tx: Tx | None = None,
) -> Lease:
    from broker.delivery import inbox

    return inbox.ack_and_claim(
        store, ident, inp.lease_token, inp.ids, inp.limit, inp.lease, process=process, tx=tx
    )


def next_turn(
    store: Store,
    ident: Identity,
    inp: inputs.NextTurnInput,
    *,
    process: str | None = None,
    tx: Tx | None = None,
) -> Turn:
    from broker.delivery import turns

    return turns.next_turn(store, ident, inp.wait, inp.lease, inp.limit, process=process, tx=tx)


def seen(store: Store, ident: Identity, inp: inputs.SeenInput, *, tx: Tx | None = None) -> TurnSeen:
    from broker.delivery import turns

    return turns.seen(store, ident, inp.turn_id, tx=tx)


def history(
    store: Store, ident: Identity, inp: inputs.NoInput, *, tx: Tx | None = None
) -> list[HistoryEntry]:
    from broker.delivery import history as history_

    return history_.entries(store, ident, tx=tx)
