"""Small result shapes of the HTTP API that are not library records."""

from __future__ import annotations

from dataclasses import dataclass

from broker.model.records import Count as Count
from broker.model.records import Done as Done
from broker.model.records import Expiry as Expiry

_DOCSTRINGS = {"use_attribute_docstrings": True}


@dataclass(frozen=True, slots=True)
class ErrorBody:
    """Every refusal: the CLI's error code and a one-line message (plus the
    error's own fields, e.g. ``result`` of a message that reached nobody)."""

    __pydantic_config__ = _DOCSTRINGS

    error: str
    """the stable code (spec §Errors)"""
    message: str


@dataclass(frozen=True, slots=True)
class Me:
    """Who a token is: the server derives every sender from this (S10)."""

    space_id: str
    address: str


@dataclass(frozen=True, slots=True)
class Health:
    status: str
    version: str
    transactions: int
    """group-commit transactions so far"""
    on_loop: int
    """of them, run by the event loop itself (the writer lock free: no hand-off)"""
    writes: int
    """write requests committed in them"""
    careful: int
    """batches run again with a savepoint a write, after one failed (the rest committed)"""
    subscribers: int
    """open SSE streams"""
    waiting: int
    """long-polls parked on a doorbell now"""
    lean: int
    """requests answered by the lean lane (an agent's write on a remembered token)"""
