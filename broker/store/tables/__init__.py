"""The schema: SQLAlchemy Core metadata, the one source of truth.

One module per domain (``space``, ``log``, ``turns``, ``board``, ``store``) on
the one ``metadata`` of ``base``, with the columns that mean the same everywhere
from ``column``; ``from broker.store.tables import X`` names any of them. The modules are imported in the order below, which is the tables' order
in ``metadata`` (and in docs/schema.md).

Alembic migrations are generated from this package and ``docs/schema.md`` is
rendered from it, so every table and column is documented here, in ``comment=``.

Overview (one database holds many spaces; every row carries ``space_id``):

``spaces``
    One message space per root run (S1): kind, state, settings, and the
    floors of its counters ``last_seq`` (the per-space log sequence),
    ``last_bcast`` and ``log_bytes`` (for ``log_max_mb``, S11): the counters
    themselves are derived from the log under the write lock (revision 0017),
    so a send writes no space row.
``participants``
    Runs that joined a space (S2-S5), and the directory (S25): one concept,
    one table. The address is unique per space; a re-join reuses the row, so
    the inbox, cursors and directives survive a retry (S3).
``participant_events``
    Append-only journal of joined / left (S4).
``messages``
    The log (S7, S11): every send and receipt, one row each, append-only
    (triggers refuse UPDATE and DELETE), with a gap-free ``seq`` per space and
    the outcome of the send (``reached`` / ``not_reached``). Board posts,
    directives and retractions are log rows too: the board is a view of it.
    A message's id names its seq (revision 0018): no index of ids.
``message_aliases``
    The seq of each message whose id does not name it: ids logged before
    revision 0018, and imported ones.
``deliveries``
    One row per (message, recipient inbox): the queue (S13-S16), states
    ready -> processing -> done | quarantine, with the lease that holds it.
    Its rowid is the message's rowid times 2^20 plus its place among the
    message's deliveries (revision 0017): in log order, found by message.
``turns``
    A participant's turn (S17-S18): the lease over its deliveries and the
    broadcast range it showed, until confirmed ``seen``.
``transcript``
    Per-participant record of what was sent, received and injected, turn by
    turn (S19), plus notices (``tool_unavailable``, ``messaging_full``).
    Append-only.
``board_claims``
    Current holder and fencing token of each board key (S22); the row stays
    after release so the token keeps growing.
``claim_journal``
    Append-only history of claims: claimed / released / expired / renewed (S23).
``operator_key``
    One row: the hash of the store's operator key (S29).
``reservations``
    Path reservations (S37): one row per grant of a path pattern, exclusive or
    shared, kept after it ends so the per-space fencing token only grows; its
    claimed / renewed / released / expired lines go to ``claim_journal`` under
    the key ``path <pattern>``.
``purges``, ``purging``
    Retention: the store-level journal of purged spaces, and the marker a purge
    writes (and removes) inside its transaction so the append-only triggers let
    exactly that space's rows go.

Timestamps are text, fixed-width ISO-8601 UTC with microseconds (sortable);
ids are ULIDs (time-ordered), so ``(created_at_utc, id)`` orders totally.
JSON columns hold JSON text, portable across SQLite and PostgreSQL.
"""

from __future__ import annotations

# The import order is the tables' order in metadata (and in docs/schema.md).
# isort: off
from broker.store.tables.base import metadata
from broker.store.tables.space import participant_events, participants, spaces
from broker.store.tables.log import deliveries, message_aliases, messages
from broker.store.tables.turns import history, transcript, turns
from broker.store.tables.board import board_claims, claim_journal, reservations
from broker.store.tables.store import (
    folds,
    operator_key,
    purges,
    purging,
    sender_usage,
    space_usage,
)
# isort: on

__all__ = [
    "board_claims",
    "claim_journal",
    "deliveries",
    "folds",
    "history",
    "message_aliases",
    "messages",
    "metadata",
    "operator_key",
    "participant_events",
    "participants",
    "purges",
    "purging",
    "sender_usage",
    "space_usage",
    "reservations",
    "spaces",
    "transcript",
    "turns",
]
