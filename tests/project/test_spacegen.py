"""The shared template behind ``spacegen.fresh_store`` is the schema of today's code.

The export, import and view tests run on copies of one migrated template (kept
between runs). A template keyed on too few files once outlived a schema change
(DELETE triggers removed from dialect.py, still in the template): those tests
then ran on an old schema. Here the template is compared with a store migrated
from scratch, object by object.
"""

from __future__ import annotations

from pathlib import Path

import spacegen

from broker import Store


def _schema(store: Store) -> list[tuple[str, str, str, str | None]]:
    with store.read() as t:
        rows = t.all(
            "SELECT type, name, tbl_name, sql FROM sqlite_master "
            "WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name"
        )
        version = t.one("SELECT version_num FROM alembic_version")[0]
    return [(r["type"], r["name"], r["tbl_name"], r["sql"]) for r in rows] + [
        ("alembic", version, "", None)
    ]


def test_fresh_store_template_has_exactly_the_schema_of_a_new_migration(tmp_path: Path) -> None:
    copied = spacegen.fresh_store(tmp_path / "copy")
    migrated = Store(f"sqlite:///{tmp_path / 'migrated' / 'broker.db'}")
    try:
        got, want = _schema(copied), _schema(migrated)
    finally:
        copied.close()
        migrated.close()
    assert {r[0] for r in want} >= {"table", "index", "trigger", "view"}
    assert got == want


def test_fresh_store_template_key_covers_every_file_that_shapes_the_schema() -> None:
    names = {(p.parent.name, p.name) for p in spacegen.schema_sources()}
    for must in [
        ("tables", "__init__.py"),
        ("store", "dialect.py"),
        ("store", "views.py"),
        ("store", "sqlite.py"),
        ("versions", "0001_initial_schema.py"),
        ("migrations", "env.py"),
    ]:
        assert must in names, must
    assert any(p.suffix == ".sql" for p in spacegen.schema_sources())
