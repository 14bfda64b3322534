"""Tail a space's log as rows commit (``broker message list --follow``), until it stops.

Uses the space's doorbell (``broker.wake``): woken by each commit that appends
to the log, no busy polling of the tables.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from broker import errors, messages, spaces, wake
from broker.db import Store
from broker.records import LogEntry


def follow_log(
    store: Store,
    space_ref: str,
    *,
    after: str | None = None,
    after_seq: int | None = None,
    kinds: Iterable[str] = (),
    idle_timeout: float | None = None,
) -> Iterator[list[LogEntry]]:
    """Yield batches of new log entries until the space is no longer running.

    ``idle_timeout`` ends the follow after that many seconds without news."""
    space = spaces.get(store, space_ref)
    kind_list = list(kinds)
    seq = after_seq
    if seq is None and after is not None:
        with store.read() as t:
            row = t.one("SELECT seq FROM messages WHERE space_id = ? AND id = ?", (space.id, after))
        if row is None:
            raise errors.MessageNotFound(f"no message {after!r} in space {space.id}")
        seq = row[0]  # even when nothing follows it yet: never restart from the top
    with wake.Waiter(store, [wake.space_key(space.id)]) as waiter:
        while True:
            batch = messages.log(store, space.id, after_seq=seq, kinds=kind_list)
            if batch:
                seq = batch[-1].seq
                yield batch
            elif spaces.get(store, space.id).state != "running":
                # One last read: rows committed just before the stop.
                return
            rung = waiter.wait(idle_timeout if idle_timeout is not None else 3600.0)
            if not rung and idle_timeout is not None:
                return
