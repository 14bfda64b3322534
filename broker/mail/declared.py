"""The mail operations as the operation table calls them
(``broker.api.operations``): ``fn(store, identity, inp, *, tx)``, the checked
input record whole, handed to the function that does the work."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.model import inputs
    from broker.model.records import AckStatus, ContactPolicy, SearchHit
    from broker.spaces.auth import Identity
    from broker.store.sqlite import Store, Tx


def status(
    store: Store, ident: Identity, inp: inputs.MessageStatusInput, *, tx: Tx | None = None
) -> AckStatus:
    from broker.mail import acks

    return acks.status(store, ident, inp.message_id, tx=tx)


def policy(
    store: Store, ident: Identity, inp: inputs.NoInput, *, tx: Tx | None = None
) -> ContactPolicy:
    from broker.spaces import contact

    return contact.get(store, ident, tx=tx)


def set_policy(
    store: Store, ident: Identity, inp: inputs.SetPolicyInput, *, tx: Tx | None = None
) -> ContactPolicy:
    from broker.spaces import contact

    return contact.set_policy(store, ident, inp.policy, list(inp.allow), tx=tx)


def search(
    store: Store, ident: Identity, inp: inputs.SearchInput, *, tx: Tx | None = None
) -> list[SearchHit]:
    return _search(store, ident, inp, tx)


def operator_search(
    store: Store, inp: inputs.OperatorSearchInput, *, tx: Tx | None = None
) -> list[SearchHit]:
    return _search(store, inp.space, inp, tx)


def _search(
    store: Store, who: str | Identity, inp: inputs.SearchInput, tx: Tx | None
) -> list[SearchHit]:
    """The agent's search and the operator's: one search, seen by ``who``."""
    from broker.mail import search
    from broker.model.typecheck import utc_time

    since = None if inp.since is None else utc_time(inp.since)  # the stored times' form
    return search.search(
        store, who, inp.query, sender=inp.sender, to=inp.to, kinds=inp.kinds, since=since,
        limit=inp.limit, tx=tx,
    )  # fmt: skip
