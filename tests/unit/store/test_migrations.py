"""`alembic upgrade head` on an empty database yields exactly the metadata of
``broker.store.tables`` (spec §Habits), with the triggers of ``broker.store.dialect``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from broker import Store, errors
from broker.store.dialect import FTS_TABLE, search_ddl, triggers_ddl
from broker.store.migrate import HEAD, config, upgrade
from broker.store.tables import metadata
from broker.vocab import APPEND_ONLY


@pytest.fixture
def migrated(tmp_path: Path) -> Store:
    """A fresh file migrated with ``alembic upgrade head`` (not with create_all)."""
    s = Store(f"sqlite:///{tmp_path / 'migrated.db'}", migrate=False)
    assert s.schema_version() is None
    upgrade(s.engine)
    return s


def _is_empty_string_default_quirk(diff: Any) -> bool:
    # alembic's SQLite comparison strips quotes with `'(.+)'`, which cannot match
    # the empty string literal `''`: server_default="" then always "differs".
    if isinstance(diff, list):  # column modifications come grouped
        return all(_is_empty_string_default_quirk(d) for d in diff)
    if not (isinstance(diff, tuple) and diff[0] == "modify_default"):
        return False
    texts = [_default_text(d) for d in (diff[5], diff[6])]
    return texts == ["", ""]


def _default_text(default: Any) -> str | None:
    if default is None:
        return None
    arg = getattr(default, "arg", default)
    return str(getattr(arg, "text", arg)).strip("()'\"")


def test_migration_upgrade_head_equals_the_metadata(migrated: Store) -> None:
    with migrated.engine.connect() as conn:
        ctx = MigrationContext.configure(
            conn,
            opts={
                "compare_type": True,
                "compare_server_default": True,
                # The search index (S36) is an FTS5 virtual table and its shadow
                # tables: not SQLAlchemy metadata; the next test compares it.
                "include_name": lambda name, kind, _: (
                    not (kind == "table" and (name or "").startswith(FTS_TABLE))
                ),
            },
        )
        diffs = [
            d for d in compare_metadata(ctx, metadata) if not _is_empty_string_default_quirk(d)
        ]
    assert diffs == []


def _schema_facts(conn: sa.Connection) -> dict[str, Any]:
    """What alembic does not compare: partial-index predicates, CHECK constraints."""
    facts: dict[str, Any] = {}
    for name, sql in conn.exec_driver_sql(
        "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
    ):
        facts[f"index {name}"] = " ".join(sql.split())
    for name, sql in conn.exec_driver_sql(
        "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name != 'alembic_version'"
    ):
        checks = sorted(
            " ".join(c.split()) for c in re.findall(r"CHECK \((.*?)\)(?:,|\s*\)$)", sql, re.S)
        )
        facts[f"checks {name}"] = checks
        fks = conn.exec_driver_sql(f"PRAGMA foreign_key_list({name})").fetchall()
        facts[f"fks {name}"] = sorted((r[2], r[3], r[4]) for r in fks)
        cols = conn.exec_driver_sql(f"PRAGMA table_info({name})").fetchall()
        facts[f"columns {name}"] = [(r[1], r[2], r[3], r[5]) for r in cols]
    return facts


def test_migration_matches_create_all_in_indexes_checks_and_keys(
    migrated: Store, tmp_path: Path
) -> None:
    reference = sa.create_engine(f"sqlite:///{tmp_path / 'reference.db'}")
    metadata.create_all(reference)
    with reference.begin() as conn:  # the search index (S36) is not metadata
        for ddl in search_ddl("sqlite"):
            conn.exec_driver_sql(ddl)
    with reference.connect() as ref, migrated.engine.connect() as mig:
        want, got = _schema_facts(ref), _schema_facts(mig)
    reference.dispose()
    assert set(got) == set(want)
    for key in sorted(want):
        assert got[key] == want[key], key


def test_migration_head_constant_equals_the_script_directory_head() -> None:
    script = ScriptDirectory.from_config(config())
    assert script.get_heads() == [HEAD]
    assert script.get_current_head() == HEAD


# The spec, written out here rather than computed by the code under test: the
# log, the journals and the transcript refuse UPDATE and DELETE (S23, S34), and
# the inbox's waiting counter follows its deliveries.
SPEC_APPEND_ONLY = {"messages", "claim_journal", "participant_events", "transcript"}
SPEC_TRIGGERS = {f"{t}_no_{op}" for t in SPEC_APPEND_ONLY for op in ("update", "delete")} | {
    "deliveries_waiting_insert",
    "deliveries_waiting_update",
    # purges: the record of a purge is kept, and only archived spaces are purged
    "purges_no_update",
    "purges_no_delete",
    "purging_no_update",
    "purging_archived_only",
    # sender_usage, space_usage: each sender's share and the space's size follow the log
    "messages_sender_usage",
    "spaces_sender_usage",
    # participants.waiting: folded in batches, refolded when a space goes (revision 0015)
    "spaces_waiting",
    # the search index (S36) follows the log: inserts, and a purge's deletes
    "messages_fts_insert",
    "messages_fts_delete",
    # ... and its mark goes to the log's last row when a space goes (revision 0025)
    "spaces_search",
    # S43: a REPLACE from any connection (recursive_triggers off) is refused
    *(f"{t}_no_replace" for t in (*SPEC_APPEND_ONLY, "purges")),
}


def test_migration_creates_every_trigger(migrated: Store) -> None:
    with migrated.read() as t:
        got = {r[0] for r in t.all("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
    assert got == SPEC_TRIGGERS
    # ... and the code's own lists say the same (a new database from create_all).
    assert set(APPEND_ONLY) == SPEC_APPEND_ONLY
    by_code = {
        re.match(r"CREATE TRIGGER IF NOT EXISTS (\w+)", ddl).group(1)  # type: ignore[union-attr]
        for ddl in triggers_ddl("sqlite") + search_ddl("sqlite")
        if ddl.startswith("CREATE TRIGGER")
    }
    assert by_code == SPEC_TRIGGERS


def test_migration_records_head_and_a_second_open_does_not_migrate_again(
    migrated: Store,
) -> None:
    assert migrated.schema_version() == HEAD
    with migrated.read() as t:
        before = t.all("SELECT type, name, sql FROM sqlite_master ORDER BY name")
    again = Store(migrated.url)
    assert again.schema_version() == HEAD
    with again.read() as t:
        assert t.all("SELECT type, name, sql FROM sqlite_master ORDER BY name") == before
        assert [tuple(r) for r in t.all("SELECT version_num FROM alembic_version")] == [(HEAD,)]
    again.close()


def test_migration_downgrade_to_base_and_upgrade_again(migrated: Store) -> None:
    from alembic import command

    cfg = config()
    with migrated.engine.connect() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "base")
    with migrated.read() as t:
        left = {
            r[0] for r in t.all("SELECT name FROM sqlite_master WHERE type IN ('table', 'trigger')")
        }
    assert left <= {"alembic_version"}
    upgrade(migrated.engine)
    assert migrated.schema_version() == HEAD


def test_migration_unknown_revision_in_the_file_is_a_store_error(migrated: Store) -> None:
    with migrated.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = 'ffff'")
    with pytest.raises(errors.StoreError):
        Store(migrated.url)


def test_an_upgrade_names_each_revision_to_a_watcher_with_its_title_and_time(
    tmp_path: Path,
) -> None:
    """``upgrade(on_step=...)`` is told of every revision as it is applied, in
    order: its number, the first line of its docstring and its seconds (what
    ``broker db upgrade`` prints on a terminal)."""
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'b.db'}")
    seen: list[tuple[str, str, float]] = []
    try:
        upgrade(engine, on_step=lambda rev, title, s: seen.append((rev, title, s)))
    finally:
        engine.dispose()
    script = ScriptDirectory.from_config(config())
    want = [r.revision for r in reversed(list(script.walk_revisions()))]
    assert [rev for rev, _, _ in seen] == want and want[-1] == HEAD
    titles = dict((rev, title) for rev, title, _ in seen)
    assert titles[HEAD] == script.get_revision(HEAD).doc.splitlines()[0]
    assert titles["0022"] == "deliveries name their recipient by a number: the participant's rowid"
    assert all(s >= 0 for _, _, s in seen)
