"""broker: a transactional message broker for swarms of AI agents.

Public names only; see README.md for the tour. Names load on first use, so
``broker`` CLI calls import only what they need.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from broker.client import Agent as Agent
    from broker.client import Operator as Operator
    from broker.db import Store as Store
    from broker.db import Tx as Tx
    from broker.errors import BrokerError as BrokerError
    from broker.records import Joined as Joined
    from broker.records import LogEntry as LogEntry
    from broker.records import Participant as Participant
    from broker.records import SendResult as SendResult
    from broker.records import Space as Space

_WHERE = {
    "Agent": "broker.client",
    "Operator": "broker.client",
    "Store": "broker.db",
    "Tx": "broker.db",
    "BrokerError": "broker.errors",
    "Joined": "broker.records",
    "LogEntry": "broker.records",
    "Participant": "broker.records",
    "SendResult": "broker.records",
    "Space": "broker.records",
}
__all__ = sorted(_WHERE)
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'broker' has no attribute {name!r}")
