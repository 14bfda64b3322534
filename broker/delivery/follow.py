"""Tail a space's log as rows commit (``broker message list --follow``), until it stops.

Uses the space's doorbell (``broker.delivery.wake``): woken by each commit that appends
to the log, no busy polling of the tables. The doorbell is bound before the
first read, so nothing committed after that read is missed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Iterator

from broker import errors
from broker.delivery import wake
from broker.ids import by_id
from broker.mail import messages
from broker.model.records import LogEntry
from broker.spaces import spaces
from broker.store.sql import stmt
from broker.store.sqlite import Store

# The log position of a message id: the board's cursor statement is that very
# statement (one text, one name in the catalogue).
_SEQ_OF = stmt("messages.seq_of")

FOREVER_S = 3600.0  # one wait without an idle timeout; the loop waits again
BATCH = 256  # entries per read: short read snapshots never pin the WAL, bounded memory


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

    Returns as soon as the space is stopped (or archived) and every entry
    logged before that was yielded, even when it stopped before the call.
    ``idle_timeout`` ends the follow after that many seconds without a new
    entry (entries of other kinds, or of other spaces, do not count)."""
    if idle_timeout is not None and not (math.isfinite(idle_timeout) and idle_timeout >= 0):
        raise errors.InvalidInput(
            f"idle_timeout must be a finite number of seconds >= 0, not {idle_timeout!r}",
            field="idle_timeout",
        )
    space = spaces.get(store, space_ref)
    kind_list = list(kinds)
    seq = after_seq
    if seq is None and after is not None:
        with store.read() as t:
            row = t.one(_SEQ_OF, {"space_id": space.id, **by_id(after)})
        if row is None:
            raise errors.MessageNotFound(f"no message {after!r} in space {space.id}")
        seq = row["seq"]  # even when nothing follows it yet: never restart from the top
    quiet_until = None if idle_timeout is None else time.monotonic() + idle_timeout
    with wake.Waiter(store, [wake.space_key(space.id)]) as waiter:
        while True:
            # One snapshot for both: if it shows the space stopped, the batch read
            # in it holds every entry logged before the stop.
            with store.read() as t:
                running = spaces.get(store, space.id, tx=t).state == "running"
                batch = messages.log(
                    store, space.id, after_seq=seq, kinds=kind_list, limit=BATCH, tx=t
                )
            if batch:
                seq = batch[-1].seq
                yield batch  # outside the snapshot: a slow consumer must not pin the WAL
                if idle_timeout is not None:
                    quiet_until = time.monotonic() + idle_timeout
                continue  # read again before waiting (or returning)
            if not running:
                return
            if quiet_until is None:
                waiter.wait(FOREVER_S)
                continue
            left = quiet_until - time.monotonic()
            if left <= 0:
                return
            waiter.wait(left)
