"""Bounds on parked waits (S41): per participant, per space, and the server's budget.

A wait parked in a server (a long-poll on a claim or a turn, an MCP
``inbox_next`` with a wait) costs the server a connection for as long as it
waits. One token parking hundreds of them, or many identities of one space,
must not fill the server, and the operator must always get in. So a server's
asyncio twins (``broker.api.aio``) park through a ``Parking``: a wait that
would go past a participant's or its space's share is refused with
``too_many_waits`` (HTTP 429, ``Retry-After``), and one the server as a whole
has no room for (``room()``: its file budget, ``broker.frontends.http.budget``)
with ``server_busy`` (HTTP 503). A call that finds something at once never
parks, so it is never refused for this.

A library user's twins have no ``Parking`` (no bound: the process is its own).
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Callable, Iterator

from broker import errors
from broker.spaces.auth import Identity

RETRY_AFTER_S = 1


class Parking:
    """The parked waits of one server, counted (thread-safe)."""

    PER_PARTICIPANT = 4  # an agent needs one or two (a claim and a turn, an MCP session's)
    PER_SPACE = 1024

    def __init__(
        self,
        per_participant: int = PER_PARTICIPANT,
        per_space: int = PER_SPACE,
        room: Callable[[], bool] | None = None,
    ) -> None:
        self.per_participant = per_participant
        self.per_space = per_space
        self.room = room
        self._lock = threading.Lock()
        self._by_participant: Counter[str] = Counter()
        self._by_space: Counter[str] = Counter()

    def parked(self, ident: Identity | None = None) -> int:
        """Waits parked now: ``ident``'s, or all of them."""
        with self._lock:
            if ident is None:
                return sum(self._by_space.values())
            return self._by_participant[ident.participant_id]

    @contextlib.contextmanager
    def park(self, ident: Identity) -> Iterator[None]:
        """Hold one parked wait for ``ident`` while the block runs, or refuse it."""
        pid, sid = ident.participant_id, ident.space_id
        with self._lock:
            if self._by_participant[pid] >= self.per_participant:
                raise errors.TooManyWaits(
                    f"{ident.address} already has {self.per_participant} waits parked in this "
                    "server, the most one participant may: wait in one of them, or retry",
                    retry_after=RETRY_AFTER_S,
                    limit=self.per_participant,
                )
            if self._by_space[sid] >= self.per_space:
                raise errors.TooManyWaits(
                    f"space {sid} already has {self.per_space} waits parked in this server, "
                    "the most one space may: retry",
                    retry_after=RETRY_AFTER_S,
                    limit=self.per_space,
                )
            if self.room is not None and not self.room():
                raise errors.ServerBusy(
                    "the server is at its budget of open files (it keeps the rest for the "
                    "operator and its own files): retry",
                    retry_after=RETRY_AFTER_S,
                )
            self._by_participant[pid] += 1
            self._by_space[sid] += 1
        try:
            yield
        finally:
            with self._lock:
                self._by_participant[pid] -= 1
                self._by_space[sid] -= 1
                if not self._by_participant[pid]:
                    del self._by_participant[pid]
                if not self._by_space[sid]:
                    del self._by_space[sid]
