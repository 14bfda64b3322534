"""Trust (S27-S29, S34): each attack of issue 10 on identity and authority,
tried through the real CLI (and the library where the attack is a library
call), refused with nothing written; and the allowed paths beside them.

The attacker holds what a confused or prompt-injected agent holds: its own
token and the space's join key (both in its environment), never the operator
key. Row counts (``cli_space.count_rows``) show that a refusal wrote nothing.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trusted
from cli_space import count_rows

from broker import Agent, Operator, Store, errors
from broker.store import keys
from broker.store.dialect import UNIQUE_KEYS

Cli = Callable[..., Any]
NO_KEY = {"BROKER_JOIN_KEY": ""}  # the cli fixture hands no join key to this call


def one_line(res: Any, code: int) -> str:
    """A refusal: the documented exit code and exactly one line on stderr."""
    assert res.code == code, (res.code, res.out, res.err)
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.err, res.err
    return str(lines[0])


def create(cli: Cli, kind: str = "agentiflow") -> tuple[str, str]:
    """`eval "$(broker space create ...)"`: the space id and its join key."""
    res = cli("space", "create", "--kind", kind)
    assert res.code == 0, res.err
    words = res.out.split()
    assert words[0] == "export" and len(res.out.splitlines()) == 1
    env = dict(w.split("=", 1) for w in words[1:])
    return env["BROKER_SPACE"], env["BROKER_JOIN_KEY"]


def join(cli: Cli, space: str, codename: str, *args: str, **env: str) -> dict[str, Any]:
    res = cli("join", space, codename, "--json", *args, env=env)
    assert res.code == 0, res.err
    data: dict[str, Any] = res.json()
    return data


def as_env(space: str, joined: dict[str, Any]) -> dict[str, str]:
    return {"BROKER_SPACE": space, "BROKER_AS": joined["address"], "BROKER_TOKEN": joined["token"]}


def row(store: Store, space: str, address: str) -> dict[str, Any]:
    with store.read() as t:
        found = t.row(
            "SELECT token_hash, messaging, tools, is_lead, parent, status, codename "
            "FROM participants WHERE space_id = ? AND address = ?",
            (space, address),
        )
    assert found is not None
    return found


# --- S27: joining is authenticated -------------------------------------------------------------
def test_S27_space_create_shows_the_join_key_once_and_stores_only_its_hash(
    cli: Cli, store: Store
) -> None:
    space, key = create(cli)
    data = cli("space", "create", "--kind", "run", "--json").json()
    assert set(data) >= {"id", "join_key"} and data["join_key"] != key
    with store.read() as t:
        stored = t.one("SELECT join_key_hash FROM spaces WHERE id = ?", (space,))[0]
    assert stored == keys.digest(key) and key not in stored
    shown = cli("space", "show", space, "--json").json()
    assert "join_key" not in shown and key not in json.dumps(shown)


def test_S27_a_join_without_the_key_or_with_a_wrong_one_is_refused(cli: Cli, store: Store) -> None:
    space, key = create(cli)
    before = count_rows(store)
    line = one_line(cli("join", space, "flow/heron>lynx#1", env=NO_KEY), 4)
    assert line.startswith("broker: auth_failed:") and "join key" in line
    line = one_line(cli("join", space, "flow/heron>lynx#1", "--join-key", key + "x"), 4)
    assert "auth_failed" in line and "not the join key" in line
    other, other_key = create(cli)
    line = one_line(cli("join", space, "flow/heron>lynx#1", "--join-key", other_key), 4)
    assert "auth_failed" in line  # another space's key opens only that space
    assert count_rows(store) == {**before, "spaces": before["spaces"] + 1}
    assert join(cli, space, "flow/heron>lynx#1", BROKER_JOIN_KEY=key)["address"] == "lynx#1"


def test_S27_a_live_address_cannot_be_taken_over(cli: Cli, store: Store) -> None:
    """issue 10: `broker join $S 'flow/heron>lynx@2'` took over live lynx's inbox."""
    space, key = create(cli, "workflow")
    lynx = join(cli, space, "flow/lynx", BROKER_JOIN_KEY=key)
    otter = join(cli, space, "flow/otter", BROKER_JOIN_KEY=key)
    assert cli("msg", "send", "--to", "lynx", "for lynx only", env=as_env(space, otter)).code == 0
    before, held = count_rows(store), row(store, space, "lynx")
    # S40: the join key admits new addresses only, live or not.
    line = one_line(cli("join", space, "flow/lynx@2", "--join-key", key), 4)
    assert line == (
        "broker: forbidden: lynx has joined this space before: continuing it needs its last "
        "token (--token) or the operator key; the join key admits new addresses only"
    )
    # A wrong token is no better than none.
    line = one_line(
        cli("join", space, "flow/lynx@2", "--join-key", key, "--token", otter["token"]), 4
    )
    assert "(the token given is not its last token)" in line
    assert count_rows(store) == before and row(store, space, "lynx") == held
    # lynx's own token still works, and its inbox is still its own.
    claim = cli("inbox", "claim", "--json", env=as_env(space, lynx))
    assert claim.code == 0 and claim.json()["deliveries"][0]["body"] == "for lynx only"


def test_S27_the_lead_cannot_be_taken_over(cli: Cli, store: Store) -> None:
    space, key = create(cli)
    lead = join(cli, space, "flow/heron", "--lead", BROKER_JOIN_KEY=key)
    before = count_rows(store)
    for codename in ("flow/heron@2", "flow/falcon"):
        line = one_line(cli("join", space, codename, "--lead", "--join-key", key), 4)
        assert "forbidden" in line and "lead has joined this space before" in line
    assert count_rows(store) == before
    assert cli("board", "post", "still the lead", env=as_env(space, lead)).code == 0


def test_S27_a_retry_with_the_holders_token_rejoins_and_keeps_the_inbox(
    cli: Cli, store: Store
) -> None:
    space, key = create(cli)
    lynx = join(cli, space, "flow/heron>lynx#1", BROKER_JOIN_KEY=key)
    lead = join(cli, space, "flow/heron", "--lead", BROKER_JOIN_KEY=key)
    assert cli("msg", "send", "--to", "lynx#1", "work", env=as_env(space, lead)).code == 0
    again = join(cli, space, "flow/heron>lynx#1@2", BROKER_JOIN_KEY=key, BROKER_TOKEN=lynx["token"])
    assert again["participant_id"] == lynx["participant_id"] and again["token"] != lynx["token"]
    stale = cli("inbox", "claim", env=as_env(space, lynx))
    assert one_line(stale, 4).startswith("broker: auth_failed:")
    got = cli("inbox", "claim", "--json", env=as_env(space, again)).json()
    assert [d["body"] for d in got["deliveries"]] == ["work"]
    lead2 = join(
        cli, space, "flow/heron@2", "--lead", "--token", lead["token"], BROKER_JOIN_KEY=key
    )
    assert lead2["address"] == "lead"


def test_S27_S40_an_address_whose_holder_left_is_joined_again_with_its_last_token(
    cli: Cli, store: Store
) -> None:
    space, key = create(cli)
    lynx = join(cli, space, "flow/heron>lynx#1", BROKER_JOIN_KEY=key)
    assert cli("leave", env=as_env(space, lynx)).code == 0
    before = count_rows(store)
    line = one_line(cli("join", space, "flow/heron>lynx#1@2", "--join-key", key), 4)
    assert "forbidden" in line and "needs its last token (--token)" in line
    assert count_rows(store) == before
    # Its last token alone continues it: a restart that holds only its identity needs no join key.
    again = join(cli, space, "flow/heron>lynx#1@2", BROKER_JOIN_KEY="", BROKER_TOKEN=lynx["token"])
    assert again["participant_id"] == lynx["participant_id"]


HOLDER = textwrap.dedent(
    """
    import os, sys, time
    from broker import Agent, Store
    url, space, key = sys.argv[1:4]
    me, joined = Agent.join(Store(url), space, "flow/heron>lynx#1", join_key=key)
    print(joined.token, flush=True)  # pid recorded: this process holds the address
    time.sleep(600)
    """
)


def test_S27_an_address_whose_process_was_killed_can_be_joined_again(
    cli: Cli, store: Store, db_url: str, tmp_path: Path
) -> None:
    space, key = create(cli)
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    proc = subprocess.Popen(
        [sys.executable, str(script), db_url, space, key], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        token = proc.stdout.readline().strip()
        assert token
        before = count_rows(store)
        operator_key = keys.presented(store)  # may continue it once it is gone (S40)
        with pytest.raises(errors.Conflict, match=f"its process {proc.pid} is alive"):
            Agent.join(store, space, "flow/heron>lynx#1@2", operator_key=operator_key)
        assert count_rows(store) == before
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        # The join key, never (S40), dead or alive.
        line = one_line(cli("join", space, "flow/heron>lynx#1@2", "--join-key", key), 4)
        assert "forbidden" in line and "has joined this space before" in line
        # Gone at once, though its heartbeat is seconds old (well inside live_seconds).
        _, again = Agent.join(store, space, "flow/heron>lynx#1@2", operator_key=operator_key)
        assert again.address == "lynx#1" and again.token != token
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def test_S27_a_space_without_a_join_key_is_joined_after_the_operator_rotates_one(
    cli: Cli, store: Store
) -> None:
    space, old = create(cli)
    with store.write() as t:  # a space made before join keys (schema 0005)
        t.execute("UPDATE spaces SET join_key_hash = NULL WHERE id = ?", (space,))
    line = one_line(cli("join", space, "flow/heron>lynx#1", "--join-key", old), 4)
    assert f"broker space join-key {space} --rotate" in line
    res = cli("space", "join-key", space, "--rotate")
    assert res.code == 0 and res.out.startswith(f"export BROKER_SPACE={space} BROKER_JOIN_KEY=")
    new = res.out.split("BROKER_JOIN_KEY=")[1].strip()
    assert join(cli, space, "flow/heron>lynx#1", BROKER_JOIN_KEY=new)["address"] == "lynx#1"
    rotated = cli("space", "join-key", space, "--rotate", "--json").json()
    assert rotated["space_id"] == space and rotated["join_key"] != new
    assert one_line(cli("join", space, "flow/heron>otter#1", "--join-key", new), 4)


# --- S28: grants bounded by whoever joins you ---------------------------------------------------
def test_S28_a_rejoin_cannot_widen_a_worker_to_authority(cli: Cli, store: Store) -> None:
    """issue 10: a worker re-joined with `--tool board.directive` and gained authority."""
    space, key = create(cli)
    worker = join(cli, space, "flow/heron>lynx#1", BROKER_JOIN_KEY=key)
    before, held = count_rows(store), row(store, space, "lynx#1")
    res = cli(
        "join", space, "flow/heron>lynx#1@2", "--tool", "board.directive", "--join-key", key,
        "--token", worker["token"],
    )  # fmt: skip
    line = one_line(res, 4)
    assert "forbidden" in line and "board.directive" in line and "never widens" in line
    assert count_rows(store) == before and row(store, space, "lynx#1") == held
    directive = cli("board", "directive", "--to", "lynx#1", "obey", env=as_env(space, worker))
    assert one_line(directive, 4).startswith("broker: tool_unavailable:")


def test_S28_a_receive_only_participant_cannot_drop_its_off(cli: Cli, store: Store) -> None:
    space, key = create(cli)
    lead = join(cli, space, "flow/heron", "--lead", BROKER_JOIN_KEY=key)
    quiet = join(cli, space, "flow/heron>quiet#1", "--messaging", "off", BROKER_JOIN_KEY=key)
    before = count_rows(store)
    res = cli("join", space, "flow/heron>quiet#1@2", "--join-key", key, "--token", quiet["token"])
    line = one_line(res, 4)
    assert "forbidden" in line and "a re-join never widens a grant" in line
    assert "quiet#1 held no tool before" in line
    assert count_rows(store) == before and not row(store, space, "quiet#1")["messaging"]
    # Narrower is fine: a re-join may keep off (and a lead may narrow itself).
    again = join(
        cli, space, "flow/heron>quiet#1@2", "--messaging", "off", BROKER_JOIN_KEY=key,
        BROKER_TOKEN=quiet["token"],
    )  # fmt: skip
    assert again["address"] == "quiet#1"
    narrower = join(
        cli, space, "flow/heron@2", "--lead", "--tool", "msg.send", BROKER_JOIN_KEY=key,
        BROKER_TOKEN=lead["token"],
    )  # fmt: skip
    assert narrower["address"] == "lead"


def test_S28_a_child_joins_with_its_parents_token_and_gets_at_most_its_grant(
    cli: Cli, store: Store
) -> None:
    space, key = create(cli)
    lynx = join(cli, space, "flow/heron>lynx#1", "--tool", "msg.send", BROKER_JOIN_KEY=key)
    before = count_rows(store)
    for extra in (["--tool", "board.directive"], ["--tool", "board.post"], ["--lead"], []):
        res = cli("join", space, "flow/heron>lynx#1>kid#1", "--parent-token", lynx["token"], *extra)
        line = one_line(res, 4 if extra != ["--lead"] else 4)
        assert "forbidden" in line and "its parent lynx#1" in line
    line = one_line(
        cli(
            "join",
            space,
            "flow/heron>lynx#1>kid#1",
            "--parent-token",
            lynx["token"],
            "--parent",
            "lead",
            "--tool",
            "msg.send",
        ),  # fmt: skip
        2,
    )
    assert "invalid_input" in line and "not the holder of the parent token" in line
    line = one_line(cli("join", space, "flow/heron>kid#1", "--parent-token", "forged"), 4)
    assert "auth_failed" in line
    both = cli(
        "join", space, "flow/heron>kid#1", "--parent-token", lynx["token"], "--join-key", key
    )
    assert "give one credential" in one_line(both, 2)
    assert count_rows(store) == before
    kid = join(
        cli, space, "flow/heron>lynx#1>kid#1", "--parent-token", lynx["token"], "--tool", "msg.send"
    )
    assert row(store, space, kid["address"])["parent"] == "lynx#1"


def test_S28_a_child_of_a_receive_only_parent_stays_off(store: Store) -> None:
    space = Operator(store).create_space("workflow")
    _, quiet = Agent.join(store, space.id, "quiet", join_key=space.join_key, messaging=False)
    kid, joined = Agent.join(store, space.id, "kid", parent_token=quiet.token)
    assert (
        not row(store, space.id, "kid")["messaging"]
        and row(store, space.id, "kid")["parent"] == "quiet"
    )
    with pytest.raises(errors.ToolUnavailable, match="receive-only"):
        kid.send("quiet", "hello")
    assert joined.address == "kid"


def test_S28_the_operator_key_may_grant_any_set(store: Store) -> None:
    op = Operator(store)
    space = op.create_space("agentiflow").id
    boss, joined = op.join(space, "flow/heron", lead=True)
    worker, wj = op.join(space, "flow/heron>lynx#1", tools=["board.directive", "msg.send"])
    op.join(space, "flow/heron>otter#1")
    assert worker.directive("otter#1", "check the logs").reached == ["otter#1"]
    again, _ = op.join(space, "flow/heron>lynx#1@2", tools=["board.*"], token=wj.token)
    assert again.address == "lynx#1"


# --- S29: the operator key -----------------------------------------------------------------------
def test_S29_the_key_is_made_with_the_store_in_a_private_file(store: Store) -> None:
    path = Path(f"{store.path}.operator-key")
    assert path.stat().st_mode & 0o777 == 0o600 and path.stat().st_uid == os.geteuid()
    secret = path.read_text().strip()
    with store.read() as t:
        stored = t.one("SELECT key_hash FROM operator_key")[0]
    assert stored == keys.digest(secret) and secret not in stored
    Operator(store, key=secret)
    with pytest.raises(errors.AuthError, match="not this store's"):
        Operator(store, key=secret + "x")


def test_S29_operator_commands_with_a_wrong_key_are_refused(cli: Cli, store: Store) -> None:
    """issue 10: any process could `broker message send $S --urgent` as the operator."""
    space, key = create(cli)
    lead = join(cli, space, "flow/heron", "--lead", BROKER_JOIN_KEY=key)
    before = count_rows(store)
    wrong = {"BROKER_OPERATOR_KEY": "guessed"}
    for argv in (
        ("message", "send", space, "--urgent", "stop everything"),
        ("message", "list", space),
        ("dir", "list", space),
        ("space", "stop", space, "--yes"),
        ("space", "join-key", space, "--rotate"),
        ("agent", "run", space, "mole", "--max-turns", "1", "--", "true"),
    ):
        line = one_line(cli(*argv, env=wrong), 4)
        assert line.startswith("broker: auth_failed:") and "not this store's" in line, argv
    assert count_rows(store) == before
    turn = cli("inbox", "next", "--json", env=as_env(space, lead)).json()
    assert turn["items"] == []  # no "URGENT: Message from your operator"
    # The operator at its own shell notices nothing: the key file is found.
    assert cli("message", "send", space, "--urgent", "from me").code == 0


def test_S29_a_key_file_open_to_others_or_a_symlink_is_refused(
    cli: Cli, store: Store, tmp_path: Path
) -> None:
    space, _ = create(cli)
    path = Path(f"{store.path}.operator-key")
    path.chmod(0o644)
    line = one_line(cli("message", "list", space), 4)
    assert "open to others (mode 0644)" in line and "chmod 600" in line
    path.chmod(0o600)
    real = tmp_path / "elsewhere.key"
    path.rename(real)
    path.symlink_to(real)
    try:
        line = one_line(cli("message", "list", space), 4)
        assert "is a symbolic link" in line
    finally:
        path.unlink()
        real.rename(path)
    assert cli("message", "list", space).code == 0


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o602, 0o610, 0o601, 0o400])
def test_S29_a_key_file_any_group_or_other_may_use_is_refused(
    store: Store, mode: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Readable by the group alone (0640) or by others alone (0604), or any
    other bit for them: refused; the owner's own bits (0400) are fine."""
    monkeypatch.delenv("BROKER_OPERATOR_KEY", raising=False)
    path = Path(f"{store.path}.operator-key")
    path.chmod(mode)
    try:
        if mode & 0o077:
            with pytest.raises(errors.AuthError, match=rf"open to others \(mode {mode:04o}\)"):
                Operator(store)
        else:
            Operator(store)
    finally:
        path.chmod(0o600)


def test_S29_a_key_file_readable_by_the_group_is_refused_on_the_cli(cli: Cli, store: Store) -> None:
    space, _ = create(cli)
    path = Path(f"{store.path}.operator-key")
    for mode in (0o640, 0o604):
        path.chmod(mode)
        line = one_line(cli("message", "list", space), 4)
        assert f"open to others (mode {mode:04o})" in line and "chmod 600" in line
    path.chmod(0o600)
    assert cli("message", "list", space).code == 0


def test_S29_the_key_from_the_environment_overrides_the_file(
    store: Store, db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = Path(f"{store.path}.operator-key").read_text().strip()
    monkeypatch.setenv("BROKER_OPERATOR_KEY", "not-the-key")
    with pytest.raises(errors.AuthError):
        Operator(store)
    monkeypatch.setenv("BROKER_OPERATOR_KEY", secret)
    Operator(store)
    # A store made with BROKER_OPERATOR_KEY set takes that key, and writes no file.
    monkeypatch.setenv("BROKER_OPERATOR_KEY", "chosen-by-the-operator")
    other = Store(f"sqlite:///{tmp_path / 'env' / 'broker.db'}")
    try:
        assert not Path(f"{other.path}.operator-key").exists()
        Operator(other)
        monkeypatch.delenv("BROKER_OPERATOR_KEY")
        with pytest.raises(errors.AuthError, match="operator key required"):
            Operator(other)
    finally:
        other.close()


def test_S29_the_mcp_operator_needs_the_key(cli: Cli, store: Store) -> None:
    path = Path(f"{store.path}.operator-key")
    path.rename(f"{path}.away")
    try:
        line = one_line(cli("mcp", "--operator", input=""), 4)
        assert "operator key required" in line
        line = one_line(cli("mcp", "--operator", input="", env={"BROKER_OPERATOR_KEY": "x"}), 4)
        assert "not this store's" in line
    finally:
        Path(f"{path}.away").rename(path)


def test_S29_an_agent_token_is_not_the_operator_key(store: Store) -> None:
    op = Operator(store)
    space = op.create_space("workflow")
    _, joined = trusted.join(store, space.id, "lynx")
    with pytest.raises(errors.AuthError):
        Operator(store, key=joined.token)
    with pytest.raises(errors.AuthError):
        Agent.join(store, space.id, "mole", operator_key=joined.token)
    with pytest.raises(errors.AuthError):
        Agent.join(store, space.id, "mole", join_key=joined.token)


# --- S34: append-only against every SQL path --------------------------------------------------------
# Each append-only table and a free-text column an attacker would rewrite.
APPEND_ONLY = {
    "messages": "body",
    "participant_events": "reason",
    "transcript": "content",
    "claim_journal": "owner",
    "purges": "export_dir",
}


def _key(table: str) -> str:
    """A table's first unique key: the log's is (space_id, seq), no key of ids (revision 0018)."""
    return ", ".join(UNIQUE_KEYS[table][0])


def test_S34_replace_upsert_update_and_delete_leave_append_only_rows_as_they_were(
    store: Store, tmp_path: Path
) -> None:
    from cli_space import populate

    populate(store)
    op = Operator(store)
    gone = op.create_space("workflow").id
    op.stop_space(gone)
    op.archive_space(gone)
    op.purge_space(gone, tmp_path / "export")  # a purges row
    for table, col in APPEND_ONLY.items():
        with store.read() as t:
            first = t.row(f"SELECT * FROM {table} ORDER BY id LIMIT 1")
            rows = t.one(f"SELECT count(*) FROM {table}")[0]
        assert first is not None, table
        columns = list(first)
        names = ", ".join(columns)
        marks = ", ".join("?" for _ in columns)
        changed = [("forged" if c == col else first[c]) for c in columns]
        attacks = [
            (f"INSERT OR REPLACE INTO {table} ({names}) VALUES ({marks})", changed),
            (f"REPLACE INTO {table} ({names}) VALUES ({marks})", changed),
            (
                f"INSERT INTO {table} ({names}) VALUES ({marks}) "
                f"ON CONFLICT ({_key(table)}) DO UPDATE SET {col} = excluded.{col}",
                changed,
            ),
            (f"UPDATE {table} SET {col} = 'forged' WHERE id = ?", [first["id"]]),
            (f"DELETE FROM {table} WHERE id = ?", [first["id"]]),
        ]
        for sql, params in attacks:
            with (
                pytest.raises(
                    (errors.AppendOnly, sqlite3.DatabaseError), match=f"append-only: {table}"
                ),
                store.transaction() as tx,
            ):
                tx.execute(sql, params)
        with store.read() as t:
            assert t.row(f"SELECT * FROM {table} WHERE id = ?", (first["id"],)) == first, table
            assert t.one(f"SELECT count(*) FROM {table}")[0] == rows, table


def test_S34_every_store_connection_fires_delete_triggers_on_replace(store: Store) -> None:
    raw = store.connect()
    try:
        assert raw.execute("PRAGMA recursive_triggers").fetchone()[0] == 1
    finally:
        raw.close()


# --- served mode: the same rules over HTTP -------------------------------------------------------
def test_S27_S29_served_join_and_join_key_need_the_operator_key(tmp_path: Path) -> None:
    from served import Server

    srv = Server(tmp_path / "served" / "home")
    try:
        with srv.operator() as op:
            created = op.post("/api/spaces", json={"kind": "session"})
            assert created.status_code == 201 and created.json()["join_key"]
            sid = created.json()["id"]
            joined = op.post(f"/api/sessions/{sid}/participants", json={"codename": "lynx"})
            assert joined.status_code == 201, joined.text
            token = joined.json()["token"]
            # The live holder is not taken over, not even by the operator without its token.
            again = op.post(f"/api/sessions/{sid}/participants", json={"codename": "lynx@2"})
            assert again.status_code == 409 and again.json()["error"] == "conflict"
            retry = op.post(
                f"/api/sessions/{sid}/participants", json={"codename": "lynx@2", "token": token}
            )
            assert retry.status_code == 201, retry.text
            rotated = op.post(f"/api/sessions/{sid}/join-key")
            assert rotated.status_code == 200 and rotated.json()["space_id"] == sid
        with srv.client(retry.json()["token"]) as agent:  # an agent's token is not the key
            for path, body in (("participants", {"codename": "mole"}), ("join-key", None)):
                r = agent.post(f"/api/sessions/{sid}/{path}", json=body)
                assert r.status_code == 403 and r.json()["error"] == "forbidden", path
        with srv.client("guessed") as nobody:
            r = nobody.post(f"/api/sessions/{sid}/participants", json={"codename": "mole"})
            assert r.status_code == 401 and r.json()["error"] == "auth_failed"
        with srv.operator() as op:
            names = [p["address"] for p in op.get(f"/api/sessions/{sid}/participants").json()]
        assert names == ["lynx"]
    finally:
        srv.stop()
