"""The board of a space (S21-S24): posts, standing directives, key claims.

Posts, directives and retractions are log rows (the board is a view of the
log; ``board.post`` itself is ``messages.post``).

- ``read``: the board after a cursor: posts, directives and retractions in log
  order, oldest first, at most ``limit``; the cursor is the id of the last
  entry read (any message id of the space works). A directive carries
  ``in_force``: false once it was retracted.
- ``directive``: a standing instruction (tool ``board.directive``). It is one
  log row recording whom it reached when issued, with no inbox rows: which
  participants it applies to is decided at every turn from its ``to`` forms
  (``active_directives``), so a role, step or broadcast directive also applies
  to participants that join later and match. It applies until lifted.
- ``retract``: lifts a directive (tool ``board.retract``); only its author
  (the address that issued it) may, and only once.

Claims (S22-S23) live in ``board_claims``, one row per key kept forever (the
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

import heapq
import json
import math
import re
from dataclasses import dataclass
from typing import Any

from broker import errors, messages, tools
from broker.addressing import Target, parse_target
from broker.auth import Caller, Identity
from broker.db import Store, Tx
from broker.ids import fmt_ts, new_id, ts_after
from broker.models import DirectiveInput
from broker.records import BoardEntry, ClaimGrant, JournalEntry, SendResult, to_dict
from broker.spaces import resolve_id

DEFAULT_READ_LIMIT = 100
MAX_READ_LIMIT = 1000
DEFAULT_TTL = 300.0  # seconds
MAX_TTL = 86400.0
KEY_MAX = 200
_KEY = re.compile(r"[A-Za-z0-9._:/-]+")
# The partial index's predicate, verbatim, so SQLite can use the index
# (it only uses a partial index when the query's WHERE contains its WHERE).
_BOARD_KINDS = "kind IN ('post', 'directive', 'retract')"
# `to` forms that can match participants who join after the directive.
_LATER = frozenset({"role", "step", "name", "broadcast"})


# --- reading the board ----------------------------------------------------------------
def read(
    store: Store,
    ident: Identity,
    *,
    after: str | None = None,
    limit: int = DEFAULT_READ_LIMIT,
    tx: Tx | None = None,
) -> list[BoardEntry]:
    """``board.read``: posts, directives and retractions after the cursor ``after``
    (a message id), oldest first, at most ``limit``."""
    _check_read_limit(limit)

    def run(t: Tx, _row: Caller) -> list[BoardEntry]:
        return _read(t, ident.space_id, after, limit)

    return tools.call(store, ident, "board.read", run, tx=tx, write=False)


def view(
    store: Store,
    space_ref: str,
    *,
    after: str | None = None,
    limit: int = DEFAULT_READ_LIMIT,
    tx: Tx | None = None,
) -> list[BoardEntry]:
    """The operator's ``board.view``: what ``read`` returns, without an agent's identity."""
    _check_read_limit(limit)
    with store.read(tx) as t:
        return _read(t, resolve_id(t, space_ref), after, limit)


def _check_read_limit(limit: object) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_READ_LIMIT:
        raise errors.InvalidInput(f"bad limit {limit!r}: 1 to {MAX_READ_LIMIT}")


def _read(t: Tx, space_id: str, after: str | None, limit: int) -> list[BoardEntry]:
    start = 0
    if after:
        row = t.one("SELECT seq FROM messages WHERE space_id = ? AND id = ?", (space_id, after))
        if row is None:
            raise errors.MessageNotFound(
                f"no message {after!r} in this space: --after takes the id of a board entry you read"
            )
        start = row[0]
    # One range per kind on the partial index, merged: never a scan of the log.
    per_kind = [
        t.all(
            "SELECT id, seq, kind, sender, recipients, body, ref, reached, created_at_utc, "
            "CASE WHEN kind = 'directive' THEN NOT EXISTS (SELECT 1 FROM messages r "
            "WHERE r.ref = m.id AND r.kind = 'retract') END "
            f"FROM messages m WHERE space_id = ? AND {_BOARD_KINDS} AND kind = ? AND seq > ? "
            "ORDER BY seq LIMIT ?",
            (space_id, kind, start, limit),
        )
        for kind in ("post", "directive", "retract")
    ]
    merged = heapq.merge(*per_kind, key=lambda r: r[1])
    return [_entry(r) for _, r in zip(range(limit), merged, strict=False)]


def _entry(r: tuple[Any, ...]) -> BoardEntry:
    return BoardEntry(
        id=r[0],
        seq=r[1],
        kind=r[2],
        sender=r[3],
        to=json.loads(r[4]),
        body=r[5],
        ref=r[6],
        reached=json.loads(r[7]),
        in_force=None if r[9] is None else bool(r[9]),
        created_at_utc=r[8],
    )


# --- directives -----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Directive:
    id: str
    seq: int
    sender: str
    body: str
    created_at_utc: str


def directive(
    store: Store,
    ident: Identity,
    to: str | list[str] | tuple[str, ...],
    text: str,
    *,
    idempotency_key: str | None = None,
    tx: Tx | None = None,
) -> SendResult:
    """``board.directive``: a standing instruction for the participants ``to``
    addresses (S6 forms), shown on each of their turns until retracted.

    A directive that reaches nobody now is still logged and in force. It is an
    error to its sender (S8) unless one of its forms (role, step, bare name,
    broadcast) can match a participant that joins later."""
    inp = messages.parse_input(
        DirectiveInput,
        {
            "to": [to] if isinstance(to, str) else list(to),
            "text": text,
            "idempotency_key": idempotency_key,
        },
    )
    if not inp.text.strip():
        raise errors.InvalidInput("a directive needs text")
    targets = [parse_target(x) for x in inp.to]
    for tg in targets:
        if tg.kind == "operator":
            raise errors.InvalidInput("a directive cannot be addressed to the operator")
    if any(tg.kind == "broadcast" for tg in targets) and len(targets) > 1:
        raise errors.InvalidInput("'broadcast' cannot be combined with other addresses")

    def run(t: Tx, row: Caller) -> SendResult:
        sender = messages.Sender(ident.address, ident.participant_id, row.parent)
        return messages.send_in_tx(
            store,
            t,
            ident.space_id,
            sender,
            "directive",
            targets,
            inp.text,
            key=inp.idempotency_key,
            deliver=False,
        )

    result = tools.call(store, ident, "board.directive", run, tx=tx)
    if result.not_reached and not result.reached and not any(tg.kind in _LATER for tg in targets):
        reasons = ", ".join(f"{n.address}: {n.reason}" for n in result.not_reached)
        raise errors.NotDelivered(
            f"directive {result.id} reached nobody ({reasons}); it stays in force until retracted",
            result=to_dict(result),
        )
    return result


def retract(
    store: Store, ident: Identity, directive_id: str, *, tx: Tx | None = None
) -> SendResult:
    """``board.retract``: lift a directive. Only its author may, once."""
    if not isinstance(directive_id, str) or not directive_id.strip():
        raise errors.InvalidInput("retract needs the id of a directive")
    did = directive_id.strip()

    def run(t: Tx, row: Caller) -> SendResult:
        found = t.one(
            "SELECT kind, sender FROM messages WHERE space_id = ? AND id = ?",
            (ident.space_id, did),
        )
        if found is None or found[0] != "directive":
            raise errors.DirectiveNotFound(f"no directive {did!r} in this space", directive_id=did)
        if found[1] != ident.address:
            raise errors.NotAuthor(
                f"only the author of directive {did} ({found[1]}) may retract it, not {ident.address}",
                directive_id=did,
                author=found[1],
            )
        done = t.one(
            "SELECT id FROM messages WHERE ref = ? AND kind = 'retract' AND space_id = ?",
            (did, ident.space_id),
        )
        if done is not None:
            raise errors.AlreadyRetracted(
                f"directive {did} was already retracted (by {done[0]})",
                directive_id=did,
                retract_id=done[0],
            )
        sender = messages.Sender(ident.address, ident.participant_id, row.parent)
        return messages.send_in_tx(
            store,
            t,
            ident.space_id,
            sender,
            "retract",
            [],
            f"retracts directive {did}",
            ref=did,
            deliver=False,
        )

    return tools.call(store, ident, "board.retract", run, tx=tx)


def active_directives(t: Tx, space_id: str, participant_id: str) -> list[Directive]:
    """Directives in force for a participant, oldest first (S17 group 2).

    Decided now from each directive's ``to`` forms, resolved like S6 against
    the participant as it is now: so a directive reaches later joiners, and a
    re-joined run (same address, S3) keeps its directives."""
    me = t.one("SELECT address, agent, step FROM participants WHERE id = ?", (participant_id,))
    if me is None:
        return []
    rows = t.all(
        "SELECT m.id, m.seq, m.sender, m.recipients, m.body, m.created_at_utc, p.parent "
        "FROM messages m LEFT JOIN participants p ON p.space_id = m.space_id AND p.address = m.sender "
        # `seq > 0` (always true) steers the planner onto the partial index.
        f"WHERE m.space_id = ? AND m.{_BOARD_KINDS} AND m.kind = 'directive' AND m.seq > 0 "
        "AND NOT EXISTS (SELECT 1 FROM messages r WHERE r.ref = m.id AND r.kind = 'retract') "
        "ORDER BY m.seq",
        (space_id,),
    )
    if not rows:
        return []
    address, agent, step = me
    is_address: dict[str, bool] = {}  # a bare name is an address if someone has it (S6)

    def applies(to: list[str], sender: str, sender_parent: str | None) -> bool:
        for text in to:
            target = parse_target(text)
            if _matches(
                t, space_id, target, sender, sender_parent, address, agent, step, is_address
            ):
                return True
        return False

    return [
        Directive(id=r[0], seq=r[1], sender=r[2], body=r[4], created_at_utc=r[5])
        for r in rows
        if applies(json.loads(r[3]), r[2], r[6])
    ]


def _matches(
    t: Tx,
    space_id: str,
    target: Target,
    sender: str,
    sender_parent: str | None,
    address: str,
    agent: str,
    step: str | None,
    is_address: dict[str, bool],
) -> bool:
    kind, value = target.kind, target.value
    if kind == "address":
        return address == value
    if kind == "name":
        if value not in is_address:
            is_address[value] = (
                t.one(
                    "SELECT 1 FROM participants WHERE space_id = ? AND address = ?",
                    (space_id, value),
                )
                is not None
            )
        if is_address[value]:
            return address == value
        kind = "role"
    if kind == "role":
        return agent == value and address != sender
    if kind == "step":
        return step == value and address != sender
    if kind == "broadcast":
        return address != sender
    if kind == "lead":
        return address == "lead"
    if kind == "parent":
        return sender_parent is not None and address == sender_parent
    return False  # operator: nobody takes a turn as the operator


# --- claims ---------------------------------------------------------------------------
def validate_key(key: object) -> str:
    """A claim key: 1-200 characters of letters, digits and . _ : / -, no '..'."""
    if not isinstance(key, str) or not key:
        raise errors.InvalidInput("a claim key is empty")
    if len(key) > KEY_MAX:
        raise errors.InvalidInput(
            f"claim key is {len(key)} characters long; at most {KEY_MAX}", key=key[:KEY_MAX]
        )
    if not _KEY.fullmatch(key):
        bad = next(c for c in key if not _KEY.fullmatch(c))
        raise errors.InvalidInput(
            f"claim key {key!r} has {bad!r}: use letters, digits and . _ : / -", key=key
        )
    if ".." in key:
        raise errors.InvalidInput(f"claim key {key!r} contains '..'", key=key)
    return key


def validate_ttl(ttl: object) -> float:
    """A lease length in seconds: more than 0, at most a day."""
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not math.isfinite(ttl):
        raise errors.InvalidInput(f"bad ttl {ttl!r}: a number of seconds")
    if not 0 < ttl <= MAX_TTL:
        raise errors.InvalidInput(f"bad ttl {ttl!r}: more than 0 and at most {MAX_TTL:g} seconds")
    return float(ttl)


def _validate_token(token: object) -> int:
    if isinstance(token, bool) or not isinstance(token, int) or token < 1:
        raise errors.InvalidInput(f"bad token {token!r}: the fencing token the claim returned")
    return token


def _journal(
    t: Tx,
    space_id: str,
    key: str,
    event: str,
    owner: str,
    token: int,
    lease_expires_at: str | None,
    at: str,
) -> str:
    jid = new_id()
    t.execute(
        "INSERT INTO claim_journal (id, space_id, key, event, owner, token, lease_expires_at, at_utc) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (jid, space_id, key, event, owner, token, lease_expires_at, at),
    )
    return jid


def claim(
    store: Store,
    ident: Identity,
    key: str,
    ttl: float = DEFAULT_TTL,
    *,
    tx: Tx | None = None,
) -> ClaimGrant:
    """``board.claim``: an exclusive lease on ``key`` for ``ttl`` seconds, with a
    fencing token larger than any earlier grant of the key. Held by someone
    else: ``ClaimHeld`` with the holder and the expiry."""
    key = validate_key(key)
    ttl = validate_ttl(ttl)

    def run(t: Tx, _row: Caller) -> ClaimGrant:
        now = store.now()
        at = fmt_ts(now)
        expires = ts_after(now, ttl)
        space_id = ident.space_id
        cur = t.one(
            "SELECT holder, token, lease_expires_at FROM board_claims WHERE space_id = ? AND key = ?",
            (space_id, key),
        )
        if cur is None:
            token = 1
            t.execute(
                "INSERT INTO board_claims (space_id, key, holder, token, claimed_at_utc, lease_expires_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (space_id, key, ident.address, token, at, expires),
            )
        else:
            holder, old_token, old_expires = cur
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
                        lease_expires_at=old_expires,
                    )
            token = old_token + 1
            t.execute(
                "UPDATE board_claims SET holder = ?, token = ?, claimed_at_utc = ?, lease_expires_at = ? "
                "WHERE space_id = ? AND key = ?",
                (ident.address, token, at, expires, space_id, key),
            )
        _journal(t, space_id, key, "claimed", ident.address, token, expires, at)
        return ClaimGrant(
            key=key, token=token, holder=ident.address, claimed_at_utc=at, lease_expires_at=expires
        )

    return tools.call(store, ident, "board.claim", run, tx=tx)


def _held_by_caller(
    t: Tx, ident: Identity, key: str, token: int, at: str, verb: str
) -> tuple[str, str]:
    """The (claimed_at, lease_expires_at) of the caller's live claim with ``token``,
    or ``LeaseLost`` saying why the token no longer holds the key."""
    cur = t.one(
        "SELECT holder, token, claimed_at_utc, lease_expires_at FROM board_claims "
        "WHERE space_id = ? AND key = ?",
        (ident.space_id, key),
    )
    fields = {"key": key, "token": token}
    if cur is None or cur[0] is None:
        raise errors.LeaseLost(
            f"cannot {verb} key {key!r}: nobody holds it (token {token} is stale)", **fields
        )
    holder, current, claimed_at, expires = cur
    if holder != ident.address:
        raise errors.LeaseLost(
            f"cannot {verb} key {key!r}: it is held by {holder} now (your token {token} is stale)",
            holder=holder,
            **fields,
        )
    if token != current:
        raise errors.LeaseLost(
            f"cannot {verb} key {key!r}: token {token} is stale (your current grant has token {current})",
            **fields,
        )
    if expires <= at:
        raise errors.LeaseLost(
            f"cannot {verb} key {key!r}: your claim expired at {expires}; claim it again",
            lease_expires_at=expires,
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
        t.execute(
            "UPDATE board_claims SET holder = NULL, claimed_at_utc = NULL, lease_expires_at = NULL "
            "WHERE space_id = ? AND key = ?",
            (ident.space_id, key),
        )
        jid = _journal(t, ident.space_id, key, "released", ident.address, token, expires, at)
        return JournalEntry(
            id=jid,
            key=key,
            event="released",
            owner=ident.address,
            token=token,
            lease_expires_at=expires,
            at_utc=at,
        )

    return tools.call(store, ident, "board.release", run, tx=tx)


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
        t.execute(
            "UPDATE board_claims SET lease_expires_at = ? WHERE space_id = ? AND key = ?",
            (expires, ident.space_id, key),
        )
        _journal(t, ident.space_id, key, "renewed", ident.address, token, expires, at)
        return ClaimGrant(
            key=key,
            token=token,
            holder=ident.address,
            claimed_at_utc=claimed_at,
            lease_expires_at=expires,
        )

    return tools.call(store, ident, "board.claim", run, tx=tx)


# --- operator views -------------------------------------------------------------------
def expire_claims(store: Store, space_ref: str, *, tx: Tx | None = None) -> int:
    """Journal and free every expired claim of a space (the lazy expiry, for all
    keys at once); returns how many. Takes the write lock only if there are any."""
    with store.read(tx) as t:
        space_id = resolve_id(t, space_ref)
        at = store.now_ts()
        if (
            t.one(
                "SELECT 1 FROM board_claims WHERE space_id = ? AND holder IS NOT NULL "
                "AND lease_expires_at <= ? LIMIT 1",
                (space_id, at),
            )
            is None
        ):
            return 0
    with store.write(tx) as t:
        at = store.now_ts()
        rows = t.all(
            "SELECT key, holder, token, lease_expires_at FROM board_claims WHERE space_id = ? "
            "AND holder IS NOT NULL AND lease_expires_at <= ? ORDER BY key",
            (space_id, at),
        )
        for key, holder, token, expires in rows:
            _journal(t, space_id, key, "expired", holder, token, expires, at)
        t.execute(
            "UPDATE board_claims SET holder = NULL, claimed_at_utc = NULL, lease_expires_at = NULL "
            "WHERE space_id = ? AND holder IS NOT NULL AND lease_expires_at <= ?",
            (space_id, at),
        )
    return len(rows)


def claims(store: Store, space_ref: str, *, tx: Tx | None = None) -> list[ClaimGrant]:
    """The live claims of a space (held and not expired), by key. Writes nothing."""
    with store.read(tx) as t:
        space_id = resolve_id(t, space_ref)
        rows = t.all(
            "SELECT key, token, holder, claimed_at_utc, lease_expires_at FROM board_claims "
            "WHERE space_id = ? AND holder IS NOT NULL AND lease_expires_at > ? ORDER BY key",
            (space_id, store.now_ts()),
        )
    return [
        ClaimGrant(key=r[0], token=r[1], holder=r[2], claimed_at_utc=r[3], lease_expires_at=r[4])
        for r in rows
    ]


def journal(
    store: Store, space_ref: str, *, key: str | None = None, tx: Tx | None = None
) -> list[JournalEntry]:
    """The claim journal of a space (optionally one key), oldest first. Expired
    claims not yet journaled are journaled first, so the history is complete."""
    if key is not None:
        validate_key(key)
    expire_claims(store, space_ref, tx=tx)
    with store.read(tx) as t:
        space_id = resolve_id(t, space_ref)
        sql = (
            "SELECT id, key, event, owner, token, lease_expires_at, at_utc FROM claim_journal "
            "WHERE space_id = ?"
        )
        params: list[Any] = [space_id]
        if key is not None:
            sql += " AND key = ?"
            params.append(key)
        rows = t.rows(sql + " ORDER BY at_utc, id", params)
    return [JournalEntry(**r) for r in rows]
