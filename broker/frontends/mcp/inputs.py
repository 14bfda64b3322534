"""What the MCP tools take: pydantic models, closed to unknown fields (S10).

The messaging ones are ``broker.model.pydantic_inputs``' own (``PostInput``,
``DirectiveInput``; ``msg_send``'s and ``messages_send``'s are declared operations'); the rest are declared here with the library's bounds
(S22, S33), so a tool's JSON schema, the check of its arguments and the
library agree. No model has a sender: who calls is the connection's identity.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints

from broker.frontends.http.edge import Strict
from broker.model.pydantic_inputs import DirectiveInput as DirectiveInput
from broker.model.pydantic_inputs import PostInput as PostInput
from broker.model.pydantic_inputs import Target
from broker.vocab import (
    BOARD_READ_DEFAULT,
    BOARD_READ_MAX,
    MIN_SECONDS,
    SEARCH_DEFAULT,
    SEARCH_MAX,
)

MAX_WAIT_S = 600.0  # an MCP request that blocks longer outlives most clients' timeouts
KEY_PATTERN = r"^[A-Za-z0-9._:/-]{1,200}$"

Key = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=KEY_PATTERN)]
Ttl = Annotated[float, Field(ge=MIN_SECONDS, le=86400, allow_inf_nan=False)]
MessageId = Annotated[str, StringConstraints(min_length=1, max_length=200)]
SpaceRef = Annotated[str, StringConstraints(min_length=1, max_length=200, strip_whitespace=True)]


class _In(Strict):
    """Closed and strict, the HTTP bodies' base (``broker.frontends.http.edge``)."""


class SearchInput(_In):
    """``msg.search`` (S36): what the agent sent or received."""

    query: Annotated[str, StringConstraints(min_length=1, max_length=1000)]
    written_by: Target | None = None  # a filter, not a sender: no tool takes one (S10)
    to: Target | None = None
    kinds: list[Annotated[str, StringConstraints(max_length=16)]] = Field(
        default_factory=list, max_length=8
    )
    since: Annotated[str, StringConstraints(max_length=40)] | None = None
    limit: int = Field(SEARCH_DEFAULT, ge=1, le=SEARCH_MAX)


class StatusInput(_In):
    """``msg status``: who has seen a message the agent sent."""

    message_id: MessageId


class BoardReadInput(_In):
    """``board.read``."""

    after: MessageId | None = None
    limit: int = Field(BOARD_READ_DEFAULT, ge=1, le=BOARD_READ_MAX)


class KeyClaimInput(_In):
    """``board.claim``."""

    key: Key
    ttl: Ttl = 300.0


class KeyReleaseInput(_In):
    """``board.release``."""

    key: Key
    fence: int = Field(ge=1)


class KeyRenewInput(_In):
    """``board.renew``."""

    key: Key
    fence: int = Field(ge=1)
    ttl: Ttl = 300.0


PathText = Annotated[str, StringConstraints(min_length=1, max_length=4096)]  # globs.PATH_MAX


class ReserveInput(_In):
    """Path reservations (S37): the library checks each pattern (S33)."""

    patterns: list[PathText] = Field(min_length=1, max_length=100)
    shared: bool = False
    ttl: Ttl = 300.0
    reason: str | None = Field(None, max_length=500)


class UnreserveInput(_In):
    fence: int = Field(ge=1)


class CheckPathsInput(_In):
    paths: list[PathText] = Field(min_length=1, max_length=10_000)


class RetractInput(_In):
    """``board.retract``."""

    directive_id: MessageId


class NextTurnInput(_In):
    """``inbox.next``."""

    wait: float = Field(0.0, ge=0, le=MAX_WAIT_S, allow_inf_nan=False)
    limit: int | None = Field(None, ge=1, le=10_000)


class SeenInput(_In):
    """``inbox.seen``."""

    turn_id: MessageId


class NoInput(_In):
    """A tool without arguments (still closed: any field is refused)."""


# --- the operator's ---------------------------------------------------------------
class MessagesListInput(_In):
    """The operator's ``messages.list``."""

    run: SpaceRef
    after_seq: int | None = Field(None, ge=0)
    kind: (
        Annotated[
            str,
            StringConstraints(pattern=r"^(direct|broadcast|post|directive|retract|operator|seen)$"),
        ]
        | None
    ) = None
    limit: int = Field(100, ge=1, le=1000)


class RunInput(_In):
    """Operator tools that take only the run (space) id."""

    run: SpaceRef
