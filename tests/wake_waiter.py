"""Helper processes for tests/unit/delivery/test_wake.py (run as scripts, never imported by pytest).

``waiter MODE URL SPACE ADDRESS TOKEN WAIT``: waits once the way MODE does
(``claim``: ``inbox.claim(ClaimInput(wait=WAIT))``; ``turn``: ``turns.next_turn(wait=WAIT)``;
``follow``: the first batch of ``follow_log`` after the backlog) and prints, as
JSON lines, every event of the doorbell's test hook (``{"event", "woke", "ns"}``:
"enter", "sleep" - registered, checked, about to block -, "woke") and then
``{"result": [bodies]}``.

``bound URL KEY``: makes a Waiter on KEY, prints its socket path, and is killed
by SIGKILL before it can clean up (a waiter that died).

``two-waiters URL SPACE A TOKEN_A B TOKEN_B``: registers a Waiter for A and one
for B in this one process, prints ``{"parked": 2}`` once B's is about to
sleep, and prints ``{"w1": [bodies], "woke": why}`` once B's wait returned
with mail (S41: the test stops this process meanwhile).

``killed-writer URL SPACE ADDRESS TOKEN TO BODY``: sends BODY to TO and is
killed by SIGKILL right after the COMMIT, before its doorbell rings (the
after-commit hooks run in order: ours first).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any


def _emit(obj: dict[str, Any]) -> None:
    print(json.dumps(obj), flush=True)


def waiter(mode: str, url: str, space: str, address: str, token: str, wait: str) -> None:
    from broker import Store
    from broker.delivery import wake
    from broker.spaces import participants

    store = Store(url)
    ident = participants.authenticate(store, space, address, token)

    def hook(w: wake.Waiter, event: str) -> None:
        _emit({"event": event, "woke": w.woke, "ns": time.time_ns()})

    if mode == "follow":
        from broker.delivery.follow import follow_log
        from broker.mail.messages import log

        seq = max((e.seq for e in log(store, space)), default=0)
        wake._hook = hook
        batch = next(follow_log(store, space, after_seq=seq, idle_timeout=float(wait)), [])
        _emit({"result": [e.body for e in batch]})
        return
    wake._hook = hook
    if mode == "claim":
        from broker.delivery import inbox
        from broker.model.inputs import ClaimInput

        got = inbox.claim(store, ident, ClaimInput(wait=float(wait)))
        _emit({"result": [d.body for d in got.deliveries]})
    elif mode == "turn":
        from broker.delivery import turns

        turn = turns.next_turn(store, ident, wait=float(wait))
        _emit({"result": [i.body for i in turn.items]})
    else:
        raise SystemExit(f"unknown mode {mode!r}")


def bound(url: str, key: str) -> None:
    from broker import Store
    from broker.delivery import wake

    w = wake.Waiter(Store(url), [key])
    _emit({"path": w.paths[0], "socket": w.socket_path})
    os.kill(os.getpid(), signal.SIGKILL)


def two_waiters(url: str, space: str, a: str, token_a: str, b: str, token_b: str) -> None:
    from broker import Agent, Store
    from broker.delivery import wake

    store = Store(url)
    agent_a, agent_b = (
        Agent.connect(store, space, a, token_a),
        Agent.connect(store, space, b, token_b),
    )
    keys = [wake.participant_key(x.identity.participant_id) for x in (agent_a, agent_b)]

    def hook(w: wake.Waiter, event: str) -> None:
        if event == "sleep" and w.keys == keys[1:] and not told:
            told.append(1)
            _emit({"parked": 2})

    told: list[int] = []
    with wake.Waiter(store, keys[:1]), wake.Waiter(store, keys[1:]) as waiter_b:
        wake._hook = hook
        while True:
            got = agent_b.claim()
            if got.deliveries:
                _emit({"w1": [d.body for d in got.deliveries], "woke": waiter_b.woke})
                return
            waiter_b.wait(60)


def killed_writer(url: str, space: str, address: str, token: str, to: str, body: str) -> None:
    from broker import Agent, Store

    store = Store(url)
    me = Agent.connect(store, space, address, token)
    with store.transaction() as tx:
        tx.after_commit(lambda: os.kill(os.getpid(), signal.SIGKILL))
        me.send(to, body, tx=tx)


if __name__ == "__main__":
    what, *args = sys.argv[1:]
    if what == "waiter":
        waiter(*args)
    elif what == "bound":
        bound(*args)
    elif what == "two-waiters":
        two_waiters(*args)
    elif what == "killed-writer":
        killed_writer(*args)
    else:
        raise SystemExit(f"unknown helper {what!r}")
