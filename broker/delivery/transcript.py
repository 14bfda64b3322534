"""Per-participant transcripts (S19): what each participant was shown, turn by turn.

What a participant *sent* is not copied here: the log already has it (rows
whose sender is the address), so the transcript keeps only what the log cannot
say: what was received and injected in which turn, and notices
(``tool_unavailable``, ``messaging_full``). ``rebuild`` puts the three back
together, turn by turn, as the model saw them.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from broker.ids import new_id
from broker.spaces.roster import not_found
from broker.spaces.spaces import resolve_id
from broker.store.sql import stmts
from broker.store.sqlite import Rows, Store, Tx

if TYPE_CHECKING:
    from broker.model.records import TranscriptEntry, TurnRecord

_SQL = stmts("transcript", "insert", "participant", "turns", "entries", "sent")


def insert_rows(t: Tx, rows: Rows) -> None:
    """Append transcript rows as given (every column), inside ``t``: a turn's
    received and injected entries, notices, and rows the importer restores."""
    t.many(_SQL["insert"], rows)


def notice(
    store: Store, t: Tx, space_id: str, participant_id: str, name: str, content: str
) -> None:
    """Leave a notice in a participant's transcript, inside the caller's transaction."""
    insert_rows(
        t,
        [
            {
                "id": new_id(),
                "space_id": space_id,
                "participant_id": participant_id,
                "turn_id": None,
                "position": 0,
                "direction": "notice",
                "message_id": None,
                "kind": name,
                "content": content,
                "at_utc": store.now_ts(),
            }
        ],
    )


def rebuild(
    store: Store, space_ref: str, address: str, *, tx: Tx | None = None
) -> list[TurnRecord]:
    """A participant's transcript, turn by turn (S19): per turn, what it received
    and what was injected, in the order the model saw it; then what it sent (from
    the log) and the notices it got until its next turn. The first record
    (``turn_id`` None) holds what came before its first turn, if anything."""
    # Built on first use (records_more): every call that notices loads this module.
    from broker.model.records import TranscriptEntry, TurnRecord

    with store.read(tx) as t:
        space_id = resolve_id(t, space_ref)
        me = t.one(_SQL["participant"], {"space_id": space_id, "address": address})
        if me is None:
            raise not_found(space_id, address)
        pid = me["id"]
        turns = t.all(_SQL["turns"], {"participant_id": pid})
        rows = t.all(_SQL["entries"], {"participant_id": pid})
        sent = t.all(_SQL["sent"], {"space_id": space_id, "address": address})
    records = [
        _Record(turn_id=None, at=None, state=None, seen_at=None),
        *(
            _Record(
                turn_id=r["id"], at=r["created_at_utc"], state=r["state"], seen_at=r["seen_at_utc"]
            )
            for r in turns
        ),
    ]
    by_turn = {r.turn_id: r for r in records}
    keys = [(r["created_at_utc"], r["id"]) for r in turns]

    def owner(at: str, ident: str) -> _Record:
        # The last turn begun at or before this entry (ids are time-ordered: ties break by id).
        return records[bisect_right(keys, (at, ident))]

    for r in rows:
        entry = TranscriptEntry(
            direction=r["direction"],
            at_utc=r["at_utc"],
            turn_id=r["turn_id"],
            position=r["position"],
            message_id=r["message_id"],
            kind=r["kind"],
            content=r["content"],
        )
        if r["direction"] == "notice" or r["turn_id"] not in by_turn:
            owner(r["at_utc"], r["id"]).notices.append(entry)
        else:
            rec = by_turn[r["turn_id"]]
            (rec.received if r["direction"] == "received" else rec.injected).append(entry)
    for m in sent:
        owner(m["created_at_utc"], m["id"]).sent.append(
            TranscriptEntry(
                direction="sent",
                at_utc=m["created_at_utc"],
                turn_id=None,
                position=0,
                message_id=m["id"],
                kind=m["kind"],
                content=m["body"],
            )
        )
    out = []
    for rec in records:
        if rec.turn_id is None and not (rec.sent or rec.notices):
            continue
        out.append(
            TurnRecord(
                turn_id=rec.turn_id,
                at_utc=rec.at,
                state=rec.state,
                seen_at_utc=rec.seen_at,
                received=sorted(rec.received, key=lambda e: e.position),
                injected=sorted(rec.injected, key=lambda e: e.position),
                sent=rec.sent,
                notices=rec.notices,
            )
        )
    return out


@dataclass
class _Record:
    turn_id: str | None
    at: str | None
    state: str | None
    seen_at: str | None
    received: list[TranscriptEntry] = field(default_factory=list)
    injected: list[TranscriptEntry] = field(default_factory=list)
    sent: list[TranscriptEntry] = field(default_factory=list)
    notices: list[TranscriptEntry] = field(default_factory=list)
