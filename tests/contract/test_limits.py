"""S30 (the operator is always heard, per-sender shares, `space set/show`) and
S33 (every space setting finite and inside its documented bounds, at create,
set and import; settings stored before the bounds never break a send).

Real SQLite files; the flood attacks (one agent filling the log, or the lead's inbox) run through the real CLI.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import spacegen
import sqlrows
import trusted
from sqlrows import spaces_as_read, waiting_sql

from broker import Agent, Operator, Store, errors
from broker.interchange.export import export_space
from broker.interchange.importer import ImportFailed, import_dir
from broker.store.settings import BOUNDS, Limits

MB = 1024 * 1024


def count(store: Store, sql: str, *params: Any) -> int:
    with store.read() as t:
        return int(t.one(sql, params)[0])


def messages(store: Store) -> int:
    return count(store, "SELECT count(*) FROM messages")


def agents(store: Store, sid: str, *codenames: str) -> list[Agent]:
    return [trusted.join(store, sid, c)[0] for c in codenames]


# --- S33: bounded settings ---------------------------------------------------------------
BAD = [
    ("lease_seconds", float("inf")),
    ("lease_seconds", "inf"),
    ("lease_seconds", 1e12),
    ("lease_seconds", "abc"),
    ("lease_seconds", 0),
    ("log_max_mb", float("nan")),
    ("log_max_mb", 1e300),
    ("inbox_cap", -5),
    ("inbox_cap", 2**70),
    ("body_max_bytes", 1024 * 1024 + 1),
    ("broadcast_cap", 0),
    ("max_deliveries", 10_001),
    ("sender_share", 1.5),
    ("sender_share", 0),
]


@pytest.mark.parametrize(("key", "value"), BAD)
def test_S33_a_setting_out_of_bounds_is_refused_naming_it_at_create_and_set(
    store: Store, operator: Operator, key: str, value: object
) -> None:
    spaces_before = count(store, "SELECT count(*) FROM spaces")
    with pytest.raises(errors.InvalidInput, match=f"^bad space setting {key} ") as info:
        operator.create_space("workflow", **{key: value})
    assert info.value.fields["field"] == key
    assert count(store, "SELECT count(*) FROM spaces") == spaces_before  # nothing written

    sid = operator.create_space("workflow").id
    rows = messages(store)
    with pytest.raises(errors.InvalidInput, match=f"^bad space setting {key} "):
        operator.set_space(sid, **{key: value})
    assert operator.get_space(sid).settings == {} and messages(store) == rows


def test_S33_each_setting_is_accepted_at_its_bounds_and_refused_just_past_them(
    operator: Operator,
) -> None:
    for key, (low, high) in BOUNDS.items():
        sid = operator.create_space("workflow", **{key: high}).id
        assert operator.space_usage(sid).limits[key] == high
        with pytest.raises(errors.InvalidInput, match=key):
            operator.set_space(sid, **{key: high * 1.5 + 1})
        low_ok = low + (0.001 if key in ("log_max_mb", "lease_seconds", "sender_share") else 0)
        assert operator.set_space(sid, **{key: low_ok}).limits[key] == low_ok


def test_S33_an_unknown_setting_lists_the_valid_keys(operator: Operator) -> None:
    with pytest.raises(errors.InvalidInput) as info:
        operator.create_space("workflow", nosuch=1)
    assert info.value.message == (
        "unknown space setting 'nosuch': the settings are " + ", ".join(BOUNDS)
    )


def test_S33_settings_stored_before_the_bounds_are_clamped_and_sends_and_claims_work(
    store: Store, operator: Operator
) -> None:
    """A store written before the bounds (or by hand) can hold lease_seconds=1e12,
    inbox_cap=-5, "abc": the limits in effect clamp them (above the top: the
    top; below the bottom or not a number: the default), so a send and a claim
    work, and `space set` rewrites them to the values in effect."""
    sid = operator.create_space("workflow").id
    bad = {"lease_seconds": 1e12, "inbox_cap": -5, "body_max_bytes": "abc", "junk": 1}
    with store.write() as t:  # by hand, past the library's checks
        t.execute("UPDATE spaces SET settings = ? WHERE id = ?", (json.dumps(bad), sid))
    a, b = agents(store, sid, "a", "b")
    a.send("b", "still works")
    lease = b.claim()
    assert [d.body for d in lease.deliveries] == ["still works"]
    limits = operator.space_usage(sid).limits
    assert (limits["lease_seconds"], limits["inbox_cap"], limits["body_max_bytes"]) == (
        BOUNDS["lease_seconds"][1],
        256,
        65536,
    )
    operator.set_space(sid, max_deliveries=7)
    assert operator.get_space(sid).settings == {
        "body_max_bytes": 65536,
        "inbox_cap": 256,
        "lease_seconds": BOUNDS["lease_seconds"][1],
        "max_deliveries": 7,
    }


@pytest.mark.parametrize(("key", "value"), [("lease_seconds", "abc"), ("inbox_cap", -5),
                                            ("lease_seconds", 1e12)])  # fmt: skip
def test_S33_an_import_checks_the_settings_and_reports_file_and_line(
    tmp_path: Path, key: str, value: object
) -> None:
    store = spacegen.fresh_store(tmp_path / "a")
    sid = Operator(store).create_space("workflow").id
    export_space(store, sid, tmp_path / "out")
    space_json = next((tmp_path / "out").rglob("space.json"))
    row = json.loads(space_json.read_text(encoding="utf-8"))
    row["settings"] = {key: value}
    space_json.write_text(json.dumps(row) + "\n", encoding="utf-8")
    other = spacegen.fresh_store(tmp_path / "b")
    with pytest.raises(ImportFailed) as info:
        import_dir(other, tmp_path / "out")
    (problem,) = info.value.fields["problems"]
    assert problem.startswith(
        f"runs/{sid}/messages/space.json:1: settings: bad space setting {key}"
    )
    assert count(other, "SELECT count(*) FROM spaces") == 0


# --- S30: the operator passes every cap -------------------------------------------------
def test_S30_the_operator_passes_inbox_cap_and_is_counted(store: Store, operator: Operator) -> None:
    sid = operator.create_space("workflow", inbox_cap=2, sender_share=1).id
    a, b = agents(store, sid, "a", "b")
    a.send("b", "1")
    a.send("b", "2")
    with pytest.raises(errors.NotDelivered, match="b: inbox_full"):
        a.send("b", "3")
    got = operator.send(sid, "stop and read this", to=["b"], urgent=True)
    assert got.reached == ["b"] and got.not_reached == []
    assert count(store, f"{waiting_sql(store)} WHERE address = 'b'") == 3
    (inbox,) = [i for i in operator.space_usage(sid).inboxes if i.address == "b"]
    assert (inbox.waiting, inbox.cap) == (3, 2)
    turn = b.next_turn()
    assert turn.items[0].group == "urgent" and turn.items[0].body == "stop and read this"


def test_S30_the_operator_passes_log_max_mb_and_its_bytes_are_logged(
    store: Store, operator: Operator
) -> None:
    sid = operator.create_space("workflow", log_max_mb=0.05, sender_share=1).id
    a, b = agents(store, sid, "a", "b")
    with pytest.raises(errors.MessagingFull, match="passed log_max_mb"):
        for _ in range(100):
            a.send("b", "x" * 4000)
    rows, used = messages(store), operator.space_usage(sid).log_bytes
    assert used >= 0.05 * MB
    res = operator.send(sid, "the operator is heard", to=["b"], urgent=True)
    assert res.reached == ["b"]
    usage = operator.space_usage(sid)
    assert messages(store) == rows + 1 and usage.log_bytes > used
    assert {u.sender for u in usage.top_senders} == {"a", "operator"}


def test_S30_the_operator_broadcast_passes_broadcast_cap(store: Store, operator: Operator) -> None:
    sid = operator.create_space("workflow", broadcast_cap=1).id
    a, b, c = agents(store, sid, "a", "b", "c")
    a.send("broadcast", "one")
    with pytest.raises(errors.NotDelivered, match="broadcast: broadcast_full"):
        a.send("broadcast", "two")
    assert sorted(operator.send(sid, "everyone, stop").reached) == ["a", "b", "c"]


# --- S30: per-sender shares -------------------------------------------------------------
def test_S30_one_sender_holds_at_most_its_share_of_an_inbox(
    store: Store, operator: Operator
) -> None:
    sid = operator.create_space("workflow", inbox_cap=8, sender_share=0.5).id
    a, c, b = agents(store, sid, "a", "c", "b")
    for i in range(4):
        a.send("b", f"a{i}")
    with pytest.raises(errors.NotDelivered, match="b: sender_share") as info:
        a.send("b", "a4")
    assert info.value.fields["result"]["not_reached"] == [
        {"address": "b", "reason": "sender_share"}
    ]
    for i in range(4):
        c.send("b", f"c{i}")  # another sender still gets in, up to inbox_cap
    with pytest.raises(errors.NotDelivered, match="b: inbox_full"):
        c.send("b", "c4")
    assert operator.send(sid, "heard", to=["b"]).reached == ["b"]
    # the refused sends are logged with their reason (S7), nothing is delivered for them
    with store.read() as t:
        reasons = [json.loads(r[0]) for r in t.all("SELECT not_reached FROM messages ORDER BY seq")]
    assert [r for r in reasons if r] == [
        [{"address": "b", "reason": "sender_share"}],
        [{"address": "b", "reason": "inbox_full"}],
    ]
    # once b drains a's messages, a is below its share again
    lease = b.claim(limit=3)
    b.ack(lease.lease_token)
    a.send("b", "a again")


def test_S30_a_batch_counts_its_own_deliveries_toward_the_share(
    store: Store, operator: Operator
) -> None:
    sid = operator.create_space("workflow", inbox_cap=4, sender_share=0.5).id
    a, b = agents(store, sid, "a", "b")
    results = a.send_many([{"to": "b", "text": str(i)} for i in range(4)])
    assert [r.reached for r in results] == [["b"], ["b"], [], []]
    assert [n.reason for r in results[2:] for n in r.not_reached] == ["sender_share"] * 2
    assert count(store, f"{waiting_sql(store)} WHERE address = 'b'") == 2


def test_S30_one_sender_holds_at_most_its_share_of_the_log(
    store: Store, operator: Operator
) -> None:
    sid = operator.create_space("workflow", log_max_mb=0.1, sender_share=0.5).id
    a, c = agents(store, sid, "a", "c")
    sent = 0
    with pytest.raises(errors.MessagingFull) as info:
        for _ in range(100):
            a.send("operator", "x" * 5000)
            sent += 1
    assert info.value.fields == {"space_id": sid, "sender": "a", "reason": "sender_share"}
    assert "sender_share (0.5 of log_max_mb 0.1 MB)" in info.value.message
    rows = messages(store)
    used = operator.space_usage(sid)
    (top, *_) = used.top_senders
    assert top.sender == "a" and 0.5 <= top.share < 0.6  # stopped at its share, not at the cap
    c.send("operator", "another agent is still heard")
    assert operator.send(sid, "and the operator", to=["c"]).reached == ["c"]
    assert messages(store) == rows + 2


def _usage_read(store: Store, sid: str) -> dict[str, list[tuple[Any, ...]]]:
    """What every reader of sender_usage sees (each adds, on SQLite, the log
    rows of the batch not folded in yet), beside the log's own sums."""
    from broker.store.sql import stmt

    by_log = (
        f"SELECT sender, sum(size_bytes), count(*) FROM messages WHERE space_no = {sqlrows.SPACE_NO} "
        "GROUP BY sender ORDER BY sender"
    )
    with store.read() as t:
        top = sorted(
            tuple(r) for r in t.all(stmt("usage.top_senders"), {"space_id": sid, "n": 1000})
        )
        senders = [r[0] for r in top]
        return {
            "log": [tuple(r) for r in t.all(by_log, (sid,))],
            "top": top,
            "one": [
                (s, int(t.one(stmt("usage.sender_log_bytes"), {"space_id": sid, "sender": s})[0]))
                for s in senders
            ],
            "shares": sorted(tuple(r) for r in t.all(stmt("shares.log_bytes"), {"space_id": sid})),
            # the space's total (space_usage, revision 0020), as the send's caller check
            # and space show read it
            "space": [int(t.one(stmt("usage.space_totals"), {"space_id": sid})["log_bytes"])],
        }


def _agrees(store: Store, sid: str) -> list[tuple[Any, ...]]:
    got = _usage_read(store, sid)
    assert got["top"] == got["log"]
    assert got["one"] == [(s, b) for s, b, _ in got["log"]]
    assert got["shares"] == [(s, b) for s, b, _ in got["log"]]
    assert got["space"] == [sum(b for _, b, _ in got["log"])]
    return got["log"]


def test_S30_sender_usage_follows_the_log_on_every_path_and_goes_with_a_purge(
    store: Store, operator: Operator, tmp_path: Path
) -> None:
    """Kept by triggers: sends, batches, receipts and operator rows all count,
    and every reader of it equals the log's own sums; a purged space leaves no
    row of it."""
    sid = operator.create_space("workflow").id
    a, b = agents(store, sid, "a", "b")
    a.send("b", "one")
    a.send_many([{"to": "b", "text": "two"}, {"to": "broadcast", "text": "three"}])
    operator.send(sid, "four")
    turn = b.next_turn()
    assert turn.id is not None
    b.seen(turn.id)  # a `seen` receipt from b
    kept = _agrees(store, sid)
    assert {s for s, *_ in kept} == {"a", "b", "operator"}
    operator.archive_space(sid)
    operator.purge_space(sid, tmp_path / "export")
    assert count(store, "SELECT count(*) FROM sender_usage WHERE space_id = ?", sid) == 0
    assert count(store, "SELECT count(*) FROM space_usage WHERE space_id = ?", sid) == 0


def test_S30_sender_usage_taken_in_batches_stays_exact_across_batches_and_a_purge(
    store: Store, operator: Operator, tmp_path: Path
) -> None:
    """SQLite folds the log into sender_usage 32 rows at a time (revision 0015):
    its readers add the rows not folded yet, so they agree with the log before,
    at and after each batch; a purge of the space holding the log's last rows
    frees rowids that the next sends take again, and those count too."""
    keep = operator.create_space("workflow").id
    gone = operator.create_space("workflow").id
    a, _ = agents(store, keep, "a", "b")
    z, _ = agents(store, gone, "z", "y")
    for i in range(40):  # one batch folded, 8 rows waiting
        a.send("b", f"m{i}")
        if i in (0, 30, 31, 32, 39):
            _agrees(store, keep)
    if store.dialect == "sqlite":
        with store.read() as t:
            folded = t.one("SELECT upto FROM folds WHERE name = 'sender_usage'")[0]
            assert 0 < folded < t.one("SELECT max(rowid) FROM messages")[0]
    for i in range(20):
        z.send("y", f"z{i}")  # the log's last rows: the purged space's
    a.send("b", "between")
    for i in range(5):
        z.send("y", f"z-last{i}")
    operator.archive_space(gone)
    operator.purge_space(gone, tmp_path / "export")
    _agrees(store, keep)
    for i in range(70):  # rowids the purge freed, then two more batches
        a.send("b", f"after{i}")
        if i in (0, 10, 40, 69):
            _agrees(store, keep)
    log = _agrees(store, keep)
    assert log[0][0] == "a" and log[0][2] == 111
    assert count(store, "SELECT count(*) FROM sender_usage WHERE space_id = ?", gone) == 0
    assert count(store, "SELECT count(*) FROM space_usage WHERE space_id = ?", gone) == 0


# --- S30: space set / space_usage -------------------------------------------------------
def test_S30_set_space_changes_the_limits_in_effect_and_logs_the_change(
    store: Store, operator: Operator
) -> None:
    sid = operator.create_space("workflow", inbox_cap=2).id
    a, b = agents(store, sid, "a", "b")
    a.send("b", "1")
    usage = operator.set_space(sid, inbox_cap=512, sender_share=0.25, log_max_mb=128)
    assert usage.limits["inbox_cap"] == 512 and usage.sender_inbox_cap == 128
    assert usage.log_cap_bytes == 128 * MB and usage.sender_log_cap_bytes == 32 * MB
    assert operator.get_space(sid).settings == {
        "inbox_cap": 512,
        "log_max_mb": 128,
        "sender_share": 0.25,
    }
    (entry,) = operator.log(sid, sender="operator")
    assert entry.body == (
        "space settings changed by the operator: inbox_cap 2 -> 512, log_max_mb 64 -> 128, "
        "sender_share 0.5 -> 0.25"
    )
    assert entry.to == ["operator"] and entry.reached == ["operator"]
    assert b.next_turn().items[0].body == "1"  # the change reaches no inbox
    rows = messages(store)
    operator.set_space(sid, inbox_cap=512)  # the same value: nothing changes, nothing logged
    assert messages(store) == rows
    with pytest.raises(errors.InvalidInput, match="no setting given"):
        operator.set_space(sid)


def test_S30_the_caps_a_send_checks_follow_set_space_at_the_next_send(
    store: Store, operator: Operator
) -> None:
    """A send's caps are computed once per settings (``spaces.caps_of``): a
    ``set_space`` that lowers them refuses the very next send, and one that
    raises them again lets the next one through, in the same process."""
    sid = operator.create_space("workflow", inbox_cap=4, sender_share=1).id
    a, b = agents(store, sid, "a", "b")
    a.send("b", "1")
    a.send("b", "2")  # both caps read for these settings: cached now
    operator.set_space(sid, sender_share=0.25)  # a's share of b's inbox: 1, it holds 2
    with pytest.raises(errors.NotDelivered, match="b: sender_share"):
        a.send("b", "3")
    operator.set_space(sid, sender_share=1, inbox_cap=2)  # b's inbox holds 2: full
    with pytest.raises(errors.NotDelivered, match="b: inbox_full"):
        a.send("b", "4")
    operator.set_space(sid, inbox_cap=3)
    assert a.send("b", "5").reached == ["b"]


def test_S30_space_usage_reports_the_log_the_top_senders_and_each_inbox(
    store: Store, operator: Operator
) -> None:
    sid = operator.create_space("workflow").id
    a, b, c = agents(store, sid, "a", "b", "c")
    for _ in range(3):
        a.send("b", "x" * 1000)
    c.send("b", "hi")
    usage = operator.space_usage(sid, top=1)
    assert usage.log_bytes == count(
        store, f"SELECT log_bytes FROM {spaces_as_read(store)} WHERE id = ?", sid
    )
    assert [(u.sender, u.messages) for u in usage.top_senders] == [("a", 3)]
    assert usage.top_senders[0].share == round(usage.top_senders[0].log_bytes / (64 * MB), 4)
    assert [(i.address, i.waiting, i.cap) for i in usage.inboxes] == [
        ("b", 4, 256),
        ("a", 0, 256),
        ("c", 0, 256),
    ]
    with pytest.raises(errors.InvalidInput, match="bad top 0"):
        operator.space_usage(sid, top=0)


def test_S30_the_default_limits_are_the_documented_ones() -> None:
    limits = Limits()
    assert (limits.inbox_cap, limits.log_max_mb, limits.sender_share) == (256, 64, 0.5)
    assert limits.sender_inbox_cap() == 128


# --- the CLI: space set/show and the flood attacks ---------------------------------------
def agent_env(store: Store, sid: str, codename: str, **fields: Any) -> dict[str, str]:
    _, joined = trusted.join(store, sid, codename, pid=None, **fields)
    return {"BROKER_SPACE": sid, "BROKER_AS": joined.address, "BROKER_TOKEN": joined.token}


def test_S30_cli_space_set_and_show(cli: Callable[..., Any], store: Store) -> None:
    sid = cli("space", "create", "--kind", "workflow", "--json").json()["id"]
    r = cli("space", "set", sid, "nosuch=1")
    assert r.code == 2 and r.err.strip() == (
        "broker: invalid_input: unknown space setting 'nosuch': the settings are "
        + ", ".join(BOUNDS)
    )
    for bad in ("lease_seconds=inf", "lease_seconds=1e12", "inbox_cap=-5", "log_max_mb=nan"):
        r = cli("space", "set", sid, bad)
        key = bad.split("=")[0]
        assert r.code == 2 and r.err.startswith(f"broker: invalid_input: bad space setting {key} ")
        assert len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err
    r = cli("space", "create", "--kind", "workflow", "--setting", "lease_seconds=inf")
    assert r.code == 2 and "bad space setting lease_seconds" in r.err
    assert count(store, "SELECT count(*) FROM spaces") == 1  # nothing written by the refusals
    r = cli("space", "set", sid, "log_max_mb=128", "sender_share=0.25", "--json")
    assert r.code == 0, r.err
    shown = r.json()
    assert shown["settings"] == {"log_max_mb": 128, "sender_share": 0.25}
    assert shown["usage"]["limits"]["log_max_mb"] == 128
    assert shown["usage"]["sender_log_cap_bytes"] == 32 * MB
    text = cli("space", "show", sid).out
    assert "log_max_mb       128" in text and "sender_share     0.25" in text
    assert "operator" in text  # the change itself is in the log, from the operator
    assert cli("space", "show", sid, "--json").json() == shown  # set prints what show does


def test_S30_flood_of_64KiB_bodies_to_operator_is_stopped_at_the_share_and_the_operator_is_heard(
    cli: Callable[..., Any], store: Store
) -> None:
    """The log flood: one agent sends 64 KiB bodies to `operator` until the log is
    full; the operator's own --urgent must still get through. log_max_mb is
    set to 1 here (16 bodies fill half of it) so the test stays short."""
    sid = cli("space", "create", "--kind", "agentiflow", "--json").json()["id"]
    assert cli("space", "set", sid, "log_max_mb=1").code == 0
    lead = agent_env(store, sid, "flow/heron", lead=True)
    flood = agent_env(store, sid, "flow/heron>lynx")
    body = "x" * 65536
    codes = [cli("msg", "send", "--to", "operator", body, env=flood).code for _ in range(10)]
    assert codes[:8] == [0] * 8 and codes[-1] == 6  # messaging_full once at its share
    refused = cli("msg", "send", "--to", "operator", body, env=flood)
    assert "sender_share" in refused.err and refused.code == 6
    rows = messages(store)
    r = cli("message", "send", sid, "--urgent", "stop the flood")
    assert r.code == 0, r.err
    assert messages(store) == rows + 1
    with store.read() as t:
        urgent = t.one(
            "SELECT sender, urgent, coalesce(reached, recipients) FROM messages "
            "ORDER BY seq DESC LIMIT 1"
        )
    assert tuple(urgent) == ("operator", 1, '["lead"]')
    assert cli("inbox", "next", "--json", env=lead).json()["items"][0]["group"] == "urgent"


def test_S30_flood_of_256_messages_to_the_lead_stops_at_the_share_and_the_urgent_arrives(
    store: Store, cli: Callable[..., Any]
) -> None:
    """The inbox flood: 256 messages from one agent flood the lead's inbox; the
    operator's URGENT is delivered and the flooder stops at 128 (its share).
    The flood itself runs in-process (256 CLI processes take minutes); the
    operator's side and the flooder's refusal go through the CLI."""
    sid = cli("space", "create", "--kind", "agentiflow", "--json").json()["id"]
    lead = agent_env(store, sid, "flow/heron", lead=True)
    flood_env = agent_env(store, sid, "flow/heron>lynx")
    flooder = Agent.connect(store, sid, flood_env["BROKER_AS"], flood_env["BROKER_TOKEN"])
    results = flooder.send_many([{"to": "lead", "text": f"spam {i}"} for i in range(256)])
    assert sum(1 for r in results if r.reached) == 128
    assert {n.reason for r in results for n in r.not_reached} == {"sender_share"}
    r = cli("msg", "send", "--to", "lead", "one more", env=flood_env)
    assert r.code == 1 and "not delivered to lead: sender_share" in r.out + r.err
    r = cli("message", "send", sid, "--urgent", "URGENT: stop", "--json")
    assert r.code == 0 and r.json()["reached"] == ["lead"], r.err
    waiting = count(store, f"{waiting_sql(store)} WHERE address = 'lead'")
    assert waiting == 129
    first = cli("inbox", "next", "--json", env=lead).json()["items"][0]
    assert (first["group"], first["body"]) == ("urgent", "URGENT: stop")


def test_S30_space_set_and_usage_through_a_served_store(tmp_path: Path) -> None:
    """The same calls over HTTP (broker.frontends.remote against a real `broker serve`):
    bounded, logged, the same usage record; a bad value is invalid_input."""
    from broker.frontends import remote
    from tests.served import Server

    srv = Server(tmp_path / "home")
    try:
        op = remote.RemoteOperator(remote.connect(srv.base), srv.key)
        sid = op.create_space("workflow").id
        usage = op.set_space(sid, inbox_cap=300, sender_share=0.2)
        assert (usage.limits["inbox_cap"], usage.sender_inbox_cap) == (300, 60)
        assert op.space_usage(sid, top=3) == usage
        with pytest.raises(errors.InvalidInput, match="bad space setting lease_seconds"):
            op.set_space(sid, lease_seconds=1e12)
        assert op.get_space(sid).settings == {"inbox_cap": 300, "sender_share": 0.2}
        (entry,) = op.log(sid)
        assert entry.body == (
            "space settings changed by the operator: inbox_cap 256 -> 300, sender_share 0.5 -> 0.2"
        )
        assert entry.via == "cp"
    finally:
        srv.stop()


def test_S30_a_stopped_space_keeps_its_settings(store: Store, operator: Operator) -> None:
    sid = operator.create_space("workflow").id
    operator.stop_space(sid)
    rows = messages(store)
    with pytest.raises(errors.Conflict, match="is stopped: its settings no longer apply"):
        operator.set_space(sid, inbox_cap=5)
    assert operator.get_space(sid).settings == {} and messages(store) == rows


def test_S30_the_async_operator_has_set_space_and_space_usage(store: Store) -> None:
    import asyncio

    from broker.api.aio import AsyncOperator

    async def main() -> tuple[Any, Any]:
        op = AsyncOperator(store)
        sid = (await asyncio.to_thread(Operator(store).create_space, "workflow")).id
        return await op.set_space(sid, inbox_cap=10), await op.space_usage(sid)

    changed, usage = asyncio.run(main())
    assert changed == usage and usage.limits["inbox_cap"] == 10 and usage.sender_inbox_cap == 5
