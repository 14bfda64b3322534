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
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from broker import errors, grants
from broker.db import Tx
from broker.ids import parse_ts, ts_after
from broker.settings import Limits
from broker.spaces import limits_of
from broker.sql import stmt

_CALLER = stmt("auth.caller")
_CALLER_TO = stmt("auth.caller_to")
_CALLER_HEARTBEAT = stmt("auth.caller_heartbeat")
_RECIPIENT = ("r_id", "r_address", "r_status", "r_waiting", "r_policy", "r_allow", "r_parent")
HEARTBEAT_S = 1.0
_beats: dict[tuple[int, str], str] = {}  # (store, participant) -> heartbeat due after


@dataclass(frozen=True, slots=True)
class Identity:
    """Who is calling: built only from a verified token (S10)."""

    space_id: str
    participant_id: str
    address: str
    token_hash: str


@dataclass(frozen=True, slots=True)
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
    # The space's counters as of this transaction (a write holds the lock, so
    # they are the ones the next send bumps): ``(last_seq, log_bytes, last_bcast)``.
    counters: tuple[int, int, int] = (0, 0, 0)
    # ``caller(..., to=address)``: that participant's row as ``broker.messages``
    # reads a recipient (None: not read, or no such address).
    recipient: tuple[Any, ...] | None = None

    @property
    def granted(self) -> frozenset[str]:
        return _granted(self.messaging, self.tools, self.is_lead)

    @property
    def limits(self) -> Limits:
        return limits_of(self.settings)


@lru_cache(maxsize=1024)
def _granted(messaging: bool, tools_json: str | None, is_lead: bool) -> frozenset[str]:
    return grants.effective(messaging, json.loads(tools_json) if tools_json else None, is_lead)


def caller(t: Tx, ident: Identity, now: str | None = None, to: str | None = None) -> Caller:
    """Check ``ident`` inside ``t`` or refuse (``AuthError``, ``ParticipantLeft``,
    ``SpaceNotRunning``). With ``now`` (a write), the caller's heartbeat is
    refreshed at most once a second per process. With ``to``, the participant
    at that address is read in the same statement (``Caller.recipient``)."""
    key = (id(t.store), ident.participant_id)
    params = {"id": ident.participant_id, "token_hash": ident.token_hash}
    if now is None or ((due := _beats.get(key)) is not None and now < due):
        peeked = to is not None
        row = t.one(_CALLER_TO, {**params, "to": to}) if peeked else t.one(_CALLER, params)
    else:
        peeked = False  # once a second: the recipient is read on its own then
        row = t.one(_CALLER_HEARTBEAT, {**params, "now": now})
        if row is not None:
            if len(_beats) > 4096:
                _beats.clear()
            _beats[key] = ts_after(parse_ts(now), HEARTBEAT_S)
    if row is None:
        _beats.pop(key, None)
        raise errors.AuthError(
            f"token for {ident.address!r} is no longer valid (the participant re-joined with a new one)"
        )
    if row["status"] == "left":
        if row["space_state"] != "running":
            raise errors.SpaceNotRunning(
                f"space {ident.space_id} is {row['space_state']}: it takes no message",
                space_id=ident.space_id,
            )
        raise errors.ParticipantLeft(
            f"participant {ident.address!r} has left space {ident.space_id}; join again"
        )
    return Caller(
        status=row["status"],
        messaging=bool(row["messaging"]),
        tools=row["tools"],
        is_lead=bool(row["is_lead"]),
        agent=row["agent"],
        parent=row["parent"],
        space_state=row["space_state"],
        settings=row["settings"],
        counters=(row["last_seq"], row["log_bytes"], row["last_bcast"]),
        recipient=tuple(row[k] for k in _RECIPIENT) if peeked and row["r_id"] else None,
    )
