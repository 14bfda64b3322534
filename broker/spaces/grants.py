"""Messaging tool grants (S24), pure.

Every participant gets the default set unless it names tools at join; naming
narrows to what is named. ``board.directive`` and ``board.retract`` carry
authority over other agents: only naming them (or ``board.*``) grants them, ``*``
never does, and a lead has them. Messaging off means no tool at all
(receive-only). Off is inherited by children; narrowing is not (decided at join
in ``participants.join``).
"""

from __future__ import annotations

from collections.abc import Iterable

from broker.errors import InvalidInput

DEFAULT = frozenset({"board.claim", "board.release", "board.post", "board.read", "msg.send"})
# How a participant's messaging tools were granted, in the source's words (its
# ``tool_grant`` records): the default set offered to every run with a space, or
# the tools a workflow's ``messaging: { tools: [...] }`` names (here: named at join).
MESSAGING_DEFAULT = "ambient:messaging_default"
WORKFLOW_MESSAGING = "ambient:workflow_messaging"
AUTHORITY = frozenset({"board.directive", "board.retract"})
ALL = DEFAULT | AUTHORITY
WILDCARDS = frozenset({"*", "board.*", "msg.*"})


def validate(tools: Iterable[str]) -> list[str]:
    out: list[str] = []
    for name in tools:
        if name not in ALL and name not in WILDCARDS:
            raise InvalidInput(
                f"unknown messaging tool {name!r}: use board.* / msg.* tools ({', '.join(sorted(ALL))})",
                field="tools",
            )
        if name not in out:
            out.append(name)
    return out


def effective(messaging: bool, tools: list[str] | None, is_lead: bool) -> frozenset[str]:
    if not messaging:
        return frozenset()
    if tools is None:
        granted = set(DEFAULT)
    else:
        granted = set()
        for name in tools:
            if name == "*":
                granted |= DEFAULT  # '*' never grants authority
            elif name == "board.*":
                granted |= {t for t in ALL if t.startswith("board.")}
            elif name == "msg.*":
                granted |= {t for t in ALL if t.startswith("msg.")}
            else:
                granted.add(name)
    if is_lead:
        granted |= AUTHORITY
    return frozenset(granted)


def source(messaging: bool, tools: list[str] | None) -> str | None:
    """The ``tool_grant`` a participant's messaging tools are recorded under:
    ``ambient:messaging_default`` for the default set, ``ambient:workflow_messaging``
    for tools named at join, None when messaging is off (no tool: receive-only)."""
    if not messaging:
        return None
    return MESSAGING_DEFAULT if tools is None else WORKFLOW_MESSAGING
