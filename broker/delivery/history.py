"""Teammates' canonical histories (S16, S26): each handled message once.

A teammate keeps its own history under its name: every message it was given
in a turn (directives excepted: they are re-shown each turn, not history),
one row per message id. The worker loop writes the history *first* and acks
the turn *second* (``broker.teammates.runtime.serve``); a redelivered message is found
by its id and not appended twice, and when the ack is lost (the lease ran out
and the turn went to a later one) the rows that turn appended are removed
again, so the later turn appends them itself. The only writer of ``history``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from broker import errors
from broker.ids import new_id
from broker.model.inputs import TurnInput
from broker.model.records import HistoryEntry, Turn, TurnMessages
from broker.record_type import from_row
from broker.spaces import auth
from broker.spaces.auth import Identity
from broker.store.sql import stmts
from broker.store.sqlite import Rows, Store, Tx

_SQL = stmts("history", "insert", "append", "undo", "entries", "append_turn", "undo_turn", "turn")


def insert_rows(t: Tx, rows: Rows) -> None:
    """Insert history rows as given (every column of ``history``), inside ``t``."""
    t.many(_SQL["insert"], rows)


def append(store: Store, ident: Identity, turn: Turn, *, tx: Tx | None = None) -> list[str]:
    """Append the turn's messages (not its directives) to ``ident``'s history;
    returns the message ids appended now (those already there are skipped)."""
    fresh: list[str] = []
    with store.write(tx) as t:
        now = store.now_ts()
        auth.caller(t, ident, now)
        for item in turn.items:
            if item.group == "directive":
                continue
            row = t.one(
                _SQL["append"],
                {
                    "id": new_id(),
                    "space_id": ident.space_id,
                    "participant_id": ident.participant_id,
                    "message_id": item.id,
                    "turn_id": turn.id,
                    "kind": item.kind,
                    "sender": item.sender,
                    "body": item.body,
                    "at_utc": now,
                },
            )
            if row is not None:
                fresh.append(row["message_id"])
    return fresh


def undo(store: Store, ident: Identity, message_ids: Sequence[str], *, tx: Tx | None = None) -> int:
    """Remove ``message_ids`` from ``ident``'s history again; how many went."""
    ids = list(dict.fromkeys(message_ids))
    if not ids:
        return 0
    with store.write(tx) as t:
        auth.caller(t, ident)
        rows = t.all(_SQL["undo"], {"participant_id": ident.participant_id, "ids": json.dumps(ids)})
    return len(rows)


def _own_turn(t: Tx, ident: Identity, turn_id: str) -> None:
    if t.one(_SQL["turn"], {"turn_id": turn_id, "participant_id": ident.participant_id}) is None:
        raise errors.NotFound(f"no turn {turn_id!r} of {ident.address}", turn_id=turn_id)


def append_turn(
    store: Store, ident: Identity, inp: TurnInput, *, tx: Tx | None = None
) -> TurnMessages:
    """``history.append``: the caller's turn ``inp.turn_id`` appended to its
    history by the store itself (what the turn showed, as its transcript has
    it: a served teammate sends only the id); the message ids appended now."""
    with store.write(tx) as t:
        now = store.now_ts()
        auth.caller(t, ident, now)
        _own_turn(t, ident, inp.turn_id)
        rows = t.all(
            _SQL["append_turn"],
            {"participant_id": ident.participant_id, "turn_id": inp.turn_id, "at_utc": now},
        )
    return TurnMessages(turn_id=inp.turn_id, message_ids=[r["message_id"] for r in rows])


def undo_turn(
    store: Store, ident: Identity, inp: TurnInput, *, tx: Tx | None = None
) -> TurnMessages:
    """``history.undo``: the rows the caller's turn ``inp.turn_id`` appended
    removed again (its ack was lost: the redelivered turn appends them, S16)."""
    with store.write(tx) as t:
        auth.caller(t, ident)
        _own_turn(t, ident, inp.turn_id)
        rows = t.all(
            _SQL["undo_turn"], {"participant_id": ident.participant_id, "turn_id": inp.turn_id}
        )
    return TurnMessages(turn_id=inp.turn_id, message_ids=[r["message_id"] for r in rows])


def entries(store: Store, ident: Identity, *, tx: Tx | None = None) -> list[HistoryEntry]:
    """``ident``'s history, oldest first."""
    with store.read(tx) as t:
        auth.caller(t, ident)
        rows = t.all(_SQL["entries"], {"participant_id": ident.participant_id})
    return [from_row(HistoryEntry, r) for r in rows]
