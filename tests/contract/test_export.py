"""The JSONL exporter (spec §Export layout) and the Mailbox Protocol exporter: every
documented file and line schema, export -> import -> export byte-identical
(fixed spaces and hypothesis-generated ones), ``--follow`` against a live
writer process, and what the mailbox files say when parsed back."""

from __future__ import annotations

import json
import multiprocessing as mp
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pgtest
import pytest
import spacegen
import sqlrows
import trusted
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings

from broker import Agent, Operator, Store, errors
from broker.frontends.cli import main
from broker.interchange.export import (
    LOG,
    LOG_SUBSETS,
    SPECS,
    Spec,
    export_mailbox,
    export_space,
    layout_files,
    slug_of,
    space_parts,
    subject_of,
)
from broker.interchange.importer import check, import_dir, parse_mail
from broker.spaces import spaces
from broker.store.filenames import safe_name
from broker.store.sql import stmt
from broker.store.tables import metadata

ROOT = Path(__file__).resolve().parents[2]
FORK = mp.get_context("fork")
SPEC_OF = {s.file: s for s in SPECS}
MAIL_NAME = re.compile(r"^(\d{2,})_([a-z0-9-]+)_([0-9a-f]{6})\.txt$")


def tree(root: Path) -> dict[str, bytes]:
    """Every file below ``root`` by relative path, with its bytes."""
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def spec_for(rel: str) -> Spec:
    """The spec of a file of the layout, by its path inside the space folder."""
    if rel in LOG_SUBSETS:
        return LOG
    parts = rel.split("/")
    if parts[0] == "mailboxes" and len(parts) == 3:
        return SPEC_OF[f"mailboxes/<address>/{parts[2]}"]
    if parts[:2] == ["board", "claims"] and len(parts) == 3:
        return SPEC_OF["board/claims/<key>.json"]
    return SPEC_OF[rel]


def assert_line_schema(spec: Spec, obj: dict[str, Any]) -> None:
    assert list(obj) == list(spec.names), f"{spec.file}: keys {list(obj)}"
    check(spec, obj)  # types, nullability, choices, timestamps


@pytest.fixture
def rich(tmp_path: Path) -> tuple[Store, spacegen.Built]:
    store = spacegen.fresh_store(tmp_path / "a")
    return store, spacegen.rich_space(store)


def space_dir(root: Path, store: Store, space: str) -> Path:
    kind = spaces.get(store, space).kind
    return root.joinpath(*space_parts(kind, space))


# --- layout and line schemas ----------------------------------------------------------
def test_export_writes_every_documented_file_with_its_line_schema(
    rich: tuple[Store, spacegen.Built], tmp_path: Path
) -> None:
    store, b = rich
    summary = export_space(store, b.space, tmp_path / "out", now=spacegen.EXPORT_NOW)
    folder = tmp_path / "out" / "runs" / b.space / "messages"
    assert summary.dir == str(folder)
    for rel in layout_files():
        if "<address>" in rel:
            for name in ("lynx", "otter", "heron"):
                assert (folder / rel.replace("<address>", name)).is_file(), rel
        elif rel.endswith("/"):
            assert (folder / rel).is_dir(), rel
        else:
            assert (folder / rel).is_file(), rel
    assert (folder / "log.jsonl.lock").read_bytes() == b""
    checked = 0
    for path in sorted(folder.rglob("*")):
        rel = str(path.relative_to(folder))
        if not path.is_file() or rel == "log.jsonl.lock":
            continue
        spec = spec_for(rel)
        if path.suffix == ".json":
            assert_line_schema(spec, json.loads(path.read_text(encoding="utf-8")))
        else:
            for obj in jsonl(path):
                assert_line_schema(spec, obj)
                checked += 1
    assert checked > 40
    assert not [p for p in folder.rglob("*.tmp")], "no temp file is left behind"


def test_export_log_is_every_message_and_receipt_in_seq_order_with_outcomes(
    rich: tuple[Store, spacegen.Built], tmp_path: Path
) -> None:
    store, b = rich
    export_space(store, b.space, tmp_path / "out", now=spacegen.EXPORT_NOW)
    folder = tmp_path / "out" / "runs" / b.space / "messages"
    log = jsonl(folder / "log.jsonl")
    db = Operator(store).log(b.space)
    assert [e["id"] for e in log] == [e.id for e in db]
    assert [e["seq"] for e in log] == list(range(1, len(db) + 1))
    by_id = {e["id"]: e for e in log}
    assert by_id[b.messages["direct"]]["outcome"] == "delivered"
    assert by_id[b.messages["partial"]]["outcome"] == "partial"
    assert by_id[b.messages["partial"]]["not_reached"] == [
        {"address": "ghost", "reason": "no_live_participant"}
    ]
    assert [e["outcome"] for e in log if e["body"] == "nobody hears this"] == ["reached_nobody"]
    assert by_id[b.messages["post"]]["outcome"] == "logged"
    assert by_id[b.messages["to_operator"]]["reached"] == ["operator"]
    assert [e["outcome"] for e in log if e["kind"] == "seen"] == ["receipt"]
    # the board and broadcast files repeat log lines, filtered
    posts = jsonl(folder / "board" / "posts.jsonl")
    assert [p["id"] for p in posts] == [e["id"] for e in log if e["kind"] == "post"]
    directives = jsonl(folder / "board" / "directives.jsonl")
    assert [d["kind"] for d in directives] == ["directive", "directive", "retract"]
    assert directives[2]["ref"] == b.messages["directive2"]
    bcast = jsonl(folder / "mailboxes" / "broadcast.jsonl")
    assert [m["id"] for m in bcast] == [b.messages["broadcast"]]
    assert bcast[0]["bcast_no"] == 1


def test_export_board_claims_journal_keys_and_one_file_per_live_claim(
    rich: tuple[Store, spacegen.Built], tmp_path: Path
) -> None:
    store, b = rich
    summary = export_space(store, b.space, tmp_path / "out", now=spacegen.EXPORT_NOW)
    folder = tmp_path / "out" / "runs" / b.space / "messages"
    assert sorted(p.name for p in (folder / "board" / "claims").iterdir()) == ["src%2Fa.py.json"]
    assert summary.live_claims == 1
    live = json.loads((folder / "board" / "claims" / "src%2Fa.py.json").read_text())
    assert live["key"] == "src/a.py" and live["holder"] == "lynx" and live["token"] == 1
    journal = jsonl(folder / "board" / "claims.jsonl")
    assert [(j["key"], j["event"]) for j in journal if j["key"].startswith("path ")] == [
        ("path docs/**", "claimed"),
        ("path src/*.py", "claimed"),
        ("path *.md", "claimed"),
        ("path *.md", "released"),
        ("path *.md", "claimed"),
    ]
    assert [(j["key"], j["event"]) for j in journal if not j["key"].startswith("path ")] == [
        ("src/a.py", "claimed"),
        ("src/b.py", "claimed"),
        ("src/b.py", "released"),
        ("src/c.py", "claimed"),
        ("src/c.py", "expired"),
        ("src/d.py", "claimed"),
    ]
    keys = {k["key"]: k for k in jsonl(folder / "board" / "keys.jsonl")}
    assert keys["src/b.py"]["holder"] is None and keys["src/b.py"]["token"] == 1
    assert keys["src/d.py"]["holder"] == "heron"  # lapsed, not journaled yet: kept, not live


def test_S37_export_has_every_path_reservation_live_or_ended_by_fence(
    rich: tuple[Store, spacegen.Built], tmp_path: Path
) -> None:
    store, b = rich
    export_space(store, b.space, tmp_path / "out", now=spacegen.EXPORT_NOW)
    folder = tmp_path / "out" / "runs" / b.space / "messages"
    lines = jsonl(folder / "board" / "reservations.jsonl")
    assert [(r["token"], r["pattern"], r["mode"], r["holder"]) for r in lines] == [
        (1, "docs/**", "exclusive", "lynx"),
        (2, "src/*.py", "exclusive", "lynx"),
        (3, "*.md", "shared", "otter"),
        (4, "*.md", "shared", "otter"),
    ]
    assert [r["ended_at_utc"] is None for r in lines] == [True, True, False, True]
    assert lines[0]["reason"] == "rewrite the docs" and lines[2]["reason"] is None


def test_export_mailboxes_hold_inboxes_cursors_turns_transcripts(
    rich: tuple[Store, spacegen.Built], tmp_path: Path
) -> None:
    store, b = rich
    export_space(store, b.space, tmp_path / "out", now=spacegen.EXPORT_NOW)
    mailboxes = tmp_path / "out" / "runs" / b.space / "messages" / "mailboxes"
    otter = jsonl(mailboxes / "otter" / "inbox.jsonl")
    assert [d["state"] for d in otter][:2] == ["done", "processing"]
    assert all(d["recipient"] == "otter" for d in otter)
    keys = [(d["created_at_utc"], d["id"]) for d in otter]
    assert keys == sorted(keys), "FIFO order"
    lynx = jsonl(mailboxes / "lynx" / "inbox.jsonl")
    assert lynx[-1]["state"] == "quarantine" and lynx[-1]["quarantine_reason"]
    cursors = {c["address"]: c["bcast_seen"] for c in jsonl(mailboxes / "cursors.jsonl")}
    assert cursors["otter"] == 1
    assert [t["state"] for t in jsonl(mailboxes / "otter" / "turns.jsonl")] == ["seen", "open"]
    assert len(jsonl(mailboxes / "otter" / "transcript.jsonl")) == 4
    assert len(jsonl(mailboxes / "otter" / "history.jsonl")) == 2
    assert jsonl(mailboxes / "heron" / "inbox.jsonl") == []


def test_export_covers_every_column_of_every_table() -> None:
    """A column added to the schema must be exported, or import would lose it."""
    # Secrets (their hashes too) are never exported: an imported space gets a
    # new join key from its operator (S27), participants new tokens.
    not_exported = {("participants", "token_hash"), ("spaces", "join_key_hash")}
    derived = {("participants", "waiting")}  # exported, recomputed by triggers on import
    # whether the ready index holds a delivery yet (revision 0019): the store's own
    not_exported.add(("deliveries", "queued"))
    # retention: not rows of a space; sender_usage, space_usage: derived from the log by
    # triggers (S30, S11); operator_key: the store's, not a space's; folds: where their
    # batch stands; message_aliases: an index of the log's ids, written again by the importer
    store_level = {
        *("purges", "purging", "sender_usage", "space_usage", "operator_key", "folds"),
        "message_aliases",
    }
    # a delivery's message (and so its space and time): its rowid's (revision 0021); the
    # importer finds the message by this id and writes no column of it
    locates = {("deliveries", "message_id")}
    # a delivery's recipient is the store's number of its participant (revision 0022):
    # exported as that participant's id, from which the importer takes its number
    locates.add(("deliveries", "recipient_id"))
    not_exported.add(("deliveries", "recipient_no"))
    # the log's space is the store's number of it (revision 0023): the space exported
    not_exported.add(("messages", "space_no"))
    for table in metadata.tables.values():
        if table.name in store_level:
            continue
        imported = {
            f.column for s in SPECS if s.table == table.name for f in s.fields if f.imported
        } - {c for t, c in locates if t == table.name}
        want = (
            {c.name for c in table.columns}
            - {"space_id"}
            - {c for t, c in not_exported | derived if t == table.name}
        )
        if table.name == "spaces":
            want |= {"id"}
        assert imported == want, f"{table.name}: layout misses {want - imported}"


def test_docs_export_md_documents_every_file_and_field() -> None:
    doc = (ROOT / "docs" / "export.md").read_text(encoding="utf-8")
    sections = re.split(r"^### ", doc, flags=re.M)
    for spec in SPECS:
        section = next((s for s in sections if s.startswith(f"`{spec.file}`")), None)
        assert section is not None, f"docs/export.md has no section for {spec.file}"
        for f in spec.fields:
            assert f"`{f.name}`" in section, f"{spec.file}: field {f.name} is not documented"
    for rel in layout_files():
        assert rel in doc, rel


# --- round trips ----------------------------------------------------------------------
WAITING_AS_READ = (
    "waiting + (SELECT count(*) FROM deliveries w WHERE w.rowid > "
    "coalesce((SELECT upto FROM folds WHERE name = 'waiting'), 0) "
    "AND w.recipient_no = participants.rowid AND w.state IN ('ready', 'processing'))"
)


def _rows(store: Store, space: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the space in every table, secrets' hashes aside (S27)."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    with store.read() as t:
        for table in metadata.tables.values():
            if table.name in ("operator_key", "folds"):
                continue  # the store's, not the space's
            if table.name == "space_usage":
                continue  # folded in batches on SQLite: read as the space's log_bytes, below
            if table.name == "sender_usage":
                # Folded in batches on SQLite (revision 0015): compared as its readers see it.
                usage = t.all(stmt("usage.top_senders"), {"space_id": space, "n": 1_000_000})
                out[table.name] = sorted((tuple(r) for r in usage), key=repr)
                continue
            # queued: whether the ready index holds the row yet (revision 0019), the store's own.
            skip = ("token_hash", "join_key_hash", "queued")
            cols = [c.name for c in table.columns if c.name not in skip]
            if table.name == "deliveries":
                # The recipient's number is the store's (revision 0022): by its id.
                cols[cols.index("recipient_no")] = "recipient_id"
            if table.name == "messages":
                # The space's number is the store's (revision 0023): by its id.
                cols[cols.index("space_no")] = "space_id"
            if table.name == "participants" and store.dialect == "sqlite":
                # Counted in batches on SQLite (revision 0015): as its readers see it.
                cols[cols.index("waiting")] = WAITING_AS_READ
            key = "id" if table.name == "spaces" else "space_id"
            # The space's counters are derived from the log (revision 0017), a delivery's
            # space is its message's (revision 0021): as read.
            source = {
                "spaces": sqlrows.spaces_as_read(store),
                "deliveries": sqlrows.delivery_rows(),
                "messages": sqlrows.log_rows(),
            }.get(table.name, table.name)
            out[table.name] = sorted(
                [
                    tuple(r)
                    for r in t.all(
                        f"SELECT {', '.join(cols)} FROM {source} WHERE {key} = ?", (space,)
                    )
                ],
                key=repr,
            )
    return out


def round_trip(store: Store, space: str, tmp: Path) -> None:
    first, second = tmp / "first", tmp / "second"
    export_space(store, space, first, now=spacegen.EXPORT_NOW)
    other = spacegen.fresh_store(tmp / "b")
    summary = import_dir(other, first)
    assert summary.spaces == [space]
    export_space(other, space, second, now=spacegen.EXPORT_NOW)
    assert tree(first) == tree(second)
    assert _rows(store, space) == _rows(other, space)
    other.close()


# Columns no round trip can vary: secrets are never exported (S27); the rest
# are written by the store itself and recomputed on import.
NOT_VARIED = {
    ("participants", "token_hash"),
    ("spaces", "join_key_hash"),
    ("deliveries", "queued"),  # whether the ready index holds the row yet (revision 0019)
}


def _unvaried(store: Store, space: str) -> list[str]:
    """The optional columns of the exported tables that hold no value other
    than NULL or their default anywhere in ``space``."""
    missing = []
    with store.read() as t:
        for spec_table in sorted({s.table for s in SPECS}):
            table = metadata.tables[spec_table]
            key = "id" if table.name == "spaces" else "space_id"
            for c in table.columns:
                if (table.name, c.name) in NOT_VARIED:
                    continue
                default = c.server_default.arg if c.server_default is not None else None
                if not c.nullable and default is None:
                    continue  # required: every row holds a value
                col = c.name
                if (table.name, col) == ("participants", "waiting") and store.dialect == "sqlite":
                    col = WAITING_AS_READ  # counted in batches (revision 0015)
                source = {
                    "spaces": sqlrows.spaces_as_read(store),
                    # the row's own columns, with its message's space (revision 0021)
                    "deliveries": "(SELECT d.*, (SELECT sp.id FROM spaces sp WHERE sp.rowid = m.space_no) AS space_id FROM deliveries d "
                    "JOIN messages m ON m.rowid = d.rowid >> 20) AS deliveries",
                    "messages": sqlrows.log_rows(),
                }.get(table.name, table.name)
                values = t.all(
                    f"SELECT DISTINCT {col} FROM {source} WHERE {key} = ? AND {col} IS NOT NULL",
                    (space,),
                )
                text = getattr(default, "text", default)
                if not [v for (v,) in values if str(v) != str(text).strip("'")]:
                    missing.append(f"{table.name}.{c.name}")
    return missing


def test_a_round_trip_keeps_every_optional_column_of_every_exported_table(
    store: Store, backend: str, clocked_url: str, tmp_path: Path
) -> None:
    """Export, import into another store of the same backend, compare every
    row: with every optional column set somewhere, a column the exporter or
    the importer drops (``reply_to`` was) cannot pass as NULL = NULL."""
    built = spacegen.every_column_space(store)
    assert _unvaried(store, built.space) == []
    plain = spacegen.rich_space(store).space  # the check sees a column left unset
    assert {"messages.reply_to", "participants.is_lead"} <= set(_unvaried(store, plain))
    export_space(store, built.space, tmp_path / "out", now=spacegen.EXPORT_NOW)
    other = spacegen.fresh_store(tmp_path / "b") if backend == "sqlite" else Store(clocked_url)
    try:
        assert import_dir(other, tmp_path / "out").spaces == [built.space]
        assert _rows(store, built.space) == _rows(other, built.space)
    finally:
        other.close()


@pytest.mark.parametrize("kind", ["agentiflow", "workflow", "session", "run"])
def test_export_import_export_is_byte_identical(kind: str, tmp_path: Path) -> None:
    store = spacegen.fresh_store(tmp_path / "a")
    built = spacegen.rich_space(store, kind)
    round_trip(store, built.space, tmp_path)
    folder = tmp_path / "first" / Path(*space_parts(kind, built.space))
    assert (folder / "space.json").is_file()
    assert {
        "agentiflow": "agentiflows",
        "workflow": "runs",
        "session": "sessions",
        "run": "runs",
    }[kind] == folder.relative_to(tmp_path / "first").parts[0]


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=spacegen.plans)
def test_round_trip_random_spaces_export_import_export_identical(
    plan: list[tuple[Any, ...]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    tmp = tmp_path_factory.mktemp("rt")
    store = spacegen.fresh_store(tmp / "a")
    space = spacegen.apply_plan(store, plan)
    round_trip(store, space, tmp)
    store.close()


def test_reexport_replaces_files_atomically_and_drops_claims_no_longer_live(
    rich: tuple[Store, spacegen.Built], tmp_path: Path
) -> None:
    store, b = rich
    out = tmp_path / "out"
    export_space(store, b.space, out, now=spacegen.EXPORT_NOW)
    claims = out / "runs" / b.space / "messages" / "board" / "claims"
    assert [p.name for p in claims.iterdir()] == ["src%2Fa.py.json"]
    sqlrows.end_claim(
        store, b.space, "src/a.py", event="released", at="2026-01-03T00:00:00.000000Z"
    )
    export_space(store, b.space, out, now=spacegen.EXPORT_NOW)
    assert list(claims.iterdir()) == []
    assert not [p for p in out.rglob("*.tmp")]


# --- follow ---------------------------------------------------------------------------
def _writer(url: str, space: str, n: int) -> None:
    store = Store(url)
    me, _ = trusted.join(store, space, "flow/writer", agent="writer")
    for i in range(n):
        if i % 10 == 0:
            me.send("broadcast", f"broadcast {i}")
        elif i % 7 == 0:
            me.post(f"post {i}", addressed_to=["reader"])
        else:
            me.send("reader", f"message {i}")
    me.leave()


def _last_per_key(lines: list[dict[str, Any]], key: str) -> dict[Any, dict[str, Any]]:
    return {obj[key]: obj for obj in lines}


def _wait_for(path: Path, proc: subprocess.Popen[str], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def _follow(home: Path, space: str, root: Path, url: str) -> subprocess.Popen[str]:
    env = pgtest.process_env(home, url)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "broker",
            "export",
            space,
            "--root",
            str(root),
            "--follow",
            "--json",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_follow_appends_while_a_writer_process_sends_and_ends_equal_to_the_database(
    store: Store, space: str, join: Callable[..., Agent], tmp_path: Path
) -> None:
    reader = join("flow/reader", agent="reader")
    reader.send("operator", "before the exporter started")
    root = tmp_path / "follow"
    proc = _follow(tmp_path / "home", space, root, store.url)
    folder = root / "runs" / space / "messages"
    _wait_for(folder / "log.jsonl.lock", proc)
    writer = FORK.Process(target=_writer, args=(store.url, space, 120))
    writer.start()
    rid = reader.identity.participant_id
    while writer.is_alive():  # meanwhile the reader's queue moves
        ready = sqlrows.deliveries(store, rid, state="ready")
        if len(ready) > 3:  # a few stay ready for the moves below (a fast server keeps up)
            sqlrows.set_delivery(store, ready[0], "done")
        time.sleep(0.01)
    writer.join()
    assert writer.exitcode == 0
    # Once the exporter has written every delivery, move a few more: these
    # changes must show up as appended lines.
    inbox = folder / "mailboxes" / "reader" / "inbox.jsonl"
    total = len(sqlrows.deliveries(store, rid))
    deadline = time.monotonic() + 60
    while len({d["id"] for d in jsonl(inbox)}) < total:
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.02)
    ready = sqlrows.deliveries(store, rid, state="ready")
    assert ready
    for did in ready[:3]:
        sqlrows.set_delivery(store, did, "done")
    sqlrows.claim(store, space, "k", "reader", at=store.now_ts(), expires=sqlrows.FAR_FUTURE)
    sqlrows.turn_with_transcript(store, space, rid, ready[0], seen=True)
    sqlrows.set_cursor(store, rid, 3)
    spaces.stop(store, space)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    summary = json.loads(out)
    assert summary["appended_lines"] > 0

    snap = tmp_path / "snap"
    export_space(store, space, snap)
    sfolder = snap / "runs" / space / "messages"
    # The log and the append-only files are byte for byte the snapshot.
    for rel in (
        "log.jsonl",
        "board/posts.jsonl",
        "board/directives.jsonl",
        "mailboxes/broadcast.jsonl",
        "participants.jsonl",
        "board/claims.jsonl",
    ):
        assert (folder / rel).read_bytes() == (sfolder / rel).read_bytes(), rel
    log = jsonl(folder / "log.jsonl")
    assert [e["id"] for e in log] == [e.id for e in Operator(store).log(space)]
    assert len(log) == 121
    # Files of changing rows: the last line per id is the snapshot's line.
    for rel, key in (
        ("directory.jsonl", "id"),
        ("mailboxes/cursors.jsonl", "participant_id"),
        ("board/keys.jsonl", "key"),
        ("mailboxes/reader/inbox.jsonl", "id"),
        ("mailboxes/reader/turns.jsonl", "id"),
        ("mailboxes/writer/inbox.jsonl", "id"),
    ):
        assert _last_per_key(jsonl(folder / rel), key) == _last_per_key(
            jsonl(sfolder / rel), key
        ), rel
    for rel in ("mailboxes/reader/transcript.jsonl", "mailboxes/reader/history.jsonl"):
        assert (folder / rel).read_bytes() == (sfolder / rel).read_bytes(), rel
    assert tree(folder / "board" / "claims") == tree(sfolder / "board" / "claims")
    assert (folder / "space.json").read_bytes() == (sfolder / "space.json").read_bytes()
    assert len(jsonl(folder / "mailboxes" / "reader" / "inbox.jsonl")) > len(
        jsonl(sfolder / "mailboxes" / "reader" / "inbox.jsonl")
    ), "state changes were appended, not rewritten"


def test_follow_ends_cleanly_on_sigterm(store: Store, space: str, tmp_path: Path) -> None:
    root = tmp_path / "follow"
    proc = _follow(tmp_path / "home", space, root, store.url)
    _wait_for(root / "runs" / space / "messages" / "log.jsonl.lock", proc)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert json.loads(out)["space"] == space


# --- CLI ------------------------------------------------------------------------------
def test_cli_export_prints_a_summary_and_refuses_follow_for_the_mailbox_layout(
    cli: Callable[..., Any], tmp_path: Path
) -> None:
    space = cli("space", "create", "--kind", "run", "--json").json()["id"]
    r = cli("export", space, "--root", str(tmp_path / "out"), "--json")
    assert r.code == 0, r.err
    assert r.json()["dir"] == str(tmp_path / "out" / "runs" / space / "messages")
    r = cli("export", space, "--layout", "mailbox", "--follow", "--root", str(tmp_path / "m"))
    assert r.code == 2 and "--follow" in r.err
    r = cli("export", "nosuchspace", "--root", str(tmp_path / "out"))
    assert r.code == 3 and r.err.startswith("broker: ")


def test_export_and_import_have_help_and_json() -> None:
    # Help needs no store: in this process, once (not once per backend).
    for cmd, option in (("export", "--root"), ("import", "--skip-bad")):
        r = CliRunner().invoke(main, [cmd, "--help"], prog_name="broker")
        assert r.exit_code == 0 and "--json" in r.stdout and option in r.stdout


# --- mailbox layout -------------------------------------------------------------------
def test_mailbox_export_writes_the_directory_and_parseable_mail(
    rich: tuple[Store, spacegen.Built], tmp_path: Path
) -> None:
    store, b = rich
    export_mailbox(store, b.space, tmp_path / "m")
    mail = tmp_path / "m" / "mail"
    assert sorted(p.name for p in (mail / "dir").iterdir()) == ["lynx.txt", "otter.txt"]
    assert (mail / "dir" / "lynx.txt").read_text() == (
        "id: lynx\nrole: lynx role\narchetype: specialist\ntask: task of lynx\n"
    )
    for who in ("lynx", "otter", "heron"):
        for sub in ("inbox", "drafts", "sent"):
            assert (mail / who / sub).is_dir()
        assert list((mail / who / "drafts").iterdir()) == []
    with store.read() as t:
        bodies = {
            r[0]: r[1]
            for r in t.all(
                f"SELECT id, body FROM messages WHERE space_no = {sqlrows.SPACE_NO}",
                (b.space,),
            )
        }
        states = t.all(
            "SELECT p.address, d.state, COUNT(*) FROM deliveries d JOIN participants p "
            "ON p.rowid = d.recipient_no WHERE p.space_id = ? GROUP BY 1, 2",
            (b.space,),
        )
    folders = {"ready": "inbox", "processing": "inbox", "done": "sent", "quarantine": "quarantine"}
    expected: dict[tuple[str, str], int] = {}
    for address, state, n in states:
        key = (address, folders[state])
        expected[key] = expected.get(key, 0) + n
    # the broadcast: unread by lynx's readers except otter (cursor 1 = read), heron left
    expected[("otter", "sent")] = expected.get(("otter", "sent"), 0) + 1
    expected[("heron", "inbox")] = expected.get(("heron", "inbox"), 0) + 1
    expected[("operator", "inbox")] = 1
    seen: dict[tuple[str, str], int] = {}
    for path in sorted(mail.rglob("*.txt")):
        if path.parent.name == "dir":
            continue
        owner, folder = path.parent.parent.name, path.parent.name
        m = MAIL_NAME.match(path.name)
        assert m, path.name
        seen[(owner, folder)] = seen.get((owner, folder), 0) + 1
        assert int(m.group(1)) == seen[(owner, folder)], "NN counts up in FIFO order"
        headers, body, _ = parse_mail(path.read_text(encoding="utf-8"))
        assert headers["To"] == owner
        assert body in bodies.values()
        assert headers["Subject"].removeprefix("URGENT: ") == subject_of(body)
        assert m.group(2) == slug_of(headers["Subject"])
        assert list(headers) == ["To", "From", "Subject", "Date"]
    assert seen == expected
    urgent = [p for p in (mail / "lynx" / "inbox").iterdir() if "stop-and-report" in p.name]
    assert parse_mail(urgent[0].read_text())[0]["Subject"] == "URGENT: stop and report"


def test_mailbox_export_refuses_a_root_whose_mail_folder_is_not_empty(
    rich: tuple[Store, spacegen.Built], tmp_path: Path
) -> None:
    store, b = rich
    (tmp_path / "m" / "mail" / "dir").mkdir(parents=True)
    (tmp_path / "m" / "mail" / "dir" / "x.txt").write_text("id: x\n")
    with pytest.raises(errors.Conflict):
        export_mailbox(store, b.space, tmp_path / "m")


def test_subject_is_the_first_line_cut_at_72_characters() -> None:
    assert subject_of("\n\n  first   line \nsecond") == "first line"
    assert subject_of("x" * 100) == "x" * 72
    assert subject_of("") == "(no subject)"
    assert subject_of("go", urgent=True) == "URGENT: go"
    assert subject_of("tab\there\x00nul") == "tab here nul"


def test_mailbox_names_use_safe_components_for_hostile_addresses(tmp_path: Path) -> None:
    store = spacegen.fresh_store(tmp_path / "a")
    space = Operator(store).create_space("run").id
    pid = sqlrows.participant(store, space, "../../etc")
    sqlrows.message(
        store, space, "operator", "../../x\nbody", deliver_to=[pid], reached=["../../etc"]
    )
    export_mailbox(store, space, tmp_path / "m")
    owner = tmp_path / "m" / "mail" / safe_name("../../etc")
    assert owner.name == "%2E.%2F..%2Fetc"
    (path,) = (owner / "inbox").iterdir()
    m = MAIL_NAME.match(path.name)
    assert m and m.group(1) == "01" and m.group(2) == "x"
    assert parse_mail(path.read_text())[0]["To"] == "../../etc"


# --- the bench, bounded ---------------------------------------------------------------
def test_export_memory_bench_runs_at_a_small_size(tmp_path: Path) -> None:
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "export_memory.py"),
            "--messages",
            "3000",
            "--out",
            str(tmp_path / "r.json"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["messages"] == 3000
    assert result["exported_messages"] == 3000
    assert result["peak_rss_mb"] > 0 and result["export_seconds"] > 0
