"""Who is calling: the Bearer credential of a request, checked by the library.

Operator endpoints take the store's operator key (S29); agent endpoints take a
participant's token, and the server derives the caller from it (S10): no body
field, header or path part can name a sender. An agent token on an operator
endpoint is ``forbidden`` (403), not ``auth_failed``: the caller is known, it
is just not the operator.

An agent token is checked against the store before the body is read
(401/403 before 422): a re-join (new token) or a leave, by any process on
the store, takes effect on the next request, ``GET /api/me`` included.

A declared operation's token is checked once, then remembered (``cached``):
its identity (space, participant, address, token hash) never changes, and
every agent operation re-checks that identity inside its own transaction
(``broker.spaces.auth.caller``: the token hash against the participant's row,
its status, its space's state), so a token that was replaced, a participant
that left or a space that stopped is refused by the operation itself, with
the same error the edge would give. What the edge check decided besides is
which error comes first: a request answered from the cache that fails for
any reason has its token checked afresh before the answer, and a refused
token's error is the answer (and the token forgotten). Hand-written routes and
the calls a participant that left may still make (``after_leave``) are
checked on every request. The operator key is re-verified every
``OPERATOR_TTL_S`` (a rotated key takes effect within it).
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from broker import errors
from broker.api.handles import Agent, Operator

OPERATOR_TTL_S = 5.0  # re-verify the operator key this often (a rotated key takes effect)
AGENTS_MAX = 65_536  # remembered agent tokens (past it the cache starts again)


def bearer(headers: Any) -> str | None:
    """The credential of an ``Authorization: Bearer <secret>`` header, or None.
    Two or more ``Authorization`` headers are no credential at all: one
    request, one caller, whichever header a proxy or a parser would pick."""
    values = headers.getlist("authorization")
    if len(values) != 1:
        return None
    value = values[0]
    if not value:
        return None
    scheme, _, secret = value.partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        return None
    return str(secret.strip())


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


class Credentials:
    """Turns Bearer secrets into library handles (``Operator`` / ``Agent``)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self._operators: dict[str, tuple[float, Operator]] = {}
        self._agents: dict[str, Agent] = {}  # token digest -> its handle (see the module doc)

    # --- operator ------------------------------------------------------------------
    def operator(self, secret: str | None) -> Operator:
        if not secret:
            raise errors.AuthError(
                "operator key required: send it as 'Authorization: Bearer <key>'"
            )
        digest = _digest(secret)
        cached = self._operators.get(digest)
        now = time.monotonic()
        if cached is not None and now - cached[0] < OPERATOR_TTL_S:
            return cached[1]
        try:
            op = _make_operator(self.store, secret)
        except errors.AuthError:
            self._operators.pop(digest, None)
            if self._is_agent(secret):
                raise errors.Forbidden(
                    "an agent token cannot use operator endpoints: they need the operator key"
                ) from None
            raise
        if len(self._operators) > 16:
            self._operators.clear()
        self._operators[digest] = (now, op)
        return op

    # --- agent ---------------------------------------------------------------------
    def agent(self, secret: str | None, after_leave: bool = False) -> Agent:
        """The participant ``secret`` is; ``after_leave``: also one that has left
        (S4: it may still read its own row)."""
        if not secret:
            raise errors.token_refused()
        try:
            if after_leave:
                return Agent._after_leave(self.store, secret)
            return Agent.from_token(self.store, secret)
        except errors.AuthError:
            if self._is_operator(secret):
                raise errors.Forbidden(
                    "the operator key is not an agent token: agent endpoints act as a participant"
                ) from None
            raise

    def cached(self, secret: str | None) -> Agent | None:
        """The handle of an agent token checked before, or None (check it)."""
        return self._agents.get(_digest(secret)) if secret else None

    def remember(self, secret: str, agent: Agent) -> None:
        """Keep the handle of a token just checked (``agent``, not after leaving)."""
        if len(self._agents) >= AGENTS_MAX:
            self._agents.clear()
        self._agents[_digest(secret)] = agent

    def is_operator(self, secret: str | None) -> bool:
        """Whether ``secret`` is the operator key (a fresh check is cached as
        ``operator``'s): the server keeps room for it when it has little (S41)."""
        if not secret:
            return False
        cached = self._operators.get(_digest(secret))
        if cached is not None and time.monotonic() - cached[0] < OPERATOR_TTL_S:
            return True
        return self._is_operator(secret)

    def forget(self, secret: str | None) -> None:
        """Drop a cached handle whose credential the library just refused."""
        if secret:
            digest = _digest(secret)
            self._operators.pop(digest, None)
            self._agents.pop(digest, None)

    def _is_agent(self, secret: str) -> bool:
        try:
            Agent.from_token(self.store, secret)
        except errors.BrokerError:
            return False
        return True

    def _is_operator(self, secret: str) -> bool:
        try:
            _make_operator(self.store, secret)
        except errors.BrokerError:
            return False
        return True


def _make_operator(store: Any, key: str) -> Operator:
    """The library's check of the operator key (S29): ``auth_failed`` if not the store's."""
    return Operator(store, key=key, via="cp")
