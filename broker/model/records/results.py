"""Small results that are not a concept's record: a count, an expiry, a plain yes.

Part of ``broker.model.records`` (import them from there). A declared
operation whose library method returns a number, a time or nothing returns one
of these on the other surfaces (the HTTP API, MCP): ``Operation.value`` names
the field the library method hands back.
"""

from __future__ import annotations

from broker.record_type import DOCSTRINGS, record


@record
class Count:
    __pydantic_config__ = DOCSTRINGS

    count: int
    """how many deliveries the call settled or requeued"""


@record
class Expiry:
    __pydantic_config__ = DOCSTRINGS

    expires_at: str
    """the lease's new expiry (UTC)"""


@record
class Done:
    """The call did what it was asked; nothing else to say."""

    ok: bool
