"""The operator's view and control of a space's limits (S30): ``space show``
reports the limits in effect and their use, ``space set`` changes them.

Reads only, except ``set_space``, which changes the space's settings through
``broker.spaces.spaces`` and records the change in the log (a log-only operator row,
so ``message list`` shows who changed what, when). The per-sender counters read
here (``sender_usage``) are kept by triggers; the caps are enforced in
``broker.mail.messages``.
"""

from __future__ import annotations

import json
import math
from typing import Any

from broker import errors
from broker.mail.messages import OPERATOR, append
from broker.model.records import InboxUse, SenderUse, SpaceUsage
from broker.spaces import shares, spaces
from broker.store.sql import stmt
from broker.store.sqlite import Store, Tx
from broker.vocab import number

_SPACE_TOTALS = stmt("usage.space_totals")
_TOP_SENDERS = stmt("usage.top_senders")
_INBOXES = stmt("usage.inboxes")
_BOARD = stmt("usage.board")
TOP_MAX = 1000


def space_usage(store: Store, ref: str, *, top: int = 10, tx: Tx | None = None) -> SpaceUsage:
    """The limits in effect in a space and what uses them: log bytes against
    ``log_max_mb``, the ``top`` senders by their part of the log, what the join
    key's newcomers hold of it together (S42), each participant's waiting
    deliveries against ``inbox_cap`` and live holds against ``holds_cap``,
    and the board's live holds and stored bytes (S41)."""
    if isinstance(top, bool) or not isinstance(top, int) or not 1 <= top <= TOP_MAX:
        raise errors.InvalidInput(f"bad top {top!r}: 1 to {TOP_MAX}", field="top")
    with store.read(tx) as t:
        sid = spaces.resolve_id(t, ref)
        row = t.one(_SPACE_TOTALS, {"space_id": sid})
        senders = t.all(_TOP_SENDERS, {"space_id": sid, "n": top})
        at = store.now_ts()
        inboxes = t.all(_INBOXES, {"space_id": sid, "at": at})
        board = t.one(_BOARD, {"space_id": sid, "at": at})
        newcomers = {a for a, g in shares.groups(t, sid).items() if g.join_key}
        newcomer_bytes = shares.log_bytes(t, sid, newcomers)
    limits = spaces.limits_of(row["settings"])
    # At least one byte: a share of the log divides by it (the bounds keep it
    # above 100 bytes; a stored value below them is the default, Limits.lenient).
    cap = max(1, math.floor(limits.log_cap_bytes()))
    stored = json.loads(row["settings"])
    return SpaceUsage(
        space_id=sid,
        state=row["state"],
        limits=limits.to_dict(),
        settings=stored if isinstance(stored, dict) else {},
        log_bytes=int(row["log_bytes"]),
        log_cap_bytes=cap,
        sender_log_cap_bytes=math.floor(limits.sender_log_cap_bytes()),
        sender_inbox_cap=limits.sender_inbox_cap(),
        messages=int(row["last_seq"]),  # one log row per seq
        top_senders=[
            SenderUse(
                sender=r["sender"],
                log_bytes=int(r["log_bytes"]),
                messages=int(r["messages"]),
                share=round(r["log_bytes"] / cap, 4),
            )
            for r in senders
        ],
        inboxes=[
            InboxUse(
                address=r["address"],
                status=r["status"],
                waiting=int(r["waiting"]),
                cap=limits.inbox_cap,
                holds=int(r["holds"]),
            )
            for r in inboxes
        ],
        holds=int(board["holds"]),
        board_bytes=int(board["board_bytes"]),
        join_key_members=len(newcomers),
        join_key_log_bytes=newcomer_bytes,
        join_key_log_cap_bytes=math.floor(limits.join_key_log_cap_bytes()),
    )


def set_space(
    store: Store, ref: str, settings: dict[str, Any], *, via: str = "cli", tx: Tx | None = None
) -> SpaceUsage:
    """Change a space's settings (S30): each checked against its bounds (S33),
    merged over the space's own, and the change logged as an operator row that
    reaches nobody (``to: operator``). Returns the usage under the new limits.
    A setting given with its current value changes nothing and logs nothing."""
    with store.write(tx) as t:
        sid, before, after = spaces.set_settings(store, ref, settings, tx=t)
        changed = {k: v for k, v in after.items() if before.get(k, _UNSET) != v}
        if changed:
            old = spaces.limits_of(json.dumps(before, sort_keys=True)).to_dict()
            words = ", ".join(
                f"{k} {number(old[k])} -> {number(v)}" for k, v in sorted(changed.items())
            )
            append(
                store,
                t,
                sid,
                "operator",
                OPERATOR,
                f"space settings changed by the operator: {words}",
                recipients='["operator"]',
                reached=[OPERATOR],
                via=via,
            )
        return space_usage(store, sid, tx=t)


_UNSET = object()
