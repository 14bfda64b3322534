"""The mail methods of ``Agent`` and ``Operator`` (S35, S36, S38, ack status):
mixed into both handles (``broker.api.handles``), kept here so each module stays small.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from broker.model.typecheck import checked, utc_time
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

    def status(self, message_id: str, *, tx: Tx | None = None) -> AckStatus:
        """Who among those it reached has seen a message this agent sent (their
        confirmed turns showed it, S18)."""
        from broker.mail import acks

        return acks.status(self.store, self.identity, message_id, tx=tx)

    def search(
        self,
        query: str,
        *,
        sender: str | None = None,
        to: str | None = None,
        kinds: Iterable[str] | None = None,
        since: str | None = None,
        limit: int = SEARCH_DEFAULT,
        tx: Tx | None = None,
    ) -> list[SearchHit]:
        """Full-text search of what this agent sent or received (S36), best first."""
        from broker.mail import search

        return search.agent_search(
            self.store,
            self.identity,
            query,
            sender=sender,
            to=to,
            kinds=kinds,
            since=None if since is None else utc_time(since),
            limit=limit,
            tx=tx,
        )

    def contact_policy(self, *, tx: Tx | None = None) -> ContactPolicy:
        """Who may message this agent directly (S38)."""
        from broker.spaces import contact

        return contact.get(self.store, self.identity, tx=tx)

    def set_contact_policy(
        self, policy: str, allow: Iterable[str] = (), *, tx: Tx | None = None
    ) -> ContactPolicy:
        """``open`` | ``parent-and-lead`` | ``listed`` (with ``allow``) | ``closed``
        (S38): a direct send this policy refuses is logged ``contact_policy``."""
        from broker.spaces import contact

        return contact.set_policy(self.store, self.identity, policy, list(allow), tx=tx)


@checked
class OperatorMail:
    """``Operator``'s threads, search and ack status."""

    store: Store

    def search(
        self,
        space: str,
        query: str,
        *,
        sender: str | None = None,
        to: str | None = None,
        kinds: Iterable[str] | None = None,
        since: str | None = None,
        limit: int = SEARCH_DEFAULT,
    ) -> list[SearchHit]:
        """Full-text search of one whole space (S36), best first, with snippets."""
        from broker.mail import search

        if since is not None:
            since = utc_time(since)
        return search.search(
            self.store, space, query, sender=sender, to=to, kinds=kinds, since=since, limit=limit
        )
