"""What a new user meets first: `space create` without --kind, a mistyped store
URL, the log without its receipts, the message ids of quarantine, and a board
key to wait for."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from broker import Store, errors
from broker.frontends.cli import main

Cli = Callable[..., Any]


# --- space create ---------------------------------------------------------------------------
def test_S1_space_create_without_kind_makes_a_run_and_its_help_says_when_to_pick_another(
    cli: Cli,
) -> None:
    made = cli("space", "create", "--json")
    assert made.code == 0, made.err
    assert made.json()["kind"] == "run" and made.json()["id"].startswith("run_")
    shown = cli("space", "show", made.json()["id"], "--json").json()
    assert shown["kind"] == "run"
    # (not through ``cli``: it reads every `space create` output as a join key)
    shown_help = CliRunner().invoke(main, ["space", "create", "--help"])
    assert shown_help.exit_code == 0
    help_text = " ".join(shown_help.output.split())
    for hint in (
        "run (a standalone run; pick it when unsure)",
        "agentiflow (a lead and its workers",
        "workflow (a run of steps",
        "session (a chat session",
        "[default: run]",
    ):
        assert hint in help_text, hint
    assert cli("space", "create", "--kind", "session", "--json").json()["kind"] == "session"


# --- a mistyped URL -------------------------------------------------------------------------
STORE_FORMS = ("sqlite:///PATH", "postgresql+psycopg://USER@HOST:PORT/DB")
SERVER_FORMS = ("http(s)://HOST:PORT", "unix:///PATH/broker.sock")


@pytest.mark.parametrize(
    "url", ["foo://x", "mysql://h/db", "sqlite:/relative.db", "postgres-ish://u:pw@h/x", "x.db"]
)
def test_S33_a_bad_store_url_names_both_store_forms_and_the_servers_in_the_cli(
    cli: Cli, cli_process: Cli, tmp_path: Path, url: str
) -> None:
    # Refused before any store is opened: in this process, but one real process.
    for argv in (["space", "list"], ["space", "create"], ["--url", url, "dir", "list", "x"]):
        run = cli_process if argv == ["space", "create"] and url == "x.db" else cli
        res = run(*argv, env={"BROKER_URL": url})
        assert res.code == 2, (argv, res.err)
        line = res.err.strip()
        assert "\n" not in line and line.startswith("broker: invalid_input: bad database URL ")
        for form in STORE_FORMS + SERVER_FORMS:
            assert form in line, (form, line)
        assert "pw" not in line  # a password is never echoed
    assert not (tmp_path / "home").exists()  # nothing made


def test_S33_the_librarys_bad_url_names_both_store_forms_and_no_server(tmp_path: Path) -> None:
    for url in ("foo://x", "postgresx://u:secret@h/x"):
        with pytest.raises(errors.InvalidInput) as refused:
            Store(url)
        for form in STORE_FORMS:
            assert form in refused.value.message
        assert "http" not in refused.value.message and "secret" not in refused.value.message
        assert refused.value.fields == {"field": "url"}


# --- the operator's views of the queue and the log --------------------------------------------
def _swarm(store: Store) -> tuple[str, Any, Any]:
    import trusted

    from broker import Operator

    sid = Operator(store).create_space("workflow").id
    lynx, _ = trusted.join(store, sid, "wf/lynx", pid=None)
    otter, _ = trusted.join(store, sid, "wf/otter", pid=None)
    return sid, lynx, otter


def test_S15_queue_quarantined_shows_the_message_id_and_json_keeps_the_delivery_id(
    cli: Cli, store: Store
) -> None:
    from broker import Operator

    sid, lynx, otter = _swarm(store)
    sent = lynx.send(["otter"], "poison pill")
    lease = otter.claim()
    otter.quarantine(lease.lease_token, sent.id, "cannot parse")
    table = cli("queue", "quarantined", sid)
    assert table.code == 0, table.err
    head, row = table.out.splitlines()
    assert head.split()[0] == "MESSAGE" and row.split()[:3] == [sent.id, "otter", "lynx"]
    assert cli("message", "list", sid).out.split()[1] == sent.id  # the id the log shows
    (item,) = cli("queue", "quarantined", sid, "--json").lines()
    delivery = lease.deliveries[0].delivery_id
    assert (item["id"], item["delivery_id"]) == (sent.id, delivery) and delivery not in table.out
    requeued = cli("queue", "requeue", sid, row.split()[0])  # the id shown requeues it
    assert requeued.code == 0 and requeued.out.strip() == "requeued 1"
    assert Operator(store).quarantined(sid) == []


def test_S18_message_list_folds_the_seen_receipts_out_unless_asked(cli: Cli, store: Store) -> None:
    sid, lynx, otter = _swarm(store)
    first = lynx.send(["otter"], "hello")
    turn = otter.next_turn()
    receipt = otter.seen(turn.id).receipt_id
    second = otter.send(["lynx"], "hi back")

    def ids(*argv: str) -> list[str]:
        res = cli("message", "list", sid, *argv)
        assert res.code == 0, res.err
        if "--json" in argv:
            return [line["id"] for line in res.lines()]
        return [line.split()[1] for line in res.out.splitlines()]

    assert ids() == ids("--json") == [first.id, second.id]
    assert ids("--receipts") == ids("--receipts", "--json") == [first.id, receipt, second.id]
    assert ids("--kind", "seen") == ids("--kind", "seen", "--json") == [receipt]
    assert ids("--kind", "direct,seen") == [first.id, receipt, second.id]
    assert ids("--tail", "1", "--receipts") == [second.id]
    assert ids("--after", first.id) == [second.id]
    help_text = " ".join(CliRunner().invoke(main, ["message", "list", "--help"]).output.split())
    assert "folded out, from --json too" in help_text and "--receipts" in help_text


# --- board claim --wait -----------------------------------------------------------------------
def test_S22_board_claim_wait_parks_on_the_keys_doorbell_until_the_holder_releases(
    cli: Cli, store: Store, tmp_path: Path
) -> None:
    import json
    import os
    import subprocess
    import sys
    import time

    import trusted

    from broker import Operator
    from broker.delivery import doorbells

    sid = Operator(store).create_space("workflow").id
    lynx, lynx_joined = trusted.join(store, sid, "wf/lynx", pid=None)
    _, otter = trusted.join(store, sid, "wf/otter", pid=None)
    held = lynx.claim_key("build/lock", ttl=600)
    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
    env.update(BROKER_HOME=str(tmp_path / "home"), BROKER_SPACE=sid, BROKER_AS=otter.address)
    env["BROKER_TOKEN"] = otter.token
    argv = [sys.executable, "-m", "broker", "board", "claim", "build/lock", "--wait", "120"]
    proc = subprocess.Popen([*argv, "--json"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        # parked: its process's marker is in the key's doorbell folder
        folder = Path(doorbells.root_path(store)) / doorbells.board_key(sid, "build/lock")
        deadline = time.monotonic() + 60
        while not (folder.is_dir() and any(folder.iterdir())):
            assert proc.poll() is None, "board claim --wait returned while the key was held"
            assert time.monotonic() < deadline, "board claim --wait never parked"
            time.sleep(0.05)
        lynx.release_key("build/lock", held.fence)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    grant = json.loads(out)
    assert (grant["holder"], grant["fence"]) == ("otter", held.fence + 1)

    lynx_env = {"BROKER_SPACE": sid, "BROKER_AS": "lynx", "BROKER_TOKEN": lynx_joined.token}
    in_vain = cli("board", "claim", "build/lock", "--wait", "0.2", env=lynx_env)
    assert in_vain.code == 5 and "held by otter until" in in_vain.err
    bad = cli("board", "claim", "build/lock", "--wait", "-1", env=lynx_env)
    assert bad.code == 2 and "--wait" in bad.err
