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


def test_the_server_tunes_its_interpreter_for_the_event_loop() -> None:
    """``broker serve`` (its process alone: the library never does) freezes
    what it has loaded out of the cyclic collector's sight, runs a full
    collection at most every ``FULL_COLLECTION_EVERY`` middle ones, and lets
    another thread hold the interpreter at most ``SWITCH_INTERVAL_S`` before
    the event loop gets it back (a console view's reading held it 5 ms at a
    time: a p99 of 12 ms for the sends meanwhile instead of 5)."""
    import json
    import subprocess
    import sys

    from broker.frontends.cli import serve

    probe = (
        "import gc, json, sys; from broker.frontends.cli import serve; "
        "now = lambda: (sys.getswitchinterval(), gc.get_threshold()[2], gc.get_freeze_count()); "
        "before = now(); serve.tune_interpreter(); print(json.dumps([before, now()]))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    before, after = json.loads(out.stdout)
    assert before[0] == 0.005 and before[2] == 0  # the interpreter's own
    assert after[0] == serve.SWITCH_INTERVAL_S == 0.001
    assert after[1] == serve.FULL_COLLECTION_EVERY
    assert after[2] > 10_000  # the loaded modules, frozen
