"""Why a settle of an inbox lease missed (S14): where the lease's messages are
now, and the refusal that says so. Reads only (``broker.inbox`` is the one
writer of ``deliveries``, and runs the settle statements)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from broker import errors
from broker.auth import Identity
from broker.db import Tx
from broker.sql import stmt

_BY_MESSAGE_IDS = stmt("inbox.by_message_ids")
_BY_TOKEN = stmt("inbox.by_token")


def where_now(t: Tx, recipient_id: str, ids: Sequence[str]) -> dict[str, tuple[str, str | None]]:
    """Where each of ``ids`` stands in the inbox: ``{message id: (state, lease token)}``."""
    rows = t.all(_BY_MESSAGE_IDS, {"recipient_id": recipient_id, "ids": json.dumps(list(ids))})
    return {r["message_id"]: (r["state"], r["lease_token"]) for r in rows}


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
    the whole lease), or let it stand. Rows already in ``settled_state`` under
    this same token were settled by the holder before: idempotent, not lost."""
    if ids is not None:
        if len(done) == len(ids):
            return
        got = set(done)
        missing = [i for i in ids if i not in got]
        found = where_now(t, ident.participant_id, missing)
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
        return
    if done:
        return
    rows = t.all(_BY_TOKEN, {"token": token, "recipient_id": ident.participant_id})
    if not rows:
        raise errors.LeaseLost(
            f"lease {token[:8]}... holds nothing in the inbox of {ident.address}: it expired "
            "and its messages were claimed again, or the token is wrong",
            lease_token=token,
            lost=[],
        )
    lost = [(r["message_id"], r["state"]) for r in rows if r["state"] != settled_state]
    if lost:
        raise _lost(token, lost)
