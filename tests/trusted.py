"""Joins for tests that are not about joining: with the store's operator key.

The key comes from the library (``broker.store.keys.presented``: BROKER_OPERATOR_KEY
or the key file beside the database), the way an operator's own process finds
it. Tests of the join rules themselves (S27, S28) use the join key and parent
tokens explicitly (tests/unit/spaces/test_trust.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from broker import Agent
from broker.api.aio import AsyncAgent
from broker.api.handles import Store
from broker.model.records import Joined, to_dict
from broker.spaces import participants
from broker.store import keys, procs


def join(store: Store, space: str, codename: str, **fields: Any) -> tuple[Agent, Joined]:
    """``Agent.join`` with the operator key (this process holds the identity)."""
    fields.setdefault("operator_key", keys.presented(store))
    return Agent.join(store, space, codename, **fields)


def credential(store: Store) -> participants.Credential:
    """The operator key as a join credential (``directory.register`` takes one)."""
    return participants.Credential(operator_key=keys.presented(store))


async def ajoin(
    store: Store, space: str, codename: str, **fields: Any
) -> tuple[AsyncAgent, Joined]:
    """``AsyncAgent.join`` with the operator key."""
    fields.setdefault("operator_key", keys.presented(store))
    return await AsyncAgent.join(store, space, codename, **fields)


def in_a_gone_process(store: Store, joins: Callable[[Store], Joined]) -> tuple[Agent, Joined, int]:
    """A participant whose process is gone: ``joins(store)`` runs in a forked
    child, on a store of its own (same URL and clock), and records that child
    as its process (S27: a join records only the joining process or one of its
    ancestors), then the child exits. Returns a handle on it here, its
    ``Joined`` and the dead child's pid."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.close(read)
            joined = joins(Store(store.url, clock=store.clock))  # never the parent's connection
            os.write(write, json.dumps(to_dict(joined)).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    assert status == 0 and data, "the joining child failed"
    joined = Joined(**json.loads(data))
    return Agent.connect(store, joined.space_id, joined.address, joined.token), joined, pid


def join_gone(store: Store, space: str, codename: str, **fields: Any) -> tuple[Agent, Joined, int]:
    """``join`` from a process that is gone by the time it returns (see
    ``in_a_gone_process``)."""
    return in_a_gone_process(store, lambda s: join(s, space, codename, **fields)[1])


def dead_process() -> str:
    """A ``host:pid:start`` of a process that has exited, its pid reaped (restart
    recovery, S32: a lease recorded under it is held by nobody)."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead = f"{procs.host()}:{int(done.stdout)}:1"
    assert procs.gone(dead)
    return dead
