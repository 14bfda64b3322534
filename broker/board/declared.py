"""The board's operations as the operation table calls them
(``broker.api.operations``): ``fn(store, identity, inp, *, tx)``, the checked
input record whole, handed to the function that does the work
(``broker.board.claims``, ``broker.board.reservations``, ``broker.board.posts``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.model import inputs
    from broker.model.records import (
        BoardEntry,
        ClaimGrant,
        JournalEntry,
        PathCheck,
        Reservation,
        SendResult,
    )
    from broker.spaces.auth import Identity
    from broker.store.sqlite import Store, Tx


def claim(
    store: Store, ident: Identity, inp: inputs.KeyClaimInput, *, tx: Tx | None = None
) -> ClaimGrant:
    from broker.board import claims

    return claims.claim(store, ident, inp.key, inp.ttl, wait=inp.wait, tx=tx)


def release(
    store: Store, ident: Identity, inp: inputs.KeyReleaseInput, *, tx: Tx | None = None
) -> JournalEntry:
    from broker.board import claims

    return claims.release(store, ident, inp.key, inp.fence, tx=tx)


def renew(
    store: Store, ident: Identity, inp: inputs.KeyRenewInput, *, tx: Tx | None = None
) -> ClaimGrant:
    from broker.board import claims

    return claims.renew(store, ident, inp.key, inp.fence, inp.ttl, tx=tx)


def reserve(
    store: Store, ident: Identity, inp: inputs.ReserveInput, *, tx: Tx | None = None
) -> list[Reservation]:
    from broker.board import reservations

    return reservations.reserve(
        store, ident, inp.patterns, shared=inp.shared, ttl=inp.ttl, reason=inp.reason, tx=tx
    )


def unreserve(
    store: Store, ident: Identity, inp: inputs.UnreserveInput, *, tx: Tx | None = None
) -> JournalEntry:
    from broker.board import reservations

    return reservations.release(store, ident, inp.fence, tx=tx)


def renew_reservation(
    store: Store, ident: Identity, inp: inputs.RenewReservationInput, *, tx: Tx | None = None
) -> Reservation:
    from broker.board import reservations

    return reservations.renew(store, ident, inp.fence, inp.ttl, tx=tx)


def check(
    store: Store, ident: Identity, inp: inputs.CheckPathsInput, *, tx: Tx | None = None
) -> list[PathCheck]:
    from broker.board import reservations

    return reservations.check(store, ident, inp.paths, tx=tx)


def retract(
    store: Store, ident: Identity, inp: inputs.RetractInput, *, tx: Tx | None = None
) -> SendResult:
    from broker.board import posts

    return posts.retract(store, ident, inp.directive_id, tx=tx)


def post(
    store: Store, ident: Identity, inp: inputs.PostInput, *, tx: Tx | None = None
) -> SendResult:
    from broker.mail import messages

    return messages.post(
        store,
        ident,
        inp.text,
        addressed_to=inp.addressed_to,
        idempotency_key=inp.idempotency_key,
        tx=tx,
    )


def directive(
    store: Store, ident: Identity, inp: inputs.DirectiveInput, *, tx: Tx | None = None
) -> SendResult:
    from broker.board import posts

    return posts.directive(
        store, ident, inp.to, inp.text, idempotency_key=inp.idempotency_key, tx=tx
    )


def read(
    store: Store, ident: Identity, inp: inputs.BoardReadInput, *, tx: Tx | None = None
) -> list[BoardEntry]:
    from broker.board import posts

    return posts.read(store, ident, after=inp.after, limit=inp.limit, tx=tx)
