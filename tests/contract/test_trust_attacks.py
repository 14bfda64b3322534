"""The fresh attack pass of Trust II (S45): what broke when an agent holding
only its own credentials (its token, the join key) attacked a served swarm,
each fixed as a class, on both backends where a store is involved.

- a reply (``reply_to``) to a message the replier never saw confirmed that
  the message existed and put the reply in its private thread;
- an address that reads like another (``Victim`` beside ``victim``) joined;
- a request with two ``Authorization`` headers was answered as whichever
  header each parser picked (the REST handler the first, the budget the last).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trusted

from broker import Agent, Operator, Store, errors
from broker.delivery import inbox

TOKENS: dict[str, str] = {}


def count_rows(store: Store) -> dict[str, int]:
    """Rows of the tables a send or a join writes (both backends)."""
    tables = ("messages", "deliveries", "participants", "participant_events", "transcript")
    with store.read() as t:
        return {name: t.one(f"SELECT count(*) FROM {name}")[0] for name in tables}


@pytest.fixture
def swarm(store: Store) -> tuple[str, Agent, Agent, Agent]:
    sid = Operator(store).create_space("session").id
    victim, joined = trusted.join(store, sid, "victim")
    TOKENS["victim"] = joined.token
    mallory, _ = trusted.join(store, sid, "mallory")
    boss, _ = trusted.join(store, sid, "boss")
    return sid, victim, mallory, boss


# --- a reply names only a message its sender can see -------------------------------------------
def test_S45_a_reply_to_a_message_the_sender_never_saw_reads_as_no_message(
    store: Store, swarm: tuple[str, Agent, Agent, Agent]
) -> None:
    sid, victim, mallory, boss = swarm
    private = victim.send("boss", "prod db password is s3cr3t", thread="secrets").id
    missing = "01ZZZZZZZZZZZZZZZZZZZZZZZZ"
    before = count_rows(store)
    texts = []
    for target in (private, missing):
        with pytest.raises(errors.MessageNotFound) as info:
            mallory.send("boss", "what was that?", reply_to=target)
        texts.append(str(info.value).replace(target, "ID"))
    assert texts[0] == texts[1]  # no oracle: a message not seen reads as none at all
    assert count_rows(store) == before
    # What the replier sent, what reached it, and the board: replies as before.
    to_me = boss.send("mallory", "for you").id
    mine = mallory.send("boss", "mine").id
    post = victim.post("on the board").id
    for parent in (to_me, mine, post):
        mallory.send("boss", "re", reply_to=parent)
    broadcast = victim.send("broadcast", "all hands").id
    mallory.send("boss", "re", reply_to=broadcast)
    # The operator sees the whole space.
    reply = Operator(store).send(sid, "noted", to=["victim"], reply_to=private)
    with store.read() as t:
        assert t.one("SELECT thread FROM messages WHERE id = ?", (reply.id,))[0] == "secrets"


# --- addresses that read alike -----------------------------------------------------------------
@pytest.mark.parametrize("name", ["Victim", "VICTIM", "vict1m", "VlCTIM", "victirn", "v1ctlm"])
def test_S45_a_new_address_that_reads_like_another_is_refused(
    store: Store, swarm: tuple[str, Agent, Agent, Agent], name: str
) -> None:
    sid = swarm[0]
    before = count_rows(store)
    with pytest.raises(errors.InvalidInput) as info:
        trusted.join(store, sid, name)
    assert (info.value.message, info.value.fields) == (
        f"address {name!r} reads like 'victim', already in this space: "
        "pick a codename that reads differently",
        {"field": "codename"},
    )
    assert count_rows(store) == before


def test_S45_a_rejoin_and_an_address_that_reads_differently_still_join(
    store: Store, swarm: tuple[str, Agent, Agent, Agent]
) -> None:
    sid = swarm[0]
    _, again = trusted.join(store, sid, "victim", token=TOKENS["victim"])  # a re-join (S40)
    assert again.address == "victim"
    assert trusted.join(store, sid, "victor")[1].address == "victor"
    assert trusted.join(store, sid, "victim#2")[1].address == "victim#2"


# --- one request, one credential ---------------------------------------------------------------
@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[object, str, str]]:
    from served import Server

    srv = Server(tmp_path / "home")
    try:
        with srv.operator() as op:
            sid = op.post("/api/spaces", json={"kind": "session"}).json()["id"]
            joined = op.post(f"/api/sessions/{sid}/participants", json={"codename": "mallory"})
            assert joined.status_code == 201, joined.text
        yield srv, sid, joined.json()["token"]
    finally:
        srv.stop()


@pytest.mark.sqlite_only
def test_S45_two_authorization_headers_are_no_credential_on_every_surface(
    served: tuple[object, str, str],
) -> None:
    srv, sid, token = served
    base, key = srv.base, srv.key  # type: ignore[attr-defined]
    one = {"Authorization": f"Bearer {token}"}
    twice = [("Authorization", f"Bearer {token}"), ("Authorization", f"Bearer {key}")]
    twice_op = [("Authorization", f"Bearer {key}"), ("Authorization", f"Bearer {token}")]
    send = f"{base}/api/sessions/{sid}/agent/send"
    body = {"to": "mallory", "text": "hi"}
    assert httpx.post(send, json=body, headers=one).status_code == 200
    for headers in (twice, twice_op):
        r = httpx.post(send, json=body, headers=headers)
        assert r.status_code == 401 and r.json()["error"] == "auth_failed", r.text
        r = httpx.get(f"{base}/api/spaces", headers=headers)
        assert r.status_code == 401 and r.json()["error"] == "auth_failed", r.text
        r = httpx.get(f"{base}/api/me", headers=headers)
        assert r.status_code == 401, r.text
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        },
    }
    mcp_headers = [("Accept", "application/json, text/event-stream")]
    r = httpx.post(f"{base}/mcp", json=init, headers=[*twice, *mcp_headers])
    assert r.status_code == 401, r.text
    r = httpx.post(f"{base}/mcp", json=init, headers=[*one.items(), *mcp_headers])
    assert r.status_code == 200, r.text


# --- a lease's owner names the claimer, never someone else --------------------------------------
def lease_rows(store: Store) -> list[tuple[object, ...]]:
    with store.read() as t:
        rows = t.all("SELECT rowid, state, lease_token, lease_owner FROM deliveries ORDER BY rowid")
        return [tuple(r) for r in rows]


@pytest.mark.parametrize(
    "owner",
    ["operator", "OPERATOR", "Ｏperator\u200b", "operator#2", "lead", "x>operator", "victim",
     "Victim:4242", "v1ctim", "work for victim", "boss:1"],
)  # fmt: skip
def test_S45_a_lease_owner_that_reads_as_someone_else_is_refused_and_nothing_is_written(
    store: Store, swarm: tuple[str, Agent, Agent, Agent], owner: str
) -> None:
    sid, victim, mallory, boss = swarm
    boss.send("mallory", "for mallory")
    before, rows = count_rows(store), lease_rows(store)
    with pytest.raises(errors.InvalidInput) as info:
        mallory.claim(owner=owner)
    assert info.value.fields == {"field": "owner"}
    message = str(info.value)
    assert "\n" not in message and "never another participant or the operator" in message
    assert (count_rows(store), lease_rows(store)) == (before, rows)
    first = mallory.claim()  # the default owner claims it
    mallory.ack(first.lease_token)
    boss.send("mallory", "again")
    rows = lease_rows(store)
    with pytest.raises(errors.InvalidInput) as info:
        inbox.ack_and_claim(store, mallory.identity, first.lease_token, owner=owner)
    assert info.value.fields == {"field": "owner"}
    assert lease_rows(store) == rows


@pytest.mark.parametrize(
    ("owner", "who"),
    [
        ("x>operator", "the broker's reserved name 'operator'"),
        ("work for victim", "participant 'victim'"),
        # the default form <address>:<pid> is the claimer's own only when the
        # address before the last colon is the claimer's
        ("mallory:victim:1", "participant 'victim'"),
    ],
)
def test_S45_a_refused_lease_owner_says_in_one_exact_line_whom_it_reads_as(
    store: Store, swarm: tuple[str, Agent, Agent, Agent], owner: str, who: str
) -> None:
    sid, victim, mallory, boss = swarm
    boss.send("mallory", "for mallory")
    rows = lease_rows(store)
    with pytest.raises(errors.InvalidInput) as info:
        mallory.claim(owner=owner)
    assert (str(info.value), info.value.fields) == (
        f"owner {owner!r} reads as {who}: a lease's owner names you (mallory) or a worker "
        "of yours, never another participant or the operator",
        {"field": "owner"},
    )
    assert lease_rows(store) == rows


def test_S45_a_claimer_whose_address_is_digits_cannot_pass_another_off_as_its_default_owner(
    store: Store, swarm: tuple[str, Agent, Agent, Agent]
) -> None:
    # "victim:4242" has the default form <address>:<pid>, but the address is the
    # part before the colon: it reads as victim, whoever 4242 is.
    sid, victim, mallory, boss = swarm
    digits, _ = trusted.join(store, sid, "4242")
    boss.send("4242", "for 4242")
    with pytest.raises(errors.InvalidInput) as info:
        digits.claim(owner="victim:4242")
    assert info.value.fields == {"field": "owner"}
    assert "reads as participant 'victim'" in str(info.value)
    assert digits.claim(owner="4242:7").owner == "4242:7"  # its own default form


def test_S45_a_claimers_default_owner_is_its_own_even_when_its_pid_is_another_participants_address(
    store: Store, swarm: tuple[str, Agent, Agent, Agent]
) -> None:
    # "mallory:4242" is mallory's default form <address>:<pid>, not read word by
    # word: that 4242 is also a participant's address refuses nothing.
    sid, victim, mallory, boss = swarm
    trusted.join(store, sid, "4242")
    boss.send("mallory", "for mallory")
    got = mallory.claim(owner="mallory:4242")
    assert (got.owner, len(got.deliveries)) == ("mallory:4242", 1)
    with pytest.raises(errors.InvalidInput) as info:  # in any other form it is read
        mallory.claim(owner="mallory for 4242")
    assert "reads as participant '4242'" in str(info.value)


@pytest.mark.parametrize("owner", ["mallory", "MALLORY:7", "mallory-batch", "worker-3", "w 2"])
def test_S45_a_lease_owner_of_the_claimers_own_is_taken_and_shown(
    store: Store, swarm: tuple[str, Agent, Agent, Agent], owner: str
) -> None:
    sid, victim, mallory, boss = swarm
    boss.send("mallory", "for mallory")
    got = mallory.claim(owner=owner)
    assert (got.owner, len(got.deliveries)) == (owner, 1)
    assert [r[3] for r in lease_rows(store) if r[1] == "processing"] == [owner]
    boss.send("mallory", "next")
    again = inbox.ack_and_claim(store, mallory.identity, got.lease_token, owner=owner)
    assert (again.owner, len(again.deliveries)) == (owner, 1)


@pytest.mark.sqlite_only
def test_S45_a_lease_owner_that_reads_as_the_operator_is_refused_over_http(
    served: tuple[object, str, str],
) -> None:
    srv, sid, token = served
    base, key = srv.base, srv.key  # type: ignore[attr-defined]
    claim = f"{base}/api/sessions/{sid}/agent/inbox/claim"
    headers = {"Authorization": f"Bearer {token}"}
    sent = httpx.post(
        f"{base}/api/sessions/{sid}/messages",
        json={"to": ["mallory"], "text": "hi"},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert sent.status_code in (200, 201), sent.text
    r = httpx.post(claim, json={"owner": "Operator"}, headers=headers)
    assert r.status_code == 422 and r.json()["error"] == "invalid_input", r.text
    assert r.json()["field"] == "owner" and "\n" not in r.json()["message"]
    r = httpx.post(claim, json={"owner": "mallory:1"}, headers=headers)
    assert r.status_code == 200 and len(r.json()["deliveries"]) == 1, r.text
