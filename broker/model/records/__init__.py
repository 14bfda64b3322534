"""What the broker returns: plain frozen, slotted records (no pydantic).

Results are built on every call (a send, a claim, a turn), and the CLI runs
once per agent tool call, so they cost neither pydantic's import (~80 ms) nor
its validation. A server can still derive JSON schemas from these classes
(``pydantic.TypeAdapter(Lease)``): the field descriptions are attribute
docstrings, and ``__pydantic_config__`` (a plain dict) asks for them.

The records live with their concept (``mail``, ``delivery``, ``board``,
``spaces``; ``doctor``'s, ``backup``'s and ``vacuum``'s with the store's
maintenance) and are imported from here: each module loads on the first use
of one of its names, so a CLI call builds only the classes of the concept it
touches (building a record class costs ~0.5 ms).

``to_dict`` (from ``broker.model.record_json``) turns a record into what
``json.dumps`` takes. One name per concept, in every record: the sender of a
message is ``sender``, a fencing token ``fence``, an inbox lease's token
``lease_token``, an expiry ``expires_at``; ``token`` is only ever a secret.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

# JSON bytes as text, for both ends of the API
from broker.model.record_json import json_text as json_text
from broker.model.record_json import to_dict as to_dict  # records as JSON: part of this surface

if TYPE_CHECKING:
    from broker.model.records.board import BoardEntry as BoardEntry
    from broker.model.records.board import ClaimGrant as ClaimGrant
    from broker.model.records.board import JournalEntry as JournalEntry
    from broker.model.records.board import PathCheck as PathCheck
    from broker.model.records.board import Reservation as Reservation
    from broker.model.records.delivery import Delivery as Delivery
    from broker.model.records.delivery import HistoryEntry as HistoryEntry
    from broker.model.records.delivery import InboxStats as InboxStats
    from broker.model.records.delivery import Lease as Lease
    from broker.model.records.delivery import QuarantinedDelivery as QuarantinedDelivery
    from broker.model.records.delivery import QueueStats as QueueStats
    from broker.model.records.delivery import SpaceActivity as SpaceActivity
    from broker.model.records.delivery import TranscriptEntry as TranscriptEntry
    from broker.model.records.delivery import Turn as Turn
    from broker.model.records.delivery import TurnItem as TurnItem
    from broker.model.records.delivery import TurnMessages as TurnMessages
    from broker.model.records.delivery import TurnRecord as TurnRecord
    from broker.model.records.delivery import TurnSeen as TurnSeen
    from broker.model.records.mail import AckStatus as AckStatus
    from broker.model.records.mail import ContactPolicy as ContactPolicy
    from broker.model.records.mail import LogEntry as LogEntry
    from broker.model.records.mail import NotReached as NotReached
    from broker.model.records.mail import SearchHit as SearchHit
    from broker.model.records.mail import SendResult as SendResult
    from broker.model.records.mail import Thread as Thread
    from broker.model.records.mail import log_matches as log_matches
    from broker.model.records.results import Count as Count
    from broker.model.records.results import Done as Done
    from broker.model.records.results import Expiry as Expiry
    from broker.model.records.spaces import CreatedSpace as CreatedSpace
    from broker.model.records.spaces import InboxUse as InboxUse
    from broker.model.records.spaces import Joined as Joined
    from broker.model.records.spaces import JoinKey as JoinKey
    from broker.model.records.spaces import Participant as Participant
    from broker.model.records.spaces import ParticipantEvent as ParticipantEvent
    from broker.model.records.spaces import Purged as Purged
    from broker.model.records.spaces import SenderUse as SenderUse
    from broker.model.records.spaces import Space as Space
    from broker.model.records.spaces import SpaceUsage as SpaceUsage
    from broker.store.maintenance import BackupResult as BackupResult
    from broker.store.maintenance import Finding as Finding
    from broker.store.maintenance import VacuumResult as VacuumResult

# Each record's module, loaded on the first use of its name.
_WHERE = {
    "AckStatus": "broker.model.records.mail",
    "BackupResult": "broker.store.maintenance",
    "BoardEntry": "broker.model.records.board",
    "ClaimGrant": "broker.model.records.board",
    "ContactPolicy": "broker.model.records.mail",
    "Count": "broker.model.records.results",
    "CreatedSpace": "broker.model.records.spaces",
    "Delivery": "broker.model.records.delivery",
    "Done": "broker.model.records.results",
    "Expiry": "broker.model.records.results",
    "Finding": "broker.store.maintenance",
    "HistoryEntry": "broker.model.records.delivery",
    "InboxStats": "broker.model.records.delivery",
    "InboxUse": "broker.model.records.spaces",
    "JoinKey": "broker.model.records.spaces",
    "Joined": "broker.model.records.spaces",
    "JournalEntry": "broker.model.records.board",
    "Lease": "broker.model.records.delivery",
    "LogEntry": "broker.model.records.mail",
    "NotReached": "broker.model.records.mail",
    "Participant": "broker.model.records.spaces",
    "ParticipantEvent": "broker.model.records.spaces",
    "PathCheck": "broker.model.records.board",
    "Purged": "broker.model.records.spaces",
    "QuarantinedDelivery": "broker.model.records.delivery",
    "QueueStats": "broker.model.records.delivery",
    "Reservation": "broker.model.records.board",
    "SearchHit": "broker.model.records.mail",
    "SendResult": "broker.model.records.mail",
    "SenderUse": "broker.model.records.spaces",
    "Space": "broker.model.records.spaces",
    "SpaceActivity": "broker.model.records.delivery",
    "SpaceUsage": "broker.model.records.spaces",
    "Thread": "broker.model.records.mail",
    "TranscriptEntry": "broker.model.records.delivery",
    "Turn": "broker.model.records.delivery",
    "TurnItem": "broker.model.records.delivery",
    "TurnRecord": "broker.model.records.delivery",
    "TurnMessages": "broker.model.records.delivery",
    "TurnSeen": "broker.model.records.delivery",
    "VacuumResult": "broker.store.maintenance",
    "log_matches": "broker.model.records.mail",
}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(where), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})
