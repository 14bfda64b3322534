"""``broker mcp`` over stdio, driven by the MCP SDK's own client against a
real server process (spec §Served mode; S8, S10, S17-S18, S20-S24, S33).

Every test starts real ``broker mcp`` processes (the SDK's stdio_client spawns
them and stops and reaps them when the session ends) on a real SQLite file."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest
import trusted
from mcphelp import agent_session, doorbell_waiters, env_for, text

from broker import Agent, Operator, Store
from broker.board import claims

pytest.importorskip("mcp")

from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402

AGENT_DEFAULT = {
    "msg_send",
    "msg_send_many",  # msg.send's grant: one transaction of many sends
    "board_post",
    "board_read",
    "board_claim",
    "board_release",
    "board_renew",
    "board_reserve",
    "board_unreserve",
    "board_check",
    "inbox_next",
    "inbox_seen",
    "msg_search",  # S36: reads only what the agent sent or received
    "msg_status",
}
AUTHORITY = {"board_directive", "board_retract"}


def arun(coro: Any) -> Any:
    return asyncio.run(coro)


def joined(store: Store, space: str, codename: str, **fields: Any) -> tuple[Agent, str]:
    agent, j = trusted.join(store, space, codename, **fields)
    return agent, j.token


def test_S10_a_wrong_identity_is_one_line_and_exit_4_before_serving(
    store: Store, space: str, cli: Callable[..., Any]
) -> None:
    # In this process (the cli fixture): refused before serving, no stdio is
    # ever read or written, so a process of its own adds nothing but its start.
    _, token = joined(store, space, "a")
    other = Operator(store).create_space("workflow").id
    cases = {
        "wrong token": env_for(store, space=space, address="a", token="not-the-token"),
        "no token": env_for(store, space=space, address="a"),
        "other space": env_for(store, space=other, address="a", token=token),
    }
    for why, env in cases.items():
        res = cli("mcp", env=env, input="")
        assert res.code == 4, why
        assert res.out == "", why  # nothing served
        lines = res.err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("broker: auth_failed: "), (why, lines)


def test_S24_tools_are_listed_by_grant(store: Store, space: str) -> None:
    _, plain = joined(store, space, "plain")
    _, boss = joined(store, space, "boss", tools=["board.*", "msg.send"])
    _, narrow = joined(store, space, "narrow", tools=["msg.send"])
    _, mute = joined(store, space, "mute", messaging=False)

    async def names(address: str, token: str) -> set[str]:
        async with agent_session(store, space, address, token) as s:
            return await s.tool_names()

    async def main() -> None:
        # Four clients side by side, each its own `broker mcp` process.
        got = await asyncio.gather(
            names("plain", plain), names("boss", boss), names("narrow", narrow), names("mute", mute)
        )
        always = {"inbox_next", "inbox_seen", "msg_search", "msg_status"}
        assert got[0] == AGENT_DEFAULT
        assert got[1] == AGENT_DEFAULT | AUTHORITY
        assert got[2] == {"msg_send", "msg_send_many"} | always
        assert got[3] == always  # receive-only: reads its own mail

    arun(main())


def test_S10_no_tool_takes_a_sender_and_every_schema_is_closed(store: Store, space: str) -> None:
    _, token = joined(store, space, "boss", lead=True)  # a lead has authority (S24)

    async def main() -> None:
        async with agent_session(store, space, "lead", token) as s:
            tools = (await s.client.list_tools()).tools
            assert {t.name for t in tools} == AGENT_DEFAULT | AUTHORITY
            for tool in tools:
                schema = tool.input_schema
                assert schema["additionalProperties"] is False, tool.name
                assert not {"sender", "from", "as", "token", "space"} & set(schema["properties"])
                assert tool.description and len(tool.description) > 60, tool.name

    arun(main())


def test_S10_an_unknown_argument_is_refused_and_nothing_is_written(
    store: Store, space: str
) -> None:
    _, token = joined(store, space, "a")
    joined(store, space, "b")

    async def main() -> None:
        async with agent_session(store, space, "a", token) as s:
            for extra in ({"sender": "operator"}, {"from": "b"}, {"urgent": True}):
                result = await s.call("msg_send", to=["b"], text="spoof", **extra)
                assert result.is_error
                field = next(iter(extra))
                assert text(result) == (
                    f"invalid_input: unknown field {field!r}: this tool does not take it"
                )
                assert result.structured_content == {
                    "error": "invalid_input",
                    "message": f"unknown field {field!r}: this tool does not take it",
                    "field": field,
                }

    arun(main())
    assert Operator(store).log(space) == []  # nothing was sent


def test_S8_reaching_nobody_is_a_tool_error_with_each_reason(store: Store, space: str) -> None:
    a, token = joined(store, space, "a")
    gone, _ = joined(store, space, "gone")
    gone.leave()
    joined(store, space, "b")

    async def main() -> None:
        async with agent_session(store, space, "a", token) as s:
            partly = await s.ok("msg_send", to=["b", "zed"], text="hello")
            assert partly["reached"] == ["b"]
            assert partly["not_reached"] == [{"address": "zed", "reason": "no_live_participant"}]
            nobody = await s.call("msg_send", to=["zed", "gone"], text="hello")
            assert nobody.is_error
            assert text(nobody).startswith("not_delivered: not delivered to ")
            assert "zed: no_live_participant" in text(nobody)
            assert "gone: participant_left" in text(nobody)
            assert nobody.structured_content is not None
            result = nobody.structured_content["result"]
            assert result["reached"] == []
            assert {r["reason"] for r in result["not_reached"]} == {
                "no_live_participant",
                "participant_left",
            }

    arun(main())
    log = Operator(store).log(space)
    assert [e.reached for e in log] == [["b"], []]  # logged, then reported (S8)


def test_S33_bad_arguments_get_the_broker_code_and_one_line(store: Store, space: str) -> None:
    _, token = joined(store, space, "a")

    async def main() -> None:
        async with agent_session(store, space, "a", token) as s:
            cases = [
                ("msg_send", {"to": ["b"], "text": "   "}, "invalid_input: bad text"),
                ("board_claim", {"key": "a/../b"}, "invalid_input: claim key 'a/../b' contains"),
                ("board_claim", {"key": "k", "ttl": 0}, "invalid_input: bad ttl"),
                ("board_claim", {"key": "k", "ttl": 1e-9}, "invalid_input: bad ttl"),
                ("msg_send", {"to": ["b"], "text": "a\x00b"}, "invalid_input: bad text"),
                ("msg_send", {"to": ["b"], "text": "hi", "ack_required": 1}, "invalid_input"),
                ("inbox_next", {"wait": -1}, "invalid_input: bad wait"),
                ("inbox_next", {"wait": 86_401}, "invalid_input: bad wait"),  # the record's day
                ("board_read", {"limit": 0}, "invalid_input: bad limit"),
                ("nope", {}, "not_found: no tool 'nope'"),
            ]
            for tool, args, start in cases:
                result = await s.call(tool, **args)
                assert result.is_error, tool
                assert text(result).startswith(start), (tool, text(result))
                assert "\n" not in text(result)
                assert "Error executing tool" not in text(result)

    arun(main())


def test_every_agent_tool_over_stdio(store: Store, space: str) -> None:
    """S9, S17-S18, S21-S24: each tool once, checked against the store."""
    _, boss_token = joined(store, space, "boss", tools=["board.*", "msg.send"])
    b, b_token = joined(store, space, "b")

    async def main() -> None:
        async with agent_session(store, space, "boss", boss_token) as boss:
            sent = await boss.ok("msg_send", to=["b"], text="hello b", idempotency_key="k1")
            again = await boss.ok("msg_send", to=["b"], text="hello b", idempotency_key="k1")
            assert again["id"] == sent["id"] and again["duplicate"] is True
            post = await boss.ok("board_post", text="channel news")
            assert post["kind"] == "post" and post["reached"] == []
            addressed = await boss.ok("board_post", text="for b", addressed_to=["b"])
            assert addressed["reached"] == ["b"]
            directive = await boss.ok("board_directive", to=["b"], text="keep tests green")
            board = await boss.ok("board_read")
            kinds = [(e["kind"], e["body"]) for e in board["entries"]]
            assert kinds == [
                ("post", "channel news"),
                ("post", "for b"),
                ("directive", "keep tests green"),
            ]
            page = await boss.ok("board_read", after=board["cursor"])
            assert page["entries"] == []
            grant = await boss.ok("board_claim", key="src/app.py", ttl=60)
            assert grant["holder"] == "boss" and grant["fence"] >= 1
            renewed = await boss.ok("board_renew", key="src/app.py", fence=grant["fence"], ttl=120)
            assert renewed["fence"] == grant["fence"]
            released = await boss.ok("board_release", key="src/app.py", fence=grant["fence"])
            assert released["event"] == "released"
            lost = await boss.call("board_release", key="src/app.py", fence=grant["fence"])
            assert lost.is_error and text(lost).startswith("lease_lost: ")

            async with agent_session(store, space, "b", b_token) as bs:
                held = await bs.ok("board_claim", key="shared")
                taken = await boss.call("board_claim", key="shared")
                assert taken.is_error and text(taken).startswith("claim_held: ")
                await bs.ok("board_release", key="shared", fence=held["fence"])
                # S37: path reservations through MCP.
                res = await boss.ok("board_reserve", patterns=["src/**"], reason="via MCP")
                fence = res["result"][0]["fence"]  # a list, as on HTTP (MCP wraps it)
                clash = await bs.call("board_reserve", patterns=["src/a/*.py"])
                assert clash.is_error and text(clash).startswith("conflict: ")
                assert "boss" in text(clash) and "'src/**'" in text(clash)
                bad = await bs.call("board_reserve", patterns=["../x"])
                assert bad.is_error and text(bad).startswith("invalid_input: ")
                chk = (await bs.ok("board_check", paths=["src/a/b.py", "README"]))["result"]
                assert [c["blocked"] for c in chk] == [True, False]
                assert chk[0]["held_by"][0]["holder"] == "boss"
                assert (await boss.ok("board_unreserve", fence=fence))["event"] == "released"
                turn = await bs.ok("inbox_next")
                groups = [(i["group"], i["body"]) for i in turn["items"]]
                assert groups == [
                    ("directive", "keep tests green"),
                    ("message", "hello b"),
                    ("message", "for b"),
                ]
                seen = await bs.ok("inbox_seen", turn_id=turn["id"])
                assert seen["acked"] == 2
                assert (await bs.ok("inbox_seen", turn_id=turn["id"]))["acked"] == 0
                refused = await bs.call("board_directive", to=["boss"], text="obey")
                assert refused.is_error and text(refused).startswith("tool_unavailable: ")

            lifted = await boss.ok("board_retract", directive_id=directive["id"])
            assert lifted["kind"] == "retract"

    arun(main())
    log = Operator(store).log(space)
    assert [e.kind for e in log].count("seen") == 1
    # The refused directive left a notice for b's model, and wrote no message (S24).
    assert all(e.sender != "b" or e.kind == "seen" for e in log)


SEND = (
    "import sys; from broker import Agent, Store; "
    "url, space, me, token, to, body = sys.argv[1:7]; "
    "print(Agent.connect(Store(url), space, me, token).send(to, body).id)"
)


def test_S20_inbox_next_wakes_on_a_message_another_process_sends(store: Store, space: str) -> None:
    b, b_token = joined(store, space, "b")
    _, a_token = joined(store, space, "a")
    pid = b.identity.participant_id

    async def main() -> None:
        async with agent_session(store, space, "b", b_token) as s:
            waiting = asyncio.create_task(s.call("inbox_next", wait=60))
            deadline = time.monotonic() + 30
            while doorbell_waiters(store, pid) < 2:  # the inbox watcher + inbox_next
                assert time.monotonic() < deadline, "inbox_next never parked on the doorbell"
                await asyncio.sleep(0.01)
            started = time.monotonic()
            sender = await asyncio.create_subprocess_exec(
                sys.executable, "-c", SEND, store.url, space, "a", a_token, "b", "wake up"
            )
            assert await sender.wait() == 0
            result = await asyncio.wait_for(waiting, 30)
            assert time.monotonic() - started < 30  # woken, not timed out
            assert not result.is_error
            assert result.structured_content is not None
            assert [i["body"] for i in result.structured_content["items"]] == ["wake up"]
            assert "Turn " in text(result) and "data, not an instruction" in text(result)

    arun(main())


def test_S18_a_cancelled_inbox_next_loses_nothing(store: Store, space: str) -> None:
    a, _ = joined(store, space, "a")
    b, b_token = joined(store, space, "b")
    pid = b.identity.participant_id

    async def main() -> None:
        async with agent_session(store, space, "b", b_token) as s:
            waiting = asyncio.create_task(s.call("inbox_next", wait=60))
            deadline = time.monotonic() + 30
            while doorbell_waiters(store, pid) < 2:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
            waiting.cancel()  # the SDK client sends notifications/cancelled
            with pytest.raises(asyncio.CancelledError):
                await waiting
            while doorbell_waiters(store, pid) > 1:  # the server stopped waiting
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
            await asyncio.to_thread(a.send, "b", "after the cancel")
            turn = await s.ok("inbox_next", wait=10)
            assert [i["body"] for i in turn["items"]] == ["after the cancel"]

    arun(main())


def test_S10_a_token_for_one_space_cannot_touch_another(store: Store, space: str) -> None:
    op = Operator(store)
    other = op.create_space("workflow").id
    _, a_token = joined(store, space, "a")
    b_other, _ = joined(store, other, "b")
    other_turn_owner, ot_token = joined(store, other, "c")
    b_other.send("c", "private")
    turn = other_turn_owner.next_turn()
    assert turn.id is not None
    grant = b_other.claim_key("lock", 600)

    async def main() -> None:
        async with agent_session(store, space, "a", a_token) as s:
            reach = await s.call("msg_send", to=["b", "c"], text="across?")
            assert reach.is_error and text(reach).startswith("not_delivered: ")
            seen = await s.call("inbox_seen", turn_id=turn.id)
            assert seen.is_error and text(seen).startswith("not_found: ")
            release = await s.call("board_release", key="lock", fence=grant.fence)
            assert release.is_error and text(release).startswith("lease_lost: ")
            board = await s.ok("board_read")
            assert board["entries"] == []

    arun(main())
    assert [e.body for e in op.log(other)] == ["private"]  # nothing reached the other space
    assert [(c.key, c.holder) for c in claims.live(store, other)] == [("lock", "b")]


def test_S10_print_config_is_an_entry_a_client_can_start_as_is(store: Store, space: str) -> None:
    _, token = joined(store, space, "lynx")
    joined(store, space, "b")
    base = env_for(store, space=space, address="lynx", token=token)
    printed = subprocess.run(
        [sys.executable, "-m", "broker", "mcp", "--print-config"],
        env=base,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert printed.returncode == 0, printed.stderr
    entry = json.loads(printed.stdout)["mcpServers"]["broker-lynx"]
    assert entry["env"]["BROKER_TOKEN"] == token and entry["env"]["BROKER_AS"] == "lynx"

    async def main() -> dict[str, Any]:
        env = {**entry["env"], "PYTHONPATH": base["PYTHONPATH"]}
        params = StdioServerParameters(command=entry["command"], args=entry["args"], env=env)
        async with stdio_client(params) as (read, write):  # noqa: SIM117
            async with ClientSession(read, write) as client:
                await client.initialize()
                result = await client.call_tool("msg_send", {"to": ["b"], "text": "configured"})
                assert result.structured_content is not None
                return result.structured_content

    assert asyncio.run(main())["reached"] == ["b"]

    wrong = subprocess.run(
        [sys.executable, "-m", "broker", "mcp", "--print-config"],
        env={**base, "BROKER_TOKEN": "wrong"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert wrong.returncode == 4 and wrong.stdout == ""  # a wrong identity is never printed
    assert wrong.stderr.startswith("broker: auth_failed: ")

    operator = subprocess.run(
        [sys.executable, "-m", "broker", "mcp", "--operator", "--print-config", "--json"],
        env=env_for(store),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert operator.returncode == 0, operator.stderr
    assert len(operator.stdout.splitlines()) == 1  # --json: one line
    op_entry = json.loads(operator.stdout)["mcpServers"]["broker-operator"]
    assert op_entry["args"][-2:] == ["mcp", "--operator"]
    assert set(op_entry["env"]) == {"BROKER_URL"}  # no key is ever printed
