"""The board of a space (S21-S24): posts and standing directives.

Posts, directives and retractions are log rows (the board is a view of the
log; ``board.post`` itself is ``messages.post``).

- ``read``: the board after a cursor: posts, directives and retractions in log
  order, oldest first, at most ``limit``; the cursor is the id of the last
  entry read (any message id of the space works). A directive carries
  ``in_force``: false once it was retracted.
- ``directive``: a standing instruction (tool ``board.directive``). It is one
  log row recording whom it reached when issued, with no inbox rows: which
  participants it applies to is decided at every turn from its ``to`` forms
  (``active_directives``), so a role, step or broadcast directive also applies
  to participants that join later and match. It applies until lifted.
- ``retract``: lifts a directive (tool ``board.retract``); only its author
  (the address that issued it) may, and only once; the operator may lift any
  (``retract_as_operator``).

Key claims (S22-S23) are ``broker.board.claims``.
"""

from __future__ import annotations

import heapq
import json
from typing import TYPE_CHECKING, Any

from broker import errors
from broker.ids import by_id
from broker.model import bounds
from broker.model.records import SendResult, to_dict
from broker.record_type import from_row, record
from broker.spaces import gate
from broker.spaces.addressing import Target, parse_target, parse_targets
from broker.spaces.auth import Caller, Identity
from broker.spaces.spaces import resolve_id
from broker.store.sql import stmt, stmts
from broker.store.sqlite import Store, Tx
from broker.vocab import BOARD_READ_DEFAULT, BOARD_READ_MAX, Via

if TYPE_CHECKING:
    from broker.mail.recipients import Sender
    from broker.model.records import BoardEntry

_CURSOR_SEQ = stmt("messages.seq_of")
_SQL = stmts(
    "board", "read_kind", "message_head", "retracted_by", "directives_in_force", "is_address"
)


# --- reading the board ----------------------------------------------------------------
def read(
    store: Store,
    ident: Identity,
    *,
    after: str | None = None,
    limit: int = BOARD_READ_DEFAULT,
    tx: Tx | None = None,
) -> list[BoardEntry]:
    """``board.read``: posts, directives and retractions after the cursor ``after``
    (a message id), oldest first, at most ``limit``."""
    # The types of limit and after are checked at the edge (broker.model.typecheck); the bound is ours.
    limit = bounds.count(limit, "limit", top=BOARD_READ_MAX)

    def run(t: Tx, _row: Caller) -> list[BoardEntry]:
        return _read(t, ident.space_id, after, limit)

    return gate.call(store, ident, "board.read", run, tx=tx, write=False)


def view(
    store: Store,
    space_ref: str,
    *,
    after: str | None = None,
    limit: int = BOARD_READ_DEFAULT,
    tx: Tx | None = None,
) -> list[BoardEntry]:
    """The operator's ``board.view``: what ``read`` returns, without an agent's identity."""
    limit = bounds.count(limit, "limit", top=BOARD_READ_MAX)
    with store.read(tx) as t:
        return _read(t, resolve_id(t, space_ref), after, limit)


def _read(t: Tx, space_id: str, after: str | None, limit: int) -> list[BoardEntry]:
    start = 0
    if after:
        row = t.one(_CURSOR_SEQ, {"space_id": space_id, **by_id(after)})
        if row is None:
            raise errors.MessageNotFound(
                f"no message {after!r} in this space: --after takes the id of a board entry you read"
            )
        start = row["seq"]
    # One range per kind on the partial index, merged: never a scan of the log.
    per_kind = [
        t.all(_SQL["read_kind"], {"space_id": space_id, "kind": kind, "after": start, "n": limit})
        for kind in ("post", "directive", "retract")
    ]
    merged = heapq.merge(*per_kind, key=lambda r: r["seq"])
    return [_entry(r) for _, r in zip(range(limit), merged, strict=False)]


def _entry(r: Any) -> BoardEntry:
    from broker.model.records import BoardEntry  # built on first use (records_space)

    return from_row(
        BoardEntry,
        r,
        to=json.loads(r["recipients"]),
        reached=json.loads(r["reached"]),
        in_force=None if r["in_force"] is None else bool(r["in_force"]),
    )


# --- directives -----------------------------------------------------------------------
@record
class Directive:
    id: str
    seq: int
    sender: str
    body: str
    created_at_utc: str
    known: bool
    """already in the participant's transcript (S19: recorded once)"""


def directive(
    store: Store,
    ident: Identity,
    to: list[str],
    text: str,
    *,
    idempotency_key: str | None = None,
    tx: Tx | None = None,
) -> SendResult:
    """``board.directive``: a standing instruction for the participants ``to``
    addresses (S6 forms), shown on each of their turns until retracted.

    A directive that reaches nobody now is logged and stays in force (a role,
    step, bare name or broadcast form also applies to participants that join
    later), and it is an error to its sender (S8): ``NotDelivered``."""
    from broker.mail import messages  # sending's modules: not loaded by turns reading directives

    # The input is checked by its record (broker.model.inputs.DirectiveInput); what
    # only the board can say is said here.
    if not text.strip():
        raise errors.InvalidInput("a directive needs text", field="text")
    targets, _ = parse_targets(to)
    if any(tg.kind == "operator" for tg in targets):
        raise errors.InvalidInput("a directive cannot be addressed to the operator", field="to")

    def run(t: Tx, row: Caller) -> SendResult:
        sender = messages.Sender(ident.address, ident.participant_id, row.parent)
        return messages.send_in_tx(
            store,
            t,
            ident.space_id,
            sender,
            "directive",
            targets,
            text,
            key=idempotency_key,
            deliver=False,
        )

    result = gate.call(store, ident, "board.directive", run, tx=tx)
    if result.not_reached and not result.reached:
        reasons = ", ".join(f"{n.address}: {n.reason}" for n in result.not_reached)
        raise errors.NotDelivered(
            f"directive {result.id} reached nobody ({reasons}); it is logged and stays in force "
            "until retracted",
            result=to_dict(result),
        )
    return result


def retract(
    store: Store, ident: Identity, directive_id: str, *, tx: Tx | None = None
) -> SendResult:
    """``board.retract``: lift a directive. Only its author may, once."""
    from broker.mail import messages

    did = _directive_id(directive_id)

    def run(t: Tx, row: Caller) -> SendResult:
        author = _author(t, ident.space_id, did)
        if author != ident.address:
            raise errors.NotAuthor(
                f"only the author of directive {did} ({author}) may retract it, "
                f"not {ident.address}",
                directive_id=did,
                author=author,
            )
        _in_force(t, ident.space_id, did)
        sender = messages.Sender(ident.address, ident.participant_id, row.parent)
        return _lift(store, t, ident.space_id, sender, did, None)

    return gate.call(store, ident, "board.retract", run, tx=tx)


def retract_as_operator(
    store: Store, space_ref: str, directive_id: str, *, via: Via, tx: Tx | None = None
) -> SendResult:
    """The operator lifts any directive of the space, whoever issued it (S9's
    one exception to "only its author"): a ``retract`` row from ``operator``
    recording the surface (``via``), once per directive like the author's."""
    from broker.mail import messages

    did = _directive_id(directive_id)
    with store.write(tx) as t:
        space_id = resolve_id(t, space_ref)
        _author(t, space_id, did)
        _in_force(t, space_id, did)
        return _lift(store, t, space_id, messages.Sender(messages.OPERATOR, None), did, via)


def _directive_id(directive_id: str) -> str:
    if not directive_id.strip():  # its type is checked at the edge (broker.model.typecheck)
        raise errors.InvalidInput("retract needs the id of a directive", field="directive_id")
    return directive_id.strip()


def _author(t: Tx, space_id: str, did: str) -> str:
    """Who issued directive ``did`` of the space (else ``directive_not_found``)."""
    found = t.one(_SQL["message_head"], {"space_id": space_id, **by_id(did)})
    if found is None or found["kind"] != "directive":
        raise errors.DirectiveNotFound(f"no directive {did!r} in this space", directive_id=did)
    author: str = found["sender"]
    return author


def _in_force(t: Tx, space_id: str, did: str) -> None:
    """A directive is lifted once (else ``already_retracted``)."""
    done = t.one(_SQL["retracted_by"], {"directive_id": did, "space_id": space_id})
    if done is not None:
        raise errors.AlreadyRetracted(
            f"directive {did} was already retracted (by {done['id']})",
            directive_id=did,
            retract_id=done["id"],
        )


def _lift(
    store: Store, t: Tx, space_id: str, sender: Sender, did: str, via: Via | None
) -> SendResult:
    from broker.mail import messages

    return messages.send_in_tx(
        store,
        t,
        space_id,
        sender,
        "retract",
        [],  # addressed to nobody: nothing to deliver (the board shows it)
        f"retracts directive {did}",
        via=via,
        ref=did,
    )


def active_directives(
    t: Tx,
    space_id: str,
    participant_id: str,
    address: str,
    agent: str,
    step: str | None,
) -> list[Directive]:
    """Directives in force for a participant, oldest first (S17 group 2).

    Decided now from each directive's ``to`` forms, resolved like S6 against
    the participant as it is now (``address``, ``agent``, ``step``): so a
    directive reaches later joiners, and a re-joined run (same address, S3)
    keeps its directives."""
    rows = t.all(
        _SQL["directives_in_force"], {"space_id": space_id, "participant_id": participant_id}
    )
    if not rows:
        return []
    is_address: dict[str, bool] = {}  # a bare name is an address if someone has it (S6)

    def applies(to: list[str], sender: str, sender_parent: str | None) -> bool:
        for text in to:
            target = parse_target(text)
            if _matches(
                t, space_id, target, sender, sender_parent, address, agent, step, is_address
            ):
                return True
        return False

    return [
        from_row(Directive, r, known=bool(r["known"]))
        for r in rows
        if applies(json.loads(r["recipients"]), r["sender"], r["sender_parent"])
    ]


def _matches(
    t: Tx,
    space_id: str,
    target: Target,
    sender: str,
    sender_parent: str | None,
    address: str,
    agent: str,
    step: str | None,
    is_address: dict[str, bool],
) -> bool:
    kind, value = target.kind, target.value
    if kind == "address":
        return address == value
    if kind == "name":
        if value not in is_address:
            found = t.one(_SQL["is_address"], {"space_id": space_id, "address": value})
            is_address[value] = found is not None
        if is_address[value]:
            return address == value
        kind = "role"
    if kind == "role":
        return agent == value and address != sender
    if kind == "step":
        return step == value and address != sender
    if kind == "broadcast":
        return address != sender
    if kind == "lead":
        return address == "lead"
    if kind == "parent":
        return sender_parent is not None and address == sender_parent
    return False  # operator: nobody takes a turn as the operator
