"""The mail methods of ``Agent`` and ``Operator`` (S35, S36, S38, ack status):
mixed into both handles (``broker.api.handles``), kept here so each module stays small.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from broker.api.declaration import Operation, declared
from broker.api.operations import MESSAGE_STATUS, OPERATOR_SEARCH, POLICY, SEARCH, SET_POLICY
from broker.model.fields import Input
from broker.model.typecheck import checked
from broker.store.sqlite import Tx
from broker.vocab import SEARCH_DEFAULT

if TYPE_CHECKING:
    from broker.model.records import AckStatus, ContactPolicy, SearchHit
    from broker.spaces.auth import Identity
    from broker.store.sqlite import Store


@checked
class AgentMail:
    """``Agent``'s search, ack status and contact policy."""

    store: Store
    identity: Identity

    @declared(MESSAGE_STATUS)
    def status(self, message_id: str, *, tx: Tx | None = None) -> AckStatus:
        """Who among those it reached has seen a message this agent sent (their
        confirmed turns showed it, S18)."""
        op = MESSAGE_STATUS
        return self.call(op, op.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(SEARCH)
    def search(
        self,
        query: str,
        *,
        sender: str | None = None,
        to: str | None = None,
        kinds: list[str] | None = None,
        since: str | None = None,
        limit: int = SEARCH_DEFAULT,
        tx: Tx | None = None,
    ) -> list[SearchHit]:
        """Full-text search of what this agent sent or received (S36), best first."""
        return self.call(SEARCH, SEARCH.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(POLICY)
    def contact_policy(self, *, tx: Tx | None = None) -> ContactPolicy:
        """Who may message this agent directly (S38)."""
        return self.call(POLICY, POLICY.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(SET_POLICY)
    def set_contact_policy(
        self, policy: str, allow: Iterable[str] = (), *, tx: Tx | None = None
    ) -> ContactPolicy:
        """``open`` | ``parent-and-lead`` | ``listed`` (with ``allow``) | ``closed``
        (S38): a direct send this policy refuses is logged ``contact_policy``."""
        return self.call(SET_POLICY, SET_POLICY.take(locals()), tx)  # type: ignore[no-any-return]

    def call(self, op: Operation, inp: Input | Mapping[str, Any], tx: Tx | None = None) -> Any:
        raise NotImplementedError  # the handle's own (broker.api.agent.Agent.call)


@checked
class OperatorMail:
    """``Operator``'s threads, search and ack status."""

    store: Store

    @declared(OPERATOR_SEARCH)
    def search(
        self,
        space: str,
        query: str,
        *,
        sender: str | None = None,
        to: str | None = None,
        kinds: list[str] | None = None,
        since: str | None = None,
        limit: int = SEARCH_DEFAULT,
        tx: Tx | None = None,
    ) -> list[SearchHit]:
        """Full-text search of one whole space (S36), best first, with snippets."""
        return self.call(OPERATOR_SEARCH, OPERATOR_SEARCH.take(locals()), tx)  # type: ignore[no-any-return]

    def call(self, op: Operation, inp: Input | Mapping[str, Any], tx: Tx | None = None) -> Any:
        raise NotImplementedError  # the handle's own (broker.api.operator.Operator.call)
