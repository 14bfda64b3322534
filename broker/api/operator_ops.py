"""The library functions of the operator's declared operations
(``broker.api.operations``): each takes the store, the operation's checked
input record whole and the caller's transaction (``fn(store, input, *, tx)``,
with the handle's ``via`` by keyword where the operation names it), and hands
the record's fields to the library function that does the work.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.spaces import spaces

if TYPE_CHECKING:
    from broker.model import inputs
    from broker.model.records import CreatedSpace, JoinKey, Space, SpaceUsage
    from broker.store.sqlite import Store, Tx


# --- spaces -------------------------------------------------------------------------------
def create_space(
    store: Store, inp: inputs.CreateSpaceInput, *, tx: Tx | None = None
) -> CreatedSpace:
    return spaces.create(store, inp.kind, settings=inp.settings or {}, tx=tx)


def list_spaces(store: Store, inp: inputs.SpacesInput, *, tx: Tx | None = None) -> list[Space]:
    return spaces.list_spaces(store, state=inp.state, tx=tx)


def get_space(store: Store, inp: inputs.SpaceInput, *, tx: Tx | None = None) -> Space:
    return spaces.get(store, inp.space, tx=tx)


def set_space(
    store: Store, inp: inputs.SetSpaceInput, *, via: str, tx: Tx | None = None
) -> SpaceUsage:
    from broker.spaces import usage

    return usage.set_space(store, inp.space, inp.settings or {}, via=via, tx=tx)


def space_usage(store: Store, inp: inputs.SpaceUsageInput, *, tx: Tx | None = None) -> SpaceUsage:
    from broker.spaces import usage

    return usage.space_usage(store, inp.space, top=inp.top, tx=tx)


def stop_space(store: Store, inp: inputs.SpaceInput, *, tx: Tx | None = None) -> Space:
    return spaces.stop(store, inp.space, tx=tx)


def archive_space(store: Store, inp: inputs.SpaceInput, *, tx: Tx | None = None) -> Space:
    return spaces.archive(store, inp.space, tx=tx)


def rotate_join_key(store: Store, inp: inputs.SpaceInput, *, tx: Tx | None = None) -> JoinKey:
    return spaces.rotate_join_key(store, inp.space, tx=tx)
