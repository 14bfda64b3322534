"""broker: a transactional message broker for swarms of AI agents.

Public names only; see README.md for the tour. Names load on first use, so
``broker`` CLI calls import only what they need.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from broker.api.handles import Agent as Agent
    from broker.api.handles import Operator as Operator
    from broker.errors import BrokerError as BrokerError
    from broker.model.records import Joined as Joined
    from broker.model.records import LogEntry as LogEntry
    from broker.model.records import Participant as Participant
    from broker.model.records import SendResult as SendResult
    from broker.model.records import Space as Space
    from broker.store.sqlite import Store as Store
    from broker.store.sqlite import Tx as Tx

_WHERE = {
    "Agent": "broker.api.handles",
    "Operator": "broker.api.handles",
    "Store": "broker.store.sqlite",
    "Tx": "broker.store.sqlite",
    "BrokerError": "broker.errors",
    "Joined": "broker.model.records",
    "LogEntry": "broker.model.records",
    "Participant": "broker.model.records",
    "SendResult": "broker.model.records",
    "Space": "broker.model.records",
}
__all__ = sorted(_WHERE)
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'broker' has no attribute {name!r}")
