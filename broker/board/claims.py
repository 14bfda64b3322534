"""Key claims on the board (S22-S23): exclusive leases on keys, with fencing
tokens, and the claim journal.

Claims live in ``board_claims``, one row per key kept forever (the
holder is NULL when free), so the fencing token only grows: every grant gets
the previous token + 1. A live claim is refused to anyone else with its holder
and expiry; an expired one is journaled ``expired`` lazily, by the next claim
of the key or a sweep (``expire_claims``), exactly once because the same
transaction frees the row. A claim by the key's current holder re-grants it:
its old grant is journaled ``released`` and a new, larger token is returned, so
a retried run that lost its token can take its key back and the token of its
previous attempt is fenced off. ``release`` and ``renew`` need the holder's
current, unexpired token: anything else is ``LeaseLost``. Every change is one
write transaction that also appends to ``claim_journal`` (append-only in the
database, like the log).

"""

from __future__ import annotations

import re

from broker import errors
from broker.board import globs, holds
from broker.delivery import waits, wake
from broker.ids import fmt_ts, ts_after
from broker.model import bounds
from broker.model.records import ClaimGrant, JournalEntry
from broker.record_type import from_row
from broker.spaces import gate
from broker.spaces.auth import Caller, Identity
from broker.spaces.spaces import resolve_id
from broker.store.sql import stmts
from broker.store.sqlite import Store, Tx

DEFAULT_TTL = 300.0  # seconds
MAX_TTL = 86400.0
MAX_WAIT = bounds.DAY_S  # how long a claim may wait for its key
KEY_MAX = 200
_KEY = re.compile(r"[A-Za-z0-9._:/-]+")
_SQL = stmts("board", "claim_row", "any_expired", "expired", "live_claims", "journal")
OPERATOR_REASON_MAX = 500

# The importer writes rows through these (broker.board.holds is the tables' one writer).
insert_claims = holds.insert_claims
insert_journal = holds.insert_journal


# --- claiming, releasing, renewing ------------------------------------------------------
def validate_key(key: object) -> str:
    """A claim key: 1-200 characters of letters, digits and . _ : / -, no '..'."""
    if not isinstance(key, str) or not key:
        raise errors.InvalidInput("a claim key is empty", field="key")
    if len(key) > KEY_MAX:
        raise errors.InvalidInput(
            f"claim key is {len(key)} characters long; at most {KEY_MAX}",
            field="key",
            key=key[:KEY_MAX],
        )
    if not _KEY.fullmatch(key):
        bad = next(c for c in key if not _KEY.fullmatch(c))
        raise errors.InvalidInput(
            f"claim key {key!r} has {bad!r}: use letters, digits and . _ : / -",
            field="key",
            key=key,
        )
    if ".." in key:
        raise errors.InvalidInput(f"claim key {key!r} contains '..'", field="key", key=key)
    return key


def check_wait(wait: object) -> float:
    """How long a claim may wait for its key: 0 (answer at once) to a day."""
    return bounds.seconds(wait, "wait", top=MAX_WAIT, zero=True)


def validate_ttl(ttl: object) -> float:
    """A lease length in seconds: at least a millisecond, at most a day."""
    return bounds.seconds(ttl, "ttl", top=MAX_TTL)


def _validate_token(token: int) -> int:
    # Its type and its 64-bit range are checked at the edge (broker.model.typecheck): only the floor is ours.
    if token < 1:
        raise errors.InvalidInput(
            f"bad fence {token!r}: the fencing token the claim returned", field="fence"
        )
    return token


_journal = holds.journal


def claim(
    store: Store,
    ident: Identity,
    key: str,
    ttl: float = DEFAULT_TTL,
    *,
    wait: float = 0.0,
    tx: Tx | None = None,
) -> ClaimGrant:
    """``board.claim``: an exclusive lease on ``key`` for ``ttl`` seconds, with a
    fencing token larger than any earlier grant of the key. Held by someone
    else: ``ClaimHeld`` with the holder and the expiry; with ``wait`` > 0, it
    first waits up to ``wait`` seconds for the key: woken by the release on the
    key's doorbell (S20), or when the holder's claim runs out."""
    key = validate_key(key)
    ttl = validate_ttl(ttl)
    wait = check_wait(wait)
    if wait == 0:
        return _claim(store, ident, key, ttl, tx)
    held: list[errors.ClaimHeld] = []

    def once() -> tuple[ClaimGrant | None, str | None]:
        try:
            return _claim(store, ident, key, ttl, None), None
        except errors.ClaimHeld as exc:
            held[:] = [exc]
            return None, exc.fields["expires_at"]  # its end rings nobody: wake then

    keys = [wake.board_key(ident.space_id, key)]
    got = waits.block(store, ident, wait, once, lambda g: g is not None, keys, tx=tx)
    if got is None:
        raise held[0]
    return got


def _claim(store: Store, ident: Identity, key: str, ttl: float, tx: Tx | None) -> ClaimGrant:
    """One attempt of ``claim`` (checked input)."""

    def run(t: Tx, row: Caller) -> ClaimGrant:
        now = store.now()
        at = fmt_ts(now)
        expires = ts_after(now, ttl)
        space_id = ident.space_id
        where = {"space_id": space_id, "key": key}
        cur = t.one(_SQL["claim_row"], where)
        regrant = cur is not None and cur["holder"] == ident.address
        regrant = regrant and cur["lease_expires_at"] > at
        holds.make_room(t, space_id, ident.address, at, 0 if regrant else 1, row.limits)
        grant = {"holder": ident.address, "claimed_at_utc": at, "lease_expires_at": expires}
        if cur is None:
            token = 1
            insert_claims(t, [{**where, **grant, "token": token}])
        else:
            holder, old_token, old_expires = (
                cur["holder"],
                cur["token"],
                cur["lease_expires_at"],
            )
            if holder is not None:
                if old_expires <= at:
                    _journal(t, space_id, key, "expired", holder, old_token, old_expires, at)
                elif holder == ident.address:
                    _journal(t, space_id, key, "released", holder, old_token, old_expires, at)
                else:
                    raise errors.ClaimHeld(
                        f"key {key!r} is held by {holder} until {old_expires}",
                        key=key,
                        holder=holder,
                        expires_at=old_expires,
                    )
            token = old_token + 1
            holds.grant_claim(t, {**where, **grant, "token": token})
        _journal(t, space_id, key, "claimed", ident.address, token, expires, at)
        return ClaimGrant(
            key=key, fence=token, holder=ident.address, claimed_at_utc=at, expires_at=expires
        )

    return gate.call(store, ident, "board.claim", run, tx=tx)


def _held_by_caller(
    t: Tx, ident: Identity, key: str, token: int, at: str, verb: str
) -> tuple[str, str]:
    """The (claimed_at, lease_expires_at) of the caller's live claim with fence
    ``token``, or ``LeaseLost`` saying why the fence does not hold the key (in
    the board's words: the caller does not hold it, or holds it with another fence)."""
    cur = t.one(_SQL["claim_row"], {"space_id": ident.space_id, "key": key})
    fields = {"key": key, "fence": token}
    if cur is None or cur["holder"] is None:
        raise errors.LeaseLost(
            f"cannot {verb} key {key!r}: you do not hold it (nobody holds it; claim it first)",
            **fields,
        )
    holder, current = cur["holder"], cur["token"]
    claimed_at, expires = cur["claimed_at_utc"], cur["lease_expires_at"]
    if holder != ident.address:
        raise errors.LeaseLost(
            f"cannot {verb} key {key!r}: you do not hold it (it is held by {holder} now)",
            holder=holder,
            **fields,
        )
    if token != current:
        raise errors.LeaseLost(
            f"cannot {verb} key {key!r}: fence {token} is stale (your claim has fence {current})",
            **fields,
        )
    if expires <= at:
        raise errors.LeaseLost(
            f"cannot {verb} key {key!r}: your claim expired at {expires}; claim it again",
            expires_at=expires,
            **fields,
        )
    return claimed_at, expires


def release(
    store: Store, ident: Identity, key: str, token: int, *, tx: Tx | None = None
) -> JournalEntry:
    """``board.release``: free a key the caller holds with ``token`` (else ``LeaseLost``)."""
    key = validate_key(key)
    token = _validate_token(token)

    def run(t: Tx, _row: Caller) -> JournalEntry:
        at = store.now_ts()
        _, expires = _held_by_caller(t, ident, key, token, at, "release")
        holds.free_claim(t, ident.space_id, key)
        return holds.released(t, ident.space_id, key, ident.address, token, expires, at, None)

    return gate.call(store, ident, "board.release", run, tx=tx)


def renew(
    store: Store,
    ident: Identity,
    key: str,
    token: int,
    ttl: float = DEFAULT_TTL,
    *,
    tx: Tx | None = None,
) -> ClaimGrant:
    """Renew: the caller's live claim now expires ``ttl`` seconds from now; same
    token. Needs ``board.claim``. A stale or expired token gets ``LeaseLost``."""
    key = validate_key(key)
    token = _validate_token(token)
    ttl = validate_ttl(ttl)

    def run(t: Tx, _row: Caller) -> ClaimGrant:
        now = store.now()
        at = fmt_ts(now)
        claimed_at, _ = _held_by_caller(t, ident, key, token, at, "renew")
        expires = ts_after(now, ttl)
        holds.renew_claim(t, ident.space_id, key, expires)
        _journal(t, ident.space_id, key, "renewed", ident.address, token, expires, at)
        return ClaimGrant(
            key=key,
            fence=token,
            holder=ident.address,
            claimed_at_utc=claimed_at,
            expires_at=expires,
        )

    return gate.call(store, ident, "board.claim", run, tx=tx)


# --- the operator ---------------------------------------------------------------------
def operator_reason(reason: object) -> str:
    """The journal's reason for a hold the operator ended: ``operator: <why>``."""
    if reason is None:
        return "operator"
    why = bounds.label(reason, "reason", OPERATOR_REASON_MAX).strip()
    return f"operator: {why}" if why else "operator"


def release_as_operator(
    store: Store,
    space_ref: str,
    key: str,
    *,
    fence: int | None = None,
    reason: str | None = None,
    tx: Tx | None = None,
) -> JournalEntry:
    """End the live claim on ``key`` whoever holds it: journaled ``released``
    with the reason ``operator: ...``; the holder's fence is stale from now on
    (``lease_lost``, as after an expiry). ``fence``, when given, must be the
    current grant's (so a claim made meanwhile is not the one ended). Nothing
    live to end: ``LeaseLost``."""
    key = validate_key(key)
    if fence is not None:
        fence = _validate_token(fence)
    why = operator_reason(reason)
    with store.write(tx) as t:
        space_id = resolve_id(t, space_ref)
        at = store.now_ts()
        cur = t.one(_SQL["claim_row"], {"space_id": space_id, "key": key})
        if cur is None or cur["holder"] is None or cur["lease_expires_at"] <= at:
            raise errors.LeaseLost(
                f"cannot release key {key!r}: nobody holds it", key=key, fence=fence
            )
        holder, token, expires = cur["holder"], cur["token"], cur["lease_expires_at"]
        if fence is not None and fence != token:
            raise errors.LeaseLost(
                f"cannot release key {key!r}: fence {fence} is stale ({holder} holds it "
                f"with fence {token})",
                key=key,
                fence=fence,
                holder=holder,
            )
        holds.free_claim(t, space_id, key)
        entry = holds.released(t, space_id, key, holder, token, expires, at, why)
    return entry


# --- operator views -------------------------------------------------------------------
def expire_claims(store: Store, space_ref: str, *, tx: Tx | None = None) -> int:
    """Journal and free every expired claim of a space (the lazy expiry, for all
    keys at once); returns how many. Takes the write lock only if there are any."""
    with store.read(tx) as t:
        space_id = resolve_id(t, space_ref)
        if t.one(_SQL["any_expired"], {"space_id": space_id, "at": store.now_ts()}) is None:
            return 0
    with store.write(tx) as t:
        at = store.now_ts()
        where = {"space_id": space_id, "at": at}
        rows = t.all(_SQL["expired"], where)
        for r in rows:
            _journal(
                t, space_id, r["key"], "expired", r["holder"], r["token"], r["lease_expires_at"], at
            )
        holds.free_expired_claims(t, space_id, at)
    return len(rows)


def live(store: Store, space_ref: str, *, tx: Tx | None = None) -> list[ClaimGrant]:
    """The live claims of a space (held and not expired), by key. Writes nothing."""
    with store.read(tx) as t:
        space_id = resolve_id(t, space_ref)
        rows = t.all(_SQL["live_claims"], {"space_id": space_id, "at": store.now_ts()})
    return [
        from_row(ClaimGrant, r, fence=r["token"], expires_at=r["lease_expires_at"]) for r in rows
    ]


def journal(
    store: Store, space_ref: str, *, key: str | None = None, tx: Tx | None = None
) -> list[JournalEntry]:
    """The claim journal of a space (optionally one key), oldest first. Expired
    claims not yet journaled are journaled first, so the history is complete.
    A path reservation's lines have the key ``path <pattern>`` (S37)."""
    if isinstance(key, str) and key.startswith("path "):
        globs.check_pattern(key[5:])
    elif key is not None:
        validate_key(key)
    expire_claims(store, space_ref, tx=tx)
    with store.read(tx) as t:
        space_id = resolve_id(t, space_ref)
        rows = t.all(_SQL["journal"], {"space_id": space_id, "key": key})
    return [
        from_row(JournalEntry, r, fence=r["token"], expires_at=r["lease_expires_at"]) for r in rows
    ]
