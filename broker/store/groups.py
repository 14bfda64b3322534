"""Column groups: columns of one table that travel together, named once.

The mail attributes of a message (S35: its thread, what it answers, its
importance, whether its sender asks for receipts) are columns of ``messages``
that every reader and writer of a message handles alike: the statement
catalogue expands ``{mail}`` in a ``.sql`` file to them
(``broker.store.sql``), and the code below the API reads and writes them by
these names (``broker.model.records.mail_of``, ``broker.mail.threads.mail``).
A new per-message attribute is a column in ``tables/log.py`` and its name here.

Plain names, no SQLAlchemy: the catalogue expands them on the path of every
CLI call. ``tests/unit/store/test_catalogue.py`` holds each name to a column of
its table, in the table's order.
"""

from __future__ import annotations

MAIL = ("thread", "reply_to", "importance", "ack_required")
"""``messages``' mail columns, in the table's order."""

GROUPS: dict[str, tuple[str, ...]] = {"mail": MAIL}
"""What ``{name}`` markers in the statement catalogue expand to."""

TABLES: dict[str, str] = {"mail": "messages"}
"""The table each group's columns belong to."""
