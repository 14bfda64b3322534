"""Joins for tests that are not about joining: with the store's operator key.

The key comes from the library (``broker.trust.presented``: BROKER_OPERATOR_KEY
or the key file beside the database), the way an operator's own process finds
it. Tests of the join rules themselves (S27, S28) use the join key and parent
tokens explicitly (tests/test_trust.py)."""

from __future__ import annotations

from typing import Any

from broker import Agent, participants, trust
from broker.aio import AsyncAgent
from broker.client import Store
from broker.records import Joined


def join(store: Store, space: str, codename: str, **fields: Any) -> tuple[Agent, Joined]:
    """``Agent.join`` with the operator key (this process holds the identity)."""
    fields.setdefault("operator_key", trust.presented(store))
    return Agent.join(store, space, codename, **fields)


def credential(store: Store) -> participants.Credential:
    """The operator key as a join credential (``directory.register`` takes one)."""
    return participants.Credential(operator_key=trust.presented(store))


async def ajoin(
    store: Store, space: str, codename: str, **fields: Any
) -> tuple[AsyncAgent, Joined]:
    """``AsyncAgent.join`` with the operator key."""
    fields.setdefault("operator_key", trust.presented(store))
    return await AsyncAgent.join(store, space, codename, **fields)
