"""The statement catalogue (broker/store/sql/*.sql): every statement once, named, valid.

Each statement is compiled by SQLite (EXPLAIN) on a freshly migrated database,
so a typo or a schema drift fails here rather than on some rare path; and the
broker's modules hold no SQL of their own (the count below only goes down).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from broker.store import groups, sql
from broker.store.sqlite import Store

ROOT = Path(__file__).resolve().parents[3]
SQL_START = re.compile(
    r"\s*(SELECT|INSERT|UPDATE|DELETE|WITH|CREATE|DROP|PRAGMA|BEGIN|COMMIT|ROLLBACK|"
    r"SAVEPOINT|RELEASE|ALTER|REPLACE|VACUUM|ANALYZE)\s"
)
# Modules whose SQL is schema definition, not statements the broker runs: the
# table metadata (the broker/tables package) and the views' documentation
# (their DDL is frozen in migrations/).
SCHEMA_MODULES = {"views.py", "dialect.py"}
SCHEMA_PACKAGES = {"tables"}
# Statement strings still outside the catalogue. This number only goes down;
# the target is 0.
OUTSIDE_ALLOWED = 0


def sql_literals_outside_catalogue() -> list[str]:
    found: list[str] = []
    for path in sorted((ROOT / "broker").rglob("*.py")):
        package = path.relative_to(ROOT / "broker").parts[:-1]
        if path.name in SCHEMA_MODULES or {"sql", *SCHEMA_PACKAGES} & set(package):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
                and SQL_START.match(node.value)
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value[:60]}")
    return found


def test_catalogue_statements_compile_on_a_migrated_database(store: Store) -> None:
    statements = sql.all_statements()
    assert "store.begin_write" in statements
    raw = store.connect()
    try:
        # The private index a search that cannot write makes while it runs (S36).
        raw.execute(statements["search.tail_index"])
        for name, stmt in statements.items():
            if not re.match(r"\s*(SELECT|INSERT|UPDATE|DELETE|WITH)\s", stmt):
                continue  # transaction control and pragmas are not EXPLAINable plans
            try:
                raw.execute(f"EXPLAIN {stmt}", dict.fromkeys(stmt.params))
            except Exception as exc:  # noqa: BLE001 - report which statement
                pytest.fail(f"{name}: {exc}")
    finally:
        raw.close()


def test_catalogue_names_are_qualified_and_parameters_named() -> None:
    for name, stmt in sql.all_statements().items():
        area, _, short = name.partition(".")
        assert area and short and stmt.name == name
        assert "?" not in re.sub(r"'(?:[^']|'')*'", "''", stmt), name
        for param in stmt.params:
            assert f"%({param})s" in stmt.postgresql, (name, param)


def test_no_statement_is_written_twice() -> None:
    # One text, one name: a second copy of a statement drifts from the first.
    # The SQLite text alone must be unique, even where the PostgreSQL variants
    # differ: a Stmt is equal to its SQLite text, so any cache keyed by the text
    # would hand one entry's PostgreSQL text to the other.
    seen: dict[str, str] = {}
    for name, stmt in sql.all_statements().items():
        text = " ".join(stmt.split()).lower()
        assert text not in seen, f"{name} repeats {seen[text]}"
        seen[text] = name


def test_parse_refuses_positional_parameters_and_duplicates() -> None:
    with pytest.raises(sql.CatalogueError, match="named parameters"):
        sql.parse("x", "-- name: a\nSELECT * FROM t WHERE id = ?\n")
    with pytest.raises(sql.CatalogueError, match="defined twice"):
        sql.parse("x", "-- name: a\nSELECT 1\n-- name: a\nSELECT 2\n")


def test_psycopg_text_keeps_casts_literals_and_percent() -> None:
    got = sql.to_psycopg("SELECT :a::jsonb, ':b', x LIKE 'p%' || :c")
    assert got == "SELECT %(a)s::jsonb, ':b', x LIKE 'p%%' || %(c)s"
    entry = sql.parse("x", "-- name: a\n-- doc\nSELECT 1\n-- postgresql:\nSELECT 2\n")["x.a"]
    assert (str(entry), entry.postgresql, entry.doc) == ("SELECT 1", "SELECT 2", "doc")


def test_numbered_text_binds_the_values_by_name_as_the_named_text_does(store: Store) -> None:
    """``Stmt.numbered``: each named parameter a number (one name, one number,
    however often it is used), quoted text untouched, and its values taken
    from a mapping in that order; every statement of the catalogue binds the
    same values numbered as named (SQLite's compiled plan reads the same)."""
    entry = sql.parse("x", "-- name: a\nSELECT :b, ':c', :b || :d\n")["x.a"]
    text, values = entry.numbered
    assert text == "SELECT ?1, ':c', ?1 || ?2"
    assert values({"d": 4, "b": 2, "extra": 0}) == (2, 4)
    one = sql.parse("x", "-- name: a\nSELECT :only\n")["x.a"].numbered
    assert one[0] == "SELECT ?1" and one[1]({"only": 1}) == (1,)
    raw = store.connect()
    try:
        assert raw.execute(entry, {"b": "x", "d": "y"}).fetchone()[:] == ("x", ":c", "xy")
        raw.execute(sql.stmt("search.tail_index"))  # the private index a search makes (S36)
        for name, stmt in sql.all_statements().items():
            if not re.match(r"\s*(SELECT|INSERT|UPDATE|DELETE|WITH)\s", stmt):
                continue
            text, values = stmt.numbered
            assert not re.search(r"(?<![:\w]):[A-Za-z_]", re.sub(r"'(?:[^']|'')*'", "", text))
            given = {p: None for p in stmt.params}
            plans = [  # a Variable names its parameter (':id' or '?1'): all else the same
                [
                    (r[1], r[2], r[3], r[4], None if r[1] == "Variable" else r[5], r[6])
                    for r in raw.execute(f"EXPLAIN {t}", v).fetchall()
                ]
                for t, v in ((str(stmt), given), (text, values(given)))
            ]
            assert plans[0] == plans[1], name
    finally:
        raw.close()


def test_no_sql_statement_strings_outside_the_catalogue() -> None:
    found = sql_literals_outside_catalogue()
    assert len(found) <= OUTSIDE_ALLOWED, "\n".join(found)


def test_column_group_markers_expand_to_the_groups_columns() -> None:
    got = sql.parse(
        "x",
        "-- name: a\nSELECT {mail}, {m.mail} FROM t\n-- postgresql:\nINSERT INTO t VALUES ({:mail})\n",
    )["x.a"]
    names = groups.GROUPS["mail"]
    assert str(got) == f"SELECT {', '.join(names)}, {', '.join('m.' + n for n in names)} FROM t"
    assert got.postgresql == f"INSERT INTO t VALUES ({', '.join(f'%({n})s' for n in names)})"
    with pytest.raises(sql.CatalogueError, match="no column group or fragment 'nope'"):
        sql.parse("x", "-- name: a\nSELECT {nope} FROM t\n")


def test_each_column_group_is_columns_of_its_table_in_order() -> None:
    """The groups are plain names (the CLI's hot path loads no SQLAlchemy): held
    here to the one schema source."""
    from broker.store.tables import metadata

    for group, names in groups.GROUPS.items():
        columns = [c.name for c in metadata.tables[groups.TABLES[group]].columns]
        assert [c for c in columns if c in names] == list(names), group


def test_a_fragment_is_written_once_and_used_by_the_statements_after_it() -> None:
    got = sql.parse(
        "x",
        "-- fragment: ready\n-- doc\nSELECT id FROM t WHERE s = :s\n"
        "-- name: a\nDELETE FROM t WHERE id IN ({ready})\n"
        "-- postgresql:\nDELETE FROM t WHERE id IN ({ready}) AND true\n",
    )
    assert list(got) == ["x.a"]
    assert str(got["x.a"]) == "DELETE FROM t WHERE id IN (SELECT id FROM t WHERE s = :s)"
    assert got["x.a"].postgresql.endswith("(SELECT id FROM t WHERE s = %(s)s) AND true")
    dialects = sql.parse(
        "x",
        "-- fragment: ids\nSELECT json_group_array(id) FROM t\n"
        "-- postgresql:\nSELECT json_agg(id) FROM t\n"
        "-- name: a\nSELECT ({ids}) AS ids, :s AS s\n",
    )["x.a"]
    assert str(dialects) == "SELECT (SELECT json_group_array(id) FROM t) AS ids, :s AS s"
    assert dialects.postgresql == "SELECT (SELECT json_agg(id) FROM t) AS ids, %(s)s AS s"
    with pytest.raises(sql.CatalogueError, match="defined twice"):
        sql.parse("x", "-- fragment: f\nSELECT 1\n-- name: f\nSELECT 2\n")


def test_the_shared_fragments_are_every_areas_and_written_once() -> None:
    """counters.sql's fragments (the space's derived counters) are used by
    several areas, written once: an area that defines one again is refused, a
    statement may bear its name, and counters.sql holds no statement."""
    shared = {"n": ("max(t.n, 0)", "greatest(t.n, 0)")}
    got = sql.parse("x", "-- name: a\nSELECT {n} AS n FROM t\n-- name: n\nSELECT 1\n", shared)
    assert str(got["x.a"]) == "SELECT max(t.n, 0) AS n FROM t"
    assert got["x.a"].postgresql == "SELECT greatest(t.n, 0) AS n FROM t"
    with pytest.raises(sql.CatalogueError, match="x.n: defined twice"):
        sql.parse("x", "-- fragment: n\nSELECT 2\n", shared)
    assert sql.area(sql.SHARED) == {}
    users = {
        name.partition(".")[0]
        for name, stmt in sql.all_statements().items()
        if "coalesce((SELECT max(seq) FROM messages WHERE space_no = spaces.rowid), 0)" in stmt
    }
    assert {"auth", "export", "messages", "usage"} <= users, users
    for path in sql.HERE.glob("*.sql"):
        text = path.read_text(encoding="utf-8")
        assert path.stem == sql.SHARED or "-- fragment: last_seq" not in text, path.name
