"""S43: the log, the journals and the transcript stay append-only against any
connection: a plain driver connection (``sqlite3`` without the broker's
pragmas, ``recursive_triggers`` off; ``psycopg``) tries every data-changing
statement on a populated store, on both backends, and every row is left as it
was. S34 (tests/unit/spaces/test_trust.py) is the same through the broker's own connections.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trusted
from cli_space import populate

from broker import Operator, Store
from broker.store.dialect import UNIQUE_KEYS
from broker.vocab import APPEND_ONLY

# A free-text column of each table that an attacker would rewrite.
COLUMN = {
    "messages": "body",
    "participant_events": "reason",
    "transcript": "content",
    "claim_journal": "owner",
    "purges": "export_dir",
}


class Plain:
    """A plain driver connection to the store's database, in autocommit: what
    anyone who can open the file (or reach the server) has, without the broker."""

    def __init__(self, store: Store) -> None:
        self.pg = store.url.startswith("postgresql")
        if self.pg:
            import psycopg

            self.conn: Any = psycopg.connect(
                store.url.replace("postgresql+psycopg", "postgresql"), autocommit=True
            )
        else:
            self.conn = sqlite3.connect(str(store.path), isolation_level=None)
            assert self.conn.execute("PRAGMA recursive_triggers").fetchone()[0] == 0

    def mark(self, n: int) -> str:
        return ", ".join(["%s" if self.pg else "?"] * n)

    def run(self, sql: str, params: Any = ()) -> None:
        self.conn.execute(sql.replace("?", "%s") if self.pg else sql, params)

    def rows(self, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
        cur = self.conn.execute(sql.replace("?", "%s") if self.pg else sql, params)
        return [tuple(r) for r in cur.fetchall()]

    def columns(self, table: str) -> list[str]:
        cur = self.conn.execute(f"SELECT * FROM {table} LIMIT 0")
        return [d[0] for d in cur.description]

    def unique_indexes(self, table: str) -> set[tuple[str, ...]]:
        """The column lists of every UNIQUE index (the primary key's included)."""
        if self.pg:
            got = self.rows(
                "SELECT array_agg(a.attname ORDER BY k.n) FROM pg_index i "
                "JOIN pg_class c ON c.oid = i.indrelid "
                "CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n) "
                "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum "
                "WHERE c.relname = ? AND i.indisunique GROUP BY i.indexrelid",
                (table,),
            )
            return {tuple(r[0]) for r in got}
        out = set()
        for row in self.rows(f"PRAGMA index_list({table})"):
            if row[2]:  # unique
                out.add(tuple(r[2] for r in self.rows(f"PRAGMA index_info({row[1]})")))
        return out

    def close(self) -> None:
        self.conn.close()


@pytest.fixture
def populated(store: Store, tmp_path: Path) -> Store:
    space = populate(store)
    op = Operator(store)
    keyed, _ = trusted.join(store, space.space, "keyed")
    keyed.send("lynx#1", "keyed", idempotency_key="k-1")  # a row with an idempotency key
    gone = op.create_space("workflow").id
    op.stop_space(gone)
    op.archive_space(gone)
    op.purge_space(gone, tmp_path / "export")  # a purges row
    return store


@pytest.fixture
def plain(populated: Store) -> Iterator[Plain]:
    conn = Plain(populated)
    yield conn
    conn.close()


def _snapshot(plain: Plain) -> dict[str, list[tuple[Any, ...]]]:
    return {t: plain.rows(f"SELECT * FROM {t} ORDER BY id") for t in COLUMN}


def test_S43_the_replace_guard_names_every_unique_index_of_every_append_only_table(
    plain: Plain,
) -> None:
    assert set(UNIQUE_KEYS) == set(APPEND_ONLY) | {"purges"} == set(COLUMN)
    for table, keys in UNIQUE_KEYS.items():
        # PostgreSQL's rowid identity (revision 0010) is made by the server.
        assert plain.unique_indexes(table) - {("rowid",)} == set(keys), table


def test_S43_a_plain_connection_rewrites_and_deletes_nothing(plain: Plain) -> None:
    before = _snapshot(plain)
    tried = 0
    for table, col in COLUMN.items():
        columns = plain.columns(table)
        first = dict(
            zip(columns, plain.rows(f"SELECT * FROM {table} ORDER BY id LIMIT 1")[0], strict=True)
        )
        names, marks = ", ".join(columns), plain.mark(len(columns))
        forged = [("forged" if c == col else first[c]) for c in columns]
        key = ", ".join(UNIQUE_KEYS[table][0])  # messages: (space_id, seq); no key of ids
        attacks: list[tuple[str, Any]] = [
            (
                f"INSERT INTO {table} ({names}) VALUES ({marks}) "
                f"ON CONFLICT ({key}) DO UPDATE SET {col} = excluded.{col}",
                forged,
            ),
            (f"UPDATE {table} SET {col} = 'forged' WHERE id = ?", [first["id"]]),
            (f"DELETE FROM {table} WHERE id = ?", [first["id"]]),
            (f"DELETE FROM {table}", []),
        ]
        if plain.pg:
            attacks.append((f"TRUNCATE {table} CASCADE", []))
        else:
            attacks += [
                (f"INSERT OR REPLACE INTO {table} ({names}) VALUES ({marks})", forged),
                (f"REPLACE INTO {table} ({names}) VALUES ({marks})", forged),
                (f"UPDATE OR REPLACE {table} SET {col} = 'forged'", []),
            ]
            # A new id that takes another UNIQUE key: REPLACE deletes that row.
            for key in UNIQUE_KEYS[table]:
                if key == ("id",):
                    continue
                where = " AND ".join(f"{c} IS NOT NULL" for c in key)
                victim = plain.rows(f"SELECT * FROM {table} WHERE {where} LIMIT 1")
                assert victim, (table, key)
                row = dict(zip(columns, victim[0], strict=True))
                row["id"], row[col] = "01FORGED0000000000000000000", "forged"
                attacks.append(
                    (
                        f"INSERT OR REPLACE INTO {table} ({names}) VALUES ({marks})",
                        [row[c] for c in columns],
                    )
                )
        for sql, params in attacks:
            with pytest.raises(Exception, match=f"append-only: {table} refuses"):
                plain.run(sql, params)
            tried += 1
    assert _snapshot(plain) == before
    assert tried == (25 if plain.pg else 37)


def test_S43_a_plain_connection_still_appends_a_new_row(plain: Plain) -> None:
    """The guard refuses a taken key, not an insert: a new transcript row goes in."""
    columns = [c for c in plain.columns("transcript") if c != "rowid"]  # PostgreSQL's identity
    got = plain.rows(f"SELECT {', '.join(columns)} FROM transcript LIMIT 1")[0]
    row = dict(zip(columns, got, strict=True))
    row["id"] = "01NEWROW000000000000000000"
    plain.run(
        f"INSERT INTO transcript ({', '.join(columns)}) VALUES ({plain.mark(len(columns))})",
        [row[c] for c in columns],
    )
    assert plain.rows("SELECT count(*) FROM transcript WHERE id = ?", (row["id"],)) == [(1,)]
