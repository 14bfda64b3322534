"""Sending (S6-S12) and reading the log.

Every send is one write transaction that appends exactly one log row carrying
its outcome (who it reached, and why not for each it did not) and one delivery
per reached inbox. Nothing is dropped silently: a message that reached nobody
is still logged, then raised to its sender as ``NotDelivered`` (S8).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from broker import errors
from broker.ids import by_id
from broker.mail.recipients import OPERATOR, Sender
from broker.mail.sending import Batch, append, append_receipt, send_in_tx
from broker.mail.threads import PLAIN, Mail, mail
from broker.mail.threads import to_entry as _to_entry
from broker.model.inputs import OperatorSendInput, SendInput, SendManyInput
from broker.model.records import LogEntry, SendResult, to_dict
from broker.spaces import gate
from broker.spaces.addressing import Target, parse_target, parse_targets
from broker.spaces.auth import Caller, Identity
from broker.spaces.spaces import resolve_id
from broker.store.settings import MB
from broker.store.sql import stmt
from broker.store.sqlite import Store, Tx
from broker.vocab import Via

# The send transaction lives in broker.mail.sending, recipients in broker.mail.recipients;
# these names stay importable from here (the log's public face).
__all__ = ["MB", "OPERATOR", "Batch", "Sender", "append", "append_receipt", "send_in_tx"]
_SPACE_KIND = stmt("messages.space_kind")
_SEQ_OF = stmt("messages.seq_of")
_LOG = stmt("messages.log")
_BY_ADDRESS = ("address", "name")


# --- public API -----------------------------------------------------------------------
def send(store: Store, ident: Identity, inp: SendInput, *, tx: Tx | None = None) -> SendResult:
    """``msg.send``: a direct message, or a broadcast when ``to`` is ``broadcast``.

    Its mail attributes (S35: a thread, what it answers, as ``Agent.send``
    names them) go to its log row as given."""
    targets, is_bcast = parse_targets(inp.to)
    return _send_as(
        store,
        ident,
        "msg.send",
        "broadcast" if is_bcast else "direct",
        targets,
        inp.text,
        inp.idempotency_key,
        tx,
        mail(inp),
    )


def send_many(
    store: Store, ident: Identity, inp: SendManyInput, *, tx: Tx | None = None
) -> list[SendResult]:
    """``msg.send_many``: many messages in ONE transaction (S6-S12 apply to
    each); each item is a ``msg.send``'s input record, checked by
    ``SendManyInput``.

    An invalid item refuses the whole batch and writes nothing, naming the item
    (``items[2].to``). An item that reaches nobody is not raised (the others
    were sent): check each result's ``reached`` / ``not_reached``."""
    prepared: list[tuple[str, list[Target], str, str | None, Mail]] = []
    for n, item in enumerate(inp.items):
        try:
            targets, bcast = parse_targets(item.to)
        except errors.InvalidInput as exc:
            exc.fields.setdefault("field", "to")
            raise exc.in_item(n) from None
        prepared.append(
            (
                "broadcast" if bcast else "direct",
                targets,
                item.text,
                item.idempotency_key,
                mail(item),
            )
        )
    if not prepared:
        return []

    def run(t: Tx, row: Caller) -> list[SendResult]:
        batch = Batch(
            store,
            t,
            ident.space_id,
            Sender(ident.address, ident.participant_id, row.parent, row.is_lead),
            space=row.space,
            last_at=row.last_at,
            now=row.now,
        )
        results = []
        for n, (kind, targets, text, key, m) in enumerate(prepared):
            try:
                results.append(batch.add(kind, targets, text, key=key, mail=m))
            except errors.StoreError:
                raise  # the database's trouble, not the item's
            except errors.BrokerError as exc:
                # Refused inside the transaction (the body cap, the log's
                # shares, a reused key...): the whole batch rolls back, and
                # the refusal names the item that caused it.
                raise exc.in_item(n) from None
        batch.flush()
        return results

    return gate.call(store, ident, "msg.send", run, tx=tx, counted=True)


def post(
    store: Store,
    ident: Identity,
    text: str,
    *,
    addressed_to: Iterable[str] = (),
    idempotency_key: str | None = None,
    tx: Tx | None = None,
) -> SendResult:
    """``board.post``: a channel post, or addressed (also lands in those inboxes).
    Its input is checked by its record (``broker.model.inputs.PostInput``) before it
    gets here."""
    try:
        targets = [parse_target(t) for t in addressed_to]
    except errors.InvalidInput as exc:
        exc.fields.setdefault("field", "addressed_to")
        raise
    if any(t.kind == "broadcast" for t in targets):
        raise errors.InvalidInput(
            "a post cannot be addressed to 'broadcast': an unaddressed post is the channel",
            field="addressed_to",
        )
    return _send_as(store, ident, "board.post", "post", targets, text, idempotency_key, tx)


def operator_send(
    store: Store, inp: OperatorSendInput, *, via: Via, tx: Tx | None = None
) -> SendResult:
    """A message from the operator (S9). Only operator surfaces call this, and
    each says which it is (``via``): no default, so no surface can log the
    wrong one by leaving it out.

    Without ``to`` it goes to an agentiflow's lead, and to broadcast elsewhere.
    A send whose every recipient has left is not an error (S8's one
    exception): it is logged with ``participant_left`` for each and returned."""
    if via not in ("cli", "cp", "mcp"):
        raise errors.InvalidInput(f"bad via {via!r}: cli, cp or mcp", field="via")
    targets = parse_targets(inp.to)[0] if inp.to else []
    for tg in targets:
        if tg.kind in ("parent", "operator"):
            raise errors.InvalidInput(f"the operator cannot send to {tg.text!r}", field="to")
    with store.write(tx) as t:
        space_id = resolve_id(t, inp.space)
        if not targets:  # the default target depends on the space's kind
            kind_row = t.one(_SPACE_KIND, {"space_id": space_id})
            targets = [parse_target("lead" if kind_row[0] == "agentiflow" else "broadcast")]
        result = send_in_tx(
            store,
            t,
            space_id,
            Sender(OPERATOR, None),
            "operator",
            targets,
            inp.text,
            urgent=inp.urgent,
            via=via,
            key=inp.idempotency_key,
            mail=mail(inp),
        )
    if result.not_reached and all(n.reason == "participant_left" for n in result.not_reached):
        return result  # S8's one exception: logged, and the operator's send succeeds
    return _finish(result)


def _send_as(
    store: Store,
    ident: Identity,
    tool: str,
    kind: str,
    targets: list[Target],
    text: str,
    key: str | None,
    tx: Tx | None,
    m: Mail = PLAIN,
) -> SendResult:
    def run(t: Tx, row: Caller) -> SendResult:
        sender = Sender(ident.address, ident.participant_id, row.parent, row.is_lead)
        space = row.space  # read with the caller (caller_send, caller_counted): no re-read
        return send_in_tx(
            store,
            t,
            ident.space_id,
            sender,
            kind,
            targets,
            text,
            key=key,
            mail=m,
            space=space,
            known=row.recipient,
            last_at=row.last_at,
            now=row.now,
        )

    # One participant named by address (the usual send): the caller's read also
    # reads it (auth.caller_send), so the send itself only inserts.
    one = targets[0].value if len(targets) == 1 and targets[0].kind in _BY_ADDRESS else None
    # The grant check, the tool_unavailable / messaging_full notices: tools.call.
    return _finish(gate.call(store, ident, tool, run, tx=tx, send=one, counted=True))


def _finish(result: SendResult) -> SendResult:
    expected = result.reached or result.not_reached
    if expected and not result.reached:
        reasons = ", ".join(f"{n.address}: {n.reason}" for n in result.not_reached)
        raise errors.NotDelivered(f"not delivered to {reasons}", result=to_dict(result))
    return result


# --- reading the log ------------------------------------------------------------------
def to_entry(r: tuple[Any, ...]) -> LogEntry:
    return _to_entry(r)


def log(
    store: Store,
    space_ref: str,
    *,
    after: str | None = None,
    after_seq: int | None = None,
    kinds: Iterable[str] | None = None,
    limit: int | None = None,
    tx: Tx | None = None,
) -> list[LogEntry]:
    """The log of a space in sequence order, after a message id or a sequence number."""
    with store.read(tx) as t:
        space_id = resolve_id(t, space_ref)
        start = after_seq or 0
        if after:
            row = t.one(_SEQ_OF, {"space_id": space_id, **by_id(after)})
            if row is None:
                raise errors.MessageNotFound(f"no message {after!r} in space {space_id}")
            start = max(start, row[0])
        kind_list = list(kinds or [])
        rows = t.all(
            _LOG,
            {
                "space_id": space_id,
                "after": start,
                "kinds": json.dumps(kind_list) if kind_list else None,
                "lim": limit or None,
            },
        )
    return [to_entry(r) for r in rows]
