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
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from broker import bounds, errors, globs, messages, tools
from broker.addressing import Target, parse_target
from broker.auth import Caller, Identity
from broker.db import Store, Tx
from broker.ids import fmt_ts, new_id, ts_after
from broker.records import BoardEntry, ClaimGrant, JournalEntry, SendResult, to_dict
from broker.spaces import resolve_id
from broker.sql import stmt

DEFAULT_READ_LIMIT = 100
MAX_READ_LIMIT = 1000
DEFAULT_TTL = 300.0  # seconds
MAX_TTL = 86400.0
KEY_MAX = 200
_KEY = re.compile(r"[A-Za-z0-9._:/-]+")
_CURSOR_SEQ = stmt("board.cursor_seq")
_READ_KIND = stmt("board.read_kind")
_MESSAGE_HEAD = stmt("board.message_head")
_RETRACTED_BY = stmt("board.retracted_by")
_DIRECTIVES_IN_FORCE = stmt("board.directives_in_force")
_IS_ADDRESS = stmt("board.is_address")
_INSERT_CLAIM = stmt("board.insert_claim")
_INSERT_JOURNAL = stmt("board.insert_journal")
_CLAIM_ROW = stmt("board.claim_row")
_GRANT = stmt("board.grant")
_RENEW = stmt("board.renew")
_FREE = stmt("board.free")
_ANY_EXPIRED = stmt("board.any_expired")
_EXPIRED = stmt("board.expired")
_FREE_EXPIRED = stmt("board.free_expired")
_LIVE_CLAIMS = stmt("board.live_claims")
_JOURNAL = stmt("board.journal")


# --- the one writer of board_claims and claim_journal -----------------------------------
def insert_claims(t: Tx, rows: Sequence[dict[str, Any]]) -> None:
    """Insert claim rows as given (every column of ``board_claims``), inside ``t``."""
    t.many(_INSERT_CLAIM, rows)


def insert_journal(t: Tx, rows: Sequence[dict[str, Any]]) -> None:
    """Append journal lines as given (every column of ``claim_journal``), inside ``t``."""
    t.many(_INSERT_JOURNAL, rows)


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
    limit, after = _check_read(limit, after)

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
    limit, after = _check_read(limit, after)
    with store.read(tx) as t:
        return _read(t, resolve_id(t, space_ref), after, limit)


def _check_read(limit: object, after: object) -> tuple[int, str | None]:
    checked = bounds.count(limit, "limit", top=MAX_READ_LIMIT)
    if after is not None and not isinstance(after, str):
        raise errors.InvalidInput(f"bad after {after!r}: a message id", field="after")
    return checked, after


def _read(t: Tx, space_id: str, after: str | None, limit: int) -> list[BoardEntry]:
    start = 0
    if after:
        row = t.one(_CURSOR_SEQ, {"space_id": space_id, "id": after})
        if row is None:
            raise errors.MessageNotFound(
                f"no message {after!r} in this space: --after takes the id of a board entry you read"
            )
        start = row["seq"]
    # One range per kind on the partial index, merged: never a scan of the log.
    per_kind = [
        t.all(_READ_KIND, {"space_id": space_id, "kind": kind, "after": start, "n": limit})
        for kind in ("post", "directive", "retract")
    ]
    merged = heapq.merge(*per_kind, key=lambda r: r["seq"])
    return [_entry(r) for _, r in zip(range(limit), merged, strict=False)]


def _entry(r: Any) -> BoardEntry:
    return BoardEntry(
        id=r["id"],
        seq=r["seq"],
        kind=r["kind"],
        sender=r["sender"],
        to=json.loads(r["recipients"]),
        body=r["body"],
        ref=r["ref"],
        reached=json.loads(r["reached"]),
        in_force=None if r["in_force"] is None else bool(r["in_force"]),
        created_at_utc=r["created_at_utc"],
    )


# --- directives -----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Directive:
    id: str
    seq: int
    sender: str
    body: str
    created_at_utc: str
    known: bool
    """already in the participant's transcript (S19: recorded once)"""


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

    A directive that reaches nobody now is logged and stays in force (a role,
    step, bare name or broadcast form also applies to participants that join
    later), and it is an error to its sender (S8): ``NotDelivered``."""
    from broker.models import DirectiveInput, parse_input  # pydantic: off the claim path

    inp = parse_input(
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
    if result.not_reached and not result.reached:
        reasons = ", ".join(f"{n.address}: {n.reason}" for n in result.not_reached)
        raise errors.NotDelivered(
            f"directive {result.id} reached nobody ({reasons}); it is logged and stays in force "
            "until retracted",
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
        found = t.one(_MESSAGE_HEAD, {"space_id": ident.space_id, "id": did})
        if found is None or found["kind"] != "directive":
            raise errors.DirectiveNotFound(f"no directive {did!r} in this space", directive_id=did)
        if found["sender"] != ident.address:
            raise errors.NotAuthor(
                f"only the author of directive {did} ({found['sender']}) may retract it, "
                f"not {ident.address}",
                directive_id=did,
                author=found["sender"],
            )
        done = t.one(_RETRACTED_BY, {"directive_id": did, "space_id": ident.space_id})
        if done is not None:
            raise errors.AlreadyRetracted(
                f"directive {did} was already retracted (by {done['id']})",
                directive_id=did,
                retract_id=done["id"],
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


def active_directives(
    t: Tx,
    space_id: str,
    participant_id: str,
    address: str,
    agent: str,
    step: str | None,
) -> list[Directive]:
    """Directives in force for a participant, oldest first (S17 group 2).

    Decided now from each directive's ``to`` forms, resolved like S6 against
    the participant as it is now (``address``, ``agent``, ``step``): so a
    directive reaches later joiners, and a re-joined run (same address, S3)
    keeps its directives."""
    rows = t.all(_DIRECTIVES_IN_FORCE, {"space_id": space_id, "participant_id": participant_id})
    if not rows:
        return []
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
        Directive(
            id=r["id"],
            seq=r["seq"],
            sender=r["sender"],
            body=r["body"],
            created_at_utc=r["created_at_utc"],
            known=bool(r["known"]),
        )
        for r in rows
        if applies(json.loads(r["recipients"]), r["sender"], r["sender_parent"])
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
            found = t.one(_IS_ADDRESS, {"space_id": space_id, "address": value})
            is_address[value] = found is not None
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
    return bounds.seconds(ttl, "ttl", top=MAX_TTL)


def _validate_token(token: object) -> int:
    if isinstance(token, bool) or not isinstance(token, int) or not 1 <= token < 2**63:
        raise errors.InvalidInput(
            f"bad fence {token!r}: the fencing token the claim returned", field="fence"
        )
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
    insert_journal(
        t,
        [
            {
                "id": jid,
                "space_id": space_id,
                "key": key,
                "event": event,
                "owner": owner,
                "token": token,
                "lease_expires_at": lease_expires_at,
                "at_utc": at,
            }
        ],
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
        where = {"space_id": space_id, "key": key}
        cur = t.one(_CLAIM_ROW, where)
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
                        lease_expires_at=old_expires,
                    )
            token = old_token + 1
            t.execute(_GRANT, {**where, **grant, "token": token})
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
    cur = t.one(_CLAIM_ROW, {"space_id": ident.space_id, "key": key})
    fields = {"key": key, "token": token}
    if cur is None or cur["holder"] is None:
        raise errors.LeaseLost(
            f"cannot {verb} key {key!r}: nobody holds it (token {token} is stale)", **fields
        )
    holder, current = cur["holder"], cur["token"]
    claimed_at, expires = cur["claimed_at_utc"], cur["lease_expires_at"]
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
        t.execute(_FREE, {"space_id": ident.space_id, "key": key})
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
        t.execute(_RENEW, {"space_id": ident.space_id, "key": key, "lease_expires_at": expires})
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
        if t.one(_ANY_EXPIRED, {"space_id": space_id, "at": store.now_ts()}) is None:
            return 0
    with store.write(tx) as t:
        at = store.now_ts()
        where = {"space_id": space_id, "at": at}
        rows = t.all(_EXPIRED, where)
        for r in rows:
            _journal(
                t, space_id, r["key"], "expired", r["holder"], r["token"], r["lease_expires_at"], at
            )
        t.execute(_FREE_EXPIRED, where)
    return len(rows)


def claims(store: Store, space_ref: str, *, tx: Tx | None = None) -> list[ClaimGrant]:
    """The live claims of a space (held and not expired), by key. Writes nothing."""
    with store.read(tx) as t:
        space_id = resolve_id(t, space_ref)
        rows = t.all(_LIVE_CLAIMS, {"space_id": space_id, "at": store.now_ts()})
    return [
        ClaimGrant(
            key=r["key"],
            token=r["token"],
            holder=r["holder"],
            claimed_at_utc=r["claimed_at_utc"],
            lease_expires_at=r["lease_expires_at"],
        )
        for r in rows
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
        rows = t.all(_JOURNAL, {"space_id": space_id, "key": key})
    return [
        JournalEntry(
            id=r["id"],
            key=r["key"],
            event=r["event"],
            owner=r["owner"],
            token=r["token"],
            lease_expires_at=r["lease_expires_at"],
            at_utc=r["at_utc"],
        )
        for r in rows
    ]
