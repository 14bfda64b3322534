"""Why a settle of an inbox lease missed (S14): where the lease's messages are
now, and the refusal that says so. Reads only (``broker.delivery.inbox`` is the one
writer of ``deliveries``, and runs the settle statements).

A row names two leases: ``lease_token``, the lease that took it last (kept
after it is settled, so the holder's repeat is recognised), and
``lost_lease_token``, the latest lease that lost it without settling it (a
claim took it after that lease expired, handing it out again or quarantining
it, or restart recovery returned it, S32). So a lease ``T``'s messages are the
rows naming ``T`` either way: those its holder settled (``lease_token`` T), and
those taken from it (``lost_lease_token`` T, whoever holds them now). A
message is only ever "lost" for the second reason; what the holder settled
itself is described as such, never as another lease's doing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import NamedTuple

from broker import errors
from broker.ids import seq_in_id
from broker.spaces.auth import Identity
from broker.store.sql import stmt
from broker.store.sqlite import Tx

_BY_MESSAGE_IDS = stmt("inbox.by_message_ids")
_BY_TOKEN = stmt("inbox.by_token")

REDELIVERED = "do not ack; the messages were redelivered"


class Where(NamedTuple):
    """Where a delivery stands: its state, the lease that took it last, and the
    latest lease that lost it (None: none did)."""

    state: str
    token: str | None
    lost: str | None


def where_now(t: Tx, ident: Identity, ids: Sequence[str]) -> dict[str, Where]:
    """Where each of ``ids`` stands in the inbox of ``ident``, by message id."""
    located = json.dumps([[i, seq_in_id(i)] for i in ids])
    rows = t.all(
        _BY_MESSAGE_IDS,
        {"space_id": ident.space_id, "recipient_id": ident.participant_id, "ids": located},
    )
    return {
        r["message_id"]: Where(r["state"], r["lease_token"], r["lost_lease_token"]) for r in rows
    }


def _why(token: str, w: Where) -> str:
    """What became of a message of lease ``token``, in a few words."""
    if w.token != token:  # another claim took it: after this lease expired or released it
        return {
            "processing": "claimed again under another lease",
            "done": "acked under another lease",
            "ready": "claimed again, then released by another lease",
        }.get(w.state, "claimed again, then quarantined under another lease")
    if w.lost == token:  # taken from this lease, but no other lease took it
        if w.state == "ready":
            return "returned to ready: the process holding the lease is gone"
        return "quarantined after the lease expired: delivered max_deliveries times"
    return {  # settled by this lease's holder
        "done": "acked under this lease",
        "ready": "released for replay",
    }.get(w.state, "quarantined")


def _parts(token: str, lost: list[tuple[str, Where]]) -> str:
    return ", ".join(f"{mid} ({_why(token, w)})" for mid, w in lost)


def _refusal(token: str, lost: list[tuple[str, Where]]) -> errors.LeaseLost:
    parts = _parts(token, lost)
    moved_on = any(w.token != token or w.state == "ready" for _, w in lost)
    tail = REDELIVERED if moved_on else "this lease has nothing of them left to settle"
    return errors.LeaseLost(
        f"lease {token[:8]}... no longer holds {parts}: {tail}",
        lease_token=token,
        lost=[mid for mid, _ in lost],
    )


def explain(
    t: Tx,
    ident: Identity,
    token: str,
    ids: list[str] | None,
    done: list[str],
    settled_state: str | None,
) -> None:
    """Refuse a settle under ``token`` that moved only ``done`` of ``ids`` (None:
    the whole lease), or let it stand.

    Named ids: each one missed must already be in ``settled_state`` under this
    same token (the holder's repeat: idempotent), else the batch is refused
    naming every such id and what became of it. The whole lease, when it moved
    nothing: the messages taken from it are named if there are any; else those
    its holder settled otherwise than asked; else it is the holder's repeat."""
    if ids is not None:
        if len(done) == len(ids):
            return
        got = set(done)
        missing = [i for i in ids if i not in got]
        found = where_now(t, ident, missing)
        unknown = [i for i in missing if i not in found]
        if unknown:
            raise errors.MessageNotFound(
                f"no delivery of {', '.join(unknown)} in the inbox of {ident.address}",
                ids=unknown,
            )
        lost = [
            (i, found[i])
            for i in missing
            if not (found[i].token == token and found[i].state == settled_state)
        ]
        if lost:
            raise _refusal(token, lost)
        return
    if done:
        return
    rows = [
        (r["message_id"], Where(r["state"], r["lease_token"], r["lost_lease_token"]))
        for r in t.all(_BY_TOKEN, {"token": token, "recipient_id": ident.participant_id})
    ]
    if not rows:
        raise errors.LeaseLost(
            f"lease {token[:8]}... holds nothing in the inbox of {ident.address}: it expired "
            "and its messages were claimed again, or the token is wrong",
            lease_token=token,
            lost=[],
        )
    taken = [(mid, w) for mid, w in rows if w.lost == token]
    if taken:
        raise _refusal(token, taken)
    stale = [(mid, w) for mid, w in rows if w.state != settled_state]
    if stale:
        raise _refusal(token, stale)


def turn_lost(turn_id: str, token: str, lost: list[tuple[str, Where]]) -> errors.LeaseLost:
    """A confirmation of a turn (S18) refused: its lease no longer holds ``lost``.
    Redelivered ones are the usual case, said in the turn's words; anything
    else (set aside by ``quarantine_turn``, returned by recovery) says what."""
    ids = [mid for mid, _ in lost]
    if all(w.token != token for _, w in lost):
        text = (
            f"turn {turn_id} was not confirmed before its lease expired and "
            f"{', '.join(ids)} were delivered again in a later turn: confirm that one"
        )
    else:
        text = f"turn {turn_id} no longer holds {_parts(token, lost)}: nothing was confirmed"
    return errors.LeaseLost(text, turn_id=turn_id, lost=ids)
