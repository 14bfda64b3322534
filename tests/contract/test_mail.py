"""Mail features: threads (S35), search (S36), contact policies (S38),
importance and ack-required. Through the Python API on a real SQLite file,
and through the real CLI (subprocess)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trusted
from sqlrows import spaces_as_read

from broker import errors
from broker.api.handles import Agent, Operator, Store
from broker.interchange.export import export_space
from broker.interchange.importer import import_dir
from broker.mail.search import index_bytes, integrity_check
from broker.spaces import spaces

NOW = "2026-12-01T00:00:00.000000Z"


def last_seq(store: Store, space: str) -> int:
    with store.read() as t:
        return int(t.one(f"SELECT last_seq FROM {spaces_as_read(store)} WHERE id = ?", (space,))[0])


# --- S35 threads ------------------------------------------------------------------------
def test_S35_a_reply_inherits_its_parents_thread_and_the_thread_lists_in_order(
    store: Store, space: str, operator: Operator, join: Callable[..., Agent]
) -> None:
    lynx, otter = join("flow/lynx"), join("flow/otter")
    first = lynx.send("otter", "the parser drops tokens", thread="parser-bug")
    lynx.send("otter", "unrelated chatter")
    reply = otter.send("lynx", "fixed it", reply_to=first.id)
    again = lynx.send("otter", "thanks", reply_to=reply.id)
    listed = operator.log(space, thread="parser-bug")
    assert [e.id for e in listed] == [first.id, reply.id, again.id]
    assert [e.reply_to for e in listed] == [None, first.id, reply.id]
    assert {e.thread for e in listed} == {"parser-bug"}
    # The other filters still apply inside a thread.
    assert [e.id for e in operator.log(space, thread="parser-bug", sender="otter")] == [reply.id]
    assert [e.id for e in operator.log(space, thread="parser-bug", after=reply.id)] == [again.id]


def test_S35_a_reply_to_an_unthreaded_message_starts_a_thread_named_after_it(
    space: str, operator: Operator, join: Callable[..., Agent]
) -> None:
    lynx, otter = join("flow/lynx"), join("flow/otter")
    root = lynx.send("otter", "a question")
    r1 = otter.send("lynx", "an answer", reply_to=root.id)
    r2 = lynx.send("otter", "a follow-up", reply_to=r1.id)
    assert [e.id for e in operator.log(space, thread=root.id)] == [root.id, r1.id, r2.id]
    (th,) = operator.threads(space)
    assert (th.thread, th.messages, th.senders) == (root.id, 2, ["otter", "lynx"])


def test_S35_bad_thread_or_reply_is_refused_and_writes_nothing(
    store: Store, operator: Operator, space: str, join: Callable[..., Agent]
) -> None:
    lynx, _ = join("flow/lynx"), join("flow/otter")
    first = lynx.send("otter", "in a thread", thread="t1")
    other = operator.create_space("workflow").id
    elsewhere, _ = trusted.join(store, other, "flow/lynx")
    foreign = elsewhere.send("operator", "another space's message")
    before = last_seq(store, space)
    with pytest.raises(errors.InvalidInput, match="thread"):
        lynx.send("otter", "x", thread="has space")
    with pytest.raises(errors.InvalidInput, match="thread"):
        lynx.send("otter", "x", thread="t" * 65)
    with pytest.raises(errors.InvalidInput, match="parent's thread"):
        lynx.send("otter", "x", reply_to=first.id, thread="t2")
    with pytest.raises(errors.MessageNotFound):
        lynx.send("otter", "x", reply_to=foreign.id)  # never another space's message
    with pytest.raises(errors.InvalidInput, match="reply_to"):
        lynx.send("otter", "x", reply_to="not-an-id")
    assert last_seq(store, space) == before


def test_S35_v_threads_sums_up_each_thread(
    store: Store, space: str, join: Callable[..., Agent]
) -> None:
    lynx, otter, heron = join("flow/lynx"), join("flow/otter"), join("flow/heron")
    a = lynx.send("otter", "one", thread="plan")
    otter.send("lynx", "two", thread="plan")
    z = heron.send("lynx", "three", thread="plan")
    lynx.send("otter", "elsewhere", thread="other")
    lynx.send("otter", "no thread")
    with store.read() as t:
        rows = t.rows(
            "SELECT thread, messages, first_id, last_id, participants, senders "
            "FROM v_threads WHERE space_id = ? ORDER BY thread",
            (space,),
        )
    assert rows == [
        {
            "thread": "other",
            "messages": 1,
            "first_id": rows[0]["first_id"],
            "last_id": rows[0]["first_id"],
            "participants": 1,
            "senders": '["lynx"]',
        },
        {
            "thread": "plan",
            "messages": 3,
            "first_id": a.id,
            "last_id": z.id,
            "participants": 3,
            "senders": '["lynx","otter","heron"]',
        },
    ]


def test_S35_the_turn_framing_shows_the_thread_and_the_importance(
    join: Callable[..., Agent],
) -> None:
    lynx, otter = join("flow/lynx"), join("flow/otter")
    lynx.send("otter", "look at this", thread="review", importance="high")
    lynx.send("otter", "plain")
    turn = otter.next_turn()
    head_threaded, head_plain = (item.content.splitlines()[0] for item in turn.items)
    assert 'thread="review" importance="high">>>' in head_threaded
    assert "thread=" not in head_plain and "importance=" not in head_plain


def test_S35_S38_export_import_export_keeps_threads_importance_and_policies_byte_identical(
    store: Store, space: str, join: Callable[..., Agent], tmp_path: Path
) -> None:
    lynx, otter = join("flow/lynx"), join("flow/otter")
    first = lynx.send("otter", "threaded", thread="t", importance="low", ack_required=True)
    otter.send("lynx", "reply", reply_to=first.id, importance="high")
    otter.set_contact_policy("listed", ["lynx"])
    lynx.set_contact_policy("closed")
    export_space(store, space, tmp_path / "first", now=NOW)
    other = Store(f"sqlite:///{tmp_path / 'b.db'}")
    assert import_dir(other, tmp_path / "first").spaces == [space]
    export_space(other, space, tmp_path / "second", now=NOW)

    def files(root: Path) -> dict[str, bytes]:
        return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}

    assert files(tmp_path / "first") == files(tmp_path / "second")
    log = [e for e in Operator(other).log(space) if e.kind == "direct"]
    assert [(e.thread, e.reply_to, e.importance, e.ack_required) for e in log] == [
        ("t", None, "low", True),
        ("t", first.id, "high", False),
    ]
    with other.read() as t:
        got = t.all(
            "SELECT address, contact_policy, contact_allow FROM participants "
            "WHERE space_id = ? ORDER BY address",
            (space,),
        )
    assert [tuple(r) for r in got] == [("lynx", "closed", None), ("otter", "listed", '["lynx"]')]
    # The imported log is searchable: the triggers indexed what the import wrote.
    assert [h.id for h in Operator(other).search(space, "threaded")] == [first.id]
    other.close()


# --- S38 contact policies ---------------------------------------------------------------
def test_S38_each_policy_lets_in_exactly_whom_it_says(store: Store, operator: Operator) -> None:
    space = operator.create_space("agentiflow").id
    lead, _ = trusted.join(store, space, "flow", lead=True)
    boss, _ = trusted.join(store, space, "flow/boss", parent="lead")
    kid, _ = trusted.join(store, space, "flow/kid", parent="boss")
    peer, _ = trusted.join(store, space, "flow/peer")
    assert lead.address == "lead" and kid.address == "kid"

    def reaches(sender: Agent) -> bool:
        try:
            return "kid" in sender.send("kid", f"from {sender.address}").reached
        except errors.NotDelivered as exc:
            assert exc.fields["result"]["not_reached"] == [
                {"address": "kid", "reason": "contact_policy"}
            ]
            return False

    table = {}
    for policy, allow in (
        ("open", []),
        ("parent-and-lead", []),
        ("listed", ["peer"]),
        ("closed", []),
    ):
        assert kid.set_contact_policy(policy, allow).policy == policy
        table[policy] = {a.address: reaches(a) for a in (lead, boss, peer)}
        assert operator.send(space, "the human", to=["kid"]).reached == ["kid"]
    assert table == {
        "open": {"lead": True, "boss": True, "peer": True},
        "parent-and-lead": {"lead": True, "boss": True, "peer": False},
        "listed": {"lead": True, "boss": False, "peer": True},
        "closed": {"lead": True, "boss": False, "peer": False},
    }
    # Broadcasts follow S6 unchanged: a closed participant still gets them.
    assert "kid" in peer.send("broadcast", "all hands").reached
    # Every blocked send is in the log with its reason (S7).
    with store.read() as t:
        blocked = t.one(
            "SELECT count(*) FROM v_not_reached WHERE space_id = ? AND reason = 'contact_policy'",
            (space,),
        )[0]
    assert blocked == 4  # peer once, boss once, both when closed


def test_S38_a_role_send_skips_only_the_closed_recipients(
    join: Callable[..., Agent],
) -> None:
    lynx = join("flow/lynx")
    a, b = join("flow/a", agent="worker"), join("flow/b", agent="worker")
    b.set_contact_policy("closed")
    result = lynx.send("role:worker", "who is free?")
    assert result.reached == ["a"]
    assert [(n.address, n.reason) for n in result.not_reached] == [("b", "contact_policy")]
    assert a.contact_policy().policy == "open"


def test_S38_bad_policies_are_invalid_input_and_change_nothing(
    join: Callable[..., Agent],
) -> None:
    kid = join("flow/kid")
    kid.set_contact_policy("listed", ["lynx"])
    for policy, allow in (
        ("secret", []),
        ("closed", ["lynx"]),
        ("listed", ["bad\x1baddress"]),
        ("listed", ["x" * 201]),
    ):
        with pytest.raises(errors.InvalidInput):
            kid.set_contact_policy(policy, allow)
    got = kid.contact_policy()
    assert (got.policy, got.allow) == ("listed", ["lynx"])


# --- S36 search -------------------------------------------------------------------------
@pytest.fixture
def corpus(store: Store, space: str, join: Callable[..., Agent]) -> dict[str, Any]:
    lynx, otter, heron = join("flow/lynx"), join("flow/otter"), join("flow/heron")
    ids = {
        "rare": lynx.send("otter", "the tokenizer crashes on tokenizer input tokenizer").id,
        "once": otter.send("lynx", "a long message about many things, the tokenizer among them").id,
        "heron": heron.send("lynx", "private between heron and lynx: tokenizer budget").id,
        "post": otter.post("board post about the deploy").id,
        "thread": lynx.send("otter", "see the design notes", thread="tokenizer-design").id,
    }
    return {"store": store, "space": space, "lynx": lynx, "otter": otter, "ids": ids}


def test_S36_operator_search_ranks_with_bm25_and_brackets_the_matches(
    corpus: dict[str, Any], operator: Operator
) -> None:
    space, ids = corpus["space"], corpus["ids"]
    hits = operator.search(space, "tokenizer")
    assert hits[0].id == ids["rare"]  # three occurrences in a short body rank first
    assert {h.id for h in hits} == {ids["rare"], ids["once"], ids["heron"], ids["thread"]}
    assert [h.rank for h in hits] == sorted(h.rank for h in hits)
    assert "[tokenizer]" in hits[0].snippet
    assert next(h for h in hits if h.id == ids["thread"]).thread == "tokenizer-design"
    # Filters: sender, recipient, kind, limit.
    assert [h.id for h in operator.search(space, "tokenizer", sender="heron")] == [ids["heron"]]
    assert {h.id for h in operator.search(space, "tokenizer", to="otter")} == {
        ids["rare"],
        ids["thread"],
    }
    assert [h.id for h in operator.search(space, "deploy", kinds=["post"])] == [ids["post"]]
    assert operator.search(space, "deploy", kinds=["direct"]) == []
    assert len(operator.search(space, "tokenizer", limit=2)) == 2
    assert operator.search(space, "tokenizer", since="2999-01-01T00:00:00.000000Z") == []


def test_S36_an_agent_finds_only_what_it_sent_or_received_and_never_another_space(
    corpus: dict[str, Any], operator: Operator
) -> None:
    store, ids, otter = corpus["store"], corpus["ids"], corpus["otter"]
    assert {h.id for h in otter.search("tokenizer")} == {ids["rare"], ids["once"], ids["thread"]}
    other = operator.create_space("workflow").id
    stranger, _ = trusted.join(store, other, "flow/otter")
    stranger.send("operator", "tokenizer in another space")
    assert [h.id for h in otter.search("tokenizer another")] == []
    assert [h.id for h in operator.search(corpus["space"], "another")] == []
    assert len(operator.search(other, "tokenizer")) == 1


def test_S36_S38_an_agent_searches_what_reached_it_not_what_was_addressed_to_it(
    operator: Operator, space: str, join: Callable[..., Agent]
) -> None:
    """Scope is the log row's ``reached``, not its ``recipients``: a direct
    message its contact policy refused names it and never reached it; a
    broadcast reached it without naming it (both backends)."""
    lynx, otter, heron = join("flow/lynx"), join("flow/otter"), join("flow/heron")
    otter.set_contact_policy("listed", allow=["lynx"])
    refused = heron.send(["otter", "lynx"], "zebra kept from otter")
    assert [(n.address, n.reason) for n in refused.not_reached] == [("otter", "contact_policy")]
    broadcast = heron.send("broadcast", "zebra for everyone")
    assert "otter" in broadcast.reached
    direct = lynx.send("otter", "zebra for otter")
    sent = otter.send("lynx", "zebra from otter")
    heron.send("lynx", "zebra otter never saw")
    assert {h.id for h in otter.search("zebra")} == {broadcast.id, direct.id, sent.id}
    assert {h.id for h in lynx.search("zebra")} >= {refused.id, direct.id, sent.id}
    assert len(operator.search(space, "zebra")) == 5


@pytest.mark.parametrize("query", ['"unbalanced', "AND", "nosuchcolumn:word", "a NEAR(", "   "])
def test_S36_a_query_outside_the_language_is_invalid_input_naming_the_query(
    corpus: dict[str, Any], operator: Operator, query: str
) -> None:
    with pytest.raises(errors.InvalidInput) as info:
        operator.search(corpus["space"], query)
    assert info.value.fields == {"field": "query"}


@pytest.mark.sqlite_only  # FTS5's shadow tables and VACUUM; PostgreSQL's GIN: tests/unit/store/test_pg.py
def test_S36_the_index_follows_a_purge_and_stays_consistent(
    corpus: dict[str, Any], operator: Operator, tmp_path: Path
) -> None:
    store, space = corpus["store"], corpus["space"]
    other = operator.create_space("workflow").id
    keep, _ = trusted.join(store, other, "flow/keep")
    kept = keep.send("operator", "tokenizer survives the purge").id
    assert index_bytes(store) > 0
    spaces.archive(store, space)
    operator.purge_space(space, tmp_path / "archive")
    integrity_check(store)  # raises if the index and the log differ
    assert [h.id for h in operator.search(other, "tokenizer")] == [kept]
    operator.vacuum()  # the index maps log rowids: a rewrite must keep them
    integrity_check(store)
    raw = sqlite3.connect(store.path)
    try:
        rowids = raw.execute(
            "SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'tokenizer'"
        ).fetchall()
        assert len(rowids) == 1  # the purged space's postings left with its rows
        assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        raw.close()


# --- importance and ack-required --------------------------------------------------------
def test_urgent_stays_the_operators_and_importance_is_checked(
    store: Store, space: str, join: Callable[..., Agent]
) -> None:
    lynx, _ = join("flow/lynx"), join("flow/otter")
    before = last_seq(store, space)
    for bad in ("urgent", "HIGH", ""):
        with pytest.raises(errors.InvalidInput, match="importance"):
            lynx.send("otter", "x", importance=bad)
    assert last_seq(store, space) == before


def test_S18_ack_status_says_who_has_seen_a_message_from_their_receipts(
    operator: Operator, space: str, join: Callable[..., Agent]
) -> None:
    lynx, otter, heron = join("flow/lynx"), join("flow/otter"), join("flow/heron")
    sent = lynx.send(["otter", "heron"], "please confirm", ack_required=True)
    st = lynx.status(sent.id)
    assert (st.ack_required, st.seen, st.not_seen) == (True, [], ["otter", "heron"])
    turn = otter.next_turn()
    assert lynx.status(sent.id).seen == []  # shown is not seen: the turn is unconfirmed
    otter.seen(turn.id)
    st = lynx.status(sent.id)
    assert (st.seen, st.not_seen) == (["otter"], ["heron"])
    assert operator.status(space, sent.id) == st
    with pytest.raises(errors.MessageNotFound):
        otter.status(sent.id)  # only its sender asks
    assert heron.next_turn().items


# --- through the CLI (real processes) ---------------------------------------------------
def _agent_env(joined: dict[str, Any]) -> dict[str, str]:
    return {
        "BROKER_SPACE": joined["space_id"],
        "BROKER_AS": joined["address"],
        "BROKER_TOKEN": joined["token"],
    }


def test_S35_S36_S38_cli_threads_search_policy_and_status(cli: Callable[..., Any]) -> None:
    space = cli("space", "create", "--kind", "session", "--json").json()["id"]
    planner = _agent_env(cli("join", space, "s/planner", "--json").json())
    coder = _agent_env(cli("join", space, "s/coder", "--json").json())
    first = cli(
        "msg", "send", "--to", "coder", "--thread", "parser-bug", "--importance", "high",
        "--ack-required", "--json", "The parser drops the last token",
        env=planner,
    )  # fmt: skip
    assert first.code == 0, first.err
    first_id = first.json()["id"]
    reply = cli("msg", "send", "--to", "planner", "--reply-to", first_id, "Fixed the tokenizer",
                env=coder)  # fmt: skip
    assert reply.code == 0, reply.err

    listed = cli("message", "list", space, "--thread", "parser-bug", "--json").lines()
    assert [(e["sender"], e["thread"]) for e in listed] == [
        ("planner", "parser-bug"),
        ("coder", "parser-bug"),
    ]
    assert listed[0]["importance"] == "high" and listed[0]["ack_required"] is True
    text = cli("message", "list", space, "--thread", "parser-bug").out
    assert "HIGH [parser-bug] planner -> coder" in text
    (th,) = cli("message", "threads", space, "--json").lines()
    assert (th["thread"], th["messages"], th["senders"]) == ("parser-bug", 2, ["planner", "coder"])

    found = cli("message", "search", space, "tokenizer", "--json").lines()
    assert [h["sender"] for h in found] == ["coder"]
    assert "[tokenizer]" in found[0]["snippet"]
    mine = cli("msg", "search", "parser", "--json", env=coder).lines()
    assert {h["id"] for h in mine} == {first_id, listed[1]["id"]}

    status = cli("msg", "status", first_id, "--json", env=planner).json()
    assert (status["seen"], status["not_seen"]) == ([], ["coder"])

    assert cli("msg", "policy", "closed", env=planner).out == "closed\n"
    blocked = cli("msg", "send", "--to", "planner", "--json", "may I?", env=coder)
    assert blocked.code == 1
    assert blocked.json()["not_reached"] == [{"address": "planner", "reason": "contact_policy"}]
    shown = cli("msg", "policy", "--json", env=planner).json()
    assert shown == {"policy": "closed", "allow": []}
    assert cli("message", "send", space, "--to", "planner", "from the human").code == 0


@pytest.mark.parametrize(
    "args",
    [
        ("msg", "send", "--to", "coder", "--thread", "two words", "x"),
        ("msg", "send", "--to", "coder", "--importance", "urgent", "x"),
        ("msg", "search", '"unbalanced'),
        ("msg", "policy", "listed", "--allow", "a\x07b"),
        ("msg", "policy", "--allow", "lynx"),
    ],
)
def test_S33_cli_mail_bad_input_is_one_line_exit_2_and_writes_nothing(
    cli: Callable[..., Any], args: tuple[str, ...]
) -> None:
    # In this process (click's runner): the refusals and the one line are the
    # CLI's own, with no process boundary in them (exit codes of a real process:
    # tests/frontends/cli/test_cli_core.py, tests/frontends/cli/test_cli_errors.py).
    space = cli("space", "create", "--kind", "session", "--json").json()["id"]
    me = _agent_env(cli("join", space, "s/planner", "--json").json())
    cli("join", space, "s/coder")
    res = cli(*args, env=me)
    assert res.code == 2, res.err
    assert len(res.err.strip().splitlines()) == 1 and "Traceback" not in res.err
    assert cli("message", "list", space, "--json").out == ""
    assert json.loads(cli("msg", "policy", "--json", env=me).out)["policy"] == "open"


# --- through MCP (a real `broker mcp` process) ------------------------------------------
def test_S35_S36_mcp_reply_joins_the_thread_and_search_sees_only_the_agents_mail(
    store: Store, space: str, join: Callable[..., Agent]
) -> None:
    pytest.importorskip("mcp")
    import asyncio

    from mcphelp import agent_session

    lynx = join("flow/lynx")
    heron = join("flow/heron")
    heron.send("lynx", "heron's tokenizer notes, not for otter")
    otter, joined = trusted.join(store, space, "flow/otter")
    asked = lynx.send("otter", "is the tokenizer fixed?", thread="tok", ack_required=True)

    async def main() -> None:
        async with agent_session(store, space, "otter", joined.token) as s:
            sent = await s.ok(
                "msg_send", to=["lynx"], text="yes, tokenizer fixed", reply_to=asked.id
            )
            found = await s.ok("msg_search", query="tokenizer")
            assert {h["id"] for h in found["hits"]} == {asked.id, sent["id"]}
            assert all("[tokenizer]" in h["snippet"] for h in found["hits"])
            refused = await s.call("msg_search", query='"open')
            assert refused.is_error
            status = await s.call("msg_status", message_id=asked.id)
            assert status.is_error  # only the sender asks

    asyncio.run(main())
    (entry,) = [e for e in Operator(store).log(space, thread="tok") if e.sender == "otter"]
    assert entry.reply_to == asked.id


def test_S36_ranking_reads_the_newest_window_of_matches(
    store: Store, space: str, join: Callable[..., Agent], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A word in most of a huge log costs RANK_WINDOW scores, not one per message:
    the best match outside the newest window is not ranked (documented in S36)."""
    import broker.mail.search

    lynx, _ = join("flow/lynx"), join("flow/otter")
    best_but_old = lynx.send("otter", "deploy deploy deploy deploy").id
    newer = [lynx.send("otter", f"deploy note {i} with more words around it").id for i in range(4)]
    op = Operator(store)
    assert op.search(space, "deploy")[0].id == best_but_old
    monkeypatch.setattr(broker.mail.search, "RANK_WINDOW", 3)
    got = [h.id for h in op.search(space, "deploy")]
    assert sorted(got) == sorted(newer[-3:])
