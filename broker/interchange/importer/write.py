"""The importer's writes: every table through its owner's writer (one writer
per table), named like the owner: ``spaces.insert_rows(t, rows)``,
``participants.insert_rows`` and ``insert_events``, ``messages.restore_rows``
(``broker.mail.sending``), ``inbox.insert_rows``, ``claims.insert_claims`` and
``insert_journal``, ``reservations.insert_rows``, ``turns.insert_rows``,
``transcript.insert_rows``, ``history.insert_rows``. ``rows`` are dicts keyed by
column name, every column of the table, inserted as given.
"""

from __future__ import annotations

from broker.board import claims, reservations
from broker.delivery import history, inbox, transcript, turns
from broker.mail import sending as messages
from broker.spaces import participants, spaces

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
