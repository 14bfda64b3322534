"""``RemoteOperator``: ``broker.api.handles.Operator`` over HTTP (client mode)."""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from broker import errors
from broker.api.declaration import Operation, operation
from broker.api.operations import ADMIT, MESSAGES
from broker.frontends.remote.agent import RemoteAgent
from broker.frontends.remote.codec import decode, error_from, from_dict, list_of
from broker.frontends.remote.operations import carried, derived, route
from broker.frontends.remote.reservations import RemoteOperatorPaths
from broker.frontends.remote.wire import Connection, events, json_or_none, space_path
from broker.model.fields import Input
from broker.model.records import (
    Joined,
    LogEntry,
    log_matches,
)
from broker.model.typecheck import checked, self_checked, utc_time


# --- the operator ------------------------------------------------------------------------
@checked
@derived("operator")
class RemoteOperator(RemoteOperatorPaths):
    """``broker.api.handles.Operator`` over HTTP: the operator key is the credential
    (the argument, else ``BROKER_OPERATOR_KEY``); the server records ``via: cp``.

    The same methods with the same parameters as ``Operator`` (a test compares
    their signatures), but ``tx`` (a served call is its own transaction) and
    the methods that need the database file on this host (doctor, backup,
    vacuum, export, import, purge: run them where the file is)."""

    def __init__(self, conn: Connection, key: str | None = None) -> None:
        key = key or os.environ.get("BROKER_OPERATOR_KEY")
        if not key:
            raise errors.AuthError(
                "operator key required: set BROKER_OPERATOR_KEY (client mode has no key file)"
            )
        self.conn = conn
        self.key = key

    def _call(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        return self.conn.call(method, path, secret=self.key, body=body, **kw)

    # --- spaces ---------------------------------------------------------------------------
    def _one(self, cls: type, data: Any) -> Any:
        """Decoding for the path-reservation methods (broker.frontends.remote.reservations)."""
        return from_dict(cls, data)

    def _many(self, cls: type, data: Any) -> list[Any]:
        return list_of(cls, data)

    # --- messages -----------------------------------------------------------------------
    @self_checked
    def call(self, op: Operation, inp: Input | Mapping[str, Any]) -> Any:
        """Send the declared operation ``op`` with its checked input record to
        the server (recorded ``via: cp``); its result, decoded."""
        op = operation(op)
        record: Input = op.accept("operator", inp)
        if op.http is None:
            raise errors.InvalidInput(f"{op.name} is not served over HTTP", field="op")
        path, rest = route(op, record.values())  # a field the path names is the path's only
        # the space is the path's, never the body's
        path = (space_path(rest.pop("space")) if "space" in rest else "/api") + path
        return decode(op, self._call(op.http.method, path, **carried(op, rest)))

    def log(
        self,
        space: str,
        *,
        after: str | int | None = None,
        kinds: Iterable[str] | None = None,
        sender: str | None = None,
        to: str | None = None,
        since: str | None = None,
        limit: int | None = None,
        tail: int | None = None,
        thread: str | None = None,
    ) -> list[LogEntry]:
        """``Operator.log``: the log in sequence order, filtered by the server.
        ``after`` is a message id or a seq; ``limit`` keeps the first N,
        ``tail`` the last N (not both). The server answers at most a page of
        1000 (``messages.list``, the declared read); without ``tail`` this
        reads page after page up to ``limit``."""
        _check_count(limit=limit, tail=tail)
        query: dict[str, Any] = {
            "kinds": list(kinds or []) or None,
            "sender": sender,
            "to": to,
            "since": since,
            "thread": thread,
            **_cursor(after),
        }
        if tail is not None:
            return self.call(MESSAGES, {"space": space, "tail": tail, **query})  # type: ignore[no-any-return]
        out: list[LogEntry] = []
        while True:
            size = PAGE if limit is None else min(PAGE, limit - len(out))
            page: list[LogEntry] = self.call(MESSAGES, {"space": space, "limit": size, **query})
            out += page
            if len(page) < size or (limit is not None and len(out) >= limit):
                return out
            query.update(after=None, after_seq=page[-1].seq)  # filters stay: they page too

    def follow(
        self,
        space: str,
        *,
        after: str | int | None = None,
        kinds: Iterable[str] | None = None,
        sender: str | None = None,
        to: str | None = None,
        since: str | None = None,
        idle_timeout: float | None = None,
    ) -> Iterator[list[LogEntry]]:
        """``Operator.follow``: new log rows as they commit (filtered as ``log``),
        over the server's SSE stream; resumes by itself (Last-Event-ID) when
        the server cuts the stream or restarts. Ends when the space stops, or
        after ``idle_timeout`` seconds without a byte from the server."""
        if idle_timeout is not None and not (math.isfinite(idle_timeout) and idle_timeout >= 0):
            raise errors.InvalidInput(
                f"idle_timeout must be a finite number of seconds >= 0, not {idle_timeout!r}",
                field="idle_timeout",
            )
        if since is not None:  # filtered here: read as the store writes times (S33)
            since = utc_time(since)
        wanted = set(kinds or ())
        pos = self._seq_before(space, after)
        quiet_since = time.monotonic()  # the server's keep-alives are not news
        path = space_path(space) + "/messages/stream"
        while True:
            response = self.conn.open(
                "GET",
                path,
                secret=self.key,
                headers={"Accept": "text/event-stream", "Last-Event-ID": str(pos)},
                # 0 would make the socket non-blocking: wait a moment at least
                timeout=max(idle_timeout, 0.05) if idle_timeout is not None else 3600.0,
            )
            if response.status >= 400:
                raise error_from(response.status, json_or_none(response.read()))
            try:
                for event, data in events(response):
                    if event == "message":
                        entry: LogEntry = from_dict(LogEntry, json.loads(data))
                        pos = entry.seq
                        if wanted and entry.kind not in wanted:
                            pass  # other kinds are not news (as in follow_log)
                        else:
                            quiet_since = time.monotonic()
                            if log_matches(entry, sender, to, since):
                                yield [entry]
                    elif event == "end":
                        return
                    if idle_timeout is not None and time.monotonic() - quiet_since > idle_timeout:
                        return  # no row for idle_timeout, only keep-alives
            except TimeoutError:
                return  # quiet for idle_timeout
            except (OSError, ValueError):
                pass  # dropped: resume from pos
            finally:
                response.close()

    def _seq_before(self, space: str, after: str | int | None) -> int:
        """The stream's resume point for a cursor: the stream resumes by seq, so a
        message id is turned into its seq. The newest row is read *before* the
        rows after the id: if none follows the id then, the id was the newest
        row (seqs are gap-free per space) and nothing that commits in between
        is skipped."""
        cursor = _cursor(after)
        if isinstance(after, int):
            return int(cursor["after_seq"])
        if after is None:
            return 0
        newest = self.log(space, tail=1)
        following = self.log(space, after=after, limit=1)  # an unknown id: MessageNotFound
        if following:
            return following[0].seq - 1
        return newest[0].seq if newest else 0

    # --- participants, the board, the queue -----------------------------------------------
    def join(self, space: str, codename: str, **fields: object) -> tuple[RemoteAgent, Joined]:
        """Join a participant on an agent's behalf; its token is in ``Joined``."""
        fields.pop("pid", None)  # a served join records no process (participants.join)
        joined: Joined = self.call(ADMIT, {"space": space, "codename": codename, **fields})
        return RemoteAgent(self.conn, joined.token, joined.space_id, joined.address), joined


PAGE = 1000  # rows per request of log(): the server's default page


def _cursor(after: str | int | None) -> dict[str, Any]:
    """A log cursor as the query names it: a seq is ``after_seq``, an id ``after``
    (checked as ``Operator.log`` checks it)."""
    if after is None:
        return {"after": None, "after_seq": None}
    if isinstance(after, bool) or (isinstance(after, int) and not 0 <= after < 2**63):
        raise errors.InvalidInput(f"bad cursor {after!r}: a message id or a seq", field="after")
    if isinstance(after, int):
        return {"after": None, "after_seq": after}
    return {"after": after, "after_seq": None}


def _check_count(*, limit: int | None, tail: int | None) -> None:
    """``limit`` and ``tail`` as ``Operator.log`` checks them (paging needs them sound)."""
    if limit is not None and tail is not None:
        raise errors.InvalidInput("limit and tail exclude each other", field="tail")
    for name, n in (("limit", limit), ("tail", tail)):
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise errors.InvalidInput(f"bad {name} {n!r}: a whole number from 1", field=name)
