"""Tool grants (S24): the default set, authority tools, receive-only
participants, inheritance at join, and what a refused call leaves behind."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import sqlrows
import trusted

from broker import Agent, Operator, Store, errors
from broker.spaces import grants, participants

DEFAULT = {"board.claim", "board.release", "board.post", "board.read", "msg.send"}
AUTHORITY = {"board.directive", "board.retract"}


def notices(store: Store, agent: Agent) -> list[tuple[str, str]]:
    with store.read() as t:
        rows = t.all(
            "SELECT kind, content FROM transcript WHERE participant_id = ? AND direction = 'notice' "
            "ORDER BY at_utc, id",
            (agent.identity.participant_id,),
        )
    return [tuple(r) for r in rows]


def log_size(store: Store) -> int:
    with store.read() as t:
        return int(t.one("SELECT count(*) FROM messages")[0])


def inbox(store: Store, agent: Agent) -> list[str]:
    with store.read() as t:
        return [
            r[0]
            for r in t.all(
                "SELECT m.body FROM deliveries d JOIN messages m ON m.rowid = d.rowid >> 20 "
                f"WHERE d.recipient_no = {sqlrows.RECIPIENT_NO} ORDER BY d.rowid",
                (agent.identity.participant_id,),
            )
        ]


# --- the grant rules (pure) ------------------------------------------------------------------
def test_S24_the_default_set_is_claim_release_post_read_and_send() -> None:
    assert grants.effective(True, None, False) == DEFAULT


def test_S24_star_never_grants_directive_or_retract() -> None:
    assert grants.effective(True, ["*"], False) == DEFAULT
    assert not grants.effective(True, ["*", "msg.*"], False) & AUTHORITY


def test_S24_naming_them_or_board_star_grants_the_authority_tools() -> None:
    assert grants.effective(True, ["board.directive"], False) == {"board.directive"}
    assert grants.effective(True, ["board.retract", "msg.send"], False) == {
        "board.retract",
        "msg.send",
    }
    board_star = grants.effective(True, ["board.*"], False)
    assert board_star == (DEFAULT - {"msg.send"}) | AUTHORITY


def test_S24_a_lead_has_the_authority_tools() -> None:
    assert grants.effective(True, None, True) == DEFAULT | AUTHORITY
    assert grants.effective(True, ["msg.send"], True) == {"msg.send"} | AUTHORITY


def test_S24_msg_star_grants_only_msg_send() -> None:
    assert grants.effective(True, ["msg.*"], False) == {"msg.send"}


def test_S24_messaging_off_grants_nothing_even_to_a_lead() -> None:
    assert grants.effective(False, None, True) == frozenset()


# --- grants at work ---------------------------------------------------------------------------
def test_S24_star_does_not_let_an_agent_issue_directives(
    join: Callable[..., Agent], store: Store
) -> None:
    star = join("star", tools=["*"])
    join("w1", agent="worker")
    with pytest.raises(errors.ToolUnavailable, match="'\\*' never grants it"):
        star.directive("role:worker", "obey")
    posted = star.post("but it can post")  # '*' is the default set
    entry = Operator(store).log(star.identity.space_id)[-1]
    assert (entry.id, entry.kind, entry.sender) == (posted.id, "post", "star")
    assert notices(store, star)[0][0] == "tool_unavailable"


def test_S24_named_board_star_and_lead_can_issue_and_retract_directives(
    join: Callable[..., Agent],
) -> None:
    join("w1", agent="worker")
    for who in (
        join("named", tools=["board.directive", "board.retract"]),
        join("boardstar", tools=["board.*"]),
        join("boss", lead=True),
    ):
        d = who.directive("role:worker", f"from {who.address}")
        assert d.reached == ["w1"]
        assert who.retract(d.id).kind == "retract"


def test_S24_unknown_tool_names_are_refused_at_join(store: Store, space: str) -> None:
    with pytest.raises(errors.InvalidInput, match="unknown messaging tool 'fs.write'"):
        trusted.join(store, space, "lynx", tools=["fs.write"])


def test_S24_narrowed_tools_grant_only_what_is_named(
    join: Callable[..., Agent], store: Store
) -> None:
    reader = join("reader", tools=["board.read"])
    join("otter")
    assert reader.board_read() == []
    for call in (
        lambda: reader.send("otter", "hi"),
        lambda: reader.post("hi"),
        lambda: reader.claim_key("k"),
    ):
        with pytest.raises(errors.ToolUnavailable, match="not granted"):
            call()
    assert [n[0] for n in notices(store, reader)] == ["tool_unavailable"] * 3


def test_S24_an_agent_reads_its_own_grant_and_row_through_the_library(
    join: Callable[..., Agent],
) -> None:
    # What the MCP server offers (Agent.granted) and its inbox resource counts
    # (Agent.me().waiting): the library's answers, not a front end's own query.
    reader, lead, otter = (
        join("reader", tools=["board.read"]),
        join("lead", lead=True),
        join("otter"),
    )
    assert reader.granted() == ["board.read"]
    assert lead.granted() == sorted(DEFAULT | AUTHORITY)
    assert otter.granted() == sorted(DEFAULT)
    lead.send("otter", "one")
    lead.send("otter", "two")
    me = otter.me()
    assert (me.address, me.status, me.waiting) == ("otter", "running", 2)
    otter.leave()
    assert otter.me().status == "left"  # its own row, still readable
    with pytest.raises(errors.ParticipantLeft):
        otter.granted()
    with pytest.raises(errors.InvalidInput, match="bad call to me"):
        otter.me("lynx")  # type: ignore[misc]  # its own row only: no address to pass


def test_S24_messaging_off_naming_a_tool_is_refused_at_join(store: Store, space: str) -> None:
    with pytest.raises(errors.InvalidInput, match="contradict"):
        trusted.join(store, space, "lynx", messaging=False, tools=["msg.send"])
    with pytest.raises(errors.InvalidInput, match="contradict"):
        trusted.join(store, space, "lynx", messaging=False, tools=["*"])
    assert participants.list_participants(store, space) == []


def test_S24_off_is_inherited_by_children_and_their_children(store: Store, space: str) -> None:
    trusted.join(store, space, "quiet", messaging=False)
    trusted.join(store, space, "kid", parent="quiet")  # asks for nothing: gets off
    trusted.join(store, space, "grandkid", parent="kid")
    trusted.join(store, space, "other", parent="nobody-joined")
    got = {p.address: p.messaging for p in participants.list_participants(store, space)}
    assert got == {"quiet": False, "kid": False, "grandkid": False, "other": True}


def test_S24_narrowing_is_not_inherited(store: Store, space: str) -> None:
    narrow, _ = trusted.join(store, space, "narrow", tools=["board.read"])
    kid, _ = trusted.join(store, space, "kid", parent="narrow")
    p = participants.get(store, space, "kid")
    assert p.messaging and p.tools is None
    posted = kid.post("the default set, not the parent's narrowing")
    entry = Operator(store).log(space)[-1]
    assert (entry.id, entry.kind, entry.sender) == (posted.id, "post", "kid")
    with pytest.raises(errors.ToolUnavailable):
        narrow.post("the parent kept its narrowing")


def test_S24_inherited_off_wins_over_named_tools_and_says_so(store: Store, space: str) -> None:
    trusted.join(store, space, "quiet", messaging=False)
    kid, _ = trusted.join(store, space, "kid", parent="quiet", tools=["msg.send"])
    assert not participants.get(store, space, "kid").messaging
    ((kind, content),) = notices(store, kid)
    assert kind == "tool_unavailable"
    assert "msg.send" in content and "inherited from its parent quiet" in content
    with pytest.raises(errors.ToolUnavailable, match="receive-only"):
        kid.send("quiet", "hi")


def test_S24_a_receive_only_participant_is_still_reached(
    store: Store, space: str, operator: Operator
) -> None:
    # A retried run comes back receive-only; the child it launched earlier keeps messaging.
    _, first = trusted.join(store, space, "quiet")
    kid, _ = trusted.join(store, space, "kid", parent="quiet")
    peer, _ = trusted.join(store, space, "peer", agent="peer")
    boss, _ = trusted.join(store, space, "boss", lead=True)
    quiet, _ = trusted.join(store, space, "quiet", messaging=False, token=first.token)
    assert not participants.get(store, space, "quiet").messaging

    assert operator.send(space, "from the operator", to=["quiet"]).reached == ["quiet"]
    assert kid.send("parent", "from its child").reached == ["quiet"]
    assert peer.send("quiet", "from a peer").reached == ["quiet"]
    assert "quiet" in peer.post("addressed post", addressed_to=["quiet"]).reached
    assert "quiet" in peer.send("broadcast", "to everyone").reached
    assert "quiet" in boss.directive("quiet", "standing order").reached
    assert inbox(store, quiet) == [
        "from the operator",
        "from its child",
        "from a peer",
        "addressed post",
    ]
    with pytest.raises(errors.ToolUnavailable, match="receive-only"):
        quiet.send("peer", "can I talk?")


TOOL_CALLS: dict[str, Callable[[Agent, str], Any]] = {
    "msg.send": lambda a, d: a.send("peer", "hi"),
    "board.post": lambda a, d: a.post("hi"),
    "board.read": lambda a, d: a.board_read(),
    "board.claim": lambda a, d: a.claim_key("k"),
    "board.release": lambda a, d: a.release_key("k", 1),
    "board.directive": lambda a, d: a.directive("peer", "obey"),
    "board.retract": lambda a, d: a.retract(d),
}


@pytest.mark.parametrize("tool", sorted(TOOL_CALLS))
def test_S24_a_refused_call_raises_and_leaves_only_a_tool_unavailable_notice(
    store: Store, space: str, tool: str
) -> None:
    boss, _ = trusted.join(store, space, "boss", lead=True)
    trusted.join(store, space, "peer")
    d = boss.directive("peer", "x")
    quiet, _ = trusted.join(store, space, "quiet", messaging=False)
    before = log_size(store)
    with pytest.raises(errors.ToolUnavailable) as info:
        TOOL_CALLS[tool](quiet, d.id)
    assert info.value.fields["tool"] == tool and info.value.exit_code == 4
    assert f"quiet cannot use {tool}" in str(info.value)
    assert notices(store, quiet) == [("tool_unavailable", str(info.value))]
    assert log_size(store) == before
    with store.read() as t:
        assert t.one("SELECT count(*) FROM claim_journal")[0] == 0


def test_S24_a_refusal_inside_the_callers_transaction_keeps_its_notice_if_it_commits(
    store: Store, space: str
) -> None:
    quiet, _ = trusted.join(store, space, "quiet", messaging=False)
    with store.transaction() as tx:
        with pytest.raises(errors.ToolUnavailable):
            quiet.post("hi", tx=tx)
        with pytest.raises(errors.ToolUnavailable):
            quiet.claim_key("k", tx=tx)
    assert [n[0] for n in notices(store, quiet)] == ["tool_unavailable"] * 2


def test_S11_a_send_past_log_max_mb_fails_with_a_messaging_full_notice(
    store: Store, operator: Operator
) -> None:
    space = operator.create_space("workflow", log_max_mb=0.0001).id  # ~100 bytes
    lynx, _ = trusted.join(store, space, "lynx", lead=True)
    trusted.join(store, space, "otter")
    lynx.send("otter", "x" * 200)
    before = log_size(store)
    for call in (lambda: lynx.send("otter", "more"), lambda: lynx.directive("otter", "more")):
        with pytest.raises(errors.MessagingFull):
            call()
    assert [n[0] for n in notices(store, lynx)] == ["messaging_full"] * 2
    assert log_size(store) == before
    # Inside the caller's transaction too: the send is undone, the notice commits with it.
    with store.transaction() as tx, pytest.raises(errors.MessagingFull):
        lynx.post("more", addressed_to=["otter"], tx=tx)
    assert [n[0] for n in notices(store, lynx)] == ["messaging_full"] * 3
    assert log_size(store) == before


# --- CLI ---------------------------------------------------------------------------------------
def test_cli_join_messaging_and_tool_options(cli: Callable[..., Any]) -> None:
    space = cli("space", "create", "--kind", "workflow", "--json").json()["id"]
    both = cli("join", space, "lynx", "--messaging", "off", "--tool", "msg.send")
    assert both.code == 2 and "contradict" in both.err
    unknown = cli("join", space, "lynx", "--tool", "rm.rf")
    assert unknown.code == 2 and "unknown messaging tool" in unknown.err

    star = cli("join", space, "star", "--tool", "*", "--json").json()
    env = {"BROKER_SPACE": space, "BROKER_AS": star["address"], "BROKER_TOKEN": star["token"]}
    refused = cli("board", "directive", "--to", "star", "obey", env=env)
    assert refused.code == 4 and "tool_unavailable" in refused.err

    quiet = cli("join", space, "quiet", "--messaging", "off", "--json").json()
    env = {"BROKER_SPACE": space, "BROKER_AS": quiet["address"], "BROKER_TOKEN": quiet["token"]}
    send = cli("msg", "send", "--to", "star", "hi", env=env)
    assert send.code == 4 and "receive-only" in send.err
    listed = {p["address"]: p["messaging"] for p in cli("dir", "list", space, "--json").lines()}
    assert listed == {"star": True, "quiet": False}
