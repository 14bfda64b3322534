"""Inboxes as transactional queues (S13-S16): claim, ack, release, extend, quarantine.

Every inbox is the set of ``deliveries`` rows of one recipient, moving
ready -> processing -> done | quarantine. A claim is ONE statement inside
``BEGIN IMMEDIATE``::

    UPDATE deliveries SET state = 'processing', lease_token = ?, ...
    WHERE id IN (SELECT id ... ORDER BY created_at_utc, id LIMIT ?) RETURNING ...

whose candidates are the recipient's ready rows *and* its processing rows whose
lease has expired (S15: expiry is taken back inside the claim predicate, no
sweeper needed). Each branch is an index range (``ix_deliveries_ready``,
``ix_deliveries_leased``) cut to ``LIMIT`` before the merge, so a claim reads
``limit`` rows however long the backlog. A candidate already claimed
``max_deliveries`` times goes to quarantine in the same statement (a ``CASE``)
and is not handed out.

Lease tokens: a claim takes a fresh random token; ack / release / extend /
quarantine present it. A token holds a delivery while the row is processing
under it, even past its expiry, until someone else claims the row (S14: "the
lease expired and someone else claimed" is what makes a token stale). Then the
token is refused with ``LeaseLost``, naming the message ids. The token stays on
settled rows, so a second ack by the holder is recognised and returns 0.

Delivery is at-least-once (S16). A consumer de-duplicates by the message id
(``Delivery.id``) and makes its own work and the ack one transaction, history
first, ack second::

    with store.transaction() as t:
        if not already_in_history(t, d.id):          # de-duplicate by message id
            append_to_history(t, d.id, d.body)       # the caller's own tables
        inbox.ack(store, ident, lease.token, [d.id], tx=t)
    # Both committed, or neither: if the ack raises LeaseLost (the lease was
    # lost and the message went to someone else), the history append is rolled
    # back; a retry after a crash finds the message in history and only acks.

Every write here takes ``tx=`` to join such a transaction (``store.transaction()``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from typing import Any

from broker import auth, errors, wake
from broker.auth import Identity
from broker.db import Store, Tx
from broker.ids import fmt_ts, new_token, parse_ts, ts_after
from broker.records import Delivery, Lease, QuarantinedDelivery
from broker.settings import Limits
from broker.spaces import limits_of, resolve_id

MAX_LIMIT = 10_000
MAX_LEASE_S = 7 * 24 * 3600.0
MAX_QUARANTINE_ROUNDS = 16

# Candidates: the oldest ready rows and the oldest expired leases of one
# recipient, each cut to LIMIT on its own partial index before the merge.
_CANDIDATES = (
    "SELECT id FROM ("
    "SELECT * FROM (SELECT id, created_at_utc FROM deliveries "
    "WHERE recipient_id = ?1 AND state = 'ready' ORDER BY created_at_utc, id LIMIT ?2) "
    "UNION ALL "
    "SELECT * FROM (SELECT id, created_at_utc FROM deliveries "
    "WHERE recipient_id = ?1 AND state = 'processing' AND lease_expires_at < ?3 "
    "ORDER BY created_at_utc, id LIMIT ?2)"
    ") ORDER BY created_at_utc, id LIMIT ?2"
)
_POISON = "attempts >= ?4"
# SET expressions all see the old row, so every CASE tests the old attempts/state.
CLAIM_SQL = (
    "UPDATE deliveries SET "
    f"state = CASE WHEN {_POISON} THEN 'quarantine' ELSE 'processing' END, "
    f"attempts = CASE WHEN {_POISON} THEN attempts ELSE attempts + 1 END, "
    f"lease_token = CASE WHEN {_POISON} THEN lease_token ELSE ?5 END, "
    f"lease_owner = CASE WHEN {_POISON} THEN lease_owner ELSE ?6 END, "
    f"lease_expires_at = CASE WHEN {_POISON} THEN lease_expires_at ELSE ?7 END, "
    f"quarantine_reason = CASE WHEN {_POISON} THEN 'max_deliveries' ELSE quarantine_reason END, "
    # The evidence of a lease that ran out: whose it was and when it ended.
    "last_error = CASE WHEN state = 'processing' THEN "
    "'lease of ' || coalesce(lease_owner, '?') || ' expired at ' || lease_expires_at "
    "ELSE last_error END "
    f"WHERE id IN ({_CANDIDATES}) "
    "RETURNING id, message_id, state, attempts, created_at_utc"
)


def enter(t: Tx, ident: Identity, now: str) -> Limits:
    """Check the caller inside ``t`` (refreshing its heartbeat); the space's limits."""
    return auth.caller(t, ident, now).limits


def default_owner(ident: Identity) -> str:
    return f"{ident.address}:{os.getpid()}"


def check_limit(limit: int) -> None:
    if not 1 <= limit <= MAX_LIMIT:
        raise errors.InvalidInput(f"bad limit {limit}: 1 to {MAX_LIMIT}")


def check_seconds(seconds: float, what: str = "lease") -> None:
    if not 0 < seconds <= MAX_LEASE_S:
        raise errors.InvalidInput(f"bad {what} {seconds!r}: more than 0 and at most 7 days")


def claim_rows(
    t: Tx,
    recipient_id: str,
    limit: int,
    token: str,
    owner: str,
    now: str,
    expires: str,
    max_deliveries: int,
) -> list[Delivery]:
    """The claim statement, inside ``t``: up to ``limit`` deliveries, oldest first.

    Candidates past ``max_deliveries`` are quarantined by the same statement and
    not returned; the statement is run again (rarely) to fill the batch."""
    out: list[Delivery] = []
    for _ in range(MAX_QUARANTINE_ROUNDS):
        want = limit - len(out)
        rows = t.all(CLAIM_SQL, (recipient_id, want, now, max_deliveries, token, owner, expires))
        held = [r for r in rows if r[2] == "processing"]
        if held:
            mids = [r[1] for r in held]
            msgs = {
                m[0]: m
                for m in t.all(
                    "SELECT id, kind, sender, body, urgent FROM messages "
                    f"WHERE id IN ({','.join('?' * len(mids))})",
                    mids,
                )
            }
            for r in held:
                m = msgs[r[1]]
                out.append(
                    Delivery(
                        id=r[1],
                        delivery_id=r[0],
                        kind=m[1],
                        sender=m[2],
                        body=m[3],
                        urgent=bool(m[4]),
                        created_at_utc=r[4],
                        deliveries=r[3],
                    )
                )
        if len(held) == len(rows) or len(rows) < want:
            break
    if len(out) > 1:
        out.sort(key=lambda d: (d.created_at_utc, d.delivery_id))
    return out


def next_expiry(t: Tx, recipient_id: str) -> str | None:
    row = t.one(
        "SELECT min(lease_expires_at) FROM deliveries WHERE recipient_id = ? AND state = 'processing'",
        (recipient_id,),
    )
    return row[0] if row else None


def _claim_once(
    store: Store,
    ident: Identity,
    limit: int,
    lease: float | None,
    owner: str,
    tx: Tx | None,
    want_expiry: bool,
) -> tuple[Lease, str | None]:
    now_dt = store.now()
    now = fmt_ts(now_dt)
    token = new_token()
    with store.write(tx) as t:
        limits = enter(t, ident, now)
        seconds = limits.lease_seconds if lease is None else lease
        expires = ts_after(now_dt, seconds)
        got = claim_rows(
            t, ident.participant_id, limit, token, owner, now, expires, limits.max_deliveries
        )
        expiry = next_expiry(t, ident.participant_id) if want_expiry and not got else None
    return Lease(token=token, owner=owner, expires_at=expires, deliveries=got), expiry


def claim(
    store: Store,
    ident: Identity,
    limit: int = 1,
    lease: float | None = None,
    wait: float = 0.0,
    owner: str | None = None,
    *,
    tx: Tx | None = None,
) -> Lease:
    """Claim up to ``limit`` of the oldest deliveries of the caller's inbox (S13).

    ``lease`` is in seconds (default: the space's ``lease_seconds``). With
    ``wait`` > 0, blocks on the inbox's doorbell (S20) until something can be
    claimed or ``wait`` seconds pass; an empty lease means nothing came."""
    check_limit(limit)
    if lease is not None:
        check_seconds(lease)
    owner = owner or default_owner(ident)
    if wait <= 0:
        return _claim_once(store, ident, limit, lease, owner, tx, False)[0]
    if tx is not None:
        raise errors.InvalidInput("cannot wait inside a transaction: it would hold the write lock")
    deadline = time.monotonic() + wait
    with wake.Waiter(store, [wake.participant_key(ident.participant_id)]) as waiter:
        while True:
            got, expiry = _claim_once(store, ident, limit, lease, owner, None, True)
            left = deadline - time.monotonic()
            if got.deliveries or left <= 0:
                return got
            waiter.wait(until(store, expiry, left))


def until(store: Store, expiry: str | None, left: float) -> float:
    """How long to sleep: until ``left`` runs out, or just past the next lease
    expiry of the inbox (expiry rings no doorbell: nobody commits)."""
    if expiry is None:
        return left
    delta = (parse_ts(expiry) - store.now()).total_seconds()
    return max(0.001, min(left, delta + 0.001))


# --- settling ----------------------------------------------------------------------
def _ids_clause(ids: Sequence[str] | None) -> tuple[str, list[str]]:
    if ids is None:
        return "", []
    return f" AND message_id IN ({','.join('?' * len(ids))})", list(ids)


def _norm_ids(ids: Iterable[str] | None) -> list[str] | None:
    if ids is None:
        return None
    out = list(dict.fromkeys(ids))
    if not out:
        raise errors.InvalidInput("no message ids given (omit them to mean the whole lease)")
    return out


def _lost(token: str, lost: list[tuple[str, str]]) -> errors.LeaseLost:
    why = {
        "processing": "claimed again under another lease",
        "ready": "released for replay",
        "done": "acked under another lease",
        "quarantine": "quarantined",
    }
    parts = ", ".join(f"{mid} ({why.get(state, state)})" for mid, state in lost)
    return errors.LeaseLost(
        f"lease {token[:8]}... no longer holds {parts}: do not ack; the messages were redelivered",
        lease=token,
        lost=[mid for mid, _ in lost],
    )


def _settle(
    t: Tx,
    ident: Identity,
    token: str,
    ids: list[str] | None,
    set_sql: str,
    params: Sequence[Any],
    settled_state: str | None,
) -> list[str]:
    """Move the rows still held under ``token`` (processing) with ``set_sql``.

    Rows already in ``settled_state`` under this same token were settled by the
    holder before: idempotent, not counted. Anything else is a lost lease."""
    where, extra = _ids_clause(ids)
    done = [
        r[0]
        for r in t.all(
            # `+recipient_id`: find the rows by token, not by scanning the inbox's leases.
            f"UPDATE deliveries SET {set_sql} WHERE lease_token = ? AND +recipient_id = ? "
            f"AND state = 'processing'{where} RETURNING message_id",
            (*params, token, ident.participant_id, *extra),
        )
    ]
    if ids is not None:
        got = set(done)
        missing = [i for i in ids if i not in got]
        if not missing:
            return done
        rows = t.all(
            f"SELECT message_id, state, lease_token FROM deliveries WHERE recipient_id = ? "
            f"AND message_id IN ({','.join('?' * len(missing))})",
            (ident.participant_id, *missing),
        )
        found = {r[0]: (r[1], r[2]) for r in rows}
        unknown = [i for i in missing if i not in found]
        if unknown:
            raise errors.MessageNotFound(
                f"no delivery of {', '.join(unknown)} in the inbox of {ident.address}",
                ids=unknown,
            )
        lost = [
            (i, found[i][0])
            for i in missing
            if not (found[i][1] == token and found[i][0] == settled_state)
        ]
        if lost:
            raise _lost(token, lost)
        return done
    if done:
        return done
    rows = t.all(
        "SELECT message_id, state FROM deliveries WHERE lease_token = ? AND recipient_id = ?",
        (token, ident.participant_id),
    )
    lost = [(r[0], r[1]) for r in rows if r[1] != settled_state]
    if lost or not rows:
        if not rows:
            raise errors.LeaseLost(
                f"lease {token[:8]}... holds nothing in the inbox of {ident.address}: it expired "
                "and its messages were claimed again, or the token is wrong",
                lease=token,
                lost=[],
            )
        raise _lost(token, lost)
    return done


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
    id_list = _norm_ids(ids)
    with store.write(tx) as t:
        done = _settle(
            t, ident, token, id_list, "state = 'done', acked_at_utc = ?", (store.now_ts(),), "done"
        )
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
    """processing -> ready, for replay (S14); ``error`` is kept as evidence.

    The delivery count is not reset: past ``max_deliveries`` the next claim
    quarantines it."""
    id_list = _norm_ids(ids)
    with store.write(tx) as t:
        done = _settle(
            t,
            ident,
            token,
            id_list,
            "state = 'ready', lease_owner = NULL, lease_expires_at = NULL, "
            "last_error = coalesce(?, last_error)",
            (error,),
            "ready",
        )
        if done:
            pid = ident.participant_id
            t.after_commit(lambda: wake.ring(store, ident.space_id, [pid]))
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
    if seconds is not None:
        check_seconds(seconds)
    id_list = _norm_ids(ids)
    with store.write(tx) as t:
        if seconds is None:
            settings = t.one("SELECT settings FROM spaces WHERE id = ?", (ident.space_id,))[0]
            seconds = limits_of(settings).lease_seconds
        expires = ts_after(store.now(), seconds)
        _settle(t, ident, token, id_list, "lease_expires_at = ?", (expires,), None)
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
    if not reason.strip():
        raise errors.InvalidInput("a quarantine needs a reason")
    with store.write(tx) as t:
        _settle(
            t,
            ident,
            token,
            [message_id],
            "state = 'quarantine', quarantine_reason = ?, last_error = coalesce(?, last_error)",
            (reason, error),
            "quarantine",
        )


def ack_and_claim(
    store: Store,
    ident: Identity,
    token: str,
    ids: Iterable[str] | None = None,
    limit: int = 1,
    lease: float | None = None,
    owner: str | None = None,
    *,
    tx: Tx | None = None,
) -> Lease:
    """Ack ``ids`` of lease ``token`` and claim the next ``limit`` in ONE transaction."""
    check_limit(limit)
    if lease is not None:
        check_seconds(lease)
    id_list = _norm_ids(ids)
    with store.write(tx) as t:
        _settle(
            t, ident, token, id_list, "state = 'done', acked_at_utc = ?", (store.now_ts(),), "done"
        )
        got, _ = _claim_once(store, ident, limit, lease, owner or default_owner(ident), t, False)
    return got


# --- the operator's view of quarantine ------------------------------------------------
def quarantined(store: Store, space_ref: str, *, tx: Tx | None = None) -> list[QuarantinedDelivery]:
    """Every quarantined delivery of a space, oldest first, with its evidence."""
    with store.read(tx) as t:
        space_id = resolve_id(t, space_ref)
        rows = t.all(
            "SELECT d.id, d.message_id, p.address, m.kind, m.sender, m.body, d.created_at_utc, "
            "d.attempts, d.quarantine_reason, d.last_error, d.lease_owner "
            "FROM deliveries d JOIN messages m ON m.id = d.message_id "
            "JOIN participants p ON p.id = d.recipient_id "
            "WHERE d.space_id = ? AND d.state = 'quarantine' ORDER BY d.created_at_utc, d.id",
            (space_id,),
        )
    return [
        QuarantinedDelivery(
            delivery_id=r[0],
            id=r[1],
            recipient=r[2],
            kind=r[3],
            sender=r[4],
            body=r[5],
            created_at_utc=r[6],
            deliveries=r[7],
            reason=r[8],
            last_error=r[9],
            lease_owner=r[10],
        )
        for r in rows
    ]


def requeue(store: Store, space_ref: str, ids: Iterable[str], *, tx: Tx | None = None) -> int:
    """Put quarantined deliveries back to ready with a fresh delivery count.

    ``ids`` are delivery ids or message ids (a message id requeues it in every
    inbox where it is quarantined). An id matching nothing quarantined is an
    error and nothing is requeued."""
    id_list = list(dict.fromkeys(ids))
    if not id_list:
        raise errors.InvalidInput("no ids given")
    marks = ",".join("?" * len(id_list))
    with store.write(tx) as t:
        space_id = resolve_id(t, space_ref)
        rows = t.all(
            "UPDATE deliveries SET state = 'ready', attempts = 0, quarantine_reason = NULL, "
            "lease_owner = NULL, lease_expires_at = NULL "
            f"WHERE space_id = ? AND state = 'quarantine' AND (id IN ({marks}) OR message_id IN ({marks})) "
            "RETURNING id, message_id, recipient_id",
            (space_id, *id_list, *id_list),
        )
        matched = {r[0] for r in rows} | {r[1] for r in rows}
        unknown = [i for i in id_list if i not in matched]
        if unknown:
            raise errors.MessageNotFound(
                f"not quarantined in space {space_id}: {', '.join(unknown)}", ids=unknown
            )
        woken = sorted({r[2] for r in rows})
        t.after_commit(lambda: wake.ring(store, space_id, woken))
    return len(rows)
