"""The source's operator surface under its own names: `message participants
<run-id>`, `agentiflow send <id> <text> [--now]`, the `tool_grant` a run's
messaging tools are recorded under, and the claim journal's `at` in the export
(with the export's format version, and exports of the earlier format still
importing). Each test quotes the source's sentence it holds the broker to."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import spacegen
import trusted
from cli_space import count_rows

from broker import Operator, Store
from broker.interchange.export import export_space, space_parts
from broker.interchange.importer import import_dir

Cli = Callable[..., Any]


def _log(store: Store, space: str) -> list[Any]:
    return Operator(store).log(space)


# --- "rupu message participants <run-id>" ---------------------------------------------------
def test_S25_message_participants_prints_what_dir_list_prints(cli: Cli, store: Store) -> None:
    """Source: `rupu message participants <run-id>`, where <run-id> is given "by full
    id, compact form or a unique prefix"."""
    sid = Operator(store).create_space("agentiflow").id
    trusted.join(store, sid, "flow/heron", lead=True, agent="heron", pid=None)
    trusted.join(store, sid, "flow/heron>lynx#1", agent="worker", role="recon", pid=None)
    gone, _ = trusted.join(store, sid, "flow/heron>otter#1", agent="worker", pid=None)
    gone.leave()
    compact = sid.removeprefix("af_")
    for run_id, extra in ((sid, ()), (sid, ("--json",)), (compact, ("--all",)), (sid[:12], ())):
        by_source_name = cli("message", "participants", run_id, *extra)
        assert by_source_name.code == 0, by_source_name.err
        assert by_source_name.out == cli("dir", "list", run_id, *extra).out
    assert [p["address"] for p in cli("message", "participants", sid, "--json").lines()] == [
        "lead",
        "lynx#1",
    ]
    listed = cli("message", "participants", compact, "--all").out
    assert "otter#1" in listed and "left" in listed
    missing = cli("message", "participants", "af_nosuchspace")
    assert missing.code == 3 and "space_not_found" in missing.err


# --- "rupu agentiflow send <id> <text> [--now]" ---------------------------------------------
def test_S9_agentiflow_send_is_message_send_to_the_lead_and_now_is_urgent(
    cli: Cli, store: Store
) -> None:
    """Source: "rupu agentiflow send <id> <text> [--now] is shorthand for rupu message
    send <id> --to lead [--urgent]"."""
    sid = Operator(store).create_space("agentiflow").id
    lead, _ = trusted.join(store, sid, "flow/heron", lead=True, agent="heron", pid=None)
    trusted.join(store, sid, "flow/heron>lynx#1", agent="worker", pid=None)

    short = cli("agentiflow", "send", sid, "stop", "and", "report", "--now", "--json")
    long = cli("message", "send", sid, "--to", "lead", "--urgent", "stop and report", "--json")
    assert short.code == 0 and long.code == 0, (short.err, long.err)
    plain = cli("agentiflow", "send", sid[:10], "carry", "on")
    assert plain.code == 0, plain.err
    assert plain.out.strip().endswith("delivered to lead")

    rows = _log(store, sid)
    assert [r.id for r in rows] == [short.json()["id"], long.json()["id"], rows[2].id]
    seen = [(r.kind, r.sender, r.to, r.body, r.urgent, r.via, r.reached) for r in rows]
    assert seen[0] == seen[1] == (
        "operator", "operator", ["lead"], "stop and report", True, "cli", ["lead"],
    )  # fmt: skip
    assert seen[2] == ("operator", "operator", ["lead"], "carry on", False, "cli", ["lead"])
    # --now "delivers it ahead of everything else", marked URGENT: (S17)
    turn = lead.next_turn()
    assert [i.id for i in turn.items][-1] == rows[2].id
    assert turn.items[0].id == rows[0].id and "URGENT:" in turn.items[0].content
    assert "URGENT:" not in turn.items[-1].content


def test_S8_agentiflow_send_without_a_lead_is_an_error_and_another_kind_writes_nothing(
    cli: Cli, store: Store
) -> None:
    """Source: `lead` reaches "an agentiflow's lead", else `no_lead`; a message that
    reached nobody is an error to its sender."""
    op = Operator(store)
    flow = op.create_space("agentiflow").id
    nobody = cli("agentiflow", "send", flow, "hello")
    assert nobody.code == 1
    assert "no_lead" in nobody.out + nobody.err
    assert [r.not_reached[0].reason for r in _log(store, flow)] == ["no_lead"]

    run = op.create_space("workflow").id
    trusted.join(store, run, "wf/lead", lead=True, pid=None)
    before = count_rows(store)
    refused = cli("agentiflow", "send", run, "hello", "--now")
    assert refused.code == 2
    assert refused.err.strip() == (
        f"broker: invalid_input: {run} is a workflow, not an agentiflow: it has no lead to "
        f"send to (use `broker message send {run} --to ADDRESS`)"
    )
    assert count_rows(store) == before
    assert cli("agentiflow", "send", flow).code == 2  # no text: a usage error


# --- "recorded in its tool_grant as ambient:messaging_default" -------------------------------
def test_S24_the_tool_grant_is_recorded_as_the_source_names_it(
    cli: Cli, store: Store, tmp_path: Path
) -> None:
    """Source: the default tools are "recorded in its tool_grant as
    ambient:messaging_default"; `messaging: { tools: [...] }` "grants only the tools
    named, recorded in each step's tool_grant as ambient:workflow_messaging"; a run
    whose messaging is off has no messaging tool (receive-only)."""
    op = Operator(store)
    sid = op.create_space("workflow").id
    _, parent = trusted.join(store, sid, "wf/scan", agent="scanner", pid=None)
    trusted.join(store, sid, "wf/build", tools=["board.post", "msg.send"], pid=None)
    trusted.join(store, sid, "wf/quiet", messaging=False, pid=None)
    trusted.join(store, sid, "wf/quiet>child#1", parent="quiet", pid=None)  # off is inherited
    trusted.join(store, sid, "wf/boss", tools=["*"], pid=None)
    expected = {
        "scan": "ambient:messaging_default",
        "build": "ambient:workflow_messaging",
        "quiet": None,
        "quiet>child#1": None,
        "boss": "ambient:workflow_messaging",
    }
    assert {p.address: p.tool_grant for p in op.participants(sid)} == expected
    assert op.participant(sid, "build").tool_grant == "ambient:workflow_messaging"
    listed = cli("dir", "list", sid, "--json").lines()
    assert {p["address"]: p["tool_grant"] for p in listed} == expected

    def shown(address: str) -> str:
        out = cli("dir", "show", sid, address).out
        return next(ln for ln in out.splitlines() if ln.startswith("tool grant"))

    assert shown("build") == "tool grant  ambient:workflow_messaging: board.post, msg.send"
    assert shown("scan") == (
        "tool grant  ambient:messaging_default: board.claim, board.post, board.read, "
        "board.release, msg.send"
    )
    assert shown("quiet>child#1") == "tool grant  none: messaging off (receive-only)"

    export_space(store, sid, tmp_path / "out")
    folder = tmp_path / "out" / Path(*space_parts("workflow", sid))
    lines = [json.loads(x) for x in (folder / "directory.jsonl").read_text().splitlines()]
    assert {x["address"]: x["tool_grant"] for x in lines} == expected
    # the grant is exactly what messaging and tools say: an import needs nothing else
    assert [list(x)[list(x).index("tools") + 1] for x in lines] == ["tool_grant"] * 5
    assert parent.address == "scan"


# --- the claim journal: "claimed (key, owner, at, lease_expires_at, and the claim's token)" ---
def _exported(store: Store, space: str, root: Path) -> Path:
    export_space(store, space, root, now=spacegen.EXPORT_NOW)
    return root / Path(*space_parts("workflow", space))


def _as_format_1(folder: Path) -> None:
    """Rewrite a space folder the way the first layout wrote it: format 1, the
    journal's time as `at_utc`, no `tool_grant` in the directory."""
    space = json.loads((folder / "space.json").read_text())
    space["format"] = 1
    (folder / "space.json").write_text(json.dumps(space, ensure_ascii=False, indent=2) + "\n")
    for name, rename in (("board/claims.jsonl", True), ("directory.jsonl", False)):
        out = []
        for raw in (folder / name).read_text().splitlines():
            line = json.loads(raw)
            if rename:
                line = {("at_utc" if k == "at" else k): v for k, v in line.items()}
            else:
                line.pop("tool_grant")
            out.append(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n")
        (folder / name).write_text("".join(out))


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_S23_the_export_writes_the_claim_journal_with_the_sources_at_and_format_2(
    tmp_path: Path,
) -> None:
    store = spacegen.fresh_store(tmp_path / "a")
    built = spacegen.rich_space(store, "workflow")
    folder = _exported(store, built.space, tmp_path / "first")
    assert json.loads((folder / "space.json").read_text())["format"] == 2
    assert list(json.loads((folder / "space.json").read_text()))[0] == "format"
    journal = [json.loads(x) for x in (folder / "board" / "claims.jsonl").read_text().splitlines()]
    assert journal
    for line in journal:
        # the source's claimed line: key, owner, at, lease_expires_at, and the token
        assert {"key", "owner", "at", "lease_expires_at", "token"} <= set(line)
        assert "at_utc" not in line
    claimed = next(j for j in journal if j["event"] == "claimed")
    with store.read() as t:
        at = t.one("SELECT at_utc FROM claim_journal WHERE id = :id", {"id": claimed["id"]})
    assert claimed["at"] == at["at_utc"]

    other = spacegen.fresh_store(tmp_path / "b")
    import_dir(other, tmp_path / "first")
    again = _exported(other, built.space, tmp_path / "second")
    assert _tree(folder) == _tree(again)


def test_S23_an_export_of_format_1_still_imports_and_exports_again_as_format_2(
    tmp_path: Path,
) -> None:
    store = spacegen.fresh_store(tmp_path / "a")
    built = spacegen.rich_space(store, "workflow")
    new = _exported(store, built.space, tmp_path / "new")
    shutil.copytree(tmp_path / "new", tmp_path / "old")
    old = tmp_path / "old" / new.relative_to(tmp_path / "new")
    _as_format_1(old)
    assert '"at_utc":' in (old / "board" / "claims.jsonl").read_text()

    other = spacegen.fresh_store(tmp_path / "b")
    summary = import_dir(other, tmp_path / "old")
    assert summary.journal == len((new / "board" / "claims.jsonl").read_text().splitlines()) > 0
    assert _tree(_exported(other, built.space, tmp_path / "again")) == _tree(new)


def test_S33_an_import_refuses_a_journal_line_of_the_other_format_and_an_unknown_format(
    tmp_path: Path,
) -> None:
    from broker.interchange.importer.report import ImportFailed

    store = spacegen.fresh_store(tmp_path / "a")
    built = spacegen.rich_space(store, "workflow")
    folder = _exported(store, built.space, tmp_path / "out")
    rel = str(folder.relative_to(tmp_path / "out"))
    space = json.loads((folder / "space.json").read_text())

    def refused(fmt: int) -> str:
        (folder / "space.json").write_text(json.dumps({**space, "format": fmt}))
        other = spacegen.fresh_store(tmp_path / f"b{fmt}")
        try:
            import_dir(other, tmp_path / "out")
        except ImportFailed as exc:
            assert Operator(other).spaces() == []  # all or nothing
            return exc.message
        raise AssertionError(f"format {fmt} imported")

    # format 1 reads `at_utc`: a line with `at` is not one of its lines
    assert f"{rel}/board/claims.jsonl:1: unknown field 'at'" in refused(1)
    assert f"{rel}/space.json:1: unknown format 3: this broker reads formats 1 and 2" in refused(3)
