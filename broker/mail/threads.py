"""Threads (S35): a send names ``reply_to`` (a message of its space) or a
``thread`` (a short name); a reply inherits its parent's thread. The thread is
a column of the log row, so reading a thread is one indexed range.

A reply to a message that is in no thread starts one named after that message's
id: the parent is listed with it (``log``), and the next reply joins the same.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from broker import errors
from broker.ids import by_id
from broker.model.records import LogEntry, NotReached
from broker.model.records.mail import MAIL_DEFAULTS, mail_of
from broker.record_type import from_row
from broker.spaces.spaces import resolve_id
from broker.store.sql import stmt
from broker.store.sqlite import Store, Tx

if TYPE_CHECKING:
    from broker.model.records import Thread

_PARENT = stmt("threads.parent")
_LOG = stmt("threads.log")
_LIST = stmt("threads.list")


Mail = Mapping[str, Any]
"""What a send carries beyond its text (S35): its mail attributes
(``broker.store.groups.MAIL``) by name, as the log's columns hold them."""

PLAIN: Mail = MappingProxyType(dict.fromkeys(MAIL_DEFAULTS))


def mail(inp: Any) -> Mail:
    """The mail attributes of a checked send input (``SendInput``,
    ``OperatorSendInput``), taken whole: one at its default is stored as NULL,
    so a plain message's row holds none (``mail_of`` reads them back)."""
    stored = {
        n: None if getattr(inp, n) == d else getattr(inp, n) for n, d in MAIL_DEFAULTS.items()
    }
    return PLAIN if all(v is None for v in stored.values()) else stored


def thread_of(t: Tx, space_id: str, m: Mail, viewer: str | None = None) -> Mail:
    """``m`` with its thread settled: a reply takes its parent's (S35). An agent
    (``viewer``) replies only to a message it can see (S45): one it sent or
    that reached it, or a board message; any other reads as no message at
    all, so a reply tells nothing of a message, or a thread, it never saw."""
    reply_to, thread = m["reply_to"], m["thread"]
    if reply_to is None:
        return m
    row = t.one(_PARENT, {"space_id": space_id, **by_id(reply_to), "viewer": viewer})
    if row is None:
        raise errors.MessageNotFound(f"reply_to: no message {reply_to!r} in space {space_id}")
    inherited = row["thread"] or reply_to
    if thread is not None and thread != inherited:
        raise errors.InvalidInput(
            f"thread {thread!r}: a reply stays in its parent's thread ({inherited!r})",
            field="thread",
        )
    return {**m, "thread": inherited}


def to_entry(r: Any) -> LogEntry:
    """The one log row mapper (``threads.log`` here, ``messages.log``): read by name."""
    return from_row(
        LogEntry,
        r,
        to=json.loads(r["recipients"]),
        urgent=bool(r["urgent"]),
        reached=json.loads(r["reached"]),
        not_reached=[NotReached(**n) for n in json.loads(r["not_reached"])],
        **mail_of(r),
    )


def log(store: Store, space_ref: str, thread: str, *, tx: Tx | None = None) -> list[LogEntry]:
    """The messages of ``thread`` in log order (S35)."""
    with store.read(tx) as t:
        space_id = resolve_id(t, space_ref)
        rows = t.all(_LOG, {"space_id": space_id, "thread": thread})
    return [to_entry(r) for r in rows]


def threads(store: Store, space_ref: str, *, tx: Tx | None = None) -> list[Thread]:
    """The threads of a space, most recently active first (``v_threads``)."""
    with store.read(tx) as t:
        space_id = resolve_id(t, space_ref)
        rows = t.all(_LIST, {"space_id": space_id})
    from broker.model.records import Thread  # built on first use (records_space)

    return [from_row(Thread, r, senders=json.loads(r["senders"])) for r in rows]
