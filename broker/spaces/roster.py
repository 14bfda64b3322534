"""The participants table's row mapper and writers (S2-S4): below ``broker.spaces.spaces``.

A space that stops or is archived makes everyone leave (S1), so ``spaces``
needs the departure writer; joining needs ``spaces`` (run ids, limits). The
writers live here, importing neither, so the two do not import each other.
``broker.spaces.participants`` (join, authenticate, the roster) re-exports them.
``not_found`` is the one refusal of an unknown address (``participants.get``,
``broker.delivery.transcript``). Statements are the ``participants`` area of the catalogue.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from broker import errors
from broker.board import holds
from broker.delivery import wake
from broker.ids import new_id
from broker.spaces import grants
from broker.store.sql import stmt, stmts
from broker.store.sqlite import Rows, Store, Tx

if TYPE_CHECKING:
    from broker.model.records import Participant

_SQL = stmts("participants", "insert", "insert_event", "journal_fields", "mark_left", "present_ids")
_CARRY_TOKEN = stmt("trust.carry_token")


def to_model(row: Mapping[str, Any]) -> Participant:
    """The one participant row mapper: a row of ``list_all``/``list_present``/``by_address``."""
    from broker.model.records import Participant  # built on first use (records_space)

    if not isinstance(row, Mapping):  # a database row: its values, with keys()
        # Read once into a dict: a sqlite3.Row finds a column by comparing its
        # name with each column's in turn, and this row has twenty (a console
        # reading maps a thousand of them: 4.7 µs a row by name, 1.2 as a dict).
        row = dict(zip(row.keys(), row, strict=True))
    messaging = bool(row["messaging"])
    tools = json.loads(row["tools"]) if row["tools"] is not None else None
    return Participant(
        id=row["id"],
        space_id=row["space_id"],
        address=row["address"],
        codename=row["codename"],
        agent=row["agent"],
        run_id=row["run_id"],
        step=row["step"],
        parent=row["parent"],
        role=row["role"],
        archetype=row["archetype"],
        task=row["task"],
        is_lead=bool(row["is_lead"]),
        messaging=messaging,
        tools=tools,
        status=row["status"],
        pid=row["pid"],
        joined_at_utc=row["joined_at_utc"],
        left_at_utc=row["left_at_utc"],
        last_seen_utc=row["last_seen_utc"],
        waiting=row["waiting"],
        tool_grant=grants.source(messaging, tools),
    )


def not_found(space_id: str, address: str) -> errors.ParticipantNotFound:
    """The one refusal of an address that is no participant of the space."""
    return errors.ParticipantNotFound(
        f"no participant {address!r} in space {space_id}", address=address
    )


def insert_rows(t: Tx, rows: Rows) -> None:
    """Write whole participant rows (every column, by name): the one writer of
    ``participants`` inserts, used by ``join`` and by the importer."""
    t.many(_SQL["insert"], rows)


def carry_tokens(t: Tx, rows: Rows) -> None:
    """Give copied participants their tokens back (``{id, token_hash}`` rows from
    the store they were copied from, ``broker migrate-store``): an agent goes on
    with the token it holds, and its address's history stays its own."""
    t.many(_CARRY_TOKEN, rows)


def insert_events(t: Tx, rows: Rows) -> None:
    """Write whole ``participant_events`` rows: the journal's one writer (joins,
    leaves, the importer)."""
    t.many(_SQL["insert_event"], rows)


def journal_event(
    t: Tx, pid: str, space_id: str, event: str, row: Mapping[str, Any], now: str, reason: str | None
) -> None:
    wake.ring_at_commit(t, [wake.state_key(space_id)])  # watchers of the roster (the console)
    insert_events(
        t,
        [
            {
                "id": new_id(),
                "space_id": space_id,
                "participant_id": pid,
                "event": event,
                "address": row["address"],
                "codename": row["codename"],
                "agent": row["agent"],
                "run_id": row["run_id"],
                "step": row["step"],
                "parent": row["parent"],
                "reason": reason,
                "at_utc": now,
            }
        ],
    )


def leave_in_tx(store: Store, t: Tx, pid: str, reason: str) -> None:
    """Record participant ``pid`` as left, inside the caller's transaction, and
    end its key claims and path reservations there too (journaled ``released``,
    reason ``left``): every departure (leave, a stop or an archive, the
    directory's clean-up) comes through here, and a holder that left can
    neither release nor renew, so its holds would block everyone to their TTL."""
    row = t.one(_SQL["journal_fields"], {"id": pid})
    assert row is not None
    now = store.now_ts()
    t.execute(_SQL["mark_left"], {"now": now, "id": pid})
    journal_event(t, pid, row["space_id"], "left", row, now, reason)
    holds.end_held_by(t, row["space_id"], row["address"], now, holds.LEFT)


def leave_all(store: Store, t: Tx, space_id: str, *, reason: str) -> None:
    for row in t.all(_SQL["present_ids"], {"space_id": space_id}):
        leave_in_tx(store, t, row["id"], reason)
