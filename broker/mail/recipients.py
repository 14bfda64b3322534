"""Who a send reaches (S6): each ``to`` form resolved to inboxes, or a reason.

A recipient is read with its contact policy (S38), so a direct send needs no
further read to know whether it may reach it. Nothing here writes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from broker.spaces.addressing import Target, agentiflow_address
from broker.store.sql import stmt
from broker.store.sqlite import Tx

OPERATOR = "operator"
_AT_ADDRESS = stmt("messages.at_address")
_LIVE_BY = {"role": stmt("messages.live_by_agent"), "step": stmt("messages.live_by_step")}
_BROADCAST_READERS = stmt("messages.broadcast_readers")
_SPACE_KIND = stmt("messages.space_kind")

# A recipient's contact rule (S38): (policy, the addresses a `listed` one lets in,
# its parent); None when open.
Rule = tuple[str, frozenset[str], str | None] | None


@dataclass(slots=True)
class Sender:
    """Who a send is from: derived from a verified identity, never from input."""

    address: str
    participant_id: str | None  # None for the operator
    parent: str | None = None
    is_lead: bool = False  # the lead and the operator pass every contact policy (S38)


@dataclass(slots=True)
class Outcome:
    """One ``to`` form resolved (or several, merged)."""

    # participant id -> (address, deliveries waiting, contact rule)
    deliver: dict[str, tuple[str, int, Rule]] = field(default_factory=dict)
    reached: list[str] = field(default_factory=list)
    not_reached: list[dict[str, Any]] = field(default_factory=list)
    ring: list[str] = field(default_factory=list)  # broadcast readers to wake
    bcast: bool = False
    # The broadcast cursor of the live reader furthest behind (set with bcast:
    # the readers' rows carry it, so broadcast_cap needs no second read).
    slowest: int = 0

    def merge(self, other: Outcome) -> None:
        self.reached += other.reached
        self.not_reached += other.not_reached
        self.ring += other.ring
        if other.bcast:
            self.bcast, self.slowest = True, other.slowest
        for pid, hit in other.deliver.items():
            self.deliver.setdefault(pid, hit)


def blocks(rule: Rule, sender: str) -> bool:
    """Does this contact rule refuse a direct message from ``sender`` (S38)?"""
    if rule is None:
        return False
    policy, allow, parent = rule
    if policy == "parent-and-lead":
        return sender != parent
    if policy == "listed":
        return sender not in allow
    return True  # closed


def resolve(
    t: Tx, space_id: str, sender: Sender, kind: str, target: Target, known: Any = None
) -> Outcome:
    """Resolve one ``to`` form of a ``kind`` send. ``known``: the participant at
    ``target.value``, already read in ``t`` (``auth.caller_to``)."""
    out = Outcome()
    if target.kind == "broadcast":
        _broadcast(t, space_id, sender, kind, out)
    else:
        _direct(t, space_id, sender, target, out, known)
    return out


def _add(out: Outcome, row: Any, status: str | None = None) -> None:
    pid, address, row_status, waiting, policy, allow, parent = row
    if (status or row_status) == "left":
        out.not_reached.append({"address": address, "reason": "participant_left"})
    elif pid not in out.deliver:
        rule: Rule = None
        if policy is not None:
            rule = (policy, frozenset(json.loads(allow) if allow else ()), parent)
        out.deliver[pid] = (address, waiting, rule)


def _at(t: Tx, space_id: str, address: str) -> Any:
    return t.one(_AT_ADDRESS, {"space_id": space_id, "address": address})


def _agentiflow_codename(t: Tx, space_id: str, codename: str) -> Any:
    """A full codename in an agentiflow: the root run is the lead, so its units'
    addresses drop the lead's segment (``parse_target`` cannot know the kind)."""
    if t.one(_SPACE_KIND, {"space_id": space_id})[0] != "agentiflow":
        return None
    return _at(t, space_id, agentiflow_address(codename))


def _direct(
    t: Tx, space_id: str, sender: Sender, target: Target, out: Outcome, known: Any = None
) -> None:
    if target.kind == "operator":
        out.reached.append(OPERATOR)  # logged only; nobody drains it
        return
    if target.kind in ("address", "name"):
        row = known if known is not None else _at(t, space_id, target.value)
        if row is None and "/" in target.text:
            row = _agentiflow_codename(t, space_id, target.text)
        if row is not None:
            _add(out, row)
            return
        if target.kind == "address":
            out.not_reached.append({"address": target.text, "reason": "unknown_participant"})
            return
        target = Target("role", target.value, target.text)  # a bare name that is not an address
    if target.kind in ("role", "step"):
        rows = t.all(
            _LIVE_BY[target.kind],
            {"space_id": space_id, "value": target.value, "sender": sender.address},
        )
        if not rows:
            out.not_reached.append({"address": target.text, "reason": "no_live_participant"})
        for row in rows:
            _add(out, row)
        return
    if target.kind in ("parent", "lead"):
        address = sender.parent if target.kind == "parent" else "lead"
        row = _at(t, space_id, address) if address else None
        if row is None:
            reason = "no_parent" if target.kind == "parent" else "no_lead"
            out.not_reached.append({"address": target.kind, "reason": reason})
        else:
            _add(out, row)
        return
    raise AssertionError(f"unhandled target kind {target.kind}")


def _broadcast(t: Tx, space_id: str, sender: Sender, kind: str, out: Outcome) -> None:
    rows = t.all(_BROADCAST_READERS, {"space_id": space_id, "sender": sender.address})
    if not rows:
        out.not_reached.append({"address": "broadcast", "reason": "no_live_participant"})
        return
    if kind in ("operator", "directive"):
        # The operator's broadcast is an instruction, not chatter: it goes to every
        # inbox (so it sorts with the operator's messages in a turn, S17). A
        # directive to broadcast records everyone it reaches (no inbox rows, no
        # broadcast-log entry: it is shown every turn instead). Contact policies
        # do not apply: not a direct message.
        for pid, address, _, waiting in rows:
            out.deliver.setdefault(pid, (address, waiting, None))
        return
    out.bcast = True  # the broadcast log's cap is checked by the Batch, which counts
    out.slowest = min(seen for _, _, seen, _ in rows)
    for pid, address, _, _ in rows:
        out.reached.append(address)
        out.ring.append(pid)  # no delivery rows: they read the broadcast log by cursor
