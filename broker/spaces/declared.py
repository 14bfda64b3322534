"""The participant's own operations as the operation table calls them
(``broker.api.operations``): ``fn(store, identity, inp, *, tx)``, the checked
input record whole; nothing returned is ``Done``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.model.records import Done

if TYPE_CHECKING:
    from broker.model import inputs
    from broker.model.records import Participant
    from broker.spaces.auth import Identity
    from broker.store.sqlite import Store, Tx


def me(store: Store, ident: Identity, inp: inputs.NoInput, *, tx: Tx | None = None) -> Participant:
    from broker.spaces import participants

    return participants.get(store, ident.space_id, ident.address, tx=tx)


def granted(
    store: Store, ident: Identity, inp: inputs.NoInput, *, tx: Tx | None = None
) -> list[str]:
    from broker.spaces import auth

    with store.read(tx) as t:
        return sorted(auth.caller(t, ident).granted)


def set_status(
    store: Store, ident: Identity, inp: inputs.SetStatusInput, *, tx: Tx | None = None
) -> Done:
    from broker.spaces import auth, participants

    with store.write(tx) as t:
        auth.caller(t, ident)
        participants.set_status(store, ident.participant_id, inp.status, tx=t)
    return Done(True)


def leave(store: Store, ident: Identity, inp: inputs.NoInput, *, tx: Tx | None = None) -> Done:
    from broker.spaces import participants

    participants.leave(store, ident, tx=tx)
    return Done(True)
