"""``RemoteOperator``: ``broker.client.Operator`` over HTTP (client mode)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import quote

from broker import errors
from broker.records import (
    ClaimGrant,
    Joined,
    JournalEntry,
    LogEntry,
    Participant,
    QuarantinedDelivery,
    SendResult,
    Space,
    TurnRecord,
)
from broker.remote.agent import RemoteAgent
from broker.remote.codec import error_from, from_dict, list_of
from broker.remote.wire import Connection, events, json_or_none, space_path


# --- the operator ------------------------------------------------------------------------
class RemoteOperator:
    """``broker.client.Operator`` over HTTP: the operator key is the credential
    (the argument, else ``BROKER_OPERATOR_KEY``); the server records ``via: cp``."""

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

    def create_space(self, kind: str, **settings: object) -> Space:
        data = self._call("POST", "/api/spaces", {"kind": kind, "settings": settings})
        return from_dict(Space, data)  # type: ignore[no-any-return]

    def spaces(self, *, state: str | None = None) -> list[Space]:
        return list_of(Space, self._call("GET", "/api/spaces", query={"state": state}))

    def get_space(self, space: str) -> Space:
        return from_dict(Space, self._call("GET", space_path(space)))  # type: ignore[no-any-return]

    def stop_space(self, space: str) -> Space:
        return from_dict(Space, self._call("POST", space_path(space) + "/stop"))  # type: ignore[no-any-return]

    def archive_space(self, space: str) -> Space:
        data = self._call("POST", space_path(space) + "/archive")
        return from_dict(Space, data)  # type: ignore[no-any-return]

    def send(
        self,
        space: str,
        text: str,
        *,
        to: Iterable[str] | None = None,
        urgent: bool = False,
        idempotency_key: str | None = None,
    ) -> SendResult:
        body = {
            "to": None if to is None else list(to),
            "text": text,
            "urgent": urgent,
            "idempotency_key": idempotency_key,
        }
        data = self._call("POST", space_path(space) + "/messages", body)
        return from_dict(SendResult, data)  # type: ignore[no-any-return]

    def log(
        self,
        space: str,
        *,
        after: str | None = None,
        after_seq: int | None = None,
        kinds: Iterable[str] | None = None,
        limit: int | None = None,
    ) -> list[LogEntry]:
        """The log; without ``limit`` every row after the cursor, page by page."""
        out: list[LogEntry] = []
        query: dict[str, Any] = {
            "after": after,
            "after_seq": after_seq,
            "kind": list(kinds or []),
            "limit": limit or 1000,
        }
        while True:
            page = list_of(
                LogEntry, self._call("GET", space_path(space) + "/messages", query=query)
            )
            out += page
            if limit is not None or len(page) < query["limit"]:
                return out
            query.update(after=None, after_seq=page[-1].seq)

    def participants(self, space: str) -> list[Participant]:
        return list_of(Participant, self._call("GET", space_path(space) + "/participants"))

    def quarantined(self, space: str) -> list[QuarantinedDelivery]:
        return list_of(QuarantinedDelivery, self._call("GET", space_path(space) + "/quarantine"))

    def requeue(self, space: str, ids: Iterable[str]) -> int:
        data = self._call("POST", space_path(space) + "/quarantine/requeue", {"ids": list(ids)})
        return int(data["count"])

    def transcript(self, space: str, address: str) -> list[TurnRecord]:
        path = f"{space_path(space)}/participants/{quote(address, safe='')}/transcript"
        return list_of(TurnRecord, self._call("GET", path))

    def claims(self, space: str) -> list[ClaimGrant]:
        return list_of(ClaimGrant, self._call("GET", space_path(space) + "/claims"))

    def claim_journal(self, space: str, *, key: str | None = None) -> list[JournalEntry]:
        path = space_path(space) + "/claims/journal"
        return list_of(JournalEntry, self._call("GET", path, query={"key": key}))

    def join(self, space: str, codename: str, **fields: object) -> tuple[RemoteAgent, Joined]:
        data = self._call(
            "POST", space_path(space) + "/participants", {"codename": codename, **fields}
        )
        joined: Joined = from_dict(Joined, data)
        return RemoteAgent(self.conn, joined.token, joined.space_id, joined.address), joined

    def follow(
        self,
        space: str,
        *,
        after_seq: int | None = None,
        kinds: Iterable[str] = (),
        idle_timeout: float | None = None,
    ) -> Iterator[list[LogEntry]]:
        """New log rows as they commit, over the server's SSE stream; resumes by
        itself (Last-Event-ID) when the server cuts the stream or restarts."""
        wanted = set(kinds)
        pos = after_seq or 0
        path = space_path(space) + "/messages/stream"
        while True:
            try:
                response = self.conn.open(
                    "GET",
                    path,
                    secret=self.key,
                    headers={"Accept": "text/event-stream", "Last-Event-ID": str(pos)},
                    timeout=idle_timeout if idle_timeout is not None else 3600.0,
                )
            except errors.ServerUnreachable:
                raise
            if response.status >= 400:
                raise error_from(response.status, json_or_none(response.read()))
            try:
                for event, data in events(response):
                    if event == "message":
                        entry: LogEntry = from_dict(LogEntry, json.loads(data))
                        pos = entry.seq
                        if not wanted or entry.kind in wanted:
                            yield [entry]
                    elif event == "end":
                        return
            except TimeoutError:
                return  # quiet for idle_timeout
            except (OSError, ValueError):
                pass  # dropped: resume from pos
            finally:
                response.close()
