"""S33: a refused input names its field, as a ``field`` the caller can read.

The text says what is wrong; ``field`` says where, for a program (the HTTP
422 body, an MCP tool error, ``--json`` on the CLI all carry it). These are
the refusals the earlier sweeps (send and post input, search, the HTTP query,
the operator's log) had left with the name in the text only: join codenames
and tools, contact policies, post addresses, the operator's send options,
directive ids, thread conflicts, board keys, space kinds and settings, run
ids, the log's exclusive arguments and a follow's idle timeout; then NUL in
text, lax types (join fields, settings), a ``since`` that is no time, values
too small to mean anything and reserved words in another case. Each refusal
also writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import trusted

from broker import Agent, Operator, Store, errors
from broker.spaces import participants


def _written(store: Store) -> tuple[int, ...]:
    """Row counts of the tables a refused call could have written."""
    with store.read() as t:
        return tuple(
            int(t.one(f"SELECT count(*) FROM {table}")[0])
            for table in ("spaces", "participants", "messages", "deliveries", "board_claims")
        )


def test_S33_each_refusal_names_its_field_and_writes_nothing(
    store: Store, space: str, operator: Operator, join: Callable[..., Agent]
) -> None:
    lynx = join("flow/lynx")
    sent = lynx.send("lynx", "the first", thread="alpha")
    cases: list[tuple[Callable[[], Any], str, str]] = [
        # joining (S2, S24)
        (lambda: trusted.join(store, space, "flow/a b"), "codename", "bad segment"),
        (lambda: trusted.join(store, space, "flow/operator"), "codename", "reserved"),
        (lambda: trusted.join(store, space, "  "), "codename", "codename"),
        (lambda: trusted.join(store, space, "flow/x", tools=["msg.nope"]), "tools", "unknown"),
        (
            lambda: trusted.join(store, space, "flow/x", messaging=False, tools=["msg.send"]),
            "tools",
            "contradict",
        ),
        # the contact policy (S38)
        (lambda: lynx.set_contact_policy("friends"), "policy", "bad policy"),
        (lambda: lynx.set_contact_policy("open", ["otter"]), "allow", "'listed'"),
        (lambda: lynx.set_contact_policy("listed", ["\x1b[2J"]), "allow", "allow list"),
        (lambda: lynx.set_contact_policy("listed", [f"a{i}" for i in range(257)]), "allow", "256"),
        # board posts, directives, claims (S21, S22, S35)
        (lambda: lynx.post("hello", addressed_to=["role:"]), "addressed_to", "bad role name"),
        (lambda: lynx.post("hello", addressed_to=["broadcast"]), "addressed_to", "'broadcast'"),
        (lambda: lynx.retract("   "), "directive_id", "retract"),
        (lambda: lynx.claim_key("a..b"), "key", "'..'"),
        (lambda: lynx.claim_key("a b"), "key", "letters"),
        (lambda: lynx.send("lynx", "re", reply_to=sent.id, thread="beta"), "thread", "stays"),
        # the operator (S17, S30)
        (lambda: Operator(store, via="fax").send(space, "hi"), "via", "fax"),
        (lambda: operator.send(space, "hi", via="cli"), "via", "unexpected keyword"),
        (lambda: operator.send(space), "text", "missing"),
        (lambda: operator.set_space(space), "settings", "no setting"),
        (lambda: operator.log("bad id!"), "run_id", "bad run id"),
        (lambda: operator.log(space, limit=1, tail=1), "tail", "exclude"),
        (lambda: list(operator.follow(space, idle_timeout=-1.0)), "idle_timeout", "finite"),
        (
            lambda: participants.set_status(store, lynx.identity.participant_id, "x"),
            "status",
            "bad status",
        ),
        # text a store cannot hold, strict types, smallest values (S3, S22, S30, S33)
        (lambda: lynx.send("lynx", "a\x00b"), "text", "NUL"),
        (lambda: trusted.join(store, space, "flow/x", task="a\x00b"), "task", "NUL"),
        (
            lambda: trusted.join(store, space, "flow/x", pid=2**70),
            "pid",
            "1 to 9223372036854775807",
        ),
        (lambda: trusted.join(store, space, "flow/x", lead="yes"), "lead", "true or false"),
        (lambda: trusted.join(store, space, "flow/Operator"), "codename", "reserved"),
        (lambda: operator.set_space(space, inbox_cap=True), "inbox_cap", "whole number"),
        (lambda: operator.set_space(space, log_max_mb=1e-300), "log_max_mb", "0.0001"),
        (lambda: operator.search(space, "x", since="garbage"), "since", "ISO-8601"),
        (lambda: lynx.claim_key("k", ttl=1e-9), "ttl", "at least 0.001"),
        (lambda: lynx.reserve({"src/**"}), "patterns", "a list, not set"),
        (lambda: lynx.reserve(["a", 5]), "patterns", "bad patterns.1: text"),  # the record
        (lambda: operator.log(space, after=2**70), "after", "within 64 bits"),
    ]
    before = _written(store)
    for call, field, words in cases:
        with pytest.raises(errors.InvalidInput) as info:
            call()
        assert info.value.fields.get("field") == field, (field, str(info.value))
        assert words in str(info.value), (words, str(info.value))
        assert _written(store) == before, str(info.value)


def test_S33_a_call_that_does_not_bind_names_the_argument_when_it_is_one(
    store: Store, space: str, join: Callable[..., Agent]
) -> None:
    lynx = join("flow/lynx")
    cases: list[tuple[Callable[[], Any], str | None, str]] = [
        (lambda: lynx.send("lynx", "hi", priority="high"), "priority", "unexpected keyword"),
        (lambda: lynx.send("lynx"), "text", "missing"),
        (lambda: lynx.send(text="hi"), "to", "missing"),
        # the one bind's own message names, when the call is wrong twice
        (lambda: lynx.send(to="lynx", priority="high"), "text", "missing"),
        (lambda: lynx.send("lynx", to="lynx", text="hi"), "to", "multiple values"),
        (lambda: lynx.post("hello", ["lynx"]), None, "too many positional"),  # the whole call
    ]
    for call, field, words in cases:
        with pytest.raises(errors.InvalidInput) as info:
            call()
        assert info.value.fields.get("field") == field, (field, str(info.value))
        assert words in str(info.value), (words, str(info.value))
