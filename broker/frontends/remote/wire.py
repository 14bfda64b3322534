"""Client mode's transport: a small HTTP/1.1 client on the standard library's
sockets (TCP or a Unix socket; ``http.client`` only for https, it costs ~18 ms
to import), and the SSE parsing of the log stream."""

from __future__ import annotations

import contextlib
import json
import os
import socket
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from broker import errors
from broker.frontends.remote.codec import error_from
from broker.model.records import json_text

SCHEMES = ("http://", "https://", "unix://")
# One encoder and decoder for every request: ``json.dumps`` with an argument
# builds an encoder per call.
_ENCODE = json.JSONEncoder(ensure_ascii=False).encode
_DECODE = json.JSONDecoder().decode
TIMEOUT_S = 30.0


def is_remote(url: str | None) -> bool:
    """Whether ``url`` names a broker server rather than a database."""
    return bool(url) and str(url).startswith(SCHEMES)


# --- the connection ----------------------------------------------------------------------
class ProtocolError(OSError):
    """The server's answer was not the HTTP/1.1 this client speaks."""


_HEX = frozenset(b"0123456789abcdefABCDEF")
_DIGITS = frozenset(b"0123456789")


def _number(text: bytes, what: str, base: int) -> int:
    """A number of the response's framing, in ASCII digits only (``int`` also
    reads '+5', ' 5', '0x5' and '1_0': not HTTP, and not this client's to guess)."""
    digits = _HEX if base == 16 else _DIGITS
    if not text or len(text) > 16 or not digits.issuperset(text):
        raise ProtocolError(f"bad {what} in the server's response: {text[:20]!r}")
    return int(text, base)


def _field(fields: bytes, name: bytes) -> bytes:
    """The value of header ``name`` (``b"\\r\\nname:"``, lower case) in a
    response's header lines (lower-cased, each after a CRLF); the last one if
    it is repeated, b"" if it is absent."""
    at = fields.rfind(name)
    if at < 0:
        return b""
    at += len(name)
    end = fields.find(b"\r\n", at)
    return fields[at : end if end >= 0 else len(fields)].strip()


class Response:
    """One HTTP/1.1 response read from a socket: its status, the headers its
    framing needs, and the body as bytes (``read``) or line by line
    (``readline``, for SSE), with chunked transfer decoding. The other
    headers are not read: nothing in client mode needs them."""

    def __init__(self, conn: Wire) -> None:
        self._conn = conn
        self._f = conn.rfile
        line, _, fields = self._head().partition(b"\r\n")
        parts = line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
            raise ProtocolError(f"not an HTTP response: {line[:80]!r}")
        self.status = _number(parts[1], "status", 10)
        fields = b"\r\n" + fields.lower()
        self._chunked = b"chunked" in _field(fields, b"\r\ntransfer-encoding:")
        length = _field(fields, b"\r\ncontent-length:") or b"0"
        self._left = _number(length, "content-length", 10) if not self._chunked else 0
        self._buf = b""
        self._done = not self._chunked and self._left == 0
        self.will_close = _field(fields, b"\r\nconnection:") == b"close"
        self.owner: Wire | None = None  # a one-off connection, closed with this response

    def _head(self) -> bytes:
        """The status line and the header lines, joined by CRLF, without the
        blank line. The server writes a response's head in one piece: taken
        from the buffer at once when it is whole there, else read line by line."""
        buffered = self._f.peek(65536)
        end = buffered.find(b"\r\n\r\n")
        if end >= 0 and b"\n" not in buffered[:end].replace(b"\r\n", b""):
            return self._f.read(end + 4)[:end]
        lines = [self._f.readline(65537).rstrip(b"\r\n")]
        while (h := self._f.readline(65537)) not in (b"\r\n", b"\n", b""):
            lines.append(h.rstrip(b"\r\n"))
        return b"\r\n".join(lines)

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
        size = _number(size_line.split(b";", 1)[0].strip() or b"0", "chunk size", 16)
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
        # A request's head up to its Content-Length, by what it says: an agent
        # repeats a few requests (send, claim, ack), each head made once.
        self._heads: dict[tuple[str, str, tuple[tuple[str, str], ...]], bytes] = {}

    def request(
        self, method: str, target: str, *, body: bytes | None, headers: dict[str, str]
    ) -> Response:
        key = (method, target, tuple(headers.items()))
        head = self._heads.get(key)
        if head is None:
            lines = [f"{method} {target} HTTP/1.1", f"Host: {self.host}"]
            lines += [f"{k}: {v}" for k, v in headers.items()]
            head = ("\r\n".join(lines) + "\r\n").encode("latin-1")
            if len(self._heads) >= 64:  # a bound: query strings vary
                self._heads.clear()
            self._heads[key] = head
        if body is not None or method in ("POST", "PATCH", "PUT"):
            head += b"Content-Length: %d\r\n" % len(body or b"")
        self.sock.sendall(head + b"\r\n" + (body or b""))
        return Response(self)

    def settimeout(self, timeout: float) -> None:
        self.sock.settimeout(timeout)

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

    def settimeout(self, timeout: float) -> None:
        self.conn.timeout = timeout
        if self.conn.sock is not None:
            self.conn.sock.settimeout(timeout)

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
        parts = _parsed(url)
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
        keep: bool = False,
    ) -> Any:
        """Send one request; the response is the caller's to read.

        ``timeout`` (a long-poll's): a connection of its own, closed with the
        response (a stream), unless ``keep``: then the keep-alive connection
        with that timeout for this request (``call`` reads the response whole
        and sets the usual timeout back), so an agent that waits for mail
        does not open a connection per wait."""
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
            payload = _ENCODE(body).encode("utf-8", "surrogatepass")
            head["Content-Type"] = "application/json"
        wait = timeout if timeout is not None else self.timeout
        own = timeout is not None and not keep  # a connection for this request alone
        for attempt in (1, 2):
            fresh = self._conn is None or own
            conn = None
            try:
                conn = self._new(wait) if fresh else self._conn
                assert conn is not None
                if timeout is not None and not own:
                    conn.settimeout(wait)
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
            if not own and not getattr(response, "will_close", False):
                self._conn = conn
            else:
                if conn is self._conn:
                    self._conn = None
                response.owner = conn  # closed with the response (see ``call``)
            return response
        raise AssertionError("unreachable")

    def call(self, method: str, path: str, *, secret: str | None, **kw: Any) -> Any:
        """A JSON request: its decoded result, or the library's error."""
        response = self.open(method, path, secret=secret, keep=True, **kw)
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
        if kw.get("timeout") is not None and self._conn is not None:
            self._conn.settimeout(self.timeout)  # the long-poll's timeout was for it alone
        data = json_or_none(raw) if raw else None
        if response.status >= 400:
            raise error_from(response.status, data)
        return data

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _parsed(url: str) -> Any:
    """``url`` split, its port checked here: a malformed one (an unclosed
    ``[``, a port past 65535) is invalid input, not a server that did not answer."""
    try:
        parts = urlsplit(url)
        port = parts.port  # raises for a port that is not one
    except ValueError as exc:
        raise errors.InvalidInput(f"bad server URL {url!r}: {exc}", field="url") from None
    if port == 0:
        raise errors.InvalidInput(f"bad server URL {url!r}: port 0", field="url")
    return parts


def connect(url: str | None = None) -> Connection:
    """A connection to the server at ``url`` (default ``BROKER_URL``)."""
    return Connection(url or os.environ.get("BROKER_URL", ""))


def space_path(space: str) -> str:
    """The path of a space's resources (``spaces`` takes any kind)."""
    return f"/api/spaces/{quote(space, safe='')}"


def json_or_none(raw: bytes) -> Any:
    """The server's JSON answer (None if it is none)."""
    try:
        return _DECODE(json_text(raw))
    except ValueError:
        return None


def events(response: Any) -> Iterator[tuple[str, str]]:
    """(event, data) pairs of an SSE stream (ids skipped: the records carry
    their seq); a comment (the server's keep-alive) is ("comment", text), so a
    reader can tell a quiet space from a dead connection."""
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
            yield "comment", text[1:].strip()
        elif text.startswith("event:"):
            event = text[6:].strip()
        elif text.startswith("data:"):
            data.append(text[5:].lstrip(" ") if text[5:6] == " " else text[5:])
