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

from broker.db import Store, Tx
from broker.ids import new_id
from broker.records import TranscriptEntry, TurnRecord


def notice(
    store: Store, t: Tx, space_id: str, participant_id: str, name: str, content: str
) -> None:
    """Leave a notice in a participant's transcript, inside the caller's transaction."""
    t.execute(
        "INSERT INTO transcript (id, space_id, participant_id, turn_id, position, direction, message_id, kind, "
        "content, at_utc) VALUES (?, ?, ?, NULL, 0, 'notice', NULL, ?, ?, ?)",
        (new_id(), space_id, participant_id, name, content, store.now_ts()),
    )


def rebuild(
    store: Store, space_ref: str, address: str, *, tx: Tx | None = None
) -> list[TurnRecord]:
    """A participant's transcript, turn by turn (S19): per turn, what it received
    and what was injected, in the order the model saw it; then what it sent (from
    the log) and the notices it got until its next turn. The first record
    (``turn_id`` None) holds what came before its first turn, if anything."""
    from broker import errors
    from broker.spaces import resolve_id

    with store.read(tx) as t:
        space_id = resolve_id(t, space_ref)
        me = t.one(
            "SELECT id FROM participants WHERE space_id = ? AND address = ?", (space_id, address)
        )
        if me is None:
            raise errors.ParticipantNotFound(
                f"no participant {address!r} in space {space_id}", address=address
            )
        pid = me[0]
        turns = t.all(
            "SELECT id, created_at_utc, state, seen_at_utc FROM turns WHERE participant_id = ? "
            "ORDER BY created_at_utc, id",
            (pid,),
        )
        rows = t.all(
            "SELECT id, turn_id, position, direction, message_id, kind, content, at_utc "
            "FROM transcript WHERE participant_id = ? ORDER BY at_utc, id",
            (pid,),
        )
        # What it sent is in the log, not copied here (receipts are not messages).
        sent = t.all(
            "SELECT id, kind, body, created_at_utc FROM messages "
            "WHERE space_id = ? AND sender = ? AND kind != 'seen' ORDER BY seq",
            (space_id, address),
        )
    records = [
        _Record(turn_id=None, at=None, state=None, seen_at=None),
        *(_Record(turn_id=r[0], at=r[1], state=r[2], seen_at=r[3]) for r in turns),
    ]
    by_turn = {r.turn_id: r for r in records}
    keys = [(r[1], r[0]) for r in turns]

    def owner(at: str, ident: str) -> _Record:
        # The last turn begun at or before this entry (ids are time-ordered: ties break by id).
        return records[bisect_right(keys, (at, ident))]

    for r in rows:
        entry = TranscriptEntry(
            direction=r[3],
            at_utc=r[7],
            turn_id=r[1],
            position=r[2],
            message_id=r[4],
            kind=r[5],
            content=r[6],
        )
        if r[3] == "notice" or r[1] not in by_turn:
            owner(r[7], r[0]).notices.append(entry)
        else:
            rec = by_turn[r[1]]
            (rec.received if r[3] == "received" else rec.injected).append(entry)
    for m in sent:
        owner(m[3], m[0]).sent.append(
            TranscriptEntry(
                direction="sent",
                at_utc=m[3],
                turn_id=None,
                position=0,
                message_id=m[0],
                kind=m[1],
                content=m[2],
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
