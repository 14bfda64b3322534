"""The importer's writes, in one place (one writer per table, API.md).

Each class below stands in for the module that owns the table and is named
like it, with the owner's function names: ``spaces.insert_rows(t, rows)``,
``participants.insert_rows`` and ``insert_events``, ``messages.insert_rows``,
``inbox.insert_rows``, ``board.insert_claims`` and ``insert_journal``,
``turns.insert_rows``, ``transcript.insert_rows``, ``history.insert_rows``.
Until the owners land them the statements live here (``broker/sql/importer.sql``);
then this module is replaced by importing the owners' modules. ``rows`` are
dicts keyed by column name, every column of the table, inserted as given.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from broker.db import Tx
from broker.sql import stmt

Rows = Sequence[dict[str, Any]]


def _many(t: Tx, name: str, rows: Rows) -> None:
    t.many(stmt(f"importer.insert_{name}"), rows)


# Lower-case class names on purpose: each stands for the owner module of the
# same name, so the swap to the owners' functions changes only the imports.
class spaces:
    @staticmethod
    def insert_rows(t: Tx, rows: Rows) -> None:
        _many(t, "spaces", rows)


class participants:
    @staticmethod
    def insert_rows(t: Tx, rows: Rows) -> None:
        _many(t, "participants", rows)

    @staticmethod
    def insert_events(t: Tx, rows: Rows) -> None:
        _many(t, "participant_events", rows)


class messages:
    @staticmethod
    def insert_rows(t: Tx, rows: Rows) -> None:
        _many(t, "messages", rows)


class inbox:
    @staticmethod
    def insert_rows(t: Tx, rows: Rows) -> None:
        _many(t, "deliveries", rows)


class board:
    @staticmethod
    def insert_claims(t: Tx, rows: Rows) -> None:
        _many(t, "board_claims", rows)

    @staticmethod
    def insert_journal(t: Tx, rows: Rows) -> None:
        _many(t, "claim_journal", rows)


class turns:
    @staticmethod
    def insert_rows(t: Tx, rows: Rows) -> None:
        _many(t, "turns", rows)


class transcript:
    @staticmethod
    def insert_rows(t: Tx, rows: Rows) -> None:
        _many(t, "transcript", rows)


class history:
    @staticmethod
    def insert_rows(t: Tx, rows: Rows) -> None:
        _many(t, "history", rows)
