"""What the MCP tools take: pydantic models, closed to unknown fields (S10).

The tools of declared operations take their input records
(``broker.model.inputs``); the few others are declared here with the library's bounds
(S22, S33), so a tool's JSON schema, the check of its arguments and the
library agree. No model has a sender: who calls is the connection's identity.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints

from broker.frontends.http.edge import Strict
from broker.vocab import (
    MIN_SECONDS,
)

KEY_PATTERN = r"^[A-Za-z0-9._:/-]{1,200}$"

Key = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=KEY_PATTERN)]
Ttl = Annotated[float, Field(ge=MIN_SECONDS, le=86400, allow_inf_nan=False)]
MessageId = Annotated[str, StringConstraints(min_length=1, max_length=200)]
SpaceRef = Annotated[str, StringConstraints(min_length=1, max_length=200, strip_whitespace=True)]


class _In(Strict):
    """Closed and strict, the HTTP bodies' base (``broker.frontends.http.edge``)."""


PathText = Annotated[str, StringConstraints(min_length=1, max_length=4096)]  # globs.PATH_MAX


class NoInput(_In):
    """A tool without arguments (still closed: any field is refused)."""


# --- the operator's ---------------------------------------------------------------
class RunInput(_In):
    """Operator tools that take only the run (space) id."""

    run: SpaceRef
