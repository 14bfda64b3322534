"""``python -m bench.served_protocol``: the HTTP protocol's own Python for one
lean request, without sockets, the lane or the store.

``bench.served_step`` reads the whole server per request (its protocol, the
lean lane, the library, the store, the socket), and moves by 10 % from run to
run on a virtual machine, more than a change to the protocol alone makes.
This drives ``broker serve``'s protocol class (``deadlines.protocol``: uvicorn's
httptools protocol with the deadlines and the lean lane's hooks) in one
process: an agent's kept-alive request (an ack, as the remote client frames
it) is fed to ``data_received``, a stand-in lane takes it and answers at once
with the lane's own ``Answer``, and a stand-in transport takes the write.
What is timed is what the protocol does with a request and its answer:
parsing, the deadlines, the lane's checks, the answer's head. It reports the
median and the least µs a request over ``--rounds`` rounds of
``--requests``; the least is the steadier figure on a noisy machine.

python -m bench.served_protocol --requests 5000 --rounds 15
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from bench.core import count

BODY = b'{"lease_token":"abcdefghijklmnop"}'
REQUEST = (
    b"POST /api/spaces/run_01abc/agent/inbox/ack HTTP/1.1\r\nHost: localhost\r\n"
    b"Accept: application/json\r\nAuthorization: Bearer tok_abcdefghijklmnopqrstuvwxyz012345\r\n"
    b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(BODY)
) + BODY


class _Call:
    __slots__ = ("path", "secret")

    def __init__(self, path: str, secret: str) -> None:
        self.path, self.secret = path, secret


class _Lane:
    """The lane's interface to the protocol, answering every call at once."""

    max_body = 64 * 1024
    headers = [(b"x-broker-worker", b"1")]

    def __init__(self) -> None:
        from broker.frontends.http.lane import Answer

        self.answer = Answer(200, b'{"count":1}')
        self.taken = 0

    def call(self, method: bytes, path: str, secret: str) -> _Call:
        return _Call(path, secret)

    def run(self, call: _Call, body: bytes, answer: Any) -> bool:
        self.taken += 1
        answer(self.answer)
        return True


class _Transport(asyncio.Transport):
    """Takes the writes; counts the bytes."""

    def __init__(self) -> None:
        super().__init__()
        self.sent = 0
        self.closing = False

    def write(self, data: Any) -> None:
        self.sent += len(data)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8787), "peername": ("127.0.0.1", 40000)}.get(
            name, default
        )

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def _measure(requests: int, rounds: int) -> list[float]:
    from uvicorn.config import Config
    from uvicorn.server import ServerState

    from broker.frontends.http.deadlines import protocol

    lane = _Lane()
    cls = protocol(10.0, 10.0, lane)
    config = Config(app=_app, http=cls, lifespan="off", log_level="warning")
    config.load()
    state = ServerState()
    state.default_headers = [(b"date", b"Sat, 05 Dec 2026 03:00:00 GMT"), (b"server", b"uvicorn")]
    conn = cls(config, state, {}, asyncio.get_running_loop())
    transport = _Transport()
    conn.connection_made(transport)
    feed, flush = conn.data_received, conn.transport.flush
    for _ in range(1000):  # warm
        feed(REQUEST)
        flush()
    per: list[float] = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(requests):
            feed(REQUEST)
            flush()
        per.append((time.perf_counter() - t0) / requests * 1e6)
        await asyncio.sleep(0)  # the loop's own turn: the timers the requests armed
    answered = 1000 + rounds * requests
    if lane.taken != answered or transport.closing:
        raise RuntimeError(f"the lane took {lane.taken} of {answered} requests")
    return per


async def _app(scope: Any, receive: Any, send: Any) -> None:  # never reached: the lane answers
    raise RuntimeError("a request reached the app")


def measure(requests: int, rounds: int) -> dict[str, float]:
    """µs of the protocol's Python a request: the median and the least of the rounds'."""
    try:
        import uvloop

        per = uvloop.run(_measure(requests, rounds))
    except ImportError:  # pragma: no cover - uvloop is in the serve extra
        per = asyncio.run(_measure(requests, rounds))
    return {"median_us": statistics.median(per), "least_us": min(per)}


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.served_protocol",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--requests", type=count, default=5000, help="requests a round")
    parser.add_argument("--rounds", type=count, default=15)
    args = parser.parse_args()
    got = measure(args.requests, args.rounds)
    print(
        f"protocol µs a lean request: median {got['median_us']:.2f}, "
        f"least {got['least_us']:.2f} ({args.rounds} rounds of {args.requests})"
    )


if __name__ == "__main__":
    main()
