"""Client mode: the ``Agent`` / ``Operator`` surface over HTTP (spec §Served mode).

With ``BROKER_URL=http://host:port`` or ``unix:///path/to/broker.sock`` the CLI
talks to ``broker serve`` and carries only a secret: an agent's token or the
operator key. Nothing here opens the database, and this module imports no
sqlite3, SQLAlchemy or pydantic (a CLI call's start-up is an agent's latency):
a small HTTP/1.1 client on the standard library's sockets (``http.client``
only for https), the records and the errors.

Results are the library's own records (``broker.records``), rebuilt from the
server's JSON; a refusal is the library's own error class, found by its code,
with the server's message and fields.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from collections.abc import Iterable, Iterator
from dataclasses import fields, is_dataclass
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from broker import errors, records
from broker.records import (
    AckStatus,
    BoardEntry,
    ClaimGrant,
    ContactPolicy,
    CreatedSpace,
    Joined,
    JoinKey,
    JournalEntry,
    Lease,
    LogEntry,
    Participant,
    QuarantinedDelivery,
    SearchHit,
    SendResult,
    Space,
    SpaceUsage,
    Thread,
    Turn,
    TurnRecord,
    TurnSeen,
)
from broker.remote_paths import RemoteAgentPaths, RemoteOperatorPaths

SCHEMES = ("http://", "https://", "unix://")
TIMEOUT_S = 30.0


def is_remote(url: str | None) -> bool:
    """Whether ``url`` names a broker server rather than a database."""
    return bool(url) and str(url).startswith(SCHEMES)


# --- records from JSON -----------------------------------------------------------------
_BUILDERS: dict[type, Any] = {}


def from_dict(cls: type, data: Any) -> Any:
    """A record of ``cls`` from its ``to_dict`` form (nested records rebuilt)."""
    if not isinstance(data, dict):
        raise errors.StoreError(f"the server sent {type(data).__name__} for a {cls.__name__}")
    build = _BUILDERS.get(cls) or _builder(cls)
    try:
        return build(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise errors.StoreError(f"the server sent a malformed {cls.__name__}: {exc}") from None


def _builder(cls: type) -> Any:
    convert: dict[str, Any] = {}
    for f in fields(cls):
        text = str(f.type).removesuffix(" | None")
        inner = text[5:-1] if text.startswith("list[") else None
        record = getattr(records, inner or text, None)
        if isinstance(record, type) and is_dataclass(record):
            convert[f.name] = (record, inner is not None)
    names = [f.name for f in fields(cls)]

    def build(data: dict[str, Any]) -> Any:
        kw: dict[str, Any] = {}
        for name in names:
            if name not in data:
                continue  # a field with a default; a missing required one fails below
            value = data[name]
            how = convert.get(name)
            if how is not None and value is not None:
                rec, many = how
                value = [from_dict(rec, v) for v in value] if many else from_dict(rec, value)
            kw[name] = value
        return cls(**kw)

    _BUILDERS[cls] = build
    return build


# --- errors from JSON ------------------------------------------------------------------
def _codes() -> dict[str, type[errors.BrokerError]]:
    out: dict[str, type[errors.BrokerError]] = {}
    todo: list[type[errors.BrokerError]] = [errors.BrokerError]
    while todo:
        cls = todo.pop()
        out.setdefault(cls.code, cls)
        todo.extend(cls.__subclasses__())
    return out


_BY_STATUS: dict[int, type[errors.BrokerError]] = {
    401: errors.AuthError,
    403: errors.Forbidden,
    404: errors.NotFound,
    409: errors.Conflict,
    413: errors.BodyTooLarge,
    422: errors.InvalidInput,
    503: errors.StoreBusy,
}


def error_from(status: int, body: Any) -> errors.BrokerError:
    """The library's error for a refusal the server sent."""
    if not isinstance(body, dict) or not isinstance(body.get("error"), str):
        cls = _BY_STATUS.get(status, errors.StoreError)
        return cls(f"the server answered {status} without an error body")
    code, message = body["error"], str(body.get("message", ""))
    cls = _codes().get(code) or _BY_STATUS.get(status, errors.BrokerError)
    exc = cls.__new__(cls)
    extra = {k: v for k, v in body.items() if k not in ("error", "message")}
    errors.BrokerError.__init__(exc, message, **extra)
    if exc.code != code:
        exc.code = code  # a code this client does not know: keep the server's
    return exc


# --- the connection ----------------------------------------------------------------------
class ProtocolError(OSError):
    """The server's answer was not the HTTP/1.1 this client speaks."""


class Response:
    """One HTTP/1.1 response read from a socket: status, headers, and the body
    as bytes (``read``) or line by line (``readline``, for SSE), with chunked
    transfer decoding."""

    def __init__(self, conn: Wire) -> None:
        self._conn = conn
        self._f = conn.rfile
        line = self._f.readline(65537)
        parts = line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
            raise ProtocolError(f"not an HTTP response: {line[:80]!r}")
        self.status = int(parts[1])
        self.headers: dict[str, str] = {}
        while True:
            h = self._f.readline(65537)
            if h in (b"\r\n", b"\n", b""):
                break
            name, _, value = h.decode("latin-1").partition(":")
            self.headers[name.strip().lower()] = value.strip()
        self._chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
        self._left = int(self.headers.get("content-length", "0") or 0) if not self._chunked else 0
        self._buf = b""
        self._done = not self._chunked and self._left == 0
        self.will_close = self.headers.get("connection", "").lower() == "close"
        self.owner: Wire | None = None  # a one-off connection, closed with this response

    def _more(self) -> bytes:
        """The next piece of the body (b"" at its end)."""
        if self._done:
            return b""
        if not self._chunked:
            data = self._f.read(min(self._left, 65536))
            if not data:
                raise ProtocolError("the connection closed inside a response")
            self._left -= len(data)
            self._done = self._left == 0
            return data
        size_line = self._f.readline(1026)
        if not size_line:
            raise ProtocolError("the connection closed inside a response")
        size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            while self._f.readline(65537) not in (b"\r\n", b"\n", b""):
                pass  # trailers
            self._done = True
            return b""
        data = self._f.read(size)
        self._f.readline(3)  # the CRLF after the chunk
        return data

    def read(self) -> bytes:
        out = [self._buf]
        self._buf = b""
        while piece := self._more():
            out.append(piece)
        return b"".join(out)

    def readline(self) -> bytes:
        while b"\n" not in self._buf:
            piece = self._more()
            if not piece:
                line, self._buf = self._buf, b""
                return line
            self._buf += piece
        line, _, self._buf = self._buf.partition(b"\n")
        return line + b"\n"

    def close(self) -> None:
        if not self._done or self.owner is not None:
            self._conn.close()  # an unread body (or a one-off connection): not reused


class Wire:
    """A plain HTTP/1.1 connection over TCP or a Unix socket (the standard
    library's ``http.client`` costs ~18 ms to import: a CLI call's budget)."""

    def __init__(self, unix: str, host: str, port: int, timeout: float) -> None:
        if unix:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            sock.connect(unix)
        else:
            sock = socket.create_connection((host, port), timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock
        self.rfile = sock.makefile("rb")
        self.host = host or "localhost"

    def request(
        self, method: str, target: str, *, body: bytes | None, headers: dict[str, str]
    ) -> Response:
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self.host}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        if body is not None or method in ("POST", "PATCH", "PUT"):
            lines.append(f"Content-Length: {len(body or b'')}")
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b""))
        return Response(self)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.rfile.close()
            self.sock.close()


class _Https:
    """https:// (behind a TLS proxy) through the standard library's client."""

    def __init__(self, netloc: str, timeout: float) -> None:
        import http.client

        self.conn = http.client.HTTPSConnection(netloc, timeout=timeout)

    def request(
        self, method: str, target: str, *, body: bytes | None, headers: dict[str, str]
    ) -> Any:
        self.conn.request(method, target, body=body, headers=headers)
        return self.conn.getresponse()

    def close(self) -> None:
        self.conn.close()


class Connection:
    """One keep-alive HTTP connection to a broker server."""

    def __init__(self, url: str, *, timeout: float = TIMEOUT_S) -> None:
        if not is_remote(url):
            raise errors.InvalidInput(f"not a server URL: {url!r} (http://, https:// or unix://)")
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._conn: Wire | _Https | None = None
        parts = urlsplit(url)
        self._base = ""
        if parts.scheme == "unix":
            self._unix = parts.path
            if not self._unix:
                raise errors.InvalidInput(f"bad server URL {url!r}: unix:///path/to/broker.sock")
        else:
            self._unix = ""
            self._base = parts.path.rstrip("/")  # behind a reverse proxy under a prefix
            self._scheme, self._netloc = parts.scheme, parts.netloc

    def _new(self, timeout: float) -> Wire | _Https:
        if self._unix:
            return Wire(self._unix, "", 0, timeout)
        if self._scheme == "https":
            return _Https(self._netloc, timeout)
        parts = urlsplit(f"//{self._netloc}")
        return Wire("", parts.hostname or "localhost", parts.port or 80, timeout)

    def open(
        self,
        method: str,
        path: str,
        *,
        secret: str | None,
        body: Any = None,
        query: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Send one request; the response is the caller's to read."""
        target = self._base + path
        if query:
            pairs = [(k, v) for k, v in query.items() if v is not None and not isinstance(v, list)]
            pairs += [(k, x) for k, v in query.items() if isinstance(v, list) for x in v]
            if pairs:
                target += "?" + urlencode(pairs)
        head = {"Accept": "application/json", **(headers or {})}
        if secret:
            head["Authorization"] = f"Bearer {secret}"
        payload = None
        if body is not None:
            payload = json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")
            head["Content-Type"] = "application/json"
        wait = timeout if timeout is not None else self.timeout
        for attempt in (1, 2):
            fresh = self._conn is None or timeout is not None
            conn = None
            try:
                conn = self._new(wait) if fresh else self._conn
                assert conn is not None
                response = conn.request(method, target, body=payload, headers=head)
            except (ConnectionError, OSError, ValueError) as exc:
                if conn is not None:
                    conn.close()
                if conn is self._conn:
                    self._conn = None
                    if attempt == 1 and not fresh:
                        continue  # the server closed an idle keep-alive connection: once more
                raise errors.ServerUnreachable(
                    f"the broker server at {self.url} did not answer: {exc}"
                ) from None
            if timeout is None and not getattr(response, "will_close", False):
                self._conn = conn
            else:
                if conn is self._conn:
                    self._conn = None
                response.owner = conn  # closed with the response (see ``call``)
            return response
        raise AssertionError("unreachable")

    def call(self, method: str, path: str, *, secret: str | None, **kw: Any) -> Any:
        """A JSON request: its decoded result, or the library's error."""
        response = self.open(method, path, secret=secret, **kw)
        try:
            raw = response.read()
        except (OSError, ValueError) as exc:
            self.close()
            raise errors.ServerUnreachable(
                f"the broker server at {self.url} broke off: {exc}"
            ) from None
        finally:
            owner = getattr(response, "owner", None)
            if owner is not None:
                owner.close()
        try:
            data = json.loads(raw) if raw else None
        except ValueError:
            data = None
        if response.status >= 400:
            raise error_from(response.status, data)
        return data

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def connect(url: str | None = None) -> Connection:
    """A connection to the server at ``url`` (default ``BROKER_URL``)."""
    return Connection(url or os.environ.get("BROKER_URL", ""))


def _space_path(space: str) -> str:
    return f"/api/spaces/{quote(space, safe='')}"


def _search_query(
    query: str,
    sender: str | None,
    to: str | None,
    kinds: Iterable[str] | None,
    since: str | None,
    limit: int,
) -> dict[str, Any]:
    return {
        "query": query,
        "from": sender,
        "to": to,
        "kind": list(kinds or []),
        "since": since,
        "limit": limit,
    }


def _list(cls: type, data: Any) -> list[Any]:
    if not isinstance(data, list):
        raise errors.StoreError(f"the server sent {type(data).__name__} for a list")
    return [from_dict(cls, d) for d in data]


def _one(_self: Any, cls: type, data: Any) -> Any:
    """A host method of the served-mode mixins (broker.remote_paths)."""
    return from_dict(cls, data)


def _many(_self: Any, cls: type, data: Any) -> list[Any]:
    return _list(cls, data)


def _ids(ids: Iterable[str] | None) -> list[str] | None:
    return None if ids is None else [str(i) for i in ids]


# --- the agent ---------------------------------------------------------------------------
class RemoteAgent(RemoteAgentPaths):
    """``broker.client.Agent`` over HTTP: the token is the only credential."""

    def __init__(
        self, conn: Connection, token: str, space: str | None = None, address: str | None = None
    ) -> None:
        if not token:
            raise errors.AuthError(
                "no token: pass --token or set BROKER_TOKEN (join prints it once)"
            )
        self.conn = conn
        self.token = token
        self._space = space
        self._address = address

    @classmethod
    def connect(
        cls, conn: Connection, space: str | None, address: str | None, token: str | None
    ) -> RemoteAgent:
        """Like ``Agent.connect``; the server checks the token (space and address
        only shape the path: the server derives who is calling)."""
        return cls(conn, token or "", space, address)

    def _who(self) -> None:
        me = self.conn.call("GET", "/api/me", secret=self.token)
        self._space, self._address = me["space_id"], me["address"]

    @property
    def space_id(self) -> str:
        if self._space is None:
            self._who()
        assert self._space is not None
        return self._space

    @property
    def address(self) -> str:
        if self._address is None:
            self._who()
        assert self._address is not None
        return self._address

    def _call(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        return self.conn.call(
            method, f"{_space_path(self.space_id)}/agent{path}", secret=self.token, body=body, **kw
        )

    _one, _many = _one, _many

    def send(
        self,
        to: str | Iterable[str],
        text: str,
        *,
        idempotency_key: str | None = None,
        thread: str | None = None,
        reply_to: str | None = None,
        importance: str = "normal",
        ack_required: bool = False,
    ) -> SendResult:
        targets = [to] if isinstance(to, str) else list(to)
        body = {
            "to": targets,
            "text": text,
            "idempotency_key": idempotency_key,
            "thread": thread,
            "reply_to": reply_to,
            "importance": importance,
            "ack_required": ack_required,
        }
        return from_dict(SendResult, self._call("POST", "/send", body))  # type: ignore[no-any-return]

    def search(
        self,
        query: str,
        *,
        sender: str | None = None,
        to: str | None = None,
        kinds: Iterable[str] | None = None,
        since: str | None = None,
        limit: int = 20,
    ) -> list[SearchHit]:
        q = _search_query(query, sender, to, kinds, since, limit)
        return _list(SearchHit, self._call("GET", "/search", query=q))

    def status(self, message_id: str) -> AckStatus:
        data = self._call("GET", f"/messages/{quote(message_id, safe='')}/status")
        return from_dict(AckStatus, data)  # type: ignore[no-any-return]

    def contact_policy(self) -> ContactPolicy:
        return from_dict(ContactPolicy, self._call("GET", "/policy"))  # type: ignore[no-any-return]

    def set_contact_policy(self, policy: str, allow: Iterable[str] = ()) -> ContactPolicy:
        data = self._call("POST", "/policy", {"policy": policy, "allow": list(allow)})
        return from_dict(ContactPolicy, data)  # type: ignore[no-any-return]

    def post(
        self, text: str, *, addressed_to: Iterable[str] = (), idempotency_key: str | None = None
    ) -> SendResult:
        body = {
            "text": text,
            "addressed_to": list(addressed_to),
            "idempotency_key": idempotency_key,
        }
        return from_dict(SendResult, self._call("POST", "/post", body))  # type: ignore[no-any-return]

    def directive(
        self, to: str | Iterable[str], text: str, *, idempotency_key: str | None = None
    ) -> SendResult:
        targets = [to] if isinstance(to, str) else list(to)
        body = {"to": targets, "text": text, "idempotency_key": idempotency_key}
        return from_dict(SendResult, self._call("POST", "/directive", body))  # type: ignore[no-any-return]

    def retract(self, directive_id: str) -> SendResult:
        data = self._call("POST", "/retract", {"directive_id": directive_id})
        return from_dict(SendResult, data)  # type: ignore[no-any-return]

    def leave(self) -> None:
        self._call("POST", "/leave")

    def board_read(self, *, after: str | None = None, limit: int = 100) -> list[BoardEntry]:
        return _list(
            BoardEntry, self._call("GET", "/board", query={"after": after, "limit": limit})
        )

    def claim_key(self, key: str, ttl: float = 300.0) -> ClaimGrant:
        data = self._call("POST", "/board/claim", {"key": key, "ttl": ttl})
        return from_dict(ClaimGrant, data)  # type: ignore[no-any-return]

    def release_key(self, key: str, token: int) -> JournalEntry:
        data = self._call("POST", "/board/release", {"key": key, "fence": token})
        return from_dict(JournalEntry, data)  # type: ignore[no-any-return]

    def renew_key(self, key: str, token: int, ttl: float = 300.0) -> ClaimGrant:
        data = self._call("POST", "/board/renew", {"key": key, "fence": token, "ttl": ttl})
        return from_dict(ClaimGrant, data)  # type: ignore[no-any-return]

    def claim(
        self,
        limit: int = 1,
        lease: float | None = None,
        wait: float = 0.0,
        owner: str | None = None,
    ) -> Lease:
        body = {"limit": limit, "lease": lease, "wait": wait, "owner": owner or self._owner()}
        data = self._call("POST", "/inbox/claim", body, timeout=_poll_timeout(wait))
        return from_dict(Lease, data)  # type: ignore[no-any-return]

    def _owner(self) -> str:
        # The claiming process, as in embedded mode: a restart on this host
        # gets its own work back at once (S32).
        return f"{self.address}:{os.getpid()}"

    def ack(self, token: str, ids: Iterable[str] | None = None) -> int:
        data = self._call("POST", "/inbox/ack", {"lease_token": token, "ids": _ids(ids)})
        return int(data["count"])

    def release(
        self, token: str, ids: Iterable[str] | None = None, *, error: str | None = None
    ) -> int:
        body = {"lease_token": token, "ids": _ids(ids), "error": error}
        return int(self._call("POST", "/inbox/release", body)["count"])

    def extend(
        self, token: str, seconds: float | None = None, ids: Iterable[str] | None = None
    ) -> str:
        body = {"lease_token": token, "seconds": seconds, "ids": _ids(ids)}
        return str(self._call("POST", "/inbox/extend", body)["expires_at"])

    def quarantine(
        self, token: str, message_id: str, reason: str, *, error: str | None = None
    ) -> None:
        body = {"lease_token": token, "message_id": message_id, "reason": reason, "error": error}
        self._call("POST", "/inbox/quarantine", body)

    def next_turn(
        self, wait: float = 0.0, lease: float | None = None, limit: int | None = None
    ) -> Turn:
        body = {"wait": wait, "lease": lease, "limit": limit}
        data = self._call("POST", "/turn", body, timeout=_poll_timeout(wait))
        return from_dict(Turn, data)  # type: ignore[no-any-return]

    def seen(self, turn_id: str) -> TurnSeen:
        data = self._call("POST", f"/turn/{quote(turn_id, safe='')}/seen")
        return from_dict(TurnSeen, data)  # type: ignore[no-any-return]


def _poll_timeout(wait: float) -> float | None:
    return None if not wait or wait <= 0 else float(wait) + TIMEOUT_S


# --- the operator ------------------------------------------------------------------------
class RemoteOperator(RemoteOperatorPaths):
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

    _one, _many = _one, _many

    def create_space(self, kind: str, **settings: object) -> CreatedSpace:
        data = self._call("POST", "/api/spaces", {"kind": kind, "settings": settings})
        return from_dict(CreatedSpace, data)  # type: ignore[no-any-return]

    def rotate_join_key(self, space: str) -> JoinKey:
        return from_dict(JoinKey, self._call("POST", _space_path(space) + "/join-key"))  # type: ignore[no-any-return]

    def spaces(self, *, state: str | None = None) -> list[Space]:
        return _list(Space, self._call("GET", "/api/spaces", query={"state": state}))

    def get_space(self, space: str) -> Space:
        return from_dict(Space, self._call("GET", _space_path(space)))  # type: ignore[no-any-return]

    def stop_space(self, space: str) -> Space:
        return from_dict(Space, self._call("POST", _space_path(space) + "/stop"))  # type: ignore[no-any-return]

    def archive_space(self, space: str) -> Space:
        data = self._call("POST", _space_path(space) + "/archive")
        return from_dict(Space, data)  # type: ignore[no-any-return]

    def set_space(self, space: str, /, **settings: object) -> SpaceUsage:
        data = self._call("PATCH", _space_path(space) + "/settings", body={"settings": settings})
        return from_dict(SpaceUsage, data)  # type: ignore[no-any-return]

    def space_usage(self, space: str, *, top: int = 10) -> SpaceUsage:
        data = self._call("GET", _space_path(space) + "/usage", query={"top": top})
        return from_dict(SpaceUsage, data)  # type: ignore[no-any-return]

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
        data = self._call("POST", _space_path(space) + "/messages", body)
        return from_dict(SendResult, data)  # type: ignore[no-any-return]

    def log(
        self,
        space: str,
        *,
        after: str | int | None = None,
        after_seq: int | None = None,
        kinds: Iterable[str] | None = None,
        limit: int | None = None,
        thread: str | None = None,
        sender: str | None = None,
        to: str | None = None,
        since: str | None = None,
        tail: int | None = None,
    ) -> list[LogEntry]:
        """The log; without ``limit`` every row after the cursor, page by page.
        ``sender``, ``to``, ``since`` and ``tail`` filter here, as ``Operator.log``
        does (the CLI passes them in client mode too)."""
        if isinstance(after, int) and not isinstance(after, bool):
            after, after_seq = None, after  # the CLI's --after SEQ
        filtered = any(x is not None for x in (sender, to, since, tail))
        page_limit = None if filtered else limit
        out: list[LogEntry] = []
        query: dict[str, Any] = {
            "after": after,
            "after_seq": after_seq,
            "kind": list(kinds or []),
            "limit": page_limit or 1000,
            "thread": thread,
        }
        while True:
            page = _list(LogEntry, self._call("GET", _space_path(space) + "/messages", query=query))
            out += page
            if page_limit is not None or len(page) < query["limit"]:
                break
            query.update(after=None, after_seq=page[-1].seq)
        if not filtered:
            return out
        out = [
            e
            for e in out
            if (sender is None or e.sender == sender)
            and (to is None or to in e.to or to in e.reached)
            and (since is None or e.created_at_utc >= since)
        ]  # the filters of Operator.log (no broker.client import: no sqlite3 here)
        if tail is not None:
            return out[-tail:]
        return out[:limit] if limit is not None else out

    def participants(self, space: str) -> list[Participant]:
        return _list(Participant, self._call("GET", _space_path(space) + "/participants"))

    def threads(self, space: str) -> list[Thread]:
        return _list(Thread, self._call("GET", _space_path(space) + "/threads"))

    def search(
        self,
        space: str,
        query: str,
        *,
        sender: str | None = None,
        to: str | None = None,
        kinds: Iterable[str] | None = None,
        since: str | None = None,
        limit: int = 20,
    ) -> list[SearchHit]:
        q = _search_query(query, sender, to, kinds, since, limit)
        return _list(SearchHit, self._call("GET", _space_path(space) + "/search", query=q))

    def status(self, space: str, message_id: str) -> AckStatus:
        path = f"{_space_path(space)}/messages/{quote(message_id, safe='')}/status"
        return from_dict(AckStatus, self._call("GET", path))  # type: ignore[no-any-return]

    def quarantined(self, space: str) -> list[QuarantinedDelivery]:
        return _list(QuarantinedDelivery, self._call("GET", _space_path(space) + "/quarantine"))

    def requeue(self, space: str, ids: Iterable[str]) -> int:
        data = self._call("POST", _space_path(space) + "/quarantine/requeue", {"ids": list(ids)})
        return int(data["count"])

    def transcript(self, space: str, address: str) -> list[TurnRecord]:
        path = f"{_space_path(space)}/participants/{quote(address, safe='')}/transcript"
        return _list(TurnRecord, self._call("GET", path))

    def claims(self, space: str) -> list[ClaimGrant]:
        return _list(ClaimGrant, self._call("GET", _space_path(space) + "/claims"))

    def claim_journal(self, space: str, *, key: str | None = None) -> list[JournalEntry]:
        path = _space_path(space) + "/claims/journal"
        return _list(JournalEntry, self._call("GET", path, query={"key": key}))

    def join(self, space: str, codename: str, **fields: object) -> tuple[RemoteAgent, Joined]:
        data = self._call(
            "POST", _space_path(space) + "/participants", {"codename": codename, **fields}
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
        path = _space_path(space) + "/messages/stream"
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
                raise error_from(response.status, _json(response.read()))
            try:
                for event, data in _events(response):
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


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


def _events(response: Any) -> Iterator[tuple[str, str]]:
    """(event, data) pairs of an SSE stream (comments and ids skipped: the
    records carry their seq)."""
    event, data = "message", list[str]()
    while True:
        line = response.readline()
        if not line:
            return
        text = line.decode("utf-8").rstrip("\r\n")
        if not text:
            if data:
                yield event, "\n".join(data)
            event, data = "message", []
        elif text.startswith(":"):
            continue
        elif text.startswith("event:"):
            event = text[6:].strip()
        elif text.startswith("data:"):
            data.append(text[5:].lstrip(" ") if text[5:6] == " " else text[5:])
