"""The directory (S25): who is registered and how to reach them.

The ``mail/dir/<id>.txt`` files of spec §Mailbox layout (id, role, archetype,
task), in SQL. A directory entry IS a participant row (one concept, not two
tables that drift): registering joins the space with the directory fields,
unregistering leaves.
Each claim or turn refreshes ``last_seen_utc`` (the heartbeat); ``prune`` records
as left the entries whose process is gone or whose heartbeat is too old, never
the lead or a live participant by age alone, and can first say what it would
remove (``dry_run``).
"""

from __future__ import annotations

from datetime import timedelta

from broker import errors
from broker.ids import fmt_ts
from broker.model import bounds
from broker.model.records import Joined, Participant
from broker.spaces import participants
from broker.spaces.auth import Identity
from broker.spaces.spaces import limits_of, resolve_id
from broker.store import procs
from broker.store.sql import stmt
from broker.store.sqlite import Store, Tx

ARCHETYPES = ("specialist", "surveyor", "researcher", "planner", "interfacer")
MAX_AGE_S = 10 * 366 * bounds.DAY_S
PID_MAX = 2**31 - 1
_SETTINGS = stmt("spaces.get")  # the space row: its settings hold the lease


def register(
    store: Store,
    space_ref: str,
    agent_id: str,
    *,
    role: str,
    archetype: str,
    task: str,
    credential: participants.Credential,
    agent: str | None = None,
    pid: int | None = None,
    tx: Tx | None = None,
) -> Joined:
    """Register before you work: join the space carrying the directory fields,
    with a join credential like any join (S27)."""
    if archetype not in ARCHETYPES:
        raise errors.InvalidInput(
            f"archetype must be one of {', '.join(ARCHETYPES)}, not {archetype!r}",
            field="archetype",
        )
    if pid is not None:
        pid = bounds.count(pid, "pid", top=PID_MAX)
    fields = {
        "codename": agent_id,
        "agent": agent,
        "role": role,
        "archetype": archetype,
        "task": task,
        "pid": pid,
    }
    from broker.model.inputs import JoinInput

    return participants.join(
        store, space_ref, JoinInput.parse(fields), credential=credential, tx=tx
    )


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
    return procs.pid_gone(pid)


def prune(
    store: Store,
    space_ref: str,
    *,
    older_than: float | None = None,
    check_pid: bool = True,
    dry_run: bool = False,
    tx: Tx | None = None,
) -> list[Participant]:
    """Record stale entries as left (reason ``prune``), oldest first, and return
    them; with ``dry_run`` only return what would be removed.

    An entry is stale when its registered process no longer exists
    (``check_pid``), or when its heartbeat is older than ``older_than``
    seconds (0 to 10 years). Age alone never removes the lead, an entry whose
    registered process is alive, or one whose heartbeat is fresher than the
    space's ``lease_seconds``. Between that and ``live_seconds`` the operator
    decides: a participant without a process that has been silent that long
    may be in a model call, or may have crashed without leaving, and pruning
    it is how the operator frees its address sooner (S27, S40)."""
    if older_than is not None:
        older_than = bounds.seconds(older_than, "older_than", top=MAX_AGE_S, zero=True)
    if not isinstance(check_pid, bool):
        raise errors.InvalidInput(f"bad check_pid {check_pid!r}: true or false", field="check_pid")
    if not isinstance(dry_run, bool):
        raise errors.InvalidInput(f"bad dry_run {dry_run!r}: true or false", field="dry_run")
    now = store.now()
    pruned: list[Participant] = []
    with store.write(tx) as t:
        space_id = resolve_id(t, space_ref)
        cutoff = None
        if older_than is not None:
            settings = t.one(_SETTINGS, {"space_id": space_id})["settings"]
            live_for = limits_of(settings).lease_seconds
            cutoff = fmt_ts(now - timedelta(seconds=max(older_than, live_for)))
        for entry in participants.list_participants(store, space_id, include_left=False, tx=t):
            gone = check_pid and process_gone(entry.pid)
            alive = entry.pid is not None and not process_gone(entry.pid)
            stale = (
                cutoff is not None
                and entry.last_seen_utc < cutoff
                and not entry.is_lead
                and not alive
            )
            if gone or stale:
                if not dry_run:
                    participants.leave_in_tx(store, t, entry.id, "prune")
                pruned.append(entry)
    return pruned
