"""SQL inspection: the documented views, created by migration 0002, answer the
questions people ask (who has unread mail, what reached nobody and why, who held
a key and when); docs/schema.md is generated from the schema and up to date;
the README's SQL examples run."""

from __future__ import annotations

import importlib.util
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import spacegen
import sqlrows

from broker import Store
from broker.store.migrate import config
from broker.store.views import OUTCOMES, VIEWS, select_sql

ROOT = Path(__file__).resolve().parents[3]


def _q(store: Store, sql: str, *params: Any) -> list[dict[str, Any]]:
    with store.read() as t:
        return t.rows(sql, params)


@pytest.fixture
def rich(tmp_path: Path) -> tuple[Store, spacegen.Built]:
    store = spacegen.fresh_store(tmp_path / "a")
    return store, spacegen.rich_space(store)


def test_migration_0002_creates_every_documented_view_and_downgrade_drops_them(
    tmp_path: Path,
) -> None:
    from alembic import command

    store = Store(f"sqlite:///{tmp_path / 'x.db'}")
    names = {v.name for v in VIEWS}
    with store.read() as t:
        assert {r[0] for r in t.all("SELECT name FROM sqlite_master WHERE type = 'view'")} == names
    cfg = config()
    with store.engine.connect() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0001")
    with store.read() as t:
        assert t.all("SELECT name FROM sqlite_master WHERE type = 'view'") == []
    with store.engine.connect() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
    with store.read() as t:
        assert len(t.all("SELECT name FROM sqlite_master WHERE type = 'view'")) == len(VIEWS)


def test_views_document_exactly_the_columns_they_return(
    rich: tuple[Store, spacegen.Built],
) -> None:
    store, _ = rich
    for view in VIEWS:
        with store.read() as t:
            cur = t.execute(f"SELECT * FROM {view.name} LIMIT 0")
            assert [d[0] for d in cur.description] == [c for c, _ in view.columns], view.name
        assert view.columns[0][0] == "space_id", "filter on space_id first"
        assert "token_hash" not in select_sql(view) and "lease_token" not in select_sql(view)


def test_v_log_names_each_outcome(rich: tuple[Store, spacegen.Built]) -> None:
    store, b = rich
    rows = {r["id"]: r for r in _q(store, "SELECT * FROM v_log WHERE space_id = ?", b.space)}
    assert rows[b.messages["direct"]]["outcome"] == "delivered"
    assert rows[b.messages["partial"]]["outcome"] == "partial"
    assert rows[b.messages["post"]]["outcome"] == "logged"
    assert {r["outcome"] for r in rows.values()} == set(OUTCOMES)
    nobody = [r for r in rows.values() if r["outcome"] == "reached_nobody"]
    assert [r["body"] for r in nobody] == ["nobody hears this"]


def test_v_not_reached_lists_each_address_with_its_reason(
    rich: tuple[Store, spacegen.Built],
) -> None:
    store, b = rich
    rows = _q(
        store,
        "SELECT seq, sender, address, reason, reached_n FROM v_not_reached WHERE space_id = ? "
        "ORDER BY seq",
        b.space,
    )
    assert [(r["sender"], r["address"], r["reason"], r["reached_n"]) for r in rows] == [
        ("lynx", "ghost", "no_live_participant", 1),
        ("lynx", "ghost", "no_live_participant", 0),
    ]


def test_v_inbox_shows_state_and_whether_a_lease_is_live(
    rich: tuple[Store, spacegen.Built],
) -> None:
    store, b = rich
    rows = _q(
        store,
        "SELECT recipient, state, lease_owner, lease_live, attempts FROM v_inbox "
        "WHERE space_id = ? AND state = 'processing' ORDER BY recipient",
        b.space,
    )
    assert rows == [
        {
            "recipient": "lynx",
            "state": "processing",
            "lease_owner": "lynx",
            "lease_live": 0,
            "attempts": 1,
        },
        {
            "recipient": "otter",
            "state": "processing",
            "lease_owner": "otter",
            "lease_live": 1,
            "attempts": 1,
        },
    ]


def test_v_inboxes_answers_who_has_unread_mail(rich: tuple[Store, spacegen.Built]) -> None:
    store, b = rich
    rows = {
        r["address"]: r for r in _q(store, "SELECT * FROM v_inboxes WHERE space_id = ?", b.space)
    }
    with store.read() as t:
        for address, row in rows.items():
            counts = dict(
                t.all(
                    "SELECT d.state, COUNT(*) FROM deliveries d JOIN participants p "
                    "ON p.rowid = d.recipient_no WHERE p.address = ? AND p.space_id = ? "
                    "GROUP BY d.state",
                    (address, b.space),
                )
            )
            for state in ("ready", "processing", "done", "quarantine"):
                assert row[state] == counts.get(state, 0), (address, state)
    # lynx's own broadcast is not unread for lynx; otter's cursor is past it; heron's is not
    assert rows["lynx"]["unread_broadcasts"] == 0
    assert rows["otter"]["unread_broadcasts"] == 0
    assert rows["heron"]["unread_broadcasts"] == 1
    assert rows["heron"]["unread"] == rows["heron"]["ready"] + 1
    assert rows["otter"]["lease_owner"] == "otter"
    assert rows["otter"]["lease_expires_at"] == sqlrows.FAR_FUTURE


def test_v_participants_has_status_liveness_and_why_it_left_but_no_token(
    rich: tuple[Store, spacegen.Built],
) -> None:
    store, b = rich
    rows = {
        r["address"]: r
        for r in _q(store, "SELECT * FROM v_participants WHERE space_id = ?", b.space)
    }
    assert rows["lynx"]["status"] == "running" and rows["lynx"]["live"] == 1
    assert rows["heron"]["status"] == "left" and rows["heron"]["live"] == 0
    assert rows["heron"]["left_reason"] == "leave"
    assert rows["lynx"]["left_reason"] is None
    assert rows["lynx"]["role"] == "lynx role"
    assert not any("token" in k for k in rows["lynx"])


def test_v_live_claims_hides_released_expired_and_lapsed_claims(
    rich: tuple[Store, spacegen.Built],
) -> None:
    store, b = rich
    rows = _q(store, "SELECT key, holder, token FROM v_live_claims WHERE space_id = ?", b.space)
    assert rows == [{"key": "src/a.py", "holder": "lynx", "token": 1}]


def test_v_claim_journal_and_v_claim_holds_answer_who_held_a_key_and_when(
    rich: tuple[Store, spacegen.Built],
) -> None:
    store, b = rich
    sqlrows.claim(
        store,
        b.space,
        "src/b.py",
        "lynx",
        at="2026-01-01T00:01:00.000000Z",
        expires=sqlrows.FAR_FUTURE,
    )
    journal = _q(
        store,
        "SELECT event, owner, token FROM v_claim_journal WHERE space_id = ? AND key = 'src/b.py' "
        "ORDER BY at_utc, id",
        b.space,
    )
    assert [(r["event"], r["owner"], r["token"]) for r in journal] == [
        ("claimed", "otter", 1),
        ("released", "otter", 1),
        ("claimed", "lynx", 2),
    ]
    holds = _q(
        store,
        "SELECT key, owner, token, held_from, held_until, ended_by FROM v_claim_holds "
        "WHERE space_id = ? AND key NOT LIKE 'path %' ORDER BY key, held_from",
        b.space,
    )
    assert [(h["key"], h["owner"], h["ended_by"]) for h in holds] == [
        ("src/a.py", "lynx", None),
        ("src/b.py", "otter", "released"),
        ("src/b.py", "lynx", None),
        ("src/c.py", "heron", "expired"),
        ("src/d.py", "heron", None),
    ]
    assert holds[1]["held_from"] == "2026-01-01T00:00:01.000000Z"
    assert holds[1]["held_until"] == "2026-01-01T00:00:02.000000Z"
    # Path reservations (S37) are journaled under 'path <pattern>', one hold per fence.
    paths = _q(
        store,
        "SELECT key, owner, token, ended_by FROM v_claim_holds "
        "WHERE space_id = ? AND key LIKE 'path %' ORDER BY token",
        b.space,
    )
    assert [(h["key"], h["owner"], h["token"], h["ended_by"]) for h in paths] == [
        ("path docs/**", "lynx", 1, None),
        ("path src/*.py", "lynx", 2, None),
        ("path *.md", "otter", 3, "released"),
        ("path *.md", "otter", 4, None),
    ]


def test_v_quarantine_keeps_the_evidence(rich: tuple[Store, spacegen.Built]) -> None:
    store, b = rich
    rows = _q(store, "SELECT * FROM v_quarantine WHERE space_id = ?", b.space)
    assert len(rows) == 1
    row = rows[0]
    assert (row["recipient"], row["attempts"], row["last_error"], row["quarantine_reason"]) == (
        "lynx",
        5,
        "boom",
        "max_deliveries reached",
    )
    assert row["body"] == "more work for lynx" and row["sender"] == "otter"


def test_v_directives_shows_which_are_in_force(rich: tuple[Store, spacegen.Built]) -> None:
    store, b = rich
    rows = _q(
        store,
        "SELECT id, body, in_force, retracted_by FROM v_directives WHERE space_id = ? ORDER BY seq",
        b.space,
    )
    assert [(r["body"], r["in_force"]) for r in rows] == [
        ("always cite sources", 1),
        ("old rule", 0),
    ]
    assert rows[1]["retracted_by"] == b.messages["retract"]


def test_views_work_from_a_plain_sqlite3_connection(rich: tuple[Store, spacegen.Built]) -> None:
    store, b = rich
    conn = sqlite3.connect(store.path)
    try:
        counts = {
            view.name: len(
                conn.execute(f"SELECT * FROM {view.name} WHERE space_id = ?", (b.space,)).fetchall()
            )
            for view in VIEWS
        }
    finally:
        conn.close()
    assert set(counts) == {v.name for v in VIEWS}
    assert counts["v_log"] > 0 and counts["v_participants"] > 0  # the rich space shows up


def test_each_view_in_a_new_store_is_the_one_documented(tmp_path: Path) -> None:
    """A store's views are made by its migrations; the documented SELECT
    (``broker.store.views``, from which docs/schema.md is written) is what they
    run: a revision that makes a view again (0015: an inbox's batched depth)
    and the documentation cannot part."""
    store = spacegen.fresh_store(tmp_path / "v")
    conn = sqlite3.connect(store.path)
    try:
        made = dict(conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'view'"))
    finally:
        conn.close()

    def words(sql: str) -> str:
        sql = re.sub(r"^CREATE VIEW \w+ AS ", "", sql.strip())
        return re.sub(r"\s*([(),])\s*", r"\1", " ".join(sql.split()))

    for view in VIEWS:
        assert words(made[view.name]) == words(select_sql(view)), view.name


# --- documentation --------------------------------------------------------------------
def _gen_schema_doc() -> Any:
    spec = importlib.util.spec_from_file_location(
        "gen_schema_doc", ROOT / "scripts" / "gen_schema_doc.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_schema_md_is_generated_from_the_schema_and_up_to_date() -> None:
    """Regenerate in memory: run `python scripts/gen_schema_doc.py` if this fails."""
    text = _gen_schema_doc().render()
    assert (ROOT / "docs" / "schema.md").read_text(encoding="utf-8") == text
    from broker.store.tables import metadata

    for table in metadata.tables.values():
        assert f"### `{table.name}`" in text
        for col in table.columns:
            assert f"| `{col.name}` |" in text
    for view in VIEWS:
        assert f"### `{view.name}`" in text


def _readme_queries() -> list[tuple[str, list[str] | None]]:
    """(query, the columns of the output the README shows for it), in order; a
    block's sample output belongs to its first query (None for the others)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Inspecting with SQL", 1)[1]
    found: list[tuple[str, list[str] | None]] = []
    for block, shown in re.findall(r"```sh\n([^`]*)```\n```\n([^\n]*)\n", section):
        for i, m in enumerate(re.finditer(r'sqlite3 [^"]*"(.*?)"\s*$', block, re.S | re.M)):
            found.append((m.group(1).replace('\\"', '"'), None if i else shown.split()))
    return found


def test_readme_sql_examples_run_against_a_real_space(
    rich: tuple[Store, spacegen.Built],
) -> None:
    """Every example query runs, finds rows in a space that has a bit of
    everything, and returns the columns its sample output shows."""
    store, b = rich
    queries = _readme_queries()
    assert len(queries) >= 5
    conn = sqlite3.connect(store.path)
    try:
        for sql, shown in queries:
            sql = sql.replace("$SPACE", b.space).replace("'$S'", f"'{b.space}'")
            sql = sql.replace("'task-7'", "'src/b.py'")  # the README's key; claimed, released here
            cur = conn.execute(sql)
            rows = cur.fetchall()
            assert rows, sql
            if shown is not None:
                assert [d[0] for d in cur.description] == shown, sql
    finally:
        conn.close()
