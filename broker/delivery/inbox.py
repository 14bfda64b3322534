"""Inboxes as transactional queues (S13-S16, S32): claim, ack, release, extend,
quarantine, requeue, restart recovery. The only writer of ``deliveries``
(the operator's read-only views of them are ``broker.delivery.inbox_view``).

An inbox is the ``deliveries`` rows of one recipient: ready -> processing ->
done | quarantine. A claim is ONE statement in ``BEGIN IMMEDIATE``
(``inbox.claim``): an ``UPDATE ... RETURNING`` of the oldest ready rows *and*
processing rows whose lease expired (S15: no sweeper), with their messages.
Each branch is an index range (``ix_deliveries_ready``, ``ix_deliveries_leased``)
cut to ``LIMIT`` before the merge, so a claim reads ``limit`` rows whatever the
backlog. A candidate claimed ``max_deliveries`` times goes to quarantine in the
same statement; poison at the head is quarantined in windows that double
(``inbox.quarantine_head``), so a claim never comes back empty while something
is claimable.

Lease tokens: a claim takes a fresh random token; ack / release / extend /
quarantine present it. A token holds a row while it is processing under it,
even past its expiry, until someone else claims the row (S14); then it is
refused with ``LeaseLost``, naming the message ids. It stays on settled rows,
so a second ack by the holder is recognised and returns 0; a row taken from a
lease (by a claim after its expiry, or by recovery) keeps that lease's token as
``lost_lease_token``, so a late settle of the whole lease names what it lost
(``broker.delivery.lease_lost`` explains every miss). Every settle checks its caller
first (S4: a participant that left settles nothing).

Restart recovery (S32): a lease of a long-lived process records it
(``broker.store.procs``); ``recover`` returns those of dead processes to ready. A
transient claimer (one CLI call) records none: its leases end by expiry.

Delivery is at-least-once (S16): a consumer de-duplicates by ``Delivery.id``
and makes its own work and the ack one transaction, history first, ack second
(``docs/delivery.md``); every write here takes ``tx=`` to join one. A claim
makes its records after its commit: a failure there (like a crash) leaves the
rows to their lease's expiry.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from typing import Any

from broker import errors
from broker.delivery import lease_lost, waits, wake
from broker.ids import by_id, fmt_micros, new_token, stamp_after
from broker.model import bounds
from broker.model.inputs import ClaimInput
from broker.model.records import Delivery, Lease
from broker.model.records.mail import MAIL_DEFAULTS
from broker.spaces import auth
from broker.spaces.addressing import reads_as, reads_reserved
from broker.spaces.auth import Identity
from broker.spaces.spaces import resolve_id
from broker.store import procs
from broker.store.groups import MAIL
from broker.store.settings import Limits
from broker.store.sql import stmt
from broker.store.sqlite import Store, Tx

MAX_LIMIT = 10_000
MAX_LEASE_S = bounds.WEEK_S
MAX_WAIT_S = bounds.DAY_S
OWNER_MAX = 200
EVIDENCE_MAX = 8000

_ADDRESSES = stmt("participants.addresses")
_INSERT = stmt("inbox.insert")
_RESTORE = stmt("inbox.restore")
_CLAIM = stmt("inbox.claim")
_QUARANTINE_HEAD = stmt("inbox.quarantine_head")
_CLAIMABLE = stmt("inbox.claimable")
_CLAIMABLE_AMONG = stmt("inbox.claimable_among")
_NEXT_EXPIRY = stmt("inbox.next_expiry")
_ACK = stmt("inbox.ack")
_RELEASE = stmt("inbox.release")
_EXTEND = stmt("inbox.extend")
_QUARANTINE = stmt("inbox.quarantine")
_LEASE_PROCESSES = stmt("inbox.lease_processes")
_RECOVER = stmt("inbox.recover")
_REQUEUE = stmt("inbox.requeue")

_filled: dict[tuple[int, str], bool] = {}  # (store, participant): last claim filled its limit
_seen: dict[tuple[int, str], Limits] = {}  # (store, participant): the limits its last claim read

# What a delivery row holds when the writer leaves a column out (a new send).
_DEFAULTS: dict[str, Any] = {
    "state": "ready",
    "attempts": 0,
    "lease_token": None,
    "lease_owner": None,
    "lease_expires_at": None,
    "acked_at_utc": None,
    "last_error": None,
    "quarantine_reason": None,
    "lease_process": None,
    "lost_lease_token": None,
}


# --- the one writer of deliveries -------------------------------------------------------
def insert_rows(t: Tx, rows: Sequence[dict[str, Any]], *, sent: bool = False) -> None:
    """Insert deliveries as given (ids, states and times kept), inside ``t``.

    A send passes new deliveries (``space_id, message_seq, recipient_id``: the
    statement writes the rest, a fresh ready row with its message's time and an
    id derived from its message's, revision 0024);
    the importer passes every column. A row's rowid comes from its message's
    (revision 0017). A send's own messages (``sent``) are in the log by
    construction, found by their seq: its rows go unchecked and deferred
    (``Tx.defer_many``: with the COMMIT on PostgreSQL, in one go on SQLite).
    The importer's are found by their message id (revision 0018): a message
    not in the log inserts nothing, and is refused here, as the foreign key
    refused it before (the importer names the line)."""
    if sent:
        t.defer_many(_INSERT, rows)
        return
    for row in rows:
        located = {"delivery_id": row["id"], **by_id(row["message_id"])}
        if t.execute(_RESTORE, {**_DEFAULTS, **row, **located}).rowcount != 1:
            raise errors.StoreError(
                f"delivery {row['id']}: its message {row['message_id']} is not in the log"
            )


# --- input at the edge (S33) ------------------------------------------------------------
def check_limit(limit: object, field: str = "limit") -> int:
    """How many deliveries one call may take: 1 to ``MAX_LIMIT``."""
    return bounds.count(limit, field, top=MAX_LIMIT)


def check_seconds(seconds: object, field: str = "lease") -> float:
    """A lease length: at least a millisecond and at most 7 days."""
    return bounds.seconds(seconds, field, top=MAX_LEASE_S)


def check_wait(wait: object, field: str = "wait") -> float:
    """How long a call may block: 0 (do not wait) to one day."""
    return bounds.seconds(wait, field, top=MAX_WAIT_S, zero=True)


def _check_token(token: object) -> str:
    # Printable too: ASCII alone lets a NUL through, which PostgreSQL's text
    # refuses as a database error where SQLite reads "no such lease" (S33).
    if type(token) is str and token.isascii() and token.isprintable() and 0 < len(token) <= 100:
        return token  # the common case: a token as the claim returned it
    if not isinstance(token, str) or not token:
        raise errors.InvalidInput(
            f"bad lease token {token!r}: the token the claim returned", field="lease_token"
        )
    return bounds.text(token, "lease_token", 100)


def _norm_ids(ids: Iterable[str] | None) -> list[str] | None:
    if ids is None:
        return None
    if isinstance(ids, str):
        ids = [ids]
    out = list(dict.fromkeys(bounds.text(i, "message id", 100) for i in ids))
    if not out:
        raise errors.InvalidInput(
            "no message ids given (omit them to mean the whole lease)", field="ids"
        )
    return out


def default_owner(ident: Identity) -> str:
    return f"{ident.address}:{os.getpid()}"


# Words of an owner label as a reader splits them ("worker for otter" has three).
_LABEL_WORD = re.compile(r"[\w.#>\-]+")


def check_owner(t: Tx, ident: Identity, owner: str) -> None:
    """S45: a lease's owner names the claimer or a worker of its own, never
    someone else. A word of the label that reads as a reserved word
    (``operator``, ``Lead``) or as another address of the space (``0tter``,
    ``otter:4242``) is ``invalid_input`` (field ``owner``), since every view of
    the queue shows the label as who holds the mail. The default form,
    ``<address>:<pid>``, is the caller's own and is not read."""
    if _DEFAULT_OWNER.fullmatch(owner) and owner.rsplit(":", 1)[0] == ident.address:
        return
    own = reads_as(ident.address)
    words = [w for w in _LABEL_WORD.findall(owner) if reads_as(w) != own]
    taken = {reads_as(a): a for (a,) in t.all(_ADDRESSES, {"space_id": ident.space_id})}
    for word in words:
        if reads_reserved(word) or reads_reserved(word.rsplit(">", 1)[-1]):
            who = "the broker's reserved name " + repr(word.rsplit(">", 1)[-1])
        elif reads_as(word) in taken:
            who = f"participant {taken[reads_as(word)]!r}"
        else:
            continue
        raise errors.InvalidInput(
            f"owner {owner!r} reads as {who}: a lease's owner names you "
            f"({ident.address}) or a worker of yours, never another participant or the operator",
            field="owner",
        )


_DEFAULT_OWNER = re.compile(r".+:[0-9]{1,10}")


# --- claiming ----------------------------------------------------------------------------
def claim_rows(t: Tx, values: dict[str, Any], first: list[Any] | None = None) -> list[Any]:
    """The claim statement with ``values`` (``claim_values``), inside ``t``: the
    rows of up to their ``n`` deliveries, oldest first (``deliveries_of`` makes
    them records; ``claim``, after its commit). ``first``: the rows of its
    first run, sent already with the caller check (``_claim_once`` on
    PostgreSQL).

    Candidates past ``max_deliveries`` are quarantined by the same statement and
    not returned. When that leaves the batch short, the poison at the head is
    quarantined in windows that double and the claim runs again: each round
    quarantines at least one row, so this ends, and it ends with ``n``
    deliveries or none left to claim."""
    params = dict(values)
    limit = params["n"]
    out: list[Any] = []
    window = limit
    while True:
        rows, first = (t.all(_CLAIM, params) if first is None else first), None
        met_poison = False
        for r in rows:
            if r["state"] == "processing":
                out.append(r)
            else:  # quarantined by the statement: it was handed out max_deliveries times
                met_poison = True
        if not met_poison or len(rows) < params["n"]:
            break  # no poison met, or the inbox has nothing more to offer
        params["n"] = want = limit - len(out)
        sweep: dict[str, Any] = {
            "recipient_id": params["recipient_id"],
            "now": params["now"],
            "max_deliveries": params["max_deliveries"],
            "n": max(window, want),
        }
        while True:  # the whole window was poison: look twice as far
            sweep["n"] *= 2
            if len(t.all(_QUARANTINE_HEAD, sweep)) < sweep["n"]:
                break
        window = sweep["n"]
    if len(out) > 1:
        out.sort(key=lambda r: r["r"])  # the log's order (S13): the rowid's
    return out


def claim_values(
    recipient_id: str,
    limit: int,
    token: str,
    owner: str,
    now: str,
    expires: str,
    max_deliveries: int,
    process: str | None,
) -> dict[str, Any]:
    """The claim statement's values, by name."""
    return {
        "recipient_id": recipient_id,
        "n": limit,
        "now": now,
        "max_deliveries": max_deliveries,
        "token": token,
        "owner": owner,
        "expires": expires,
        "process": process,
    }


# What inbox.claim returns of a row and its message, one JSON array in this
# order: the row's id (derived from the message's, revision 0024), the
# message's id and the row's time (revision 0021: the row holds neither).
CLAIMED = ("delivery_id", "id", "created_at_utc", "kind", "sender", "body", "urgent", *MAIL)


# Where ``deliveries_of`` finds each of a record's values in that array.
_AT = {name: i for i, name in enumerate(CLAIMED)}
_ID, _DELIVERY_ID, _CREATED, _KIND, _SENDER, _BODY, _URGENT, _THREAD, _IMPORTANCE = (
    _AT[name]
    for name in (
        "id", "delivery_id", "created_at_utc", "kind", "sender", "body", "urgent", "thread",
        "importance",
    )
)  # fmt: skip
_IMPORTANCE_DEFAULT = MAIL_DEFAULTS["importance"]
_WIDTH = len(CLAIMED)


def deliveries_of(rows: list[Any]) -> list[Delivery]:
    """Records of ``claim_rows``' rows (a row's message: one JSON array, ``CLAIMED``).

    Each value is read by its place in the array, and the mail attributes as
    ``mail_of`` reads them (a NULL ``importance`` is its default; ``thread``
    as it is): every claim makes a record of each message it hands out, and
    through a dict of each array, ``mail_of`` and ``from_row`` that took
    ~4.4 µs a message, a fifth of a message's time in a claim of 100. The
    arrays are parsed together, as one JSON array of them: one ``json.loads``
    per claim, where one per message spent ~0.9 µs a message in its Python."""
    if not rows:
        return []
    arrays = json.loads("[" + ",".join([r["message"] for r in rows]) + "]")
    out: list[Delivery] = []
    for r, m in zip(rows, arrays, strict=True):
        if len(m) != _WIDTH:  # the statement and CLAIMED out of step
            raise ValueError(f"a claimed message has {len(m)} values, CLAIMED names {_WIDTH}")
        importance = m[_IMPORTANCE]
        out.append(
            Delivery(
                id=m[_ID],
                delivery_id=m[_DELIVERY_ID],
                kind=m[_KIND],
                sender=m[_SENDER],
                body=m[_BODY],
                urgent=bool(m[_URGENT]),
                created_at_utc=m[_CREATED],
                deliveries=r["attempts"],
                thread=m[_THREAD],
                importance=_IMPORTANCE_DEFAULT if importance is None else str(importance),
            )
        )
    return out


def next_expiry(t: Tx, recipient_id: str) -> str | None:
    """When the inbox's next lease runs out (None: nothing is processing)."""
    row = t.one(_NEXT_EXPIRY, {"recipient_id": recipient_id})
    return None if row is None else row["expiry"]


def _claim_once(
    store: Store,
    ident: Identity,
    limit: int,
    lease: float | None,
    owner: str,
    process: str | None,
    tx: Tx | None,
    want_expiry: bool,
    checked: Limits | None = None,
) -> tuple[Lease, str | None]:
    """One claim. ``checked``: the caller's limits, when ``tx`` checked the
    caller already (else it is checked in the claim's write transaction)."""
    now_us = store.clock.micros()  # a number: no datetime made, added to, formatted
    now = fmt_micros(now_us)
    token = new_token()
    key = (id(store), ident.participant_id)
    if (
        tx is None
        and store.dialect == "sqlite"
        and not _filled.get(key)
        and not auth.beat_due(store, ident, now)
    ):
        # A snapshot first: an inbox with nothing to claim (most claims of a busy
        # swarm) is answered without the write lock, the caller re-checked (S10).
        # Not after a claim that filled its limit (a backlog: no extra read). Not
        # on PostgreSQL: a write there locks no more than the rows it claims, and
        # the snapshot costs the round trips of the claim itself (three), so a
        # claim that finds mail (one a wake-up makes) would pay six.
        with store.read() as t:
            limits = auth.caller(t, ident).limits
            if not t.one(_CLAIMABLE, {"recipient_id": ident.participant_id, "now": now})[0]:
                expires = stamp_after(now_us, limits.lease_seconds if lease is None else lease)
                expiry = next_expiry(t, ident.participant_id) if want_expiry else None
                return Lease(
                    lease_token=token, owner=owner, expires_at=expires, deliveries=[]
                ), expiry
    # On PostgreSQL, in a transaction of its own, the claim goes with the caller
    # check (one round trip, not two: ``auth.caller_then``), made with the
    # limits this caller's last claim read; limits found changed roll it back
    # and it is made again with the new ones.
    guess = None
    if tx is None and checked is None and store.dialect != "sqlite":
        guess = _seen.get(key)

    def values_with(limits: Limits) -> dict[str, Any]:
        expires = stamp_after(now_us, limits.lease_seconds if lease is None else lease)
        pid = ident.participant_id
        return claim_values(pid, limit, token, owner, now, expires, limits.max_deliveries, process)

    while True:
        try:
            with store.write(tx) as t:
                first = None
                if guess is not None:
                    values = values_with(guess)
                    row, first = auth.caller_then(t, ident, now, _CLAIM, values)
                    limits = row.limits
                    if _claimed_by(limits) != _claimed_by(guess):
                        raise _Changed
                else:
                    limits = auth.caller(t, ident, now).limits if checked is None else checked
                    values = values_with(limits)
                rows = claim_rows(t, values, first)
                expiry = next_expiry(t, ident.participant_id) if want_expiry and not rows else None
        except _Changed:
            guess = None  # rolled back: made again, its caller checked first
            continue
        break
    if store.dialect != "sqlite":
        _seen[key] = limits
        if len(_seen) > 4096:
            _seen.clear()
    got = deliveries_of(rows)  # after the commit: the writer lock is free
    _filled[key] = len(got) >= limit  # a path choice only, never an answer
    if len(_filled) > 4096:
        _filled.clear()
    lease_of = Lease(lease_token=token, owner=owner, expires_at=values["expires"], deliveries=got)
    return lease_of, expiry


class _Changed(Exception):
    """The limits a claim was made with are no longer the caller's."""


def _claimed_by(limits: Limits) -> tuple[float, int]:
    """What of a space's limits a claim is made with."""
    return limits.lease_seconds, limits.max_deliveries


def claimable_among(t: Tx, participant_ids: list[str]) -> set[str]:
    """Which of the inboxes of ``participant_ids`` a claim would find anything
    in now (a ready row or an expired lease), in one statement: the parked
    claims' probe (``broker.delivery.waits.Keeper``'s safety tick)."""
    now = t.store.now_ts()
    params = {"ids": json.dumps(participant_ids), "now": now}
    return {r["id"] for r in t.all(_CLAIMABLE_AMONG, params)}


def claim(
    store: Store,
    ident: Identity,
    inp: ClaimInput,
    *,
    process: str | None = None,
    tx: Tx | None = None,
) -> Lease:
    """Claim up to ``limit`` of the oldest deliveries of the caller's inbox (S13).

    ``lease`` is in seconds (default: the space's ``lease_seconds``). With
    ``wait`` > 0, blocks on the inbox's doorbell (S20) until something can be
    claimed or ``wait`` seconds pass; an empty lease means nothing came.
    ``process`` (``procs.this_process()``) marks the lease as held by this
    process, for restart recovery (S32); None for a transient caller."""
    limit, lease, wait = inp.limit, inp.lease, inp.wait
    owner = default_owner(ident) if inp.owner is None else inp.owner
    if inp.owner is not None:
        with store.read(tx) as t:
            check_owner(t, ident, owner)
    if wait == 0:
        return _claim_once(store, ident, limit, lease, owner, process, tx, False)[0]
    return waits.block(  # keeps the caller live while it waits (S27)
        store,
        ident,
        wait,
        lambda: _claim_once(store, ident, limit, lease, owner, process, None, True),
        lambda got: bool(got.deliveries),
        tx=tx,
    )


# --- settling ----------------------------------------------------------------------------
def settle(
    t: Tx,
    ident: Identity,
    token: str,
    ids: list[str] | None,
    statement: str,
    params: dict[str, Any],
    settled_state: str | None,
    *,
    own: bool,
) -> tuple[auth.Caller, list[str]]:
    """Run one settle ``statement`` (ack, release, extend, quarantine) on the rows
    still held under ``token``: the caller's row and the message ids it moved.
    A miss is explained (``broker.delivery.lease_lost``): settled before by the
    holder, lost, or unknown.

    The caller is checked first, in ``t`` (S4, S10): a participant that left,
    or whose token was replaced, settles nothing. In a transaction of its
    ``own`` (that a refusal rolls back whole) the check and the statement go
    together: one round trip on PostgreSQL (``auth.caller_then``)."""
    key = {"token": token, "recipient_id": ident.participant_id}
    ids_json = None if ids is None else json.dumps(ids)
    values = {**params, **key, "ids": ids_json}
    if own:
        row, rows = auth.caller_then(t, ident, t.store.now_ts(), statement, values)
    else:
        row = auth.caller(t, ident, t.store.now_ts())
        rows = t.all(statement, values)
    done = [r["message_id"] for r in rows]
    lease_lost.explain(t, ident, token, ids, done, settled_state)
    return row, done


def ack_all(t: Tx, recipient_id: str, token: str, now: str) -> list[str]:
    """Ack every row still held under ``token`` (a confirmed turn, S18), inside
    ``t``; the message ids acked."""
    params = {"now": now, "token": token, "recipient_id": recipient_id, "ids": None}
    return [r["message_id"] for r in t.all(_ACK, params)]


def ack(
    store: Store,
    ident: Identity,
    token: str,
    ids: Iterable[str] | None = None,
    *,
    tx: Tx | None = None,
) -> int:
    """processing -> done for ``ids`` (message ids; None = the whole lease) (S14).

    Returns how many were acked now; a repeat by the holder returns 0. A lease
    that lost any of them raises ``LeaseLost`` and acks nothing."""
    token = _check_token(token)
    id_list = _norm_ids(ids)
    with store.write(tx) as t:
        done = settle(
            t, ident, token, id_list, _ACK, {"now": store.now_ts()}, "done", own=tx is None
        )[1]
    return len(done)


def release(
    store: Store,
    ident: Identity,
    token: str,
    ids: Iterable[str] | None = None,
    *,
    error: str | None = None,
    tx: Tx | None = None,
) -> int:
    """processing -> ready, for replay (S14); ``error`` is kept as evidence, and
    so is the lease's owner (S15: a later quarantine names it).

    The delivery count is not reset: past ``max_deliveries`` the next claim
    quarantines it."""
    token = _check_token(token)
    id_list = _norm_ids(ids)
    if error is not None:
        error = bounds.text(error, "error", EVIDENCE_MAX)
    with store.write(tx) as t:
        done = settle(
            t, ident, token, id_list, _RELEASE, {"error": error}, "ready", own=tx is None
        )[1]
        if done:
            space_id, pid = ident.space_id, ident.participant_id
            wake.ring_at_commit(t, wake.keys_of(space_id, [pid]))
    return len(done)


def extend(
    store: Store,
    ident: Identity,
    token: str,
    seconds: float | None = None,
    ids: Iterable[str] | None = None,
    *,
    tx: Tx | None = None,
) -> str:
    """Push the lease's expiry to now + ``seconds`` (default ``lease_seconds``);
    returns the new expiry."""
    token = _check_token(token)
    if seconds is not None:
        seconds = check_seconds(seconds, "seconds")
    id_list = _norm_ids(ids)
    with store.write(tx) as t:
        now = store.clock.micros()
        if seconds is None:
            seconds = auth.caller(t, ident).limits.lease_seconds
        expires = stamp_after(now, seconds)
        settle(t, ident, token, id_list, _EXTEND, {"expires": expires}, None, own=tx is None)
    return expires


def quarantine(
    store: Store,
    ident: Identity,
    token: str,
    message_id: str,
    reason: str,
    *,
    error: str | None = None,
    tx: Tx | None = None,
) -> None:
    """Set a bad message aside, with its evidence (S15); the queue goes on.

    The operator lists it (``quarantined``) and can ``requeue`` it."""
    token = _check_token(token)
    reason = bounds.text(reason, "reason", EVIDENCE_MAX)
    if not reason.strip():
        raise errors.InvalidInput("a quarantine needs a reason", field="reason")
    if error is not None:
        error = bounds.text(error, "error", EVIDENCE_MAX)
    ids = _norm_ids([message_id])
    with store.write(tx) as t:
        values = {"reason": reason, "error": error}
        settle(t, ident, token, ids, _QUARANTINE, values, "quarantine", own=tx is None)


def quarantine_held(
    t: Tx, recipient_id: str, token: str, ids: Sequence[str], reason: str
) -> list[str]:
    """Quarantine those of ``ids`` still held under ``token``, inside ``t`` (a failed
    turn's input, S26; ``reason`` checked by the caller); the ids moved. Ids
    claimed again meanwhile are left to the lease that holds them now."""
    params = {
        "token": token,
        "recipient_id": recipient_id,
        "ids": json.dumps(list(ids)),
        "reason": reason,
        "error": None,
    }
    return [r["message_id"] for r in t.all(_QUARANTINE, params)]


def ack_and_claim(
    store: Store,
    ident: Identity,
    token: str,
    ids: Iterable[str] | None = None,
    limit: int = 1,
    lease: float | None = None,
    owner: str | None = None,
    *,
    process: str | None = None,
    tx: Tx | None = None,
) -> Lease:
    """Ack ``ids`` of lease ``token`` and claim the next ``limit`` in ONE transaction."""
    token = _check_token(token)
    limit = check_limit(limit)
    if lease is not None:
        lease = check_seconds(lease)
    owner = default_owner(ident) if owner is None else bounds.label(owner, "owner", OWNER_MAX)
    id_list = _norm_ids(ids)
    with store.write(tx) as t:
        if owner != default_owner(ident):
            check_owner(t, ident, owner)
        acked = {"now": store.now_ts()}
        row = settle(t, ident, token, id_list, _ACK, acked, "done", own=tx is None)[0]
        # the caller is checked: the claim takes its limits (no second read)
        got, _ = _claim_once(store, ident, limit, lease, owner, process, t, False, row.limits)
    return got


# --- restart recovery (S32) ---------------------------------------------------------------
def dead_processes(t: Tx, participant_id: str) -> list[str]:
    """The processes holding the participant's leases that are gone (any transaction)."""
    rows = t.all(_LEASE_PROCESSES, {"recipient_id": participant_id})
    return [r["lease_process"] for r in rows if procs.gone(r["lease_process"])]


def recover(t: Tx, participant_id: str, now: str) -> int:
    """Restart recovery (S32), inside the write transaction ``t``: the
    participant's processing deliveries whose owner process is gone return to
    ready at once (the claim that took them counted the attempt); leases of
    live processes, and of transient claimers (no process recorded), are
    untouched. Returns how many came back."""
    dead = dead_processes(t, participant_id)
    if not dead:
        return 0
    back = t.all(
        _RECOVER, {"recipient_id": participant_id, "now": now, "processes": json.dumps(dead)}
    )
    if back:
        wake.ring_at_commit(t, [wake.participant_key(participant_id)])
    return len(back)


def recover_on_connect(store: Store, participant_id: str) -> int:
    """``recover`` for a process that connects as the participant: one read when
    nothing is to be recovered, a write transaction only when something is."""
    with store.read() as t:
        if not dead_processes(t, participant_id):
            return 0
    with store.write() as t:
        return recover(t, participant_id, store.now_ts())


# --- the operator's write (its read-only views are broker.delivery.inbox_view) ----------------------
def requeue(store: Store, space_ref: str, ids: Iterable[str], *, tx: Tx | None = None) -> int:
    """Put quarantined deliveries back to ready with a fresh delivery count.

    ``ids`` are delivery ids or message ids (a message id requeues it in every
    inbox where it is quarantined). An id matching nothing quarantined is an
    error and nothing is requeued."""
    id_list = list(dict.fromkeys(bounds.text(i, "id", 100) for i in ids))
    if not id_list:
        raise errors.InvalidInput("no ids given", field="ids")
    with store.write(tx) as t:
        space_id = resolve_id(t, space_ref)
        rows = t.all(_REQUEUE, {"space_id": space_id, "ids": json.dumps(id_list)})
        matched = {r["id"] for r in rows} | {r["message_id"] for r in rows}
        unknown = [i for i in id_list if i not in matched]
        if unknown:
            raise errors.MessageNotFound(
                f"not quarantined in space {space_id}: {', '.join(unknown)}", ids=unknown
            )
        woken = sorted({r["recipient_id"] for r in rows})
        wake.ring_at_commit(t, wake.keys_of(space_id, woken))
    return len(rows)
