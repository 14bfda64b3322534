"""Share groups (S42): shares hold against many identities.

``sender_share`` bounds what one sender holds of the log and of another's
inbox (S30). Identities are cheap, though: whoever holds the join key can
make as many newcomers as it likes, and each participant can admit children
with its own token. So the shares are also held by *groups*, decided by how
each participant was admitted (its latest join, as the participants journal
records it):

- every newcomer the join key admitted is in the one join-key group, which
  holds ``join_key_share`` of the log and of an inbox together;
- a child admitted with its parent's token is in its parent's group: a
  parent answers for the children it lets in (with its own share);
- the lead is a group of its own (with its children), and so is each
  participant the operator admitted (the operator vouched for it alone);
- the operator is no group: it is never refused for space (S30).

So the newcomers together cannot fill a shared limit, and the lead keeps
room: what the join key's group may hold is ``join_key_share``, the rest is
left to the lead, the operator's own and their children. A join recorded
before admissions were (an old store, an import of one) puts its participant
in a group of its own, as it was.
"""

from __future__ import annotations

from collections.abc import Iterable

from broker.record_type import record
from broker.store.sql import stmts
from broker.store.sqlite import Tx

# How a join was admitted (S27): the reason of its `joined` journal line.
JOIN_KEY = "join key"
OPERATOR_KEY = "operator key"
PARENT_TOKEN = "parent token"
ADMISSIONS = (JOIN_KEY, OPERATOR_KEY, PARENT_TOKEN)
# A re-join with the address's last token alone (S40) continues the address:
# it admits nobody new, and the admission before it stands.
LAST_TOKEN = "last token"

_SQL = stmts("shares", "members", "admissions", "log_bytes", "waiting_by_sender")


@record
class Group:
    """Who answers together with a participant for a share."""

    name: str  # "join key", or the address its group is named after (the root)
    members: frozenset[str]  # addresses
    join_key: bool  # the join key's newcomers: held to join_key_share

    @property
    def shared(self) -> bool:
        """Whether it is more than its one sender's own share (S30 covers that)."""
        return self.join_key or len(self.members) > 1

    def describe(self) -> str:
        if self.join_key:
            return "the participants the join key admitted"
        return f"{self.name} and the participants it admitted"


def groups(t: Tx, space_id: str) -> dict[str, Group]:
    """Every participant's group in a space, by address."""
    rows = t.all(_SQL["members"], {"space_id": space_id})
    admitted: dict[str, str | None] = {}
    for e in t.all(_SQL["admissions"], {"space_id": space_id}):
        if e["reason"] != LAST_TOKEN:  # a continuation keeps the admission before it
            admitted[e["participant_id"]] = e["reason"]  # the latest admission decides
    by_address = {r["address"]: r for r in rows}

    def root(address: str) -> str:
        """The address a participant's group is named after (JOIN_KEY for the newcomers)."""
        seen: set[str] = set()
        while True:
            r = by_address[address]
            how = admitted.get(r["id"])
            if r["is_lead"] or how not in (JOIN_KEY, PARENT_TOKEN):
                return address  # the lead, the operator's own, or an old join
            if how == JOIN_KEY:
                return JOIN_KEY
            parent = r["parent"]
            if parent not in by_address or parent in seen:
                return address  # its parent is not in the space (or a loop of re-joins)
            seen.add(address)
            address = parent

    roots = {a: root(a) for a in by_address}
    members: dict[str, set[str]] = {}
    for a, g in roots.items():
        members.setdefault(g, set()).add(a)
    return {
        a: Group(name=g, members=frozenset(members[g]), join_key=g == JOIN_KEY)
        for a, g in roots.items()
    }


def group_of(t: Tx, space_id: str, address: str) -> Group:
    """The group of one participant (its own alone if it is not in the space)."""
    return groups(t, space_id).get(address) or Group(
        name=address, members=frozenset({address}), join_key=False
    )


def log_bytes(t: Tx, space_id: str, members: Iterable[str]) -> int:
    """What the members hold of the space's log together."""
    wanted = set(members)
    return sum(
        int(r["log_bytes"])
        for r in t.all(_SQL["log_bytes"], {"space_id": space_id})
        if r["sender"] in wanted
    )


def waiting(t: Tx, recipient_id: str, members: Iterable[str]) -> int:
    """The members' deliveries waiting in one inbox together."""
    wanted = set(members)
    return sum(
        int(r["n"])
        for r in t.all(_SQL["waiting_by_sender"], {"recipient_id": recipient_id})
        if r["sender"] in wanted
    )
