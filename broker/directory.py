"""The directory (S25): who is registered and how to reach them.

The ``mail/dir/<id>.txt`` files of spec §Mailbox layout (id, role, archetype,
task), in SQL. A directory entry IS a participant row (one concept, not two
tables that drift): registering joins the space with the directory fields,
unregistering leaves.
Each claim or turn refreshes ``last_seen_utc`` (the heartbeat); ``prune`` records
as left the entries whose heartbeat is too old or whose process is gone.
"""

from __future__ import annotations

import os
from datetime import timedelta

from broker import errors, participants
from broker.auth import Identity
from broker.db import Store, Tx
from broker.ids import fmt_ts
from broker.messages import parse_input
from broker.models import JoinInput
from broker.records import Joined, Participant
from broker.spaces import resolve_id

ARCHETYPES = ("specialist", "surveyor", "researcher", "planner", "interfacer")


def register(
    store: Store,
    space_ref: str,
    agent_id: str,
    *,
    role: str,
    archetype: str,
    task: str,
    agent: str | None = None,
    pid: int | None = None,
    tx: Tx | None = None,
) -> Joined:
    """Register before you work: join the space carrying the directory fields."""
    if archetype not in ARCHETYPES:
        raise errors.InvalidInput(
            f"archetype must be one of {', '.join(ARCHETYPES)}, not {archetype!r}"
        )
    fields = {
        "codename": agent_id,
        "agent": agent,
        "role": role,
        "archetype": archetype,
        "task": task,
        "pid": pid,
    }
    return participants.join(store, space_ref, parse_input(JoinInput, fields), tx=tx)


def entries(
    store: Store, space_ref: str, *, include_left: bool = False, tx: Tx | None = None
) -> list[Participant]:
    return participants.list_participants(store, space_ref, include_left=include_left, tx=tx)


def show(store: Store, space_ref: str, agent_id: str, *, tx: Tx | None = None) -> Participant:
    return participants.get(store, space_ref, agent_id, tx=tx)


def unregister(store: Store, ident: Identity, *, tx: Tx | None = None) -> None:
    """Unregister when done (records ``left`` with reason ``unregister``)."""
    participants.leave(store, ident, reason="unregister", tx=tx)


def process_gone(pid: int | None) -> bool:
    """True when ``pid`` names no process on this host (None: unknown, never gone)."""
    if pid is None or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # it exists, it is just not ours
    return False


def prune(
    store: Store,
    space_ref: str,
    *,
    older_than: float | None = None,
    check_pid: bool = True,
    dry_run: bool = False,
    tx: Tx | None = None,
) -> list[Participant]:
    """Record stale entries as left: heartbeat older than ``older_than`` seconds,
    or (``check_pid``) a registered process that no longer exists. ``dry_run``:
    only say who would be pruned (nothing is written)."""
    if older_than is not None and older_than < 0:
        raise errors.InvalidInput("older_than must be >= 0 seconds")
    cutoff = fmt_ts(store.now() - timedelta(seconds=older_than)) if older_than is not None else None
    pruned: list[Participant] = []
    with store.write(tx) as t:
        space_id = resolve_id(t, space_ref)
        rows = t.all(
            f"SELECT {participants.COLUMNS} FROM participants WHERE space_id = ? AND status != 'left' "
            "ORDER BY joined_at_utc, id",
            (space_id,),
        )
        for row in rows:
            entry = participants.to_model(row)
            stale = cutoff is not None and entry.last_seen_utc < cutoff
            if stale or (check_pid and process_gone(entry.pid)):
                if not dry_run:
                    participants.leave_in_tx(store, t, entry.id, "prune")
                pruned.append(entry)
    return pruned
