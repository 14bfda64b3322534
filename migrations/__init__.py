"""Alembic migrations of the broker schema (run by ``broker.store.migrate``).

Revisions are frozen once written: each one carries its own DDL and imports
no live broker code, so replaying the history runs the SQL of its time.
"""
