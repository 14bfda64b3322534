"""The server's file budget (S41): agents never take the operator's room.

Every connection, parked long-poll and database file is a file descriptor,
and a process has at most ``RLIMIT_NOFILE`` of them; past it ``accept()``
fails (the operator's connection waits or is reset) and opening anything
fails (a database connection, a socket). So the server keeps a share of its
limit, ``reserve``, for the operator and its own files:

- ``room()``: a new agent wait parks only while the descriptors in use stay
  below ``limit - reserve`` (``broker.api.parking``: else ``server_busy``, 503);
- ``Shed``: past that line every request that is not the operator's, on the
  API and on MCP, is answered 503 ``server_busy`` with ``Retry-After`` and
  ``Connection: close`` before anything else runs, so each refusal gives a
  descriptor back; the operator's requests run as usual (the console's page
  and ``/healthz`` too: they carry no credential, and hold nothing);
- ``exhausted(exc)``: a failure that is the process running out of
  descriptors (``EMFILE``, ``ENFILE``; SQLite's "unable to open database
  file" while at the limit) is answered as ``server_busy``, never a 500.

``broker serve`` raises its soft limit to the hard one at start
(``raise_limit``): the fd limit an operator sets (``ulimit -n``, systemd's
``LimitNOFILE``) is the one that counts (docs/served.md).
"""

from __future__ import annotations

import errno
import json
import os
import time
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from broker import errors

RESERVE_SHARE = 0.25  # of the limit, kept for the operator and the server's own files
RESERVE_MIN = 64
COUNT_EVERY_S = 0.05  # how stale a count of open descriptors may be
_FD_FOLDERS = ("/proc/self/fd", "/dev/fd")
_EXHAUSTED = (errno.EMFILE, errno.ENFILE)
# Paths anyone may fetch without a credential, holding nothing: never shed.
_OPEN_PATHS = ("/healthz", "/openapi.json", "/static/")


def raise_limit() -> tuple[int, int]:
    """Raise this process's soft ``RLIMIT_NOFILE`` to its hard limit; the
    (soft, hard) limits in force after it."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (OSError, ValueError):
            pass  # a platform that refuses it: the soft limit stays the budget
    return soft, hard


def _limit() -> int:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def open_descriptors(folder: str) -> int:
    """The descriptors this process has open, from its descriptor folder.

    Linux (6.2 on) gives their number as the size of ``/proc/self/fd``: one
    ``stat``, ~3 µs. Listing the folder costs ~0.5 ms at a thousand
    connections, and the budget counts again every ``COUNT_EVERY_S``: at each
    request when they come slower than that (an operator's, beside a thousand
    parked agents), and that request's answer waited for the listing. A size
    of 0 (an older kernel, ``/dev/fd``) is no count: the listing then."""
    if folder == _FD_FOLDERS[0]:
        size = os.stat(folder).st_size
        if size > 0:
            return size
    return len(os.listdir(folder))


class FdBudget:
    """The descriptors of this process against its limit, less the reserve and
    the files the server may still open for itself: a thread's first call opens
    its store connection (``to_open()``), and a burst of parked waits must not
    have taken those descriptors by then (a store that cannot open its file
    answers every request that needs a new connection with an error)."""

    def __init__(
        self, reserve: int | None = None, to_open: Callable[[], int] | None = None
    ) -> None:
        self.limit = _limit()
        self.to_open = to_open or (lambda: 0)
        wanted = reserve if reserve is not None else int(self.limit * RESERVE_SHARE)
        self.reserve = min(max(RESERVE_MIN, wanted), self.limit // 2)
        self._counted = (0.0, 0)
        self._let_in = 0  # parked waits let in since the last listing
        self._folder = next((f for f in _FD_FOLDERS if os.path.isdir(f)), None)

    def in_use(self) -> int:
        """Descriptors open now, and those kept for the store's connections yet
        to open (counted at most every ``COUNT_EVERY_S``); 0 where they cannot
        be counted (then only the limit itself bounds the server)."""
        at, seen = self._counted
        now = time.monotonic()
        if now - at < COUNT_EVERY_S or self._folder is None:
            return seen
        try:
            seen = open_descriptors(self._folder) + self.to_open()
        except OSError as exc:
            seen = self.limit if exc.errno in _EXHAUSTED else seen
        self._counted = (now, seen)
        self._let_in = 0  # the listing sees their connections now
        return seen

    def has_room(self) -> bool:
        """Whether the server is below its line (``Shed``: a request that holds
        nothing once answered)."""
        return self.in_use() + self._let_in < self.limit - self.reserve

    def room(self) -> bool:
        """Whether an agent may take one more descriptor, a parked wait, which
        then counts until the next listing: a burst of waits arriving between
        two listings (``COUNT_EVERY_S``) would all be let in on one stale count
        (a hundred at once went past the line)."""
        if not self.has_room():
            return False
        self._let_in += 1
        return True

    def exhausted(self, exc: BaseException) -> bool:
        """Whether ``exc`` is this process out of descriptors."""
        seen: BaseException | None = exc
        while seen is not None:
            if isinstance(seen, OSError) and seen.errno in _EXHAUSTED:
                return True
            if "unable to open database file" in str(seen) or "Too many open files" in str(seen):
                # SQLite does not say why it could not open the file; past the
                # budget's line, the likely why is the process's descriptors.
                self._counted = (0.0, 0)
                return not self.has_room()
            seen = seen.__cause__ or seen.__context__
        return False


def busy() -> errors.ServerBusy:
    return errors.ServerBusy(
        "the server is at its budget of open files (it keeps the rest for the operator "
        "and its own files): retry",
        retry_after=1,
    )


class Shed:
    """Past the budget, every request but the operator's is a 503 at once."""

    def __init__(self, app: ASGIApp, budget: FdBudget, is_operator: Any) -> None:
        self.app = app
        self.budget = budget
        self.is_operator = is_operator
        self.state = getattr(app, "state", None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.budget.has_room() or self._spared(scope):
            await self.app(scope, receive, send)
            return
        exc = busy()
        body = json.dumps(exc.to_dict()).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"retry-after", b"1"),
            (b"connection", b"close"),
        ]
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _spared(self, scope: Scope) -> bool:
        path: str = scope.get("path", "")
        if path == "/" or path.startswith(_OPEN_PATHS):
            return True
        given = [v for n, v in scope.get("headers", ()) if n == b"authorization"]
        if len(given) != 1:  # none, or ambiguous: no credential (credentials.bearer)
            return False
        scheme, _, rest = bytes(given[0]).decode("latin-1").partition(" ")
        secret = rest.strip() or None if scheme.lower() == "bearer" else None
        return bool(self.is_operator(secret))
