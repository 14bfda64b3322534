"""In-process handles: the typed public API agents and operators call.

``Agent`` is a participant's identity bound to a store: the sender of
everything it sends is derived from it (S10), never passed. ``Operator`` is the
human's surface; only operator front ends (CLI, control plane, MCP operator
tool) construct it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from broker import messages, participants, spaces
from broker.db import Store, Tx
from broker.models import (
    Joined,
    JoinInput,
    LogEntry,
    Participant,
    SendResult,
    Space,
    SpaceKind,
    Via,
)
from broker.participants import Identity


class Agent:
    """A participant acting in its space."""

    def __init__(self, store: Store, identity: Identity) -> None:
        self.store = store
        self.identity = identity

    @classmethod
    def connect(cls, store: Store, space: str, address: str, token: str | None) -> Agent:
        return cls(store, participants.authenticate(store, space, address, token))

    @classmethod
    def join(
        cls, store: Store, space: str, codename: str, **fields: object
    ) -> tuple[Agent, Joined]:
        fields.setdefault("pid", os.getpid())  # this process holds the identity: prune may check it
        joined = participants.join(
            store, space, messages.parse_input(JoinInput, {"codename": codename, **fields})
        )
        return cls.connect(store, joined.space_id, joined.address, joined.token), joined

    @property
    def address(self) -> str:
        return self.identity.address

    @property
    def space_id(self) -> str:
        return self.identity.space_id

    def send(
        self,
        to: str | Iterable[str],
        text: str,
        *,
        idempotency_key: str | None = None,
        tx: Tx | None = None,
    ) -> SendResult:
        return messages.send(
            self.store, self.identity, to, text, idempotency_key=idempotency_key, tx=tx
        )

    def post(
        self,
        text: str,
        *,
        addressed_to: Iterable[str] = (),
        idempotency_key: str | None = None,
        tx: Tx | None = None,
    ) -> SendResult:
        return messages.post(
            self.store,
            self.identity,
            text,
            addressed_to=addressed_to,
            idempotency_key=idempotency_key,
            tx=tx,
        )

    def leave(self, *, tx: Tx | None = None) -> None:
        participants.leave(self.store, self.identity, tx=tx)


class Operator:
    """The human running the swarm. ``via`` names the surface (S9)."""

    def __init__(self, store: Store, via: Via = "cli") -> None:
        self.store = store
        self.via: Via = via

    def create_space(self, kind: SpaceKind, **settings: object) -> Space:
        return spaces.create(self.store, kind, settings=dict(settings))

    def send(
        self,
        space: str,
        text: str,
        *,
        to: Iterable[str] | None = None,
        urgent: bool = False,
        idempotency_key: str | None = None,
        tx: Tx | None = None,
    ) -> SendResult:
        return messages.operator_send(
            self.store,
            space,
            text,
            to=to,
            urgent=urgent,
            via=self.via,
            idempotency_key=idempotency_key,
            tx=tx,
        )

    def log(self, space: str, **kw: object) -> list[LogEntry]:
        return messages.log(self.store, space, **kw)  # type: ignore[arg-type]

    def participants(self, space: str) -> list[Participant]:
        return participants.list_participants(self.store, space)
