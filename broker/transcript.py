"""Per-participant transcripts (S19): what each participant was shown, turn by turn.

What a participant *sent* is not copied here: the log already has it (rows
whose sender is the address), so the transcript keeps only what the log cannot
say: what was received and injected in which turn, and notices
(``tool_unavailable``, ``messaging_full``).
"""

from __future__ import annotations

from broker.db import Store, Tx
from broker.ids import new_id


def notice(
    store: Store, t: Tx, space_id: str, participant_id: str, name: str, content: str
) -> None:
    """Leave a notice in a participant's transcript, inside the caller's transaction."""
    t.execute(
        "INSERT INTO transcript (id, space_id, participant_id, turn_id, position, direction, message_id, kind, "
        "content, at_utc) VALUES (?, ?, ?, NULL, 0, 'notice', NULL, ?, ?, ?)",
        (new_id(), space_id, participant_id, name, content, store.now_ts()),
    )
