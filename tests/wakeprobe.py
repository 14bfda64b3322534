"""Watch a waiter through the doorbell's test hook (``broker.delivery.wake._hook``).

``probe = WakeProbe.install(monkeypatch)``; ``probe.asleep.wait(30)`` returns
once a waiter has registered, checked, read the change marker and is about to
block, so a test sends only then; ``probe.woke`` lists why each wait returned
("rung": the doorbell; "tick": the safety net; "changed", "polled", "timeout").
"""

from __future__ import annotations

import threading

import pytest

from broker.delivery import wake


class WakeProbe:
    def __init__(self) -> None:
        self.asleep = threading.Event()
        self.woke: list[str] = []

    def __call__(self, waiter: wake.Waiter, event: str) -> None:
        if event == "sleep":
            self.asleep.set()
        elif event == "woke":
            self.woke.append(waiter.woke)

    @classmethod
    def install(cls, monkeypatch: pytest.MonkeyPatch) -> WakeProbe:
        probe = cls()
        monkeypatch.setattr(wake, "_hook", probe)
        return probe
