"""A call that blocks until there is something for its caller (S20), and keeps
the caller live while it blocks (S27).

``claim`` and ``next_turn`` with ``wait`` > 0 (and their asyncio twins, which
the server's long-polls and MCP's waiting tools run), and a board claim that
waits for its key, share this loop: the doorbell is bound before the first
check, each check that found nothing sleeps until rung, until ``wait`` runs
out or just past the next expiry (the inbox's leases, the key's claim), and
at most until the caller's next heartbeat is due
(``auth.Pulse``). Without that beat a CLI or served participant blocked in a
wait longer than ``live_seconds`` would look gone, and its address, the
lead's included, could be continued without its token (by the operator or
its parent, S40) while it still waits.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from broker import errors
from broker.delivery import wake
from broker.ids import parse_ts
from broker.spaces import auth
from broker.spaces.auth import Identity
from broker.store.sqlite import Store, Tx

T = TypeVar("T")


def until(store: Store, expiry: str | None, left: float) -> float:
    """How long to sleep: until ``left`` runs out, or just past the next lease
    expiry of the inbox (expiry rings no doorbell: nobody commits)."""
    if expiry is None:
        return left
    delta = (parse_ts(expiry) - store.now()).total_seconds()
    return max(0.001, min(left, delta + 0.001))


def block(
    store: Store,
    ident: Identity,
    wait: float,
    once: Callable[[], tuple[T, str | None]],
    done: Callable[[T], bool],
    keys: list[str] | None = None,
    *,
    tx: Tx | None = None,
) -> T:
    """Call ``once()`` (a result and the time something changes with no commit
    to ring: the inbox's next lease expiry, a claim's end) until ``done(result)``
    or ``wait`` seconds have passed; the last result. It sleeps on ``keys``'
    doorbells (default: the caller's inbox). Refused inside the caller's
    transaction ``tx``: it would hold the write lock all the while."""
    if tx is not None:
        raise errors.InvalidInput(
            "cannot wait inside a transaction: it would hold the write lock", field="wait"
        )
    deadline = time.monotonic() + wait
    pulse = auth.Pulse(store, ident)
    keys = keys if keys is not None else [wake.participant_key(ident.participant_id)]
    with wake.Waiter(store, keys) as waiter:
        while True:
            got, expiry = once()
            left = deadline - time.monotonic()
            if done(got) or left <= 0:
                return got
            pulse.beat()
            waiter.wait(until(store, expiry, min(left, pulse.due_in())))
