"""One authorization path: who is calling, re-checked inside the transaction.

Every agent operation (sends, board tools, claims, turns) starts with
``caller(t, ident)``: the token is checked against the participant row in the
same transaction as the work (S10), so a re-join with a new token, a leave or a
stopped space takes effect on the very next call. The same statement returns
the caller's grant (S24) and its space's limits, so the operation needs no
further read to know what it may do.
"""

from __future__ import annotations

import json
import time
from functools import lru_cache, partial
from typing import Any

from broker import errors
from broker.ids import parse_ts, ts_after
from broker.record_type import record
from broker.spaces import grants
from broker.spaces.spaces import limits_of
from broker.store.settings import Limits
from broker.store.sql import stmt
from broker.store.sqlite import Store, Tx

_CALLER = stmt("auth.caller")
_CALLER_COUNTED = stmt("auth.caller_counted")
_CALLER_SEND = stmt("auth.caller_send")
_CALLER_HEARTBEAT = stmt("auth.caller_heartbeat")
_HEARTBEATS = stmt("auth.heartbeats")
HEARTBEAT_S = 1.0
_beats: dict[tuple[int, str], str] = {}  # (store, participant) -> heartbeat due after


@record
class Identity:
    """Who is calling: built only from a verified token (S10)."""

    space_id: str
    participant_id: str
    address: str
    token_hash: str


@record
class Caller:
    """The caller's row as of this transaction."""

    status: str
    messaging: bool
    tools: str | None  # JSON list, or None for the default set
    is_lead: bool
    agent: str
    parent: str | None
    space_state: str
    settings: str  # the space's settings JSON
    # The space's counters as of this transaction, before the caller's send (a
    # write holds the lock): ``(last_seq, log_bytes, last_bcast)``; None when
    # the check did not read them (``caller(..., counted=False)``).
    counters: tuple[int, int, int] | None = None
    # ``caller(..., send=...)``: the recipient's row as ``broker.mail.recipients``
    # reads it (None: no such address).
    recipient: tuple[Any, ...] | None = None
    # ``caller(..., send=...)``: the space's last log time (S44), '' for an
    # empty log; None: not read (the send reads it itself).
    last_at: str | None = None
    # The store's time this write was checked at (``caller(t, ident, now)``),
    # taken inside the transaction: a send stamps its row with it (one clock
    # reading a send, not two). None for a read.
    now: str | None = None

    @property
    def granted(self) -> frozenset[str]:
        return _granted(self.messaging, self.tools, self.is_lead)

    @property
    def limits(self) -> Limits:
        return limits_of(self.settings)

    @property
    def space(self) -> tuple[Any, ...] | None:
        """The space row a send's ``Batch`` takes (state, settings, counters),
        when this check read the counters; None: the batch reads it itself."""
        c = self.counters
        return None if c is None else (self.space_state, self.settings, *c)


@lru_cache(maxsize=1024)
def _granted(messaging: bool, tools_json: str | None, is_lead: bool) -> frozenset[str]:
    return grants.effective(messaging, json.loads(tools_json) if tools_json else None, is_lead)


def caller(
    t: Tx,
    ident: Identity,
    now: str | None = None,
    send: str | None = None,
    *,
    counted: bool = False,
) -> Caller:
    """Check ``ident`` inside ``t`` or refuse (``AuthError``, ``ParticipantLeft``,
    ``SpaceNotRunning``). With ``now`` (a write), the caller's heartbeat is
    refreshed at most once a second per process. ``send=address``: a
    send to that one address follows in ``t``; its recipient is read in the
    same statement (``auth.caller_send``). ``counted``: the space's counters
    are read too (``Caller.counters``), for a send to several targets."""
    params = {"id": ident.participant_id, "token_hash": ident.token_hash}
    plain = _CALLER_COUNTED if counted else _CALLER
    if now is not None and beat_due(t.store, ident, now):
        # The heartbeat's statement reads the counters too (once a second).
        row = t.one(_CALLER_HEARTBEAT, {**params, "now": now})
        return _judged(t, ident, row, now, plain, counted=counted, beat=_next_beat(now))
    if send is not None:
        return _caller_send(t, ident, params, send, now)
    return _judged(t, ident, t.one(plain, params), now, plain, counted=counted, beat=None)


def caller_then(
    t: Tx, ident: Identity, now: str, sql: str, values: dict[str, Any]
) -> tuple[Caller, list[Any]]:
    """``caller(t, ident, now)`` and the statement ``sql`` after it, sent
    together: one round trip on PostgreSQL where the check and the statement
    took two (``Tx.two``). ``sql`` runs before the check is judged, so only in
    a transaction of the caller's own, which a refusal rolls back whole; its
    rows are returned with the caller's."""
    params = {"id": ident.participant_id, "token_hash": ident.token_hash}
    beat = _next_beat(now) if beat_due(t.store, ident, now) else None
    first, values_first = (
        (_CALLER, params) if beat is None else (_CALLER_HEARTBEAT, {**params, "now": now})
    )
    rows, after = t.two(first, values_first, sql, values)
    row = rows[0] if rows else None
    return _judged(t, ident, row, now, _CALLER, counted=False, beat=beat), after


def _next_beat(now: str) -> str:
    return ts_after(parse_ts(now), HEARTBEAT_S)


def _judged(
    t: Tx,
    ident: Identity,
    row: Any,
    now: str | None,
    plain: str,
    *,
    counted: bool,
    beat: str | None,
) -> Caller:
    """The caller's row as ``plain`` reads it, refused or taken. ``beat``: the
    row came from the heartbeat's statement, and the next beat is due then."""
    key = (id(t.store), ident.participant_id)
    if beat is not None:
        if row is None:  # left (no beat for it: refused below) or a stale token
            row = t.one(plain, {"id": ident.participant_id, "token_hash": ident.token_hash})
        elif len(_beats) > 4096:
            _beats.clear()
        if row is not None and row["status"] != "left":
            _beat_at_commit(t, key, beat)
    if row is None:
        _beats.pop(key, None)
        raise errors.token_refused()  # superseded by a re-join, or forged: S10 says neither
    _refuse_left(ident, row["status"], row["space_state"])
    return _of_row(row, now, counted)


def _refuse_left(ident: Identity, status: str, space_state: str) -> None:
    """A caller that has left is refused (S4), as its stopped space if that."""
    if status == "left":
        if space_state != "running":
            raise errors.SpaceNotRunning(
                f"space {ident.space_id} is {space_state}: it takes no message",
                space_id=ident.space_id,
            )
        raise errors.ParticipantLeft(
            f"participant {ident.address!r} has left space {ident.space_id}; join again"
        )


WAIT_BEAT_S = 10.0  # a blocked caller's heartbeat: at most this long apart


class Pulse:
    """Keeps a caller blocked in a wait live (S27): while a claim, a turn or a
    watch waits on its doorbell, nothing else refreshes its heartbeat, and a
    CLI or served participant is live only while that heartbeat is fresher
    than its space's ``live_seconds``. The wait sleeps at most ``due_in()``
    and calls ``beat()`` after each wake-up; a beat writes only when a third
    of the window (at most ``WAIT_BEAT_S``, at least ``HEARTBEAT_S``) has
    passed, so a hundred idle waiters cost a few small writes a second, not
    one per wake-up. A killed waiter stops beating: its address can be
    continued without its token once its last beat is ``live_seconds`` old
    (S32, S40).

    Made right after a call that checked the caller (a claim or a turn: its
    heartbeat is then at most ``HEARTBEAT_S`` old), so the first beat is due
    one ``HEARTBEAT_S`` later. A beat re-checks the caller like any call: a
    participant that left or whose token was replaced ends the wait with
    that refusal."""

    def __init__(self, store: Store, ident: Identity) -> None:
        self.store = store
        self.ident = ident
        self.next = time.monotonic() + HEARTBEAT_S

    def due_in(self) -> float:
        """Seconds until the next beat is due (0: now)."""
        return max(0.0, self.next - time.monotonic())

    def beat(self) -> None:
        """Refresh the heartbeat if it is due (one small write)."""
        if time.monotonic() < self.next:
            return
        self.next = time.monotonic() + beat_every(heartbeat(self.store, self.ident).limits)


def beat_every(limits: Limits) -> float:
    """How often a blocked caller beats: a third of its liveness window."""
    return max(HEARTBEAT_S, min(WAIT_BEAT_S, limits.live_seconds / 3))


def beat_many(t: Tx, idents: list[Identity], now: str) -> dict[str, Caller]:
    """Refresh the heartbeats of ``idents`` inside ``t``, in one statement (a
    round of parked waiters' beats, ``broker.delivery.waits.Keeper``): the row
    of each that holds its token and has not left, by participant id, as
    ``caller`` reads it. One missing is refused; its own re-check says why.
    Until its next beat is due (``beat_every``) this process's other calls for
    a beaten caller need not write it again: the beats keep it fresh, so a
    re-check of a parked wait reads without the write lock."""
    who = {i.participant_id: i.token_hash for i in idents}
    found: dict[str, Caller] = {}
    for row in t.all(_HEARTBEATS, {"who": json.dumps(who), "now": now}):
        pid = row["id"]
        found[pid] = beaten = _of_row(row, now, False)
        _beat_at_commit(t, (id(t.store), pid), ts_after(parse_ts(now), beat_every(beaten.limits)))
    for pid in who.keys() - found.keys():
        _beats.pop((id(t.store), pid), None)  # refused: its next call checks afresh
    return found


def _beat_at_commit(t: Tx, key: tuple[int, str], due: str) -> None:
    """The next beat of ``key`` is due at ``due`` once ``t`` has committed the
    one it wrote: a beat rolled back (a group commit's pass run again, a job's
    savepoint undone) is still due, not skipped until ``due``."""
    t.after_commit(partial(_beats.__setitem__, key, due))


def heartbeat(store: Store, ident: Identity) -> Caller:
    """Refresh ``ident``'s heartbeat now, in a transaction of its own, and
    return its row (refusing like ``caller``)."""
    now = store.now_ts()
    _beats.pop((id(store), ident.participant_id), None)  # due: write it
    with store.write() as t:
        return caller(t, ident, now)


def beat_due(store: Store, ident: Identity, now: str) -> bool:
    """Whether a write by ``ident`` at ``now`` would refresh its heartbeat
    (``caller(t, ident, now)``): a read-only path must not skip one that is due."""
    due = _beats.get((id(store), ident.participant_id))
    return due is None or now >= due


def _caller_send(
    t: Tx, ident: Identity, params: dict[str, str], to: str, now: str | None
) -> Caller:
    """``auth.caller_send``: the caller's row as ``auth.caller`` reads it, with
    the recipient's row and the space's last log time, refused like ``caller``.
    Built straight from the one row (the send's hot path: no dict in between)."""
    got = t.one(_CALLER_SEND, {**params, "space_id": ident.space_id, "to": to})
    if got is None or got["status"] is None:
        _beats.pop((id(t.store), ident.participant_id), None)
        raise errors.token_refused()  # superseded by a re-join, or forged: S10 says neither
    _refuse_left(ident, got["status"], got["space_state"])
    to_id = got["to_id"]
    return _of_row(
        got,
        now,
        True,
        # the row ``broker.mail.recipients`` reads (as ``messages.at_address`` has it)
        None
        if to_id is None
        else (
            to_id,
            got["to_address"],
            got["to_status"],
            got["to_waiting"],
            got["to_policy"],
            got["to_allow"],
            got["to_parent"],
        ),
        got["last_at"],
    )


def _of_row(
    row: Any,
    now: str | None,
    counted: bool,
    recipient: tuple[Any, ...] | None = None,
    last_at: str | None = None,
) -> Caller:
    """The caller's row as every caller statement reads it, by name."""
    return Caller(
        status=row["status"],
        messaging=bool(row["messaging"]),
        tools=row["tools"],
        is_lead=bool(row["is_lead"]),
        agent=row["agent"],
        parent=row["parent"],
        space_state=row["space_state"],
        settings=row["settings"],
        counters=(row["last_seq"], row["log_bytes"], row["last_bcast"]) if counted else None,
        recipient=recipient,
        last_at=last_at,
        now=now,
    )
