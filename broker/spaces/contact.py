"""Contact policies (S38): who may message a participant directly.

``open`` (the default): anyone. ``parent-and-lead``: the participant's parent
and the lead. ``listed``: the addresses on its list. ``closed``: nobody. The
operator and the lead are never blocked; broadcasts, posts and directives are
not direct messages and follow S6/S24 unchanged. A blocked recipient is logged
``not_reached`` with reason ``contact_policy`` (S7): nothing is dropped silently.
"""

from __future__ import annotations

import json
from typing import Any

from broker import errors
from broker.model.records import ContactPolicy
from broker.spaces.auth import Identity, caller
from broker.store.sql import stmt
from broker.store.sqlite import Store, Tx

POLICIES = ("open", "parent-and-lead", "listed", "closed")
_GET = stmt("contact.get_policy")
MAX_LISTED = 256


def check(policy: str, allow: list[str] | None) -> ContactPolicy:
    """Validate a policy at the edge (S33)."""
    if policy not in POLICIES:
        raise errors.InvalidInput(
            f"bad policy {policy!r}: use {', '.join(POLICIES)}", field="policy"
        )
    names = list(dict.fromkeys(allow or []))
    if names and policy != "listed":
        raise errors.InvalidInput("an allow list goes with the 'listed' policy only", field="allow")
    if len(names) > MAX_LISTED:
        raise errors.InvalidInput(f"bad allow list: at most {MAX_LISTED} addresses", field="allow")
    for name in names:
        if not isinstance(name, str) or not 0 < len(name) <= 200 or not name.isprintable():
            raise errors.InvalidInput(f"bad address {name!r} in the allow list", field="allow")
    return ContactPolicy(policy, names)


def row_params(p: ContactPolicy) -> dict[str, Any]:
    return {
        "policy": None if p.policy == "open" else p.policy,
        "allow": json.dumps(p.allow) if p.policy == "listed" else None,
    }


def get(store: Store, ident: Identity, *, tx: Tx | None = None) -> ContactPolicy:
    """The caller's own policy."""
    with store.read(tx) as t:
        caller(t, ident)
        row = t.one(_GET, {"participant_id": ident.participant_id})
    allow = row["contact_allow"]
    return ContactPolicy(row["contact_policy"] or "open", json.loads(allow) if allow else [])


def set_policy(
    store: Store,
    ident: Identity,
    policy: str,
    allow: list[str] | None = None,
    *,
    tx: Tx | None = None,
) -> ContactPolicy:
    """Set the caller's own policy: only a participant sets its own (S38)."""
    from broker.spaces.participants import write_contact_policy

    checked = check(policy, allow)
    with store.write(tx) as t:
        caller(t, ident, store.now_ts())
        write_contact_policy(t, ident.participant_id, row_params(checked))
    return checked
