"""Client mode's HTTP/1.1 reader (``broker.frontends.remote.wire``) against a
server on a real socket that writes its answers in the shapes HTTP allows: the
head in one piece (the broker's own server), a byte at a time, with bare line
feeds, a chunked body."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from broker import errors
from broker.frontends.remote.wire import connect

BODY = b'{"count":1}'
ONE_PIECE = (
    b"HTTP/1.1 200 OK\r\ndate: x\r\nserver: uvicorn\r\ncontent-length: 11\r\n"
    b"content-type: application/json\r\n\r\n" + BODY
)


def serve(answers: list[tuple[bytes, float]]) -> Iterator[str]:
    """A server answering each request on one connection with the next of
    ``answers`` (written ``step`` bytes at a time with a pause between, when
    ``step`` is > 0): its URL."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def run() -> None:
        conn, _ = listener.accept()
        with conn:
            for answer, pause in answers:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, rest = data.partition(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                while len(rest) < length:
                    rest += conn.recv(65536)
                if pause:
                    for i in range(len(answer)):
                        conn.sendall(answer[i : i + 1])
                        time.sleep(pause)
                else:
                    conn.sendall(answer)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        listener.close()
        thread.join(5)


@pytest.fixture
def shapes() -> Iterator[str]:
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5\r\n" + BODY[:5] + b"\r\n6\r\n" + BODY[5:] + b"\r\n0\r\n\r\n"
    )
    bare = b"HTTP/1.1 200 OK\ncontent-length: 11\nX-A: b\n\n" + BODY
    # A value naming another header is no header; a length padded and in capitals.
    named = b"HTTP/1.1 200 OK\r\nX-Note: content-length: 99\r\nCONTENT-LENGTH:  11 \r\n\r\n" + BODY
    yield from serve(
        [(ONE_PIECE, 0), (ONE_PIECE, 0.001), (bare, 0), (chunked, 0), (named, 0), (ONE_PIECE, 0)]
    )


def test_every_shape_of_an_answer_is_read_whole_on_one_kept_connection(shapes: str) -> None:
    conn = connect(shapes)
    try:
        for _ in range(6):  # one piece, a byte at a time, bare LFs, chunked, named, one piece
            assert conn.call("POST", "/x", secret="s", body={}) == {"count": 1}
    finally:
        conn.close()


def test_a_head_that_is_not_http_is_a_clear_error() -> None:
    for url in serve([(b"SMTP ready\r\n\r\n", 0)]):
        conn = connect(url)
        with pytest.raises(errors.ServerUnreachable, match="not an HTTP response"):
            conn.call("POST", "/x", secret="s", body={})
        conn.close()
