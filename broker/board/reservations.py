"""Path reservations (S37): board claims on path patterns.

A reservation is a grant of one pattern (broker.board.globs) to one participant,
``exclusive`` or ``shared``, for a TTL, with a fencing token. Tokens are per
space, not per pattern: patterns overlap, so "the latest grant covering this
path" needs one order over all of them; every grant gets the largest token
of the space + 1 (rows are kept after they end, so that never goes back).

Two live reservations of different holders conflict when their patterns
overlap (``broker.board.overlap``: some path matches both) and at least one is
exclusive; a request that conflicts with any live grant is refused whole
(``Conflict`` naming holder, pattern, expiry and a path both match). A
participant never conflicts with itself; reserving a pattern it already holds
in the same mode re-grants it with a larger token (the old one is journaled
``released`` and goes stale), like a key claim (S22).

Every change is one write transaction that also journals it in
``claim_journal`` (S23) under the key ``path <pattern>``: a space cannot be in
a board key (keys are letters, digits and ``._:/-``), so the two never mix.
Expiry is lazy, as for keys: the next reservation in the space (or the
operator's journal) journals ``expired`` and ends the row, once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from broker import errors
from broker.board import claims, globs, holds
from broker.board.overlap import overlap
from broker.ids import fmt_ts, ts_after
from broker.model import bounds
from broker.model.records import JournalEntry, PathCheck, Reservation
from broker.record_type import from_row
from broker.spaces import gate
from broker.spaces.auth import Caller, Identity
from broker.spaces.spaces import resolve_id
from broker.store.sql import stmt
from broker.store.sqlite import Store, Tx

DEFAULT_TTL = claims.DEFAULT_TTL
MAX_PATTERNS = 100  # per reserve call
# One check's cost is its paths times the live reservations of the space
# (bounded by space_holds_cap, S41): both are bounded, and so is its time. A
# large commit is checked a slice at a time (the git guard does).
MAX_PATHS = 1000
CHECK_SECONDS = 2.0
# Agents' checks running at once in one process: a server's threads stay free
# for everyone else (the operator's requests above all); one more is refused
# as busy, to retry, rather than queued on a thread.
CHECKS_AT_ONCE = 2
_checking = threading.BoundedSemaphore(CHECKS_AT_ONCE)
REASON_MAX = 500
MODES = ("exclusive", "shared")
_NEXT_TOKEN = stmt("reservations.next_token")
_LIVE = stmt("reservations.live")
_EXPIRED = stmt("reservations.expired")
_ANY_EXPIRED = stmt("reservations.any_expired")
_ROW = stmt("reservations.row")

# The importer writes rows through this (broker.board.holds is the table's one writer).
insert_rows = holds.insert_reservations
journal_key = holds.journal_key


def _patterns(patterns: object) -> list[str]:
    items = [patterns] if isinstance(patterns, str) else patterns
    if not isinstance(items, list | tuple) or not items:
        raise errors.InvalidInput("reserve needs at least one pattern", field="patterns")
    if len(items) > MAX_PATTERNS:
        raise errors.InvalidInput(
            f"{len(items)} patterns; at most {MAX_PATTERNS} per call", field="patterns"
        )
    return list(dict.fromkeys(globs.check_pattern(p) for p in items))


def _paths(paths: object) -> list[str]:
    items = [paths] if isinstance(paths, str) else paths
    if not isinstance(items, list | tuple) or not items:
        raise errors.InvalidInput("check needs at least one path", field="paths")
    if len(items) > MAX_PATHS:
        raise errors.InvalidInput(f"{len(items)} paths; at most {MAX_PATHS}", field="paths")
    return list(dict.fromkeys(globs.check_path(p) for p in items))


def _token(token: object) -> int:
    if isinstance(token, bool) or not isinstance(token, int) or not 1 <= token < 2**63:
        raise errors.InvalidInput(
            f"bad fence {token!r}: the fencing token the reservation returned", field="fence"
        )
    return token


def _record(r: Any) -> Reservation:
    return from_row(Reservation, r, fence=r["token"], expires_at=r["lease_expires_at"])


def _journal(
    t: Tx, space_id: str, pattern: str, event: str, owner: str, token: int, expires: str, at: str
) -> str:
    return holds.journal(t, space_id, journal_key(pattern), event, owner, token, expires, at)


def _expire(t: Tx, space_id: str, at: str) -> int:
    """Journal and end every expired grant of the space (inside a write ``t``)."""
    where = {"space_id": space_id, "at": at}
    rows = t.all(_EXPIRED, where)
    for r in rows:
        _journal(
            t, space_id, r["pattern"], "expired", r["holder"], r["token"], r["lease_expires_at"], at
        )
    if rows:
        holds.end_expired_reservations(t, space_id, at)
    return len(rows)


def _rivals(want: str, mode: str, me: str, live: Iterable[Reservation]) -> Iterable[Reservation]:
    """The live grants ``want`` could conflict with: someone else's, not both shared."""
    for r in live:
        if r.holder != me and not (mode == "shared" and r.mode == "shared"):
            yield r


def _overlaps(
    store: Store, ident: Identity, wanted: list[str], mode: str, tx: Tx | None
) -> dict[tuple[str, str], str | None]:
    """The overlaps of the wanted patterns with the live grants of the space,
    decided before the write lock is taken (S41): under it, only grants made
    in between are left to decide. Reads the live rows; writes nothing."""
    with store.read(tx) as t:
        live = [
            _record(r) for r in t.all(_LIVE, {"space_id": ident.space_id, "at": store.now_ts()})
        ]
    return {
        (want, r.pattern): overlap(want, r.pattern)
        for want in wanted
        for r in _rivals(want, mode, ident.address, live)
    }


def _conflict(
    want: str,
    mode: str,
    me: str,
    live: Iterable[Reservation],
    known: dict[tuple[str, str], str | None],
) -> None:
    for r in _rivals(want, mode, me, live):
        pair = (want, r.pattern)
        witness = known[pair] if pair in known else overlap(want, r.pattern)
        if witness is not None:
            raise errors.Conflict(
                f"{want!r} overlaps {r.holder}'s {r.mode} reservation of {r.pattern!r} "
                f"until {r.expires_at} (fence {r.fence}); both match {witness!r}",
                pattern=want,
                holder=r.holder,
                held_pattern=r.pattern,
                mode=r.mode,
                fence=r.fence,
                expires_at=r.expires_at,
                witness=witness,
            )


def reserve(
    store: Store,
    ident: Identity,
    patterns: str | Sequence[str],
    *,
    shared: bool = False,
    ttl: float = DEFAULT_TTL,
    reason: str | None = None,
    tx: Tx | None = None,
) -> list[Reservation]:
    """Reserve path patterns (tool ``board.claim``): one grant per pattern, all
    or none. A conflict with a live grant of someone else: ``Conflict``."""
    wanted = _patterns(patterns)
    if not isinstance(shared, bool):
        raise errors.InvalidInput(f"bad shared {shared!r}: true or false", field="shared")
    ttl = claims.validate_ttl(ttl)
    if reason is not None:
        reason = bounds.label(reason, "reason", REASON_MAX)
    mode = "shared" if shared else "exclusive"
    known = _overlaps(store, ident, wanted, mode, tx)

    def run(t: Tx, caller: Caller) -> list[Reservation]:
        space = ident.space_id
        now = store.now_in(t, space)  # S44: after every overlapping grant's end
        at = fmt_ts(now)
        expires = ts_after(now, ttl)
        _expire(t, space, at)
        live = [_record(r) for r in t.all(_LIVE, {"space_id": space, "at": at})]
        held = {r.pattern for r in live if r.holder == ident.address and r.mode == mode}
        adding = sum(1 for want in wanted if want not in held)  # a re-grant adds nothing
        holds.make_room(t, space, ident.address, at, adding, caller.limits)
        for want in wanted:
            _conflict(want, mode, ident.address, live, known)
        token = t.one(_NEXT_TOKEN, {"space_id": space})["token"]
        grants: list[Reservation] = []
        for want in wanted:
            for old in live:  # the caller's own grant of the same pattern: re-granted
                if old.holder == ident.address and old.pattern == want and old.mode == mode:
                    holds.end_reservation(t, space, old.fence, at)
                    _journal(t, space, want, "released", old.holder, old.fence, old.expires_at, at)
            row = {
                "space_id": space,
                "token": token,
                "pattern": want,
                "mode": mode,
                "holder": ident.address,
                "reason": reason,
                "claimed_at_utc": at,
                "lease_expires_at": expires,
                "ended_at_utc": None,
            }
            insert_rows(t, [row])
            _journal(t, space, want, "claimed", ident.address, token, expires, at)
            grants.append(_record(row))
            token += 1
        return grants

    return gate.call(store, ident, "board.claim", run, tx=tx)


def _held(t: Tx, ident: Identity, token: int, at: str, verb: str) -> Any:
    """The caller's live grant with ``token``, or ``LeaseLost`` saying why not."""
    r = t.one(_ROW, {"space_id": ident.space_id, "token": token})
    if r is None:
        raise errors.LeaseLost(f"cannot {verb}: no reservation has fence {token}", fence=token)
    fields = {"fence": token, "pattern": r["pattern"]}
    if r["holder"] != ident.address:
        raise errors.LeaseLost(
            f"cannot {verb} fence {token}: it is {r['holder']}'s reservation of {r['pattern']!r}",
            holder=r["holder"],
            **fields,
        )
    if r["ended_at_utc"] is not None:
        raise errors.LeaseLost(
            f"cannot {verb} fence {token}: your reservation of {r['pattern']!r} ended at "
            f"{r['ended_at_utc']}; reserve it again",
            **fields,
        )
    if r["lease_expires_at"] <= at:
        raise errors.LeaseLost(
            f"cannot {verb} fence {token}: your reservation of {r['pattern']!r} expired at "
            f"{r['lease_expires_at']}; reserve it again",
            expires_at=r["lease_expires_at"],
            **fields,
        )
    return r


def release(store: Store, ident: Identity, token: int, *, tx: Tx | None = None) -> JournalEntry:
    """Release the caller's reservation with fence ``token`` (else ``LeaseLost``)."""
    token = _token(token)

    def run(t: Tx, _row: Caller) -> JournalEntry:
        at = fmt_ts(store.now_in(t, ident.space_id))
        r = _held(t, ident, token, at, "release")
        holds.end_reservation(t, ident.space_id, token, at)
        key, expires = journal_key(r["pattern"]), r["lease_expires_at"]
        return holds.released(t, ident.space_id, key, ident.address, token, expires, at, None)

    return gate.call(store, ident, "board.release", run, tx=tx)


def renew(
    store: Store, ident: Identity, token: int, ttl: float = DEFAULT_TTL, *, tx: Tx | None = None
) -> Reservation:
    """The caller's live reservation ``token`` now expires ``ttl`` seconds from now."""
    token = _token(token)
    ttl = claims.validate_ttl(ttl)

    def run(t: Tx, _row: Caller) -> Reservation:
        now = store.now_in(t, ident.space_id)
        at = fmt_ts(now)
        r = _held(t, ident, token, at, "renew")
        expires = ts_after(now, ttl)
        holds.renew_reservation(t, ident.space_id, token, expires)
        _journal(t, ident.space_id, r["pattern"], "renewed", ident.address, token, expires, at)
        return replace(_record(r), expires_at=expires)

    return gate.call(store, ident, "board.claim", run, tx=tx)


def release_as_operator(
    store: Store, space_ref: str, fence: int, *, reason: str | None = None, tx: Tx | None = None
) -> JournalEntry:
    """End the live reservation with ``fence`` whoever holds it: journaled
    ``released`` with the reason ``operator: ...``; the fence is stale from
    now on (``lease_lost``, as after an expiry). Not live: ``LeaseLost``."""
    token = _token(fence)
    why = claims.operator_reason(reason)
    with store.write(tx) as t:
        space_id = resolve_id(t, space_ref)
        at = fmt_ts(store.now_in(t, space_id))
        r = t.one(_ROW, {"space_id": space_id, "token": token})
        if r is None or r["ended_at_utc"] is not None or r["lease_expires_at"] <= at:
            problem = (
                "no reservation has that fence"
                if r is None
                else f"{r['holder']}'s reservation of {r['pattern']!r} has ended or expired"
            )
            raise errors.LeaseLost(f"cannot release fence {token}: {problem}", fence=token)
        holder, pattern, expires = r["holder"], r["pattern"], r["lease_expires_at"]
        holds.end_reservation(t, space_id, token, at)
        key = journal_key(pattern)
        entry = holds.released(t, space_id, key, holder, token, expires, at, why)
    return entry


def _check(t: Tx, space_id: str, paths: list[str], me: str | None, at: str) -> list[PathCheck]:
    live = [_record(r) for r in t.all(_LIVE, {"space_id": space_id, "at": at})]
    out = []
    deadline = time.monotonic() + CHECK_SECONDS
    for path in paths:
        if time.monotonic() > deadline:
            raise errors.StoreBusy(
                f"checking {len(paths)} paths against {len(live)} live reservations takes more "
                f"than {CHECK_SECONDS:g} s: check fewer paths at a time",
                paths=len(paths),
                reservations=len(live),
            )
        held = [r for r in live if globs.matches(r.pattern, path)]
        blocked = any(r.mode == "exclusive" and r.holder != me for r in held)
        out.append(PathCheck(path=path, held_by=held, blocked=blocked))
    return out


def check(
    store: Store, ident: Identity, paths: str | Sequence[str], *, tx: Tx | None = None
) -> list[PathCheck]:
    """Who holds what covers each path (tool ``board.read``); ``blocked`` when
    someone else holds a covering pattern exclusively. Writes nothing."""
    wanted = _paths(paths)

    def run(t: Tx, _row: Caller) -> list[PathCheck]:
        return _check(t, ident.space_id, wanted, ident.address, store.now_ts())

    if not _checking.acquire(blocking=False):
        raise errors.StoreBusy(
            f"{CHECKS_AT_ONCE} path checks are running in this broker process; retry in a moment",
            retry_after=1,
        )
    try:
        return gate.call(store, ident, "board.read", run, tx=tx, write=False)
    finally:
        _checking.release()


def check_as_operator(
    store: Store, space_ref: str, paths: str | Sequence[str], *, tx: Tx | None = None
) -> list[PathCheck]:
    """The operator's check: ``blocked`` when anyone holds a covering pattern exclusively."""
    wanted = _paths(paths)
    with store.read(tx) as t:
        return _check(t, resolve_id(t, space_ref), wanted, None, store.now_ts())


def live(store: Store, space_ref: str, *, tx: Tx | None = None) -> list[Reservation]:
    """The live reservations of a space, by token. Writes nothing."""
    with store.read(tx) as t:
        space_id = resolve_id(t, space_ref)
        return [_record(r) for r in t.all(_LIVE, {"space_id": space_id, "at": store.now_ts()})]


def expire(store: Store, space_ref: str, *, tx: Tx | None = None) -> int:
    """Journal and end every expired reservation of a space; takes the write
    lock only if there are any. Returns how many."""
    with store.read(tx) as t:
        space_id = resolve_id(t, space_ref)
        if t.one(_ANY_EXPIRED, {"space_id": space_id, "at": store.now_ts()}) is None:
            return 0
    with store.write(tx) as t:
        return _expire(t, space_id, store.now_ts())
