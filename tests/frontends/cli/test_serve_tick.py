"""``broker serve``'s main loop: one tick a second, woken at once to stop.

uvicorn's own loop wakes ten times a second to see whether it should stop
(and dates its answers once a second): an idle server with parked
long-polls woke for nothing. The server's loop ticks once a second, and a
SIGTERM (``handle_exit``) wakes it at once."""

from __future__ import annotations

import asyncio
import signal
import time
from types import SimpleNamespace

import uvicorn

from broker.frontends.cli.serve import _Server


def _server() -> tuple[uvicorn.Server, list[str]]:
    stopped: list[str] = []
    app = SimpleNamespace(
        state=SimpleNamespace(broker=SimpleNamespace(shutdown=lambda: stopped.append("shutdown")))
    )
    config = uvicorn.Config(lambda *a: None, log_level="error")
    config.load()
    return _Server(config, app).server, stopped


def test_the_main_loop_ticks_once_a_second_and_dates_its_answers_each_tick() -> None:
    server, _ = _server()
    ticks: list[float] = []

    async def on_tick(counter: int) -> bool:
        ticks.append(time.monotonic())
        assert counter % 10 == 0  # uvicorn refreshes the Date header on such a tick
        return len(ticks) == 3

    server.on_tick = on_tick  # type: ignore[method-assign]
    asyncio.run(server.main_loop())
    gaps = [b - a for a, b in zip(ticks, ticks[1:], strict=False)]
    assert len(gaps) == 2 and all(gap >= 0.95 for gap in gaps), gaps  # not uvicorn's 0.1 s


def test_a_sigterm_wakes_the_main_loop_at_once() -> None:
    server, stopped = _server()

    async def run() -> float:
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        loop.call_later(0.05, server.handle_exit, signal.SIGTERM, None)
        await server.main_loop()
        return time.monotonic() - started

    took = asyncio.run(run())
    assert server.should_exit and stopped == ["shutdown"]
    assert took < 0.9, took  # woken by the signal, not by its next one-second tick
