"""The store: one database behind ``Store`` and ``Tx`` (SQLite, or PostgreSQL), its files,
locks, keys, settings, schema (``tables``), statement catalogue (``sql``), migrations
and maintenance. The lowest layer: it imports nothing of the broker above ``errors``
and ``vocab``.
"""
