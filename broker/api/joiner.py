"""``Joiner``: someone holding a space's join key (or a parent's token, or an
address's last token), not yet a participant: the caller of ``space.join``
(S27, S40).

The credential is a field of the input record, marked secret (never quoted in
a refusal, masked in its ``repr``), and is checked by the library inside the
join's own transaction: over HTTP the route takes no Bearer header, so an
agent that holds only the server's URL and the join key can join from another
host (``BROKER_URL=http://… broker join RUN NAME``). The operator's join, with
the operator key, stays ``Operator.join``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from broker.api.declaration import Operation, declared, operation
from broker.api.operations import JOIN
from broker.model.fields import Input
from broker.model.inputs import JoinDirectory, JoinInput, SpaceJoinInput
from broker.model.typecheck import checked, self_checked
from broker.store.sqlite import Store, Tx

if TYPE_CHECKING:
    from broker.model.records import Joined


def join(store: Store, inp: SpaceJoinInput, *, tx: Tx | None = None) -> Joined:
    """``space.join``: the library's join (``participants.join``) with the
    record's credential; a served join records no process (S40)."""
    from broker.spaces import participants

    credential = participants.Credential(
        join_key=inp.join_key, parent_token=inp.parent_token, token=inp.token
    )
    return participants.join(store, inp.space, joining(inp), credential=credential, tx=tx)


def joining(inp: JoinDirectory, pid: int | None = None) -> JoinInput:
    """The library's join record of a join operation's input: its codename and
    directory, ``pid`` the process that holds the identity (None: none)."""
    kept = {f.name: getattr(inp, f.name) for f in JoinInput.FIELDS if f.name in inp.NAMES}
    return JoinInput.parse({**kept, "pid": pid})


@checked
class Joiner:
    """A caller that holds a join credential for a store (no identity yet)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    @self_checked
    def call(self, op: Operation, inp: Input | Mapping[str, Any], tx: Tx | None = None) -> Any:
        """Run the declared operation ``op`` (a joiner's) with its input record."""
        op = operation(op)
        record = op.accept("joiner", inp)
        return op.fn(self.store, record, tx=tx)

    def space_id(self, space: str) -> str:
        """The full id of ``space`` (a run id, compact or a unique prefix, S1):
        what a join would name (``space_not_found`` as the join says it)."""
        from broker.spaces import spaces

        with self.store.read() as t:
            return spaces.resolve_id(t, space)

    @declared(JOIN)
    def join(
        self,
        space: str,
        codename: str,
        *,
        agent: str | None = None,
        run_id: str | None = None,
        step: str | None = None,
        parent: str | None = None,
        role: str | None = None,
        archetype: str | None = None,
        task: str | None = None,
        lead: bool = False,
        messaging: bool = True,
        tools: list[str] | None = None,
        join_key: str | None = None,
        parent_token: str | None = None,
        token: str | None = None,
        tx: Tx | None = None,
    ) -> Joined:
        """``space.join``: join ``space`` as ``codename`` with one credential
        (the join key, a parent's token) or continue an address with its last
        ``token``; the address and a new token, shown once."""
        return self.call(JOIN, JOIN.take(locals()), tx)  # type: ignore[no-any-return]
