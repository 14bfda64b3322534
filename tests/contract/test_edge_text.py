"""S33 at the API edge, on both backends: text that a store cannot hold, types
that are not what the parameter says, and numbers that are in range but
useless.

- NUL (U+0000) is refused in every text argument as ``invalid_input`` naming
  the field, on SQLite as on PostgreSQL (whose text cannot hold it: it was a
  ``store_error`` there and stored as given on SQLite), on every surface and
  in the importer's input.
- The Python API checks types strictly, ``**kwargs`` too (join fields, space
  settings): a bool is not a number, text is not a number, a number is not a
  bool; whole numbers fit 64 bits; a ``since`` is a real time.
- The decimal settings and durations have a smallest value (S30, S22); counts
  taken from shares are exact for decimal inputs (S30).
- Case and width variants of the reserved words cannot be joined (S3, S29).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trusted
from sqlrows import spaces_as_read

from broker import Agent, Operator, Store, errors
from broker.interchange.importer import ImportFailed
from broker.spaces import addressing
from broker.store.settings import Limits

TABLES = (
    "spaces",
    "participants",
    "participant_events",
    "messages",
    "deliveries",
    "board_claims",
    "claim_journal",
    "reservations",
    "transcript",
)


def written(store: Store) -> tuple[Any, ...]:
    """Row counts of every table a refused call could write, and the space counters."""
    with store.read() as t:
        counts = tuple(int(t.one(f"SELECT count(*) FROM {name}")[0]) for name in TABLES)
        counters = tuple(
            t.one(f"SELECT sum(last_seq), sum(log_bytes) FROM {spaces_as_read(store)}")
        )
    return counts + counters


def assert_refusals(
    store: Store, cases: list[tuple[Callable[[], Any], str, str]], error: type[Exception]
) -> None:
    """Each call is refused with ``error`` naming its field, words in its
    message, and nothing written."""
    before = written(store)
    for call, field, words in cases:
        with pytest.raises(error) as info:
            call()
        assert isinstance(info.value, errors.BrokerError)
        assert info.value.fields.get("field") == field, (field, str(info.value))
        assert words in str(info.value), (words, str(info.value))
        assert written(store) == before, str(info.value)


# --- NUL ---------------------------------------------------------------------------------
def test_S33_nul_in_any_text_argument_is_invalid_input_naming_the_field_on_both_backends(
    store: Store, space: str, operator: Operator, join: Callable[..., Agent]
) -> None:
    lynx = join("flow/lynx")
    otter = join("flow/otter")
    lynx.send("otter", "to be claimed")
    lease = otter.claim()
    message_id = lease.deliveries[0].id
    key = trusted.credential(store).operator_key
    nul = "a\x00b"
    cases: list[tuple[Callable[[], Any], str, str]] = [
        (lambda: lynx.send("otter", nul), "text", "NUL"),
        (lambda: lynx.send("otter", "hi", idempotency_key=nul), "idempotency_key", "NUL"),
        (lambda: lynx.send("otter", "hi", thread=nul), "thread", "NUL"),
        (lambda: lynx.send(["otter", nul], "hi"), "to", "NUL"),
        (lambda: lynx.post(nul), "text", "NUL"),
        (lambda: lynx.directive("otter", nul), "text", "NUL"),
        (lambda: operator.send(space, nul), "text", "NUL"),
        (lambda: operator.send(space, "hi", idempotency_key=nul), "idempotency_key", "NUL"),
        (lambda: otter.claim(owner=nul), "owner", "NUL"),
        (lambda: otter.release(lease.lease_token, error=nul), "error", "NUL"),
        (lambda: otter.quarantine(lease.lease_token, message_id, nul), "reason", "NUL"),
        (lambda: lynx.reserve("src/**", reason=nul), "reason", "NUL"),
        (lambda: lynx.claim_key(nul), "key", "NUL"),
        (lambda: lynx.set_contact_policy("listed", [nul]), "allow", "NUL"),
        (lambda: lynx.search(nul), "query", "NUL"),
        # join fields arrive as **fields: checked by their own names
        (lambda: Agent.join(store, space, "flow/fox", operator_key=key, task=nul), "task", "NUL"),
        (lambda: Agent.join(store, space, "flow/fox", operator_key=key, role=nul), "role", "NUL"),
        (
            lambda: Agent.join(store, space, "flow/fox", operator_key=key, tools=[nul]),
            "tools",
            "NUL",
        ),
        (lambda: Agent.join(store, space, nul, operator_key=key), "codename", "NUL"),
        (lambda: operator.join(space, "flow/fox", agent=nul), "agent", "NUL"),
        (lambda: operator.create_space("session", **{nul: 1}), "settings", "NUL"),
    ]
    assert_refusals(store, cases, errors.InvalidInput)


def test_S33_a_batch_with_nul_in_an_item_is_refused_naming_the_item_on_both_backends(
    store: Store, join: Callable[..., Agent]
) -> None:
    lynx = join("flow/lynx")
    join("flow/otter")
    before = written(store)
    items = [{"to": ["otter"], "text": "fine"}, {"to": ["otter"], "text": "a\x00b"}]
    with pytest.raises(errors.InvalidInput) as info:
        lynx.send_many(items)
    assert info.value.fields == {"field": "items[1].text", "item": 1}
    assert str(info.value).startswith("bad items[1].text: ") and "NUL" in str(info.value)
    with pytest.raises(errors.InvalidInput) as info:
        lynx.send_many([{"to": ["otter"], "text": "x", "idempotency_key": "k\x00"}])
    assert info.value.fields == {"field": "items[0].idempotency_key", "item": 0}
    assert written(store) == before


def test_S33_the_cli_refuses_nul_in_a_body_as_invalid_input(
    store: Store, space: str, cli: Callable[..., Any]
) -> None:
    _, joined = trusted.join(store, space, "flow/lynx")
    trusted.join(store, space, "flow/otter")
    env = {"BROKER_SPACE": space, "BROKER_AS": "lynx", "BROKER_TOKEN": joined.token}
    before = written(store)
    res = cli("msg", "send", "--to", "otter", "-", "--json", env=env, input="a\x00b")
    assert res.code == 2, res.err
    assert "invalid_input" in res.err and "NUL" in res.err
    res = cli("message", "send", space, "-", env=env, input="a\x00b")
    assert res.code == 2 and "invalid_input" in res.err, res.err
    assert written(store) == before


def test_S33_an_import_with_nul_in_a_field_is_import_failed_naming_the_line(
    store: Store, operator: Operator, join: Callable[..., Agent], tmp_path: Path, db_url: str
) -> None:
    lynx = join("flow/lynx")
    join("flow/otter")
    lynx.send("otter", "hello")
    space = lynx.space_id
    operator.export_space(space, tmp_path / "out")
    log = next((tmp_path / "out").rglob("log.jsonl"))
    lines = log.read_text().splitlines()
    obj = json.loads(lines[0])
    obj["body"] = "a\x00b"  # json.dumps writes it as \u0000
    lines[0] = json.dumps(obj)
    log.write_text("\n".join(lines) + "\n")
    operator.archive_space(space)
    operator.purge_space(space, tmp_path / "kept")
    before = written(store)
    with pytest.raises(ImportFailed) as info:
        operator.import_dir(tmp_path / "out")
    assert info.value.code == "import_failed"
    assert info.value.fields["problems"][0].endswith(
        "log.jsonl:1: body is not text a store can hold (a NUL (U+0000) character)"
    )
    assert written(store) == before


def test_S33_a_mail_file_holding_nul_is_import_failed_naming_its_line(
    store: Store, operator: Operator, tmp_path: Path
) -> None:
    mail = tmp_path / "swarm" / "mail"
    (mail / "dir").mkdir(parents=True)
    (mail / "dir" / "lynx.txt").write_text("id: lynx\nrole: worker\n")
    (mail / "lynx" / "inbox").mkdir(parents=True)
    (mail / "lynx" / "inbox" / "01_ok_aaaaaa.txt").write_bytes(
        b"To: lynx\nFrom: otter\nSubject: s\n---\nline one\nline\x00two\n"
    )
    before = written(store)
    with pytest.raises(ImportFailed) as info:
        operator.import_dir(tmp_path / "swarm")
    assert info.value.fields["problems"] == [
        "mail/lynx/inbox/01_ok_aaaaaa.txt:6: holds a NUL (U+0000) character"
    ]
    assert written(store) == before


# --- strict types ------------------------------------------------------------------------
def test_S33_the_python_api_checks_types_strictly_kwargs_included(
    store: Store, space: str, operator: Operator, join: Callable[..., Agent]
) -> None:
    lynx = join("flow/lynx")
    key = trusted.credential(store).operator_key

    def joining(**fields: Any) -> Callable[[], Any]:
        return lambda: Agent.join(store, space, "flow/fox", operator_key=key, **fields)

    cases: list[tuple[Callable[[], Any], str, str]] = [
        (joining(pid=2**70), "pid", "1 to 9223372036854775807"),
        (joining(pid="123"), "pid", "a whole number"),
        (joining(pid=True), "pid", "a whole number"),
        (joining(pid=0), "pid", "bad pid 0: 1 to 9223372036854775807"),
        (joining(lead="yes"), "lead", "true or false"),
        (joining(messaging=0), "messaging", "true or false"),
        (joining(tools="msg.send"), "tools", "a list"),
        (lambda: operator.join(space, "flow/fox", pid=1.5), "pid", "a whole number"),
        (lambda: operator.set_space(space, inbox_cap=True), "inbox_cap", "a whole number"),
        (lambda: operator.set_space(space, inbox_cap="5"), "inbox_cap", "a whole number"),
        (lambda: operator.set_space(space, inbox_cap=5.0), "inbox_cap", "a whole number"),
        (lambda: operator.set_space(space, log_max_mb="1"), "log_max_mb", "a number is needed"),
        (
            lambda: operator.set_space(space, sender_share=True),
            "sender_share",
            "a number is needed",
        ),
        (
            lambda: operator.create_space("session", max_deliveries="3"),
            "max_deliveries",
            "whole number",
        ),
        (lambda: operator.search(space, "x", since="garbage"), "since", "ISO-8601"),
        (lambda: operator.search(space, "x", since="2026-02-30"), "since", "not a real time"),
        (lambda: lynx.search("x", since="yesterday"), "since", "ISO-8601"),
        (lambda: operator.log(space, since="garbage"), "since", "ISO-8601"),
        (lambda: next(operator.follow(space, since="soon")), "since", "ISO-8601"),
        (lambda: operator.log(space, after=2**70), "after", "a whole number within 64 bits"),
        (lambda: lynx.reserve({"src/**"}), "patterns", "a list, not set"),
        (lambda: lynx.reserve(["a", 5]), "patterns", "bad patterns.1: text, not a number"),
    ]
    assert_refusals(store, cases, errors.InvalidInput)


def test_S33_a_since_with_an_offset_or_a_bare_date_is_read_as_utc(
    space: str, operator: Operator, join: Callable[..., Agent]
) -> None:
    lynx = join("flow/lynx")
    join("flow/otter")
    sent = lynx.send("otter", "findable words")
    at = operator.log(space)[-1].created_at_utc
    assert [e.id for e in operator.log(space, since=at)] == [sent.id]
    assert operator.log(space, since="2999-01-01") == []
    assert [e.id for e in operator.log(space, since="2000-01-01T00:00:00+05:00")] == [sent.id]
    assert [h.id for h in operator.search(space, "findable", since=at[:10])] == [sent.id]


# --- smallest values and exact shares (S30) ----------------------------------------------
def test_S30_decimal_settings_have_a_smallest_value_and_usage_never_divides_by_zero(
    store: Store, operator: Operator
) -> None:
    sid = operator.create_space("session").id
    cases: list[tuple[Callable[[], Any], str, str]] = [
        (lambda: operator.create_space("session", log_max_mb=1e-7), "log_max_mb", "0.0001"),
        (lambda: operator.set_space(sid, log_max_mb=1e-300), "log_max_mb", "0.0001"),
        (lambda: operator.set_space(sid, lease_seconds=1e-9), "lease_seconds", "0.001"),
        (lambda: operator.set_space(sid, sender_share=1e-9), "sender_share", "0.001"),
    ]
    assert_refusals(store, cases, errors.InvalidInput)
    # The smallest log there is: a send fills it, and its usage still reads.
    small = operator.create_space("session", log_max_mb=0.0001, sender_share=0.001).id
    a, _ = trusted.join(store, small, "lynx")
    trusted.join(store, small, "otter")
    a.send("otter", "x" * 50)
    usage = operator.space_usage(small)
    assert usage.log_cap_bytes == 104  # 0.0001 MiB, rounded down
    assert usage.sender_inbox_cap == 1
    assert [u.sender for u in usage.top_senders] == ["lynx"]
    assert usage.top_senders[0].share > 0


def test_S22_a_ttl_or_lease_below_a_millisecond_is_refused_not_granted_expired(
    store: Store, join: Callable[..., Agent]
) -> None:
    lynx = join("flow/lynx")
    otter = join("flow/otter")
    lynx.send("otter", "work")
    grant = lynx.claim_key("held")
    cases: list[tuple[Callable[[], Any], str, str]] = [
        (lambda: lynx.claim_key("k", ttl=1e-9), "ttl", "at least 0.001"),
        (lambda: lynx.renew_key("held", grant.fence, ttl=1e-9), "ttl", "at least 0.001"),
        (lambda: lynx.reserve("src/**", ttl=0.0005), "ttl", "at least 0.001"),
        (lambda: otter.claim(lease=1e-6), "lease", "at least 0.001"),
    ]
    assert_refusals(store, cases, errors.InvalidInput)
    assert lynx.claim_key("k", ttl=0.001).key == "k"  # the smallest is granted


@pytest.mark.parametrize(("share", "count"), [(0.29, 29), (0.57, 57), (0.58, 58), (0.07, 7)])
def test_S30_a_senders_inbox_share_is_exact_for_decimal_shares(
    store: Store, operator: Operator, share: float, count: int
) -> None:
    sid = operator.create_space("session", inbox_cap=100, sender_share=share).id
    a, _ = trusted.join(store, sid, "lynx")
    trusted.join(store, sid, "otter")
    assert operator.space_usage(sid).sender_inbox_cap == count
    results = a.send_many([{"to": ["otter"], "text": f"m{n}"} for n in range(count + 1)])
    assert [r.reached for r in results[:count]] == [["otter"]] * count
    assert results[count].reached == []
    assert [n.reason for n in results[count].not_reached] == ["sender_share"]


def test_S30_every_share_in_hundredths_gives_its_exact_count() -> None:
    for n in range(1, 101):
        share = float(f"{n / 100:.2f}")
        assert Limits(inbox_cap=100, sender_share=share).sender_inbox_cap() == n, share
        assert Limits(inbox_cap=1000, sender_share=share).sender_inbox_cap() == 10 * n, share


# --- reserved words (S3, S29) ------------------------------------------------------------
@pytest.mark.parametrize(
    "codename",
    [
        "flow/Operator",
        "flow/OPERATOR",
        "Lead",
        "flow/lead",
        "flow/BroadCast",
        "PARENT",
        "ＬＥＡＤ",
        "flow/operator#1",
        "OPERATOR#2",
        "lead#1",
    ],
)
def test_S3_no_case_or_width_variant_of_a_reserved_word_can_be_joined(
    store: Store, space: str, codename: str
) -> None:
    before = written(store)
    with pytest.raises(errors.InvalidInput) as info:
        trusted.join(store, space, codename)
    assert info.value.fields.get("field") == "codename"
    assert written(store) == before


def test_S29_the_join_and_the_importer_share_one_list_of_reserved_words() -> None:
    from broker.interchange.importer import checks

    assert {"operator", "broadcast", "parent", "lead"} == addressing.RESERVED
    for word in ("Operator", "BROADCAST", "Parent", "Lead", "ｏｐｅｒａｔｏｒ"):
        assert addressing.reads_reserved(word)
        with pytest.raises(Exception, match="is reserved"):
            checks.check_participant_address(word)
    checks.check_participant_address("lead")  # the lead's own address, made by the lead flag
    checks.check_participant_address("leader")
    checks.check_participant_address("operator_2")
    with pytest.raises(Exception, match="is reserved"):
        checks.check_participant_address("Operator#3")  # a unit index aside, it reads "operator"


# --- refusals that name what they are about (S12, S7) -----------------------------------
def test_S12_S45_a_key_another_sender_used_is_another_key_and_names_nobody(
    store: Store, join: Callable[..., Agent]
) -> None:
    lynx = join("flow/lynx")
    otter = join("flow/otter")
    first = lynx.send("otter", "first", idempotency_key="k1")
    second = otter.send("lynx", "second", idempotency_key="k1")  # otter's own k1: no oracle
    assert second.id != first.id and not second.duplicate
    # Each sender's repeat is its own first send; a different text is a conflict
    # that names the key and what differs, never another sender.
    assert otter.send("lynx", "second", idempotency_key="k1").id == second.id
    before = written(store)
    with pytest.raises(errors.Conflict) as info:
        otter.send("lynx", "third", idempotency_key="k1")
    assert "lynx" not in str(info.value) and "used_by" not in info.value.fields
    assert info.value.fields["field"] == "idempotency_key"
    assert written(store) == before


def test_S7_a_body_over_the_cap_names_the_text_field(store: Store, operator: Operator) -> None:
    sid = operator.create_space("session", body_max_bytes=10).id
    a, _ = trusted.join(store, sid, "lynx")
    trusted.join(store, sid, "otter")
    before = written(store)
    with pytest.raises(errors.BodyTooLarge) as info:
        a.send("otter", "x" * 11)
    assert info.value.fields == {"field": "text", "size": 11, "cap": 10}
    assert written(store) == before
