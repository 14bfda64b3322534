"""``broker mcp --operator``: the operator's tools over stdio with the MCP
SDK's client against a real server process (spec §Served mode; S9, S17, S21-S23)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import trusted
from mcphelp import session, text

from broker import Operator, Store

pytest.importorskip("mcp")

OPERATOR_TOOLS = {
    "messages_send",
    "messages_list",
    "participants",
    "board_view",
    "board_release",
    "board_unreserve",
}


def test_S9_operator_tools_send_as_the_operator_via_mcp_and_show_the_run(
    store: Store, space: str
) -> None:
    lead, _ = trusted.join(store, space, "boss", tools=["board.*", "msg.send"])
    b, _ = trusted.join(store, space, "b")
    lead.post("plan: split the work")
    directive = lead.directive("b", "stay in src/")
    lifted = lead.directive("b", "old rule")
    lead.retract(lifted.id)
    lead.claim_key("src/app.py", 600)

    async def main() -> dict[str, Any]:
        async with session(store, "--operator") as op:
            assert await op.tool_names() == OPERATOR_TOOLS
            for tool in (await op.client.list_tools()).tools:
                assert tool.input_schema["additionalProperties"] is False
                assert "sender" not in tool.input_schema["properties"]
            sent = await op.ok("messages_send", space=space, to=["b"], text="stop now", urgent=True)
            assert sent["reached"] == ["b"] and sent["kind"] == "operator"
            nobody = await op.call("messages_send", space=space, to=["zed"], text="hello?")
            assert nobody.is_error and text(nobody).startswith("not_delivered: ")
            spoof = await op.call("messages_send", space=space, text="x", sender="b")
            assert spoof.is_error and text(spoof).startswith("invalid_input: unknown field")
            listed = await op.ok("messages_list", run=space, kind="operator")
            assert [m["body"] for m in listed["messages"]] == ["stop now", "hello?"]
            page = await op.ok("messages_list", run=space, after_seq=listed["after_seq"])
            assert page["messages"] == []
            people = await op.ok("participants", run=space)
            assert {p["address"]: p["waiting"] for p in people["participants"]} == {
                "boss": 0,
                "b": 1,  # the operator message (directives are not inbox rows)
            }
            return await op.ok("board_view", run=space)

    view = asyncio.run(main())
    assert [p["body"] for p in view["posts"]] == ["plan: split the work"]
    assert [(d["id"], d["in_force"]) for d in view["directives"]] == [
        (directive.id, True),
        (lifted.id, False),
    ]
    assert [(c["key"], c["holder"]) for c in view["claims"]] == [("src/app.py", "boss")]
    assert [(j["key"], j["event"]) for j in view["journal"]] == [("src/app.py", "claimed")]
    log = Operator(store).log(space, kinds=["operator"])
    assert [(e.sender, e.via, e.urgent) for e in log] == [
        ("operator", "mcp", True),
        ("operator", "mcp", False),
    ]
    turn = b.next_turn()
    assert turn.items[0].group == "urgent" and turn.items[0].body == "stop now"


def test_S22_S37_operator_mcp_tools_end_anyones_key_claim_and_path_reservation(
    store: Store, space: str
) -> None:
    otter, _ = trusted.join(store, space, "otter")
    [g] = otter.reserve("src/**", ttl=86400)
    k = otter.claim_key("deploy", ttl=86400)

    async def main() -> None:
        async with session(store, "--operator") as op:
            view = await op.ok("board_view", run=space)
            assert [(r["pattern"], r["fence"]) for r in view["reservations"]] == [
                ("src/**", g.fence)
            ]
            bad = await op.call("board_unreserve", space=space, fence=g.fence, reason="a\x9bb")
            assert bad.is_error and text(bad).startswith("invalid_input: ")
            ended = await op.ok("board_unreserve", space=space, fence=g.fence, reason="stuck")
            assert (ended["key"], ended["owner"], ended["reason"]) == (
                "path src/**",
                "otter",
                "operator: stuck",
            )
            again = await op.call("board_unreserve", space=space, fence=g.fence)
            assert again.is_error and text(again).startswith("lease_lost: ")
            freed = await op.ok("board_release", space=space, key="deploy", fence=k.fence)
            assert (freed["event"], freed["reason"]) == ("released", "operator")

    asyncio.run(main())
    op = Operator(store)
    assert op.reservations(space) == [] and op.claims(space) == []


def test_S35_the_operator_messages_send_tool_takes_msg_sends_mail_fields(
    store: Store, space: str
) -> None:
    trusted.join(store, space, "b")

    async def main() -> None:
        async with session(store, "--operator") as op:
            first = await op.ok("messages_send", space=space, to=["b"], text="plan", thread="plan",
                                importance="high", ack_required=True)  # fmt: skip
            await op.ok("messages_send", space=space, to=["b"], text="more", reply_to=first["id"])
            bad = await op.call("messages_send", space=space, to=["b"], text="x", reply_to="abc")
            assert bad.is_error and text(bad) == (
                "invalid_input: bad reply_to: a message id (26 letters and digits)"
            )

    asyncio.run(main())
    log = Operator(store).log(space, kinds=["operator"])
    assert [(e.via, e.thread, e.importance, e.ack_required, e.reply_to) for e in log] == [
        ("mcp", "plan", "high", True, None),
        ("mcp", "plan", "normal", False, log[0].id),
    ]
