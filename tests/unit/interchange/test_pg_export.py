"""Export/import across backends (issue 15): the JSONL space layout is the
bridge between a SQLite store and a PostgreSQL one, byte for byte.

A populated space exported from one backend, imported into the other and
exported again gives the same tree, file for file and byte for byte; and
back again. PostgreSQL keeps the order the exporter reads "in the order
written" in its ``rowid`` identity columns (revision 0010), filled in file
order by the import.
"""

from __future__ import annotations

from pathlib import Path

import pgtest
import spacegen

from broker import Store
from broker.interchange.export import export_space
from broker.interchange.importer import import_dir


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def _export(store: Store, space: str, root: Path) -> dict[str, bytes]:
    export_space(store, space, root, now=spacegen.EXPORT_NOW)
    return _tree(root)


def test_pg_S23_a_space_from_sqlite_through_postgresql_and_back_is_byte_identical(
    tmp_path: Path,
) -> None:
    lite = spacegen.fresh_store(tmp_path / "a")
    built = spacegen.rich_space(lite)
    first = _export(lite, built.space, tmp_path / "one")
    assert len(first) > 10 and any(name.endswith("inbox.jsonl") for name in first)
    with pgtest.database() as url:
        pg = Store(url)
        try:
            import_dir(pg, tmp_path / "one")
            assert _export(pg, built.space, tmp_path / "two") == first
        finally:
            pg.close()
    back = spacegen.fresh_store(tmp_path / "b")
    import_dir(back, tmp_path / "two")
    assert _export(back, built.space, tmp_path / "three") == first
    lite.close()
    back.close()


def test_pg_S23_a_space_written_on_postgresql_moves_to_sqlite_byte_identical(
    tmp_path: Path,
) -> None:
    with pgtest.database() as url:
        pg = Store(url, clock=spacegen.StepClock())
        try:
            built = spacegen.rich_space(pg)
            first = _export(pg, built.space, tmp_path / "one")
        finally:
            pg.close()
    lite = spacegen.fresh_store(tmp_path / "a")
    import_dir(lite, tmp_path / "one")
    assert _export(lite, built.space, tmp_path / "two") == first
    with pgtest.database() as url:
        again = Store(url)
        try:
            import_dir(again, tmp_path / "two")
            assert _export(again, built.space, tmp_path / "three") == first
        finally:
            again.close()
    lite.close()


def test_pg_cli_migrate_store_copies_every_space_to_postgresql_identically(
    tmp_path: Path,
) -> None:
    """``broker migrate-store --into URL``: every space of a SQLite store into an
    empty PostgreSQL database, checked byte-identical; a second run refuses
    (the target has those spaces), one line, and writes nothing."""
    import json
    import subprocess
    import sys

    lite = spacegen.fresh_store(tmp_path / "home")
    built = spacegen.rich_space(lite)
    other = spacegen.rich_space(lite, kind="session")
    lite.close()
    env = pgtest.process_env(tmp_path / "home", lite.url)
    with pgtest.database() as url:

        def run() -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "broker", "migrate-store", "--into", url, "--json"],
                capture_output=True,
                text=True,
                env=env,
                timeout=300,
            )

        first = run()
        assert first.returncode == 0, first.stderr
        copied = json.loads(first.stdout)
        assert copied["identical"] is True and copied["files"] > 10
        assert sorted(copied["spaces"]) == sorted([built.space, other.space])
        again = run()
        assert again.returncode != 0
        assert len(again.stderr.strip().splitlines()) == 1 and "Traceback" not in again.stderr
        pg = Store(url)
        try:
            with pg.read() as t:
                assert t.one("SELECT count(*) FROM spaces")[0] == 2
        finally:
            pg.close()
