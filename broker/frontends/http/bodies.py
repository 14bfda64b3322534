"""Request bodies of the HTTP API: pydantic input models, closed (S10, S33).

They exist only because HTTP carries them as JSON (a declared operation's body is
its input record, ``broker.frontends.http.operations``). Every model refuses unknown fields, so a
``sender`` or ``from`` in a body is ``invalid_input`` naming the field, and
every number has documented bounds (finite, in range).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints

from broker.frontends.http.edge import Strict
from broker.model.pydantic_inputs import Archetype

__all__ = ["JoinBody", "SendManyBody"]

Text = Annotated[str, StringConstraints(min_length=1, max_length=400)]
Id = Annotated[str, StringConstraints(min_length=1, max_length=200)]


class _Body(Strict):
    """Closed and strict (``edge.Strict``): the MCP tools' inputs share the base."""


# --- operator ------------------------------------------------------------------------


class JoinBody(_Body):
    """Join a participant on an agent's behalf (the operator's key authenticates it).

    No ``pid``: the server cannot tell whose a client's process is, so a served
    participant is live by its heartbeat (its calls and long-polls), S27.
    A re-join keeps the directory fields it leaves out; ``""`` clears one (S40)."""

    codename: Text
    agent: Id | None = None
    run_id: Id | None = None
    step: Annotated[str, StringConstraints(max_length=200)] | None = None
    parent: Annotated[str, StringConstraints(max_length=200)] | None = None
    role: Annotated[str, StringConstraints(max_length=200)] | None = None
    archetype: Archetype | Literal[""] | None = None
    task: Annotated[str, StringConstraints(max_length=2000)] | None = None
    lead: bool = False
    messaging: bool = True
    tools: Annotated[list[Id], Field(max_length=64)] | None = None
    token: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = None
    """the address's last token: continue it while its holder is live (S27, S40)"""


class SendManyBody(_Body):
    """Many ``msg.send`` in one transaction; each item is checked as ``msg.send``'s input
    record (``broker.model.inputs.SendInput``)."""

    items: Annotated[list[dict[str, Any]], Field(max_length=1000)]
    """``{"to", "text", "idempotency_key"}`` objects"""
