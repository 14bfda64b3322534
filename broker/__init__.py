"""broker: a transactional message broker for swarms of AI agents.

Public names only; see README.md for the tour.
"""

from __future__ import annotations

from broker.client import Agent, Operator
from broker.db import Store, Tx
from broker.errors import BrokerError
from broker.models import Joined, LogEntry, Participant, SendResult, Space

__all__ = [
    "Agent",
    "BrokerError",
    "Joined",
    "LogEntry",
    "Operator",
    "Participant",
    "SendResult",
    "Space",
    "Store",
    "Tx",
]
__version__ = "0.1.0"
