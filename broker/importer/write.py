"""The importer's writes, in one place (one writer per table, API.md).

Each class below stands in for the module that owns the table and is named
like it, with the owner's function names: ``spaces.insert_rows(t, rows)``,
``participants.insert_rows`` and ``insert_events``, ``messages.insert_rows``,
``inbox.insert_rows``, ``claims.insert_claims`` and ``insert_journal``, ``reservations.insert_rows``,
``turns.insert_rows``, ``transcript.insert_rows``, ``history.insert_rows``.
The tables whose owners have those functions are re-exported from the owners;
the others still use ``broker/sql/importer.sql`` until their owner lands them. ``rows`` are
dicts keyed by column name, every column of the table, inserted as given.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# Tables whose owners have their insert functions: used as they are.
from broker import claims, history, inbox, participants, reservations, spaces, transcript, turns
from broker.db import Tx
from broker.sql import stmt

__all__ = [
    "claims",
    "history",
    "inbox",
    "messages",
    "participants",
    "reservations",
    "spaces",
    "transcript",
    "turns",
]

Rows = Sequence[dict[str, Any]]


def _many(t: Tx, name: str, rows: Rows) -> None:
    t.many(stmt(f"importer.insert_{name}"), rows)


# Lower-case class names on purpose: each stands for the owner module of the
# same name, so the swap to the owners' functions changes only the imports.
class messages:
    @staticmethod
    def insert_rows(t: Tx, rows: Rows) -> None:
        _many(t, "messages", rows)
