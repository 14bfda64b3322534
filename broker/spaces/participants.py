"""Participants (S2-S5): join, re-join, leave, authenticate, the joined/left journal.

A participant row is also its directory entry (S25): role, archetype and task
live on it, so the directory and the roster can never drift apart.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

from broker import errors
from broker.delivery import inbox, wake
from broker.delivery.transcript import notice
from broker.ids import hash_token, new_id, new_token, parse_ts
from broker.record_type import record
from broker.spaces import auth, grants, shares
from broker.spaces.addressing import address_of, reads_as
from broker.spaces.auth import Identity

# The row mapper and writers live in broker.spaces.roster (below spaces); re-exported
# here, the participants' public module.
from broker.spaces.roster import carry_tokens as carry_tokens
from broker.spaces.roster import insert_events as insert_events
from broker.spaces.roster import insert_rows as insert_rows
from broker.spaces.roster import journal_event, not_found
from broker.spaces.roster import leave_all as leave_all
from broker.spaces.roster import leave_in_tx as leave_in_tx
from broker.spaces.roster import to_model as to_model
from broker.spaces.spaces import limits_of, resolve_id
from broker.store import keys, procs
from broker.store.sql import stmt, stmts
from broker.store.sqlite import Store, Tx

if TYPE_CHECKING:
    from broker.model.inputs import JoinInput
    from broker.model.records import Joined, Participant, ParticipantEvent

_IDENTIFY = stmt("auth.identify")
_SPACE = stmt("spaces.get")
_SQL = stmts(
    "participants",
    "holder",
    "by_token",
    "parent_messaging",
    "rejoin",
    "set_status",
    "list_all",
    "list_present",
    "by_address",
    "addresses",
    "events",
)

LIVE = ("running", "idle")
PID_MAX = 2**31 - 1


@record
class Credential:
    """What a joiner presents (S27, S40): at most one of the space's join key,
    the store's operator key or, for a child, its parent's token; and
    ``token``, the address's last token, to continue an address that has
    joined before (a retry, a restart, a re-join after leaving). The last
    token alone is enough for that; a new address needs one of the other
    three, and the join key admits new addresses only."""

    join_key: str | None = None
    operator_key: str | None = None
    parent_token: str | None = None
    token: str | None = None

    def check(self) -> None:
        for name in ("join_key", "operator_key", "parent_token", "token"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise errors.InvalidInput(f"{name} must be a non-empty string", field=name)
        given = [n for n in ("join_key", "operator_key", "parent_token") if getattr(self, n)]
        if not given and not self.token:
            raise errors.AuthError(
                "joining needs a credential: the space's join key (--join-key or "
                "BROKER_JOIN_KEY), the operator key, or a parent's token (--parent-token); an "
                "address that joined before, its last token (--token)"
            )
        if len(given) > 1:
            raise errors.InvalidInput(
                f"give one credential to join, not {' and '.join(given)}", field=given[1]
            )


def join(
    store: Store,
    space_ref: str,
    inp: JoinInput,
    *,
    credential: Credential,
    tx: Tx | None = None,
) -> Joined:
    """Join (or re-join, S3) a running space; returns the address and a fresh token.

    The credential is checked first (S27), then the address: one that has
    joined before is continued only with its last token, its recorded
    parent's token or the operator key (S40), and a live holder is replaced
    only by a re-join presenting its token (S27). A re-join keeps the
    directory fields it does not name (S40). The grant asked for is bounded
    by the credential (S28). Any refusal writes nothing."""
    credential.check()
    tools = grants.validate(inp.tools) if inp.tools is not None else None
    if not inp.messaging and tools:
        raise errors.InvalidInput(
            "messaging is off but messaging tools are named: the two contradict, pick one",
            field="tools",
        )
    if inp.pid is not None:
        _check_pid(inp.pid)
    token = new_token()
    token_hash = hash_token(token)
    now = store.now_ts()
    with store.write(tx) as t:
        space_id = resolve_id(t, space_ref)
        store.lock_space(t, space_id)  # one join of an address at a time (PostgreSQL)
        space = t.one(_SPACE, {"space_id": space_id})
        state, kind, settings = space["state"], space["kind"], space["settings"]
        parent_grant = _credential(t, space_id, credential)  # None: any set may be granted
        if parent_grant is not None and inp.parent not in (None, parent_grant.address):
            raise errors.InvalidInput(
                f"parent {inp.parent!r} is not the holder of the parent token "
                f"({parent_grant.address!r}): leave --parent out or name that one",
                field="parent",
            )
        try:
            address = address_of(inp.codename, lead=inp.lead, agentiflow=kind == "agentiflow")
        except errors.InvalidInput as exc:
            exc.fields.setdefault("field", "codename")
            raise
        if state != "running":
            raise errors.SpaceNotRunning(
                f"space {space_id} is {state}: nobody can join it", space_id=space_id
            )
        holder = t.row(_SQL["holder"], {"space_id": space_id, "address": address})
        if holder is None and not (
            credential.join_key or credential.operator_key or credential.parent_token
        ):
            raise errors.AuthError(
                f"{address} has not joined space {space_id} before, and a token continues only "
                "its own address: a new address needs the join key, the operator key or a "
                "parent's token"
            )
        if holder is None:
            _reads_unlike_any(t, space_id, address)
        kept = _kept(holder, inp)
        parent_addr = parent_grant.address if parent_grant is not None else kept["parent"]
        messaging = inp.messaging
        if parent_addr:
            parent = t.one(_SQL["parent_messaging"], {"space_id": space_id, "address": parent_addr})
            if parent is not None and not parent["messaging"]:
                messaging = False  # off is inherited (S24); narrowing is not
        wanted = grants.effective(messaging, tools, inp.lead)
        if parent_grant is not None:
            _bounded(wanted, parent_grant.granted, f"its parent {parent_grant.address}")
        if holder is not None:
            _may_continue(holder, address, credential, parent_grant)
            _may_replace(store, holder, address, credential, limits_of(settings).live_seconds)
            if not credential.operator_key:
                # S28: a re-join never widens what the address held (the operator may).
                before = grants.effective(
                    bool(holder["messaging"]),
                    json.loads(holder["tools"]) if holder["tools"] is not None else None,
                    bool(holder["is_lead"]),
                )
                _bounded(wanted, before, address, rejoin=True)
        row = {
            "address": address,
            "codename": inp.codename,
            "agent": inp.agent or address.split(">")[-1].split("#")[0],
            "run_id": inp.run_id or inp.codename,
            "step": kept["step"],
            "parent": parent_addr,
        }
        values = {
            "codename": inp.codename,
            "agent": row["agent"],
            "run_id": row["run_id"],
            "step": kept["step"],
            "parent": parent_addr,
            "role": kept["role"],
            "archetype": kept["archetype"],
            "task": kept["task"],
            "is_lead": inp.lead,
            "messaging": messaging,
            "tools": json.dumps(tools) if tools is not None else None,
            "token_hash": token_hash,
            # NULL when the joiner is not a long-lived local process (a CLI call)
            "pid": inp.pid,
            "last_seen_utc": now,
        }
        if holder is not None:
            pid = holder["id"]
            # A retried or continued run: same row, so inbox, cursors and directives stay (S3).
            t.execute(_SQL["rejoin"], {**values, "id": pid})
            inbox.recover(t, pid, now)  # S32: leases of its dead processes come back now
        else:
            pid = new_id()
            fresh = {
                **values,
                "id": pid,
                "space_id": space_id,
                "address": address,
                "status": "running",
                # bcast_seen starts at the current end: broadcasts count from the join (S6).
                "bcast_seen": space["last_bcast"],
                "waiting": 0,
                "joined_at_utc": now,
                "left_at_utc": None,
                "contact_policy": None,  # open (S38) until the participant sets one
                "contact_allow": None,
            }
            insert_rows(t, [fresh])
        journal_event(t, pid, space_id, "joined", row, now, _admitted(credential))
        if tools and not messaging:
            # Off inherited from the parent wins over the tools it named: they are
            # not offered, and its transcript says so (nothing dropped silently).
            notice(
                store,
                t,
                space_id,
                pid,
                "tool_unavailable",
                f"{address} cannot use {', '.join(tools)}: messaging is off, inherited from "
                f"its parent {parent_addr} (receive-only)",
            )
    from broker.model.records import Joined  # built on first use (records_space)

    return Joined(space_id=space_id, participant_id=pid, address=address, token=token)


KEPT = ("step", "parent", "role", "archetype", "task")


def _kept(holder: dict[str, Any] | None, inp: JoinInput) -> dict[str, str | None]:
    """The directory fields a join stores (S40): what it names, an empty value
    clearing one; what it does not name, the address's stored value (none
    on a first join). A retry that repeats nothing keeps its parent, step,
    role, archetype and task, so ``parent`` and ``step:NAME`` still reach it."""
    out: dict[str, str | None] = {}
    for name in KEPT:
        given = getattr(inp, name)
        if given is None:
            out[name] = holder[name] if holder is not None else None
        else:
            out[name] = given or None  # '' clears it
    return out


def _admitted(cred: Credential) -> str:
    """How a join was admitted, as its journal line records it: what decides
    the participant's share group (S42). A re-join with the address's last
    token alone continues it: its admission stays the one before."""
    if cred.operator_key:
        return shares.OPERATOR_KEY
    if cred.join_key:
        return shares.JOIN_KEY
    return shares.PARENT_TOKEN if cred.parent_token else shares.LAST_TOKEN


def _reads_unlike_any(t: Tx, space_id: str, address: str) -> None:
    """S45: a new address must not read like one the space already gave
    (``Victim`` beside ``victim``): a reader, a log line or a model would take
    one participant for the other. Nothing is written."""
    mine = reads_as(address)
    for (other,) in t.all(_SQL["addresses"], {"space_id": space_id}):
        if reads_as(other) == mine:
            raise errors.InvalidInput(
                f"address {address!r} reads like {other!r}, already in this space: "
                "pick a codename that reads differently",
                field="codename",
            )


def _check_pid(pid: int) -> None:
    """S27: a joiner records only a process it can show is its own (itself or
    an ancestor), since that process keeps the address live for as long as it
    runs; any other pid (process 1, a sibling's, one that does not exist)
    could hold an address for ever."""
    if type(pid) is not int or not 0 < pid <= PID_MAX:
        raise errors.InvalidInput(f"bad pid {pid!r}: a process id, 1 to {PID_MAX}", field="pid")
    if not procs.own(pid):
        why = "process 1 never exits" if pid == 1 else f"process {pid} is not one of them"
        raise errors.InvalidInput(
            f"pid {pid} refused: a join records only the joining process or one of its "
            f"ancestors (that process keeps the address live while it runs), and {why}",
            field="pid",
        )


@record
class _Parent:
    address: str
    granted: frozenset[str]
    joined_at_utc: str


def _credential(t: Tx, space_id: str, cred: Credential) -> _Parent | None:
    """Check the joiner's credential in ``t`` (``auth_failed`` if wrong); for a
    parent token, the parent and its grant (which bounds the child's, S28).
    A last token alone is checked against the address it continues (S40)."""
    if cred.operator_key:
        keys.verify_operator(t, cred.operator_key)
        return None
    if cred.join_key:
        keys.verify_join_key(t, space_id, cred.join_key)
        return None
    if not cred.parent_token:
        return None
    row = t.row(_SQL["by_token"], {"token_hash": keys.digest(cred.parent_token)})
    if row is None or row["space_id"] != space_id or row["status"] == "left":
        # One message for unknown, foreign and departed parents: no oracle.
        raise errors.AuthError(
            f"the parent token does not belong to a participant present in space {space_id}"
        )
    tools = json.loads(row["tools"]) if row["tools"] is not None else None
    granted = grants.effective(bool(row["messaging"]), tools, bool(row["is_lead"]))
    return _Parent(row["address"], granted, row["joined_at_utc"])


def _bounded(
    wanted: frozenset[str], allowed: frozenset[str], whom: str, *, rejoin: bool = False
) -> None:
    extra = sorted(wanted - allowed)
    if not extra:
        return
    asked = ", ".join(extra)
    if rejoin:
        held = f"only {', '.join(sorted(allowed))}" if allowed else "no tool"
        raise errors.Forbidden(
            f"cannot grant {asked}: a re-join never widens a grant, and {whom} held {held} before",
            tools=extra,
        )
    # No tool: messaging off, or an empty grant with messaging on.
    have = ", ".join(sorted(allowed)) or "no tool"
    raise errors.Forbidden(f"cannot grant {asked}: more than {whom} has ({have})", tools=extra)


def _may_continue(
    holder: dict[str, Any], address: str, cred: Credential, parent: _Parent | None
) -> None:
    """S40: an address that has joined before (a retry, a restart, a re-join
    after leaving, one restored by an import) is continued only with its last
    token, its recorded parent's token, or the operator key; the join key
    admits new addresses only. A parent counts only if it was in the space
    when the child first joined: a newcomer that takes a recorded parent's
    address later does not become its parent."""
    if cred.token is not None and keys.matches(cred.token, holder["token_hash"]):
        return
    if cred.operator_key:
        return
    recorded = holder["parent"]
    if (
        parent is not None
        and recorded is not None
        and parent.address == recorded
        and parent.joined_at_utc <= holder["joined_at_utc"]
    ):
        return
    wrong = " (the token given is not its last token)" if cred.token is not None else ""
    via_parent = f", the token of its parent {recorded} (--parent-token)" if recorded else ""
    raise errors.Forbidden(
        f"{address} has joined this space before{wrong}: continuing it needs its last token "
        f"(--token){via_parent} or the operator key; the join key admits new addresses only"
    )


def _live(holder: dict[str, Any], now: datetime, window: float) -> tuple[str, str] | None:
    """Why ``holder`` is live, and what ends it; None when it is gone (S27).

    Live means running or idle, and: with a recorded process, that process
    alive (a SIGKILLed one is gone at once, whatever its last heartbeat,
    S32); without (a CLI or served join), its last call or wait within
    ``window`` seconds (the space's ``live_seconds``: longer than a model
    call, S40)."""
    if holder["status"] not in LIVE:
        return None
    if holder["pid"] is not None:
        if procs.start_time(int(holder["pid"])) is None:
            return None
        # its heartbeat does not count (S27)
        return f"its process {holder['pid']} is alive", "its process has exited"
    seen = holder["last_seen_utc"]
    if seen is None or (now - parse_ts(seen)).total_seconds() >= window:
        return None
    return "its heartbeat is fresh", f"its heartbeat is older than {window:g} s"


def _may_replace(
    store: Store, holder: dict[str, Any], address: str, cred: Credential, window: float
) -> None:
    """S27: a live holder is replaced only by a re-join that presents its
    token, whoever else the joiner is (the operator and a parent too: a
    second copy of an agent must not cut off the first)."""
    if cred.token is not None and keys.matches(cred.token, holder["token_hash"]):
        return
    live = _live(holder, store.now(), window)
    if live is None:
        return
    why, until = live
    if cred.token is not None:
        raise errors.Conflict(
            f"{address} is held by {holder['codename']!r} ({why}) and the token given is not "
            "its token: nothing was changed"
        )
    raise errors.Conflict(
        f"{address} is held by {holder['codename']!r} ({why}): a re-join presents its "
        f"token (--token), or waits until it has left or {until}"
    )


def authenticate(
    store: Store, space_ref: str, address: str, token: str | None, *, tx: Tx | None = None
) -> Identity:
    """Turn (space, address, token) into an Identity, or refuse (S10)."""
    if not token:
        raise errors.token_refused()
    if not address:
        raise errors.AuthError("no address: pass --as or set BROKER_AS")
    th = hash_token(token)
    with store.read(tx) as t:
        space_id = resolve_id(t, space_ref)
        row = t.one(_SQL["holder"], {"space_id": space_id, "address": address})
        if row is None or row["token_hash"] != th:
            # One message for unknown address, wrong token and someone else's token: no oracle.
            raise errors.token_refused()
        ident = Identity(space_id, row["id"], address, th)
        auth.caller(t, ident)  # left, or its space stopped: say which
    return ident


def authenticate_token(
    store: Store, token: str | None, *, after_leave: bool = False, tx: Tx | None = None
) -> Identity:
    """The participant ``token`` belongs to, whatever its space, or refuse (S10).

    Served mode: a Bearer token alone names its holder. Same single message as
    ``authenticate`` for an unknown or stale token (no oracle). ``after_leave``:
    a participant that has left is still named (S4: its own row answers it)."""
    if not token:
        raise errors.token_refused()
    th = hash_token(token)
    with store.read(tx) as t:
        row = t.one(_IDENTIFY, {"token_hash": th})
        if row is None:
            raise errors.token_refused()
        ident = Identity(row["space_id"], row["id"], row["address"], th)
        try:
            auth.caller(t, ident)  # left, or its space stopped: say which
        except errors.ParticipantLeft:
            if not after_leave:
                raise
    return ident


def leave(store: Store, ident: Identity, *, reason: str = "leave", tx: Tx | None = None) -> None:
    with store.write(tx) as t:
        auth.caller(t, ident)
        leave_in_tx(store, t, ident.participant_id, reason)


def set_status(store: Store, participant_id: str, status: str, *, tx: Tx | None = None) -> None:
    if status not in ("running", "idle", "failed", "shutdown"):
        raise errors.InvalidInput(f"bad status {status!r}", field="status")
    with store.write(tx) as t:
        row = t.one(
            _SQL["set_status"], {"status": status, "now": store.now_ts(), "id": participant_id}
        )
        if row is not None:
            wake.ring_at_commit(t, [wake.state_key(row["space_id"])])


def list_participants(
    store: Store, space_ref: str, *, include_left: bool = True, tx: Tx | None = None
) -> list[Participant]:
    with store.read(tx) as t:
        space_id = resolve_id(t, space_ref)
        rows = t.all(
            _SQL["list_all"] if include_left else _SQL["list_present"], {"space_id": space_id}
        )
    return [to_model(r) for r in rows]


def get(store: Store, space_ref: str, address: str, *, tx: Tx | None = None) -> Participant:
    with store.read(tx) as t:
        space_id = resolve_id(t, space_ref)
        row = t.one(_SQL["by_address"], {"space_id": space_id, "address": address})
    if row is None:
        raise not_found(space_id, address)
    return to_model(row)


def journal(store: Store, space_ref: str, *, tx: Tx | None = None) -> list[ParticipantEvent]:
    with store.read(tx) as t:
        space_id = resolve_id(t, space_ref)
        rows = t.rows(_SQL["events"], {"space_id": space_id})
    from broker.model.records import ParticipantEvent  # built on first use (records_more)

    return [ParticipantEvent(**r) for r in rows]


def write_contact_policy(t: Tx, participant_id: str, params: dict[str, Any]) -> None:
    """The contact policy columns (S38): this module writes ``participants``;
    ``broker.spaces.contact`` checks and decides."""
    t.execute(stmt("contact.set_policy"), {**params, "participant_id": participant_id})
