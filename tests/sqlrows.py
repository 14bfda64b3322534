"""Rows written with plain SQL, for the export / import / view tests.

Everything the public API (``broker.api.handles``) can write is written through it in
the tests. What these helpers write directly (claims and their journal with
chosen times, delivery states, turns, transcript and history rows, cursors,
participants with addresses no join would accept) is kept in this one module,
so it can be swapped for the API where that fits.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from broker.ids import hash_token, new_id, new_token
from broker.store.sql import fragment
from broker.store.sqlite import Store

FAR_FUTURE = "2999-01-01T00:00:00.000000Z"


def delivery_rows(alias: str = "deliveries") -> str:
    """``deliveries`` as a table with the columns a row held before revision 0021
    (its message's id, space and time: the rowid's now; its recipient's id: a
    number since revision 0022; its own id: its message's since revision 0024),
    for a test that reads rows by them:
    ``f"SELECT state FROM {delivery_rows()} WHERE message_id = ?"``.
    ``rowid`` is the row's own (rowid order is inbox order, S13)."""
    return (
        f"(SELECT d.rowid AS rowid, {fragment('delivery_id')} AS id, "
        "(SELECT sp.id FROM spaces sp WHERE sp.rowid = m.space_no) AS space_id, "
        "m.id AS message_id, "
        "(SELECT p.id FROM participants p WHERE p.rowid = d.recipient_no) AS recipient_id, "
        "d.state AS state, "
        "coalesce(d.created_at_utc, m.created_at_utc) AS created_at_utc, d.attempts AS attempts, "
        "d.lease_token AS lease_token, d.lease_owner AS lease_owner, "
        "d.lease_expires_at AS lease_expires_at, d.acked_at_utc AS acked_at_utc, "
        "d.last_error AS last_error, d.quarantine_reason AS quarantine_reason, "
        "d.lease_process AS lease_process, d.lost_lease_token AS lost_lease_token, "
        "d.queued AS queued FROM deliveries d JOIN messages m ON m.rowid = d.rowid >> 20) "
        f"AS {alias}"
    )


def by_delivery_id() -> str:
    """A WHERE condition on ``deliveries`` (no alias) for the row of one delivery
    id, the parameter: a send's row keeps no id (revision 0024)."""
    return f"rowid = (SELECT x.rowid FROM {delivery_rows('x')} WHERE x.id = ?)"


def delivery_of(message_id: str) -> str:
    """A WHERE condition on ``deliveries`` (no alias) for the rows of one message,
    for an UPDATE: ``f"UPDATE deliveries SET ... WHERE {delivery_of('?')}"`` with
    the message id as the parameter (revision 0021: the rowid names the message)."""
    return f"rowid >> 20 = (SELECT m.rowid FROM messages m WHERE m.id = {message_id})"


# The number the log names a space by (revision 0023), of the space id bound as
# the parameter.
SPACE_NO = "(SELECT sp.rowid FROM spaces sp WHERE sp.id = ?)"


# How many log rows the search index holds (SQLite): those up to its mark
# (revision 0025; FTS5's integrity-check holds the index to it).
INDEXED_ROWS = (
    "SELECT count(*) FROM messages "
    "WHERE rowid <= coalesce((SELECT upto FROM folds WHERE name = 'search'), 0)"
)


def of_space(table: str) -> str:
    """A WHERE condition on ``table`` (no alias) for the rows of one space, the
    space id as the parameter: the log names its space by number (revision
    0023), every other table by id."""
    return f"space_no = {SPACE_NO}" if table == "messages" else "space_id = ?"


def log_rows(alias: str = "messages") -> str:
    """``messages`` as a table with the column a row held before revision 0023
    (its space's id: a number now), for a test that reads rows by it."""
    return (
        "(SELECT m.*, (SELECT sp.id FROM spaces sp WHERE sp.rowid = m.space_no) AS space_id "
        f"FROM messages m) AS {alias}"
    )


# The number a delivery names its recipient by (revision 0022), of the participant
# id bound as the parameter.
RECIPIENT_NO = "(SELECT rp.rowid FROM participants rp WHERE rp.id = ?)"

LONG_AGO = "2000-01-01T00:00:00.000000Z"


def participant(
    store: Store,
    space_id: str,
    address: str,
    *,
    status: str = "running",
    role: str | None = None,
    at: str | None = None,
    bcast_seen: int = 0,
) -> str:
    """A participant row with any address at all (hostile ones included)."""
    pid = new_id()
    now = at or store.now_ts()
    with store.write() as t:
        t.execute(
            "INSERT INTO participants (id, space_id, address, codename, agent, run_id, role, "
            "token_hash, status, bcast_seen, joined_at_utc, last_seen_utc, left_at_utc) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                pid,
                space_id,
                address,
                address,
                "agent",
                address,
                role,
                hash_token(new_token()),
                status,
                bcast_seen,
                now,
                now,
                now if status == "left" else None,
            ),
        )
        t.execute(
            "INSERT INTO participant_events (id, space_id, participant_id, event, address, "
            "codename, agent, run_id, at_utc) VALUES (?,?,?,?,?,?,?,?,?)",
            (new_id(), space_id, pid, "joined", address, address, "agent", address, now),
        )
    return pid


LABELS = ("agent", "run_id", "step", "parent", "role", "task")


def set_labels(store: Store, space_id: str, address: str, **labels: str) -> None:
    """Overwrite a participant's labels with any text at all: a join refuses
    control characters in them (S33), a damaged or older store may hold them."""
    assert labels and set(labels) <= set(LABELS), labels
    cols = ", ".join(f"{name} = ?" for name in labels)
    with store.write() as t:
        t.execute(
            f"UPDATE participants SET {cols} WHERE space_id = ? AND address = ?",
            (*labels.values(), space_id, address),
        )


def message(
    store: Store,
    space_id: str,
    sender: str,
    body: str,
    *,
    kind: str = "direct",
    to: list[str] | None = None,
    reached: list[str] | None = None,
    not_reached: list[dict[str, str]] | None = None,
    ref: str | None = None,
    deliver_to: Sequence[str] = (),
    bcast: bool = False,
) -> str:
    """A log row through the log's own writer (``messages.append``), plus
    deliveries to the given participant ids."""
    from broker.delivery import inbox
    from broker.mail.messages import append

    with store.write() as t:
        bcast_no = None
        if bcast:
            bcast_no = (
                t.one(f"SELECT last_bcast FROM {spaces_as_read(store)} WHERE id = ?", (space_id,))[
                    0
                ]
                + 1
            )
        mid, _, now = append(
            store,
            t,
            space_id,
            kind,
            sender,
            body,
            recipients=json.dumps(to or []),
            reached=reached or [],
            not_reached=not_reached or [],
            ref=ref,
            bcast_no=bcast_no,
        )
        inbox.insert_rows(  # the one writer of deliveries: their rowids are the message's
            t,
            [
                {
                    "id": new_id(),
                    "space_id": space_id,
                    "message_id": mid,
                    "recipient_id": pid,
                    "created_at_utc": now,
                }
                for pid in deliver_to
            ],
        )
    return mid


def deliveries(store: Store, participant_id: str, *, state: str | None = None) -> list[str]:
    """A participant's delivery ids in FIFO order (only those in ``state`` if given)."""
    where = " AND state = ?" if state else ""
    with store.read() as t:
        return [
            r[0]
            for r in t.all(
                f"SELECT id FROM {delivery_rows()} WHERE recipient_id = ?{where} ORDER BY rowid",
                (participant_id, state) if state else (participant_id,),
            )
        ]


def set_delivery(
    store: Store,
    delivery_id: str,
    state: str,
    *,
    attempts: int = 1,
    lease_owner: str | None = None,
    lease_expires_at: str | None = None,
    error: str | None = None,
    reason: str | None = None,
) -> None:
    """Move a delivery to ``state`` as the queue would leave it."""
    at = "2026-01-01T00:00:00.000000Z"
    with store.write() as t:
        t.execute(
            "UPDATE deliveries SET state = ?, attempts = ?, lease_token = ?, lease_owner = ?, "
            "lease_expires_at = ?, acked_at_utc = ?, last_error = ?, quarantine_reason = ? "
            f"WHERE {by_delivery_id()}",
            (
                state,
                attempts,
                new_id() if state == "processing" else None,
                lease_owner if state == "processing" else None,
                lease_expires_at if state == "processing" else None,
                at if state == "done" else None,
                error,
                reason if state == "quarantine" else None,
                delivery_id,
            ),
        )


def set_delivery_time(store: Store, delivery_id: str, at: str) -> None:
    """A delivery with a time of its own, not its message's, as an imported line
    may carry (revision 0021 keeps such a time; a send's row has none)."""
    with store.write() as t:
        t.execute(
            f"UPDATE deliveries SET created_at_utc = ? WHERE {by_delivery_id()}", (at, delivery_id)
        )


def set_delivery_id(store: Store, delivery_id: str, own: str) -> None:
    """A delivery with an id of its own, not the one its message gives it, as an
    imported line or a send before revision 0024 left it."""
    with store.write() as t:
        t.execute(f"UPDATE deliveries SET id = ? WHERE {by_delivery_id()}", (own, delivery_id))


def set_lease_evidence(store: Store, delivery_id: str, process: str, lost_token: str) -> None:
    """A delivery's lease evidence as a lease taken by ``process`` that lost it
    leaves it: the process that claimed it and the token that lost it."""
    with store.write() as t:
        t.execute(
            f"UPDATE deliveries SET lease_process = ?, lost_lease_token = ? WHERE {by_delivery_id()}",
            (process, lost_token, delivery_id),
        )


def claim(
    store: Store,
    space_id: str,
    key: str,
    holder: str,
    *,
    at: str,
    expires: str,
) -> int:
    """Grant ``key`` to ``holder`` (journaled); returns the fencing token."""
    with store.write() as t:
        row = t.one(
            "SELECT token FROM board_claims WHERE space_id = ? AND key = ?", (space_id, key)
        )
        token = (row[0] if row else 0) + 1
        t.execute(
            "INSERT INTO board_claims (space_id, key, holder, token, claimed_at_utc, "
            "lease_expires_at) VALUES (?,?,?,?,?,?) ON CONFLICT (space_id, key) DO UPDATE SET "
            "holder = excluded.holder, token = excluded.token, "
            "claimed_at_utc = excluded.claimed_at_utc, lease_expires_at = excluded.lease_expires_at",
            (space_id, key, holder, token, at, expires),
        )
        _journal(t, space_id, key, "claimed", holder, token, expires, at)
    return token


def end_claim(store: Store, space_id: str, key: str, *, event: str, at: str) -> None:
    """Release or expire the current claim on ``key`` (journaled)."""
    with store.write() as t:
        holder, token, expires = t.one(
            "SELECT holder, token, lease_expires_at FROM board_claims WHERE space_id = ? AND key = ?",
            (space_id, key),
        )
        t.execute(
            "UPDATE board_claims SET holder = NULL, claimed_at_utc = NULL, lease_expires_at = NULL "
            "WHERE space_id = ? AND key = ?",
            (space_id, key),
        )
        _journal(t, space_id, key, event, holder, token, expires, at)


def _journal(
    t: Any, space_id: str, key: str, event: str, owner: str, token: int, expires: str, at: str
) -> None:
    t.execute(
        "INSERT INTO claim_journal (id, space_id, key, event, owner, token, lease_expires_at, "
        "at_utc) VALUES (?,?,?,?,?,?,?,?)",
        (new_id(), space_id, key, event, owner, token, expires, at),
    )


def set_cursor(store: Store, participant_id: str, bcast_seen: int) -> None:
    with store.write() as t:
        t.execute(
            "UPDATE participants SET bcast_seen = ? WHERE id = ?", (bcast_seen, participant_id)
        )


def turn_with_transcript(
    store: Store, space_id: str, participant_id: str, message_id: str, *, seen: bool
) -> str:
    """A turn that showed ``message_id``, its transcript rows and a history row."""
    tid = new_id()
    now = store.now_ts()
    with store.write() as t:
        t.execute(
            "INSERT INTO turns (id, space_id, participant_id, lease_token, bcast_upto, state, "
            "created_at_utc, expires_at, seen_at_utc) VALUES (?,?,?,?,?,?,?,?,?)",
            (
                tid,
                space_id,
                participant_id,
                new_id(),
                0,
                "seen" if seen else "open",
                now,
                FAR_FUTURE,
                now if seen else None,
            ),
        )
        for position, direction in enumerate(("received", "injected")):
            t.execute(
                "INSERT INTO transcript (id, space_id, participant_id, turn_id, position, "
                "direction, message_id, kind, content, at_utc) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (
                    new_id(),
                    space_id,
                    participant_id,
                    tid,
                    position,
                    direction,
                    message_id,
                    "direct",
                    f"<message id={message_id}>",
                    now,
                ),
            )
        t.execute(
            "INSERT INTO history (id, space_id, participant_id, message_id, turn_id, kind, "
            "sender, body, at_utc) VALUES (?,?,?,?,?,?,?,?,?)",
            (new_id(), space_id, participant_id, message_id, tid, "direct", "x", "body", now),
        )
    return tid


def stop(store: Store, space_id: str) -> None:
    from broker.spaces import spaces

    spaces.stop(store, space_id)


def waiting_sql(store: Store) -> str:
    """``SELECT <waiting> FROM participants``, the inbox counter as the broker
    reads it: on SQLite it is taken in batches (revision 0015) and every reader
    adds the inbox's deliveries past ``folds.upto`` still ready or processing."""
    if store.dialect != "sqlite":
        return "SELECT waiting FROM participants"
    return (
        "SELECT waiting + (SELECT count(*) FROM deliveries w WHERE w.rowid > "
        "coalesce((SELECT upto FROM folds WHERE name = 'waiting'), 0) "
        "AND w.recipient_no = participants.rowid AND w.state IN ('ready', 'processing')) "
        "AS waiting FROM participants"
    )


def spaces_as_read(store: Store) -> str:
    """``spaces`` with its counters (``last_seq``, ``log_bytes``, ``last_bcast``)
    as the broker reads them: derived from the log (revision 0017), a send writes
    no space row. A subquery named ``spaces`` of every exported column, by
    ``id``: the exporter's own ``export.space`` without its one-space condition."""
    import re

    from broker.store.sql import stmt

    space = stmt("export.space")
    text = space if store.dialect == "sqlite" else space.postgresql
    every, n = re.subn(r" WHERE spaces\.id = (:space_id|%\(space_id\)s)\s*$", "", text)
    assert n == 1, text
    return f"({every}) AS spaces"
