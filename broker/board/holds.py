"""What participants hold on the board, written (S22, S23, S37): the one writer
of ``board_claims``, ``claim_journal`` and ``reservations``.

``broker.board.claims`` (key claims) and ``broker.board.reservations`` (path patterns)
decide who may hold what; every row they change is written here, and so is
every journal line. The module sits below ``broker.spaces.roster``, which records a
participant as left, so a departure ends what the participant holds in the
same transaction (``end_held_by``): a holder that left would otherwise block
everyone until its TTL ran out, and nobody could release it (S4).

A hold that ends without its holder's release is journaled ``released`` with a
``reason`` (``left``, ``operator: ...``); its fence is then stale, exactly as
after an expiry: a later release or renew with it is ``lease_lost``. One that
had already expired is journaled ``expired`` (no reason), as the lazy expiry
would have. Statements are the ``board`` and ``reservations`` areas of the
catalogue.
"""

from __future__ import annotations

from typing import Any

from broker import errors
from broker.delivery import wake
from broker.ids import new_id
from broker.model.records import JournalEntry
from broker.store.settings import Limits
from broker.store.sql import stmt
from broker.store.sqlite import Rows, Tx

LEFT = "left"  # the journal's reason for a hold ended by its holder's departure
_INSERT_CLAIM = stmt("board.insert_claim")
_INSERT_JOURNAL = stmt("board.insert_journal")
_JOURNAL_LAST_AT = stmt("board.journal_last_at")
_GRANT = stmt("board.grant")
_RENEW_CLAIM = stmt("board.renew")
_FREE = stmt("board.free")
_FREE_EXPIRED = stmt("board.free_expired")
_CLAIMS_HELD_BY = stmt("board.held_by")
_INSERT_RESERVATION = stmt("reservations.insert")
_END = stmt("reservations.end")
_RENEW_RESERVATION = stmt("reservations.renew")
_END_EXPIRED = stmt("reservations.end_expired")
_RESERVATIONS_HELD_BY = stmt("reservations.held_by")
_LIVE_HOLDS = stmt("board.live_holds")


def journal_key(pattern: str) -> str:
    """The ``claim_journal`` key of a path pattern's lines (never a board key)."""
    return f"path {pattern}"


# --- how much may be held (S41) ------------------------------------------------------------
def make_room(t: Tx, space_id: str, holder: str, at: str, adding: int, limits: Limits) -> None:
    """Refuse (``HoldsFull``) a grant that would take ``holder`` past
    ``holds_cap`` live holds, or its space past ``space_holds_cap``: key
    claims and path reservations count together, and a re-grant of what the
    holder already holds adds nothing. Every request meets every live hold
    of its space (a reservation's overlap, a path's check), so the bound is
    what keeps one participant, or many, from making the board slow for all."""
    if adding <= 0:
        return
    row = t.one(_LIVE_HOLDS, {"space_id": space_id, "holder": holder, "at": at})
    mine, everyone = int(row["holder_holds"]), int(row["space_holds"])
    if mine + adding > limits.holds_cap:
        raise errors.HoldsFull(
            f"{holder} holds {mine} live key claims and reservations and asks for {adding} "
            f"more; its holds_cap is {limits.holds_cap}: release some, or wait for them to expire",
            holder=holder,
            held=mine,
            cap=limits.holds_cap,
            setting="holds_cap",
        )
    if everyone + adding > limits.space_holds_cap:
        raise errors.HoldsFull(
            f"space {space_id} holds {everyone} live key claims and reservations; its "
            f"space_holds_cap is {limits.space_holds_cap}: wait for some to be released or "
            "expire (the operator can end holds and change the cap)",
            held=everyone,
            cap=limits.space_holds_cap,
            setting="space_holds_cap",
        )


# --- claim_journal ---------------------------------------------------------------------
def insert_journal(t: Tx, rows: Rows) -> None:
    """Append journal lines as given (every column of ``claim_journal``), inside ``t``."""
    t.many(_INSERT_JOURNAL, rows)


def journal(
    t: Tx,
    space_id: str,
    key: str,
    event: str,
    owner: str,
    token: int,
    lease_expires_at: str | None,
    at: str,
    reason: str | None = None,
) -> str:
    """Append one journal line (S23); returns its id. Its time is never before
    the key's last line (S44: processes' clocks differ by a little)."""
    last = t.one(_JOURNAL_LAST_AT, {"space_id": space_id, "key": key})
    if last is not None and last[0] is not None and last[0] > at:
        at = last[0]
    jid = new_id()
    row = {
        "id": jid,
        "space_id": space_id,
        "key": key,
        "event": event,
        "owner": owner,
        "token": token,
        "lease_expires_at": lease_expires_at,
        "at_utc": at,
        "reason": reason,
    }
    insert_journal(t, [row])
    keys = [wake.state_key(space_id)]  # the console's board follows holds live
    if event in ("released", "expired"):
        keys.append(wake.board_key(space_id, key))  # a claimer waiting for the key tries again
    wake.ring_at_commit(t, keys)
    return jid


def released(
    t: Tx,
    space_id: str,
    key: str,
    owner: str,
    token: int,
    lease_expires_at: str | None,
    at: str,
    reason: str | None,
) -> JournalEntry:
    """Journal a hold's release (a key claim, or a reservation by its journal
    key) and return the line as the callers report it."""
    jid = journal(t, space_id, key, "released", owner, token, lease_expires_at, at, reason)
    return JournalEntry(
        id=jid,
        key=key,
        event="released",
        owner=owner,
        fence=token,
        expires_at=lease_expires_at,
        at_utc=at,
        reason=reason,
    )


# --- board_claims -----------------------------------------------------------------------
def insert_claims(t: Tx, rows: Rows) -> None:
    """Insert claim rows as given (every column of ``board_claims``), inside ``t``."""
    t.many(_INSERT_CLAIM, rows)


def grant_claim(t: Tx, row: dict[str, Any]) -> None:
    """A new grant of a key that has a row: holder, token, claimed_at, expiry."""
    t.execute(_GRANT, row)


def renew_claim(t: Tx, space_id: str, key: str, expires: str) -> None:
    t.execute(_RENEW_CLAIM, {"space_id": space_id, "key": key, "lease_expires_at": expires})


def free_claim(t: Tx, space_id: str, key: str) -> None:
    """Nobody holds ``key`` now; its row (and its token) stays."""
    t.execute(_FREE, {"space_id": space_id, "key": key})


def free_expired_claims(t: Tx, space_id: str, at: str) -> None:
    t.execute(_FREE_EXPIRED, {"space_id": space_id, "at": at})


# --- reservations -----------------------------------------------------------------------
def insert_reservations(t: Tx, rows: Rows) -> None:
    """Insert reservation rows as given (every column), inside ``t``."""
    t.many(_INSERT_RESERVATION, rows)


def end_reservation(t: Tx, space_id: str, token: int, at: str) -> None:
    """Released, re-granted or ended for its holder: the row stays, ended."""
    t.execute(_END, {"space_id": space_id, "token": token, "at": at})


def renew_reservation(t: Tx, space_id: str, token: int, expires: str) -> None:
    t.execute(
        _RENEW_RESERVATION, {"space_id": space_id, "token": token, "lease_expires_at": expires}
    )


def end_expired_reservations(t: Tx, space_id: str, at: str) -> None:
    t.execute(_END_EXPIRED, {"space_id": space_id, "at": at})


# --- a holder's departure -----------------------------------------------------------------
def end_held_by(t: Tx, space_id: str, address: str, at: str, reason: str = LEFT) -> int:
    """End every key claim and path reservation ``address`` holds in the space,
    inside ``t``: a live one is journaled ``released`` with ``reason``, one
    already expired ``expired``. Returns how many live holds ended."""
    ended = 0
    for r in t.all(_CLAIMS_HELD_BY, {"space_id": space_id, "holder": address}):
        live = r["lease_expires_at"] > at
        event, why = ("released", reason) if live else ("expired", None)
        journal(t, space_id, r["key"], event, address, r["token"], r["lease_expires_at"], at, why)
        free_claim(t, space_id, r["key"])
        ended += live
    for r in t.all(_RESERVATIONS_HELD_BY, {"space_id": space_id, "holder": address}):
        live = r["lease_expires_at"] > at
        event, why = ("released", reason) if live else ("expired", None)
        key = journal_key(r["pattern"])
        journal(t, space_id, key, event, address, r["token"], r["lease_expires_at"], at, why)
        end_reservation(t, space_id, r["token"], at)
        ended += live
    return ended
