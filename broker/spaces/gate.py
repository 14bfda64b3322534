"""Calling an agent-side messaging tool (S24): who may, and what a refusal leaves.

Every agent tool (``msg.send``, ``board.*``) runs through ``call``: it re-checks
the caller's token inside the transaction, checks the tool grant, then runs the
tool. A refused call leaves a notice in the caller's transcript and nothing
else: no grant gives ``tool_unavailable``, a full log ``messaging_full``. The
notice is committed first and the error raised after, so the caller's model is
told why even though the call failed (S24, S11).

Inside a caller's transaction (``tx=``) the tool runs under a savepoint: any
error undoes what the tool wrote, so the caller may catch it and go on. The
notice is then part of the caller's transaction and stays if it commits.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from typing import TypeVar

from broker import errors
from broker.delivery.transcript import notice
from broker.spaces.auth import Caller, Identity, caller
from broker.spaces.grants import AUTHORITY
from broker.store.sqlite import Store, Tx

T = TypeVar("T")

NOTICED: tuple[type[errors.BrokerError], ...] = (errors.ToolUnavailable, errors.MessagingFull)


def refusal(ident: Identity, row: Caller, tool: str) -> errors.ToolUnavailable:
    """The error for a call without the grant; the message says why."""
    if not row.messaging:
        why = "messaging is off for it (receive-only: it is still reached, it cannot send)"
    elif tool in AUTHORITY:
        why = (
            f"{tool} carries authority and is granted only by naming it (or board.*) at join, "
            "or to a lead; '*' never grants it"
        )
    else:
        why = f"it was not granted {tool} (its tools were narrowed at join)"
    return errors.ToolUnavailable(
        f"{ident.address} cannot use {tool}: {why}", tool=tool, address=ident.address
    )


def call(
    store: Store,
    ident: Identity,
    tool: str,
    fn: Callable[[Tx, Caller], T],
    *,
    tx: Tx | None = None,
    write: bool = True,
    send: str | None = None,
    counted: bool = False,
) -> T:
    """Run ``fn(t, caller)`` as ``tool`` called by ``ident``, or refuse.

    ``write=False`` runs it in a read snapshot (no write lock); a refusal then
    writes its notice in a write transaction of its own. ``send=address``:
    the tool sends one message to that address; the caller's read reads its
    row too (``auth.caller_send``). ``counted``:
    the caller's read reads the space's counters too (a send to several targets)."""
    if not write:
        with store.read(tx) as t:
            row = caller(t, ident)
            if tool in row.granted:
                return fn(t, row)
        refused = refusal(ident, row, tool)
        with store.write(tx if tx is not None and tx.write else None) as t:
            _notice(store, t, ident, refused)
        raise refused

    failure: errors.BrokerError | None = None
    try:
        with store.write(tx) as t:
            store.lock_space(t, ident.space_id)  # first: see Store.lock_space
            # A send to one address reads its recipient with the caller, in the
            # caller's transaction too (a read: nothing to undo if it is refused).
            row = caller(t, ident, store.now_ts(), send, counted=counted)
            if tool not in row.granted:
                failure = refusal(ident, row, tool)
                _notice(store, t, ident, failure)
            elif tx is None:
                result = fn(t, row)  # an error rolls the whole transaction back
            else:
                outcome = _under_savepoint(store, t, ident, fn, row)
                if isinstance(outcome, errors.BrokerError):
                    failure = outcome
                else:
                    result = outcome[0]
    except NOTICED as exc:
        if tx is not None:
            raise
        # Our own transaction was rolled back: the notice gets one of its own.
        with store.write() as t:
            _notice(store, t, ident, exc)
        raise
    if failure is not None:
        raise failure  # after the commit: the notice stays, nothing else was written
    return result


def _under_savepoint(
    store: Store, t: Tx, ident: Identity, fn: Callable[[Tx, Caller], T], row: Caller
) -> tuple[T] | errors.BrokerError:
    """``(result,)``, or the noticed error (its notice written, the tool's writes undone)."""
    t.savepoint()
    try:
        result = fn(t, row)
    except BaseException as exc:
        with contextlib.suppress(sqlite3.Error):  # the driver already rolled back
            t.rollback_to_savepoint(exc)
        if isinstance(exc, NOTICED):
            _notice(store, t, ident, exc)
            return exc
        raise
    t.release_savepoint()
    return (result,)


def _notice(store: Store, t: Tx, ident: Identity, exc: errors.BrokerError) -> None:
    notice(store, t, ident.space_id, ident.participant_id, exc.code, str(exc))
