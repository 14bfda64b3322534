"""Sending (S6-S12) and reading the log.

Every send is one write transaction that appends exactly one log row carrying
its outcome (who it reached, and why not for each it did not) and one delivery
per reached inbox. Nothing is dropped silently: a message that reached nobody
is still logged, then raised to its sender as ``NotDelivered`` (S8).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from broker import errors, tools, wake
from broker.addressing import Target, agentiflow_address, parse_target
from broker.auth import Caller, Identity
from broker.contact import Gate
from broker.db import Store, Tx
from broker.ids import new_id
from broker.models import PostInput, SendInput, parse_input
from broker.records import LogEntry, NotReached, SendResult, to_dict
from broker.settings import Limits
from broker.spaces import limits_of, resolve_id
from broker.sql import stmt
from broker.threads import PLAIN, Mail, mail, thread_of
from broker.threads import to_entry as _to_entry
from broker.vocab import Via

MB = 1024 * 1024
OPERATOR = "operator"
_SENDER_LOG_BYTES = stmt("usage.sender_log_bytes")
_SENDER_WAITING = stmt("usage.sender_waiting")


@dataclass(slots=True)
class Sender:
    """Who a send is from: derived from a verified identity, never from input."""

    address: str
    participant_id: str | None  # None for the operator
    parent: str | None = None
    is_lead: bool = False  # the lead and the operator pass every contact policy (S38)


@dataclass(slots=True)
class _Outcome:
    deliver: dict[str, tuple[str, int]] = field(default_factory=dict)  # id -> (address, waiting)
    reached: list[str] = field(default_factory=list)
    not_reached: list[dict[str, Any]] = field(default_factory=list)
    ring: list[str] = field(default_factory=list)  # broadcast readers to wake
    bcast: bool = False


# --- public API -----------------------------------------------------------------------
def send(
    store: Store,
    ident: Identity,
    to: str | Iterable[str],
    text: str,
    *,
    idempotency_key: str | None = None,
    thread: str | None = None,
    reply_to: str | None = None,
    importance: str = "normal",
    ack_required: bool = False,
    tx: Tx | None = None,
) -> SendResult:
    """``msg.send``: a direct message, or a broadcast when ``to`` is ``broadcast``.

    ``reply_to`` (a message id of the space) or ``thread`` (a short name) put it
    in a thread (S35); ``importance`` is low, normal or high (urgent is the
    operator's, S17); ``ack_required`` lets its sender ask who has seen it."""
    inp = parse_input(
        SendInput,
        {
            "to": [to] if isinstance(to, str) else list(to),
            "text": text,
            "idempotency_key": idempotency_key,
            "thread": thread,
            "reply_to": reply_to,
            "importance": importance,
            "ack_required": ack_required,
        },
    )
    targets = [parse_target(t) for t in inp.to]
    is_bcast = any(t.kind == "broadcast" for t in targets)
    if is_bcast and len(targets) > 1:
        raise errors.InvalidInput("'broadcast' cannot be combined with other addresses")
    return _send_as(
        store,
        ident,
        "msg.send",
        "broadcast" if is_bcast else "direct",
        targets,
        inp.text,
        inp.idempotency_key,
        tx,
        mail(inp.thread, inp.reply_to, inp.importance, inp.ack_required),
    )


def send_many(
    store: Store,
    ident: Identity,
    items: Iterable[dict[str, Any]],
    *,
    tx: Tx | None = None,
) -> list[SendResult]:
    """Batched ``msg.send``: many messages in ONE transaction (S6-S12 apply to
    each). ``items`` are ``{"to": ..., "text": ..., "idempotency_key": ...}``.

    An invalid item refuses the whole batch and writes nothing. An item that
    reaches nobody is not raised (the others were sent): check each result's
    ``reached`` / ``not_reached``."""
    prepared: list[tuple[str, list[Target], str, str | None, Mail]] = []
    for n, item in enumerate(items):
        data = dict(item)
        if isinstance(data.get("to"), str):
            data["to"] = [data["to"]]
        try:
            inp = parse_input(SendInput, data)
        except errors.InvalidInput as exc:
            raise errors.InvalidInput(f"item {n}: {exc.message}") from None
        targets = [parse_target(x) for x in inp.to]
        bcast = any(tg.kind == "broadcast" for tg in targets)
        if bcast and len(targets) > 1:
            raise errors.InvalidInput(
                f"item {n}: 'broadcast' cannot be combined with other addresses"
            )
        prepared.append(
            (
                "broadcast" if bcast else "direct",
                targets,
                inp.text,
                inp.idempotency_key,
                mail(inp.thread, inp.reply_to, inp.importance, inp.ack_required),
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
        )
        results = [
            batch.add(kind, targets, text, key=key, mail=m)
            for kind, targets, text, key, m in prepared
        ]
        batch.flush()
        return results

    return tools.call(store, ident, "msg.send", run, tx=tx)


def post(
    store: Store,
    ident: Identity,
    text: str,
    *,
    addressed_to: Iterable[str] = (),
    idempotency_key: str | None = None,
    tx: Tx | None = None,
) -> SendResult:
    """``board.post``: a channel post, or addressed (also lands in those inboxes)."""
    inp = parse_input(
        PostInput,
        {"text": text, "addressed_to": list(addressed_to), "idempotency_key": idempotency_key},
    )
    targets = [parse_target(t) for t in inp.addressed_to]
    if any(t.kind == "broadcast" for t in targets):
        raise errors.InvalidInput(
            "a post cannot be addressed to 'broadcast': an unaddressed post is the channel"
        )
    return _send_as(store, ident, "board.post", "post", targets, inp.text, inp.idempotency_key, tx)


def operator_send(
    store: Store,
    space_ref: str,
    text: str,
    *,
    to: Iterable[str] | None = None,
    urgent: bool = False,
    via: Via = "cli",
    idempotency_key: str | None = None,
    tx: Tx | None = None,
) -> SendResult:
    """A message from the operator (S9). Only operator surfaces call this.

    Without ``to`` it goes to an agentiflow's lead, and to broadcast elsewhere.
    The text is checked like an agent's (never empty, S33) before anything is
    written. A send whose every recipient has left is not an error (S8's one
    exception): it is logged with ``participant_left`` for each and returned."""
    if via not in ("cli", "cp", "mcp"):
        raise errors.InvalidInput(f"bad via {via!r}: cli, cp or mcp")
    if not isinstance(urgent, bool):
        raise errors.InvalidInput(f"bad urgent {urgent!r}: true or false")
    given = [to] if isinstance(to, str) else (list(to) if to else [])
    inp = parse_input(
        SendInput,
        {"to": given or ["broadcast"], "text": text, "idempotency_key": idempotency_key},
    )
    with store.write(tx) as t:
        space_id = resolve_id(t, space_ref)
        kind_row = t.one("SELECT kind FROM spaces WHERE id = ?", (space_id,))
        names = list(inp.to) if given else ["lead" if kind_row[0] == "agentiflow" else "broadcast"]
        targets = [parse_target(n) for n in names]
        for tg in targets:
            if tg.kind in ("parent", "operator"):
                raise errors.InvalidInput(f"the operator cannot send to {tg.text!r}")
        result = send_in_tx(
            store,
            t,
            space_id,
            Sender(OPERATOR, None),
            "operator",
            targets,
            inp.text,
            urgent=urgent,
            via=via,
            key=inp.idempotency_key,
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
        return send_in_tx(store, t, ident.space_id, sender, kind, targets, text, key=key, mail=m)

    # The grant check, the tool_unavailable / messaging_full notices: tools.call.
    return _finish(tools.call(store, ident, tool, run, tx=tx))


def _finish(result: SendResult) -> SendResult:
    expected = result.reached or result.not_reached
    if expected and not result.reached:
        reasons = ", ".join(f"{n.address}: {n.reason}" for n in result.not_reached)
        raise errors.NotDelivered(f"not delivered to {reasons}", result=to_dict(result))
    return result


# --- the send transaction -------------------------------------------------------------
def send_in_tx(
    store: Store,
    t: Tx,
    space_id: str,
    sender: Sender,
    kind: str,
    targets: list[Target],
    text: str,
    *,
    urgent: bool = False,
    via: str | None = None,
    key: str | None = None,
    ref: str | None = None,
    deliver: bool = True,
    mail: Mail = PLAIN,
) -> SendResult:
    """The send itself, inside the caller's write transaction: checks, resolves
    ``targets`` (S6), applies the caps (S7), appends one log row with the
    outcome and one delivery per reached inbox. ``deliver=False`` records the
    outcome without inbox rows (directives are shown every turn instead)."""
    batch = Batch(store, t, space_id, sender, deliver=deliver)
    result = batch.add(kind, targets, text, urgent=urgent, via=via, key=key, ref=ref, mail=mail)
    batch.flush()
    return result


class Batch:
    """Sends appended in one transaction: the space row is read once, each
    distinct ``to`` form is resolved once, and the rows go in with one
    ``executemany`` per table at ``flush``. One send is a batch of one."""

    def __init__(
        self, store: Store, t: Tx, space_id: str, sender: Sender, *, deliver: bool = True
    ) -> None:
        self.store, self.t, self.space_id, self.sender, self.deliver = (
            store,
            t,
            space_id,
            sender,
            deliver,
        )
        store.lock_space(t, space_id)  # the sequence stays gap-free (PostgreSQL)
        space = t.one(
            "SELECT state, settings, last_seq, log_bytes, last_bcast FROM spaces WHERE id = ?",
            (space_id,),
        )
        if space[0] != "running":
            raise errors.SpaceNotRunning(
                f"space {space_id} is {space[0]}: it takes no message", space_id=space_id
            )
        self.limits = limits_of(space[1])
        self.seq, self.log_bytes, self.bcast_no = space[2], space[3], space[4]
        self.first_bcast = space[4]
        self.resolved: dict[tuple[str, str, str], _Outcome] = {}
        self.waiting: dict[str, int] = {}  # recipient -> waiting deliveries, counting this batch
        self.keys: dict[str, SendResult] = {}
        self.messages: list[tuple[Any, ...]] = []
        self.deliveries: list[tuple[Any, ...]] = []
        self.woken: set[str] = set()
        # S30: the operator passes every space cap; agents are held to their share.
        self.exempt = sender.participant_id is None and sender.address == OPERATOR
        self.sender_bytes: int | None = None  # this sender's log bytes, read when needed
        self.held: dict[str, int] = {}  # recipient -> this sender's deliveries waiting there
        self.gate: Gate | None = None  # contact policies (S38), read on the first direct send

    def add(
        self,
        kind: str,
        targets: list[Target],
        text: str,
        *,
        urgent: bool = False,
        via: str | None = None,
        key: str | None = None,
        ref: str | None = None,
        mail: Mail = PLAIN,
    ) -> SendResult:
        if key is not None:
            dup = self.keys.get(key) or self._logged_key(key)
            if dup is not None:
                return dup
        limits = self.limits
        body_bytes = len(text.encode("utf-8"))
        if body_bytes > limits.body_max_bytes:
            raise errors.BodyTooLarge(
                f"message body is {body_bytes} bytes; the cap is {limits.body_max_bytes}",
                size=body_bytes,
                cap=limits.body_max_bytes,
            )
        if not self.exempt:
            self._check_log(limits)
        out = _Outcome()
        for target in targets:
            cached = self._resolve(kind, target)
            out.reached += cached.reached
            out.not_reached += cached.not_reached
            out.ring += cached.ring
            out.bcast = out.bcast or cached.bcast
            for pid, hit in cached.deliver.items():
                out.deliver.setdefault(pid, hit)
        if kind == "direct" and out.deliver and not self.sender.is_lead:
            self._contact_policies(out)
        if mail.reply_to is not None:
            mail = thread_of(self.t, self.space_id, mail)
        # Each address is reported once, however many `to` forms named it.
        out.not_reached = [
            dict(p) for p in dict.fromkeys(tuple(n.items()) for n in out.not_reached)
        ]
        delivered: list[str] = []
        for pid, (address, waiting) in out.deliver.items():
            now_waiting = self.waiting.setdefault(pid, waiting)
            if not self.deliver:
                out.reached.append(address)
                self.woken.add(pid)
            elif not self.exempt and now_waiting >= limits.inbox_cap:
                out.not_reached.append({"address": address, "reason": "inbox_full"})
            elif not self.exempt and self._over_share(pid, now_waiting, limits):
                out.not_reached.append({"address": address, "reason": "sender_share"})
            else:
                out.reached.append(address)
                delivered.append(pid)
                self.waiting[pid] = now_waiting + 1
                if pid in self.held:
                    self.held[pid] += 1
        if out.bcast:
            if not self.exempt and self.bcast_no - self._slowest_reader() >= limits.broadcast_cap:
                out.bcast, out.reached, out.ring = False, [], []
                out.not_reached.append({"address": "broadcast", "reason": "broadcast_full"})
            else:
                self.bcast_no += 1
        self.woken.update(out.ring)
        self.woken.update(delivered)

        now = self.store.now_ts()
        mid = new_id()
        self.seq += 1
        recipients = _json_list(tuple(tg.text for tg in targets))
        reached_json = _json_list(tuple(out.reached))
        not_reached_json = json.dumps(out.not_reached) if out.not_reached else "[]"
        size = body_bytes + len(recipients) + len(reached_json) + len(not_reached_json)
        self.log_bytes += size
        if self.sender_bytes is not None:
            self.sender_bytes += size
        self.messages.append(
            (
                mid,
                self.space_id,
                self.seq,
                kind,
                self.sender.address,
                recipients,
                text,
                urgent,
                via,
                ref,
                reached_json,
                not_reached_json,
                len(out.reached),
                self.bcast_no if out.bcast else None,
                key,
                size,
                now,
                *mail.row(),
            )
        )
        self.deliveries += [(new_id(), self.space_id, mid, pid, now) for pid in delivered]
        result = SendResult(
            id=mid,
            seq=self.seq,
            kind=kind,
            reached=out.reached,
            not_reached=[NotReached(**n) for n in out.not_reached],
            duplicate=False,
        )
        if key is not None:
            self.keys[key] = replace(result, duplicate=True)
        return result

    def _check_log(self, limits: Limits) -> None:
        """S11, S30: past ``log_max_mb`` an agent's send is refused, and so it is
        once the sender holds ``sender_share`` of it. The sender's bytes are
        read only when the whole log is past that share (below it nobody can
        hold more), then kept up to date in the batch."""
        cap = limits.log_max_mb * MB
        if self.log_bytes >= cap:
            raise errors.MessagingFull(
                f"the log of space {self.space_id} passed log_max_mb ({limits.log_max_mb:g} MB): sends are refused",
                space_id=self.space_id,
            )
        share = cap * limits.sender_share
        if self.log_bytes < share:
            return
        if self.sender_bytes is None:
            row = self.t.one(
                _SENDER_LOG_BYTES, {"space_id": self.space_id, "sender": self.sender.address}
            )
            self.sender_bytes = int(row[0]) if row else 0
        if self.sender_bytes >= share:
            raise errors.MessagingFull(
                f"{self.sender.address} holds {self.sender_bytes / MB:.1f} MB of the log of space "
                f"{self.space_id}: its sender_share ({limits.sender_share:g} of log_max_mb "
                f"{limits.log_max_mb:g} MB) is used up; sends from it are refused",
                space_id=self.space_id,
                sender=self.sender.address,
                reason="sender_share",
            )

    def _over_share(self, pid: str, now_waiting: int, limits: Limits) -> bool:
        """S30: does this sender hold its share of ``pid``'s inbox? Counted only
        when the inbox itself holds that share (below it, nobody can)."""
        cap = limits.sender_inbox_cap()
        if now_waiting < cap:
            return False
        held = self.held.get(pid)
        if held is None:
            row = self.t.one(_SENDER_WAITING, {"recipient_id": pid, "sender": self.sender.address})
            # Deliveries added by this batch are not in the table yet.
            pending = sum(1 for d in self.deliveries if d[3] == pid)
            held = self.held[pid] = int(row[0]) + pending
        return held >= cap
    def _contact_policies(self, out: _Outcome) -> None:
        """Drop the recipients whose contact policy refuses this sender (S38)."""
        if self.sender.participant_id is None:
            return  # the operator
        if self.gate is None:
            self.gate = Gate(self.t, self.space_id)
        if not self.gate.rules:
            return
        for pid, (address, _) in list(out.deliver.items()):
            if self.gate.blocks(pid, self.sender.address):
                del out.deliver[pid]
                out.not_reached.append({"address": address, "reason": "contact_policy"})

    def _logged_key(self, key: str) -> SendResult | None:
        """The first result of an idempotency key already in the log (S12)."""
        dup = self.t.one(
            "SELECT id, seq, kind, sender, reached, not_reached FROM messages WHERE space_id = ? AND idempotency_key = ?",
            (self.space_id, key),
        )
        if dup is None:
            return None
        if dup[3] != self.sender.address:
            raise errors.Conflict(
                f"idempotency key {key!r} was already used by {dup[3]} in this space"
            )
        return SendResult(
            id=dup[0],
            seq=dup[1],
            kind=dup[2],
            reached=json.loads(dup[4]),
            not_reached=[NotReached(**n) for n in json.loads(dup[5])],
            duplicate=True,
        )

    def _resolve(self, kind: str, target: Target) -> _Outcome:
        """Resolve one ``to`` form once per batch (waiting counts are kept here)."""
        cache_key = (kind if target.kind == "broadcast" else "", target.kind, target.value)
        out = self.resolved.get(cache_key)
        if out is None:
            out = _Outcome()
            if target.kind == "broadcast":
                _resolve_broadcast(self.t, self.space_id, self.sender, kind, out)
            else:
                _resolve(self.t, self.space_id, self.sender, target, out)
            self.resolved[cache_key] = out
        return out

    def _slowest_reader(self) -> int:
        row = self.t.one(
            f"SELECT min(bcast_seen) FROM participants WHERE space_id = ? AND {_LIVE} AND address != ?",
            (self.space_id, self.sender.address),
        )
        return int(row[0] if row and row[0] is not None else self.bcast_no)

    def flush(self) -> None:
        """Write what was added: one UPDATE of the space, the log rows, the deliveries."""
        if not self.messages:
            return
        t = self.t
        t.execute(
            "UPDATE spaces SET last_seq = ?, log_bytes = ?, last_bcast = ? WHERE id = ?",
            (self.seq, self.log_bytes, self.bcast_no, self.space_id),
        )
        _insert(t, _INSERT_MESSAGE, self.messages)
        _insert(t, _INSERT_DELIVERY, self.deliveries)
        store, space_id, woken = self.store, self.space_id, list(self.woken)
        t.after_commit(lambda: wake.ring(store, space_id, woken))
        self.messages, self.deliveries, self.woken = [], [], set()
        self.held = {}  # the flushed deliveries are in the table now


@lru_cache(maxsize=4096)
def _json_list(items: tuple[str, ...]) -> str:
    """JSON of a list of addresses; a batch repeats the same few many times."""
    return json.dumps(list(items))


def _insert(t: Tx, sql: str, rows: list[tuple[Any, ...]]) -> None:
    # executemany costs ~15 us more than execute for one row: a single send is the hot path.
    if len(rows) == 1:
        t.execute(sql, rows[0])
    elif rows:
        t.raw.executemany(sql, rows)


_INSERT_DELIVERY = (
    "INSERT INTO deliveries (id, space_id, message_id, recipient_id, state, created_at_utc) "
    "VALUES (?, ?, ?, ?, 'ready', ?)"
)
_INSERT_MESSAGE = (
    "INSERT INTO messages (id, space_id, seq, kind, sender, recipients, body, urgent, via, ref, reached, "
    "not_reached, reached_n, bcast_no, idempotency_key, size_bytes, created_at_utc, "
    "thread, reply_to, importance, ack_required) "
    "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
)


def append(
    store: Store,
    t: Tx,
    space_id: str,
    kind: str,
    sender: str,
    body: str,
    *,
    recipients: str = "[]",
    reached: list[str] | None = None,
    not_reached: list[dict[str, str]] | None = None,
    urgent: bool = False,
    via: str | None = None,
    ref: str | None = None,
    key: str | None = None,
    bcast_no: int | None = None,
) -> tuple[str, int, str]:
    """Append one row to the log with the next ``seq`` of the space, outside a
    send (receipts; imports and tests); returns (id, seq, created_at_utc).
    Sends go through ``Batch``: these two are the only writers of ``messages``."""
    store.lock_space(t, space_id)
    last_seq = t.one("SELECT last_seq FROM spaces WHERE id = ?", (space_id,))[0]
    now = store.now_ts()
    mid = new_id()
    seq = last_seq + 1
    reached_json = json.dumps(reached or [])
    not_reached_json = json.dumps(not_reached or [])
    size = len(body.encode("utf-8")) + len(recipients) + len(reached_json) + len(not_reached_json)
    t.execute(
        "UPDATE spaces SET last_seq = ?, log_bytes = log_bytes + ?, last_bcast = last_bcast + ? WHERE id = ?",
        (seq, size, 1 if bcast_no is not None else 0, space_id),
    )
    t.execute(
        _INSERT_MESSAGE,
        (
            mid,
            space_id,
            seq,
            kind,
            sender,
            recipients,
            body,
            urgent,
            via,
            ref,
            reached_json,
            not_reached_json,
            len(reached or []),
            bcast_no,
            key,
            size,
            now,
            *PLAIN.row(),
        ),
    )
    return mid, seq, now


def append_receipt(
    store: Store, t: Tx, space_id: str, sender: str, turn_id: str, message_ids: list[str]
) -> str:
    """A ``seen`` receipt (S18). Receipts are written even past ``log_max_mb`` (S11)."""
    mid, _, _ = append(store, t, space_id, "seen", sender, json.dumps(message_ids), ref=turn_id)
    t.after_commit(lambda: wake.ring_space(store, space_id))
    return mid


_LIVE = "status IN ('running', 'idle')"


def _add(out: _Outcome, pid: str, address: str, status: str, waiting: int) -> None:
    if status == "left":
        out.not_reached.append({"address": address, "reason": "participant_left"})
    elif pid not in out.deliver:
        out.deliver[pid] = (address, waiting)


def _agentiflow_codename(t: Tx, space_id: str, codename: str) -> Any:
    """A full codename in an agentiflow: the root run is the lead, so its units'
    addresses drop the lead's segment (``parse_target`` cannot know the kind)."""
    if t.one("SELECT kind FROM spaces WHERE id = ?", (space_id,))[0] != "agentiflow":
        return None
    return t.one(
        "SELECT id, address, status, waiting FROM participants WHERE space_id = ? AND address = ?",
        (space_id, agentiflow_address(codename)),
    )


def _resolve(t: Tx, space_id: str, sender: Sender, target: Target, out: _Outcome) -> None:
    if target.kind == "operator":
        out.reached.append(OPERATOR)  # logged only; nobody drains it
        return
    if target.kind in ("address", "name"):
        row = t.one(
            "SELECT id, address, status, waiting FROM participants WHERE space_id = ? AND address = ?",
            (space_id, target.value),
        )
        if row is None and "/" in target.text:
            row = _agentiflow_codename(t, space_id, target.text)
        if row is not None:
            _add(out, *row)
            return
        if target.kind == "address":
            out.not_reached.append({"address": target.text, "reason": "unknown_participant"})
            return
        target = Target("role", target.value, target.text)  # a bare name that is not an address
    if target.kind in ("role", "step"):
        column = "agent" if target.kind == "role" else "step"
        rows = t.all(
            f"SELECT id, address, status, waiting FROM participants WHERE space_id = ? AND {column} = ? AND {_LIVE} "
            "AND address != ? ORDER BY joined_at_utc, id",
            (space_id, target.value, sender.address),
        )
        if not rows:
            out.not_reached.append({"address": target.text, "reason": "no_live_participant"})
        for row in rows:
            _add(out, *row)
        return
    if target.kind == "parent":
        row = None
        if sender.parent:
            row = t.one(
                "SELECT id, address, status, waiting FROM participants WHERE space_id = ? AND address = ?",
                (space_id, sender.parent),
            )
        if row is None:
            out.not_reached.append({"address": "parent", "reason": "no_parent"})
        else:
            _add(out, *row)
        return
    if target.kind == "lead":
        row = t.one(
            "SELECT id, address, status, waiting FROM participants WHERE space_id = ? AND address = 'lead'",
            (space_id,),
        )
        if row is None:
            out.not_reached.append({"address": "lead", "reason": "no_lead"})
        else:
            _add(out, *row)
        return
    raise AssertionError(f"unhandled target kind {target.kind}")


def _resolve_broadcast(t: Tx, space_id: str, sender: Sender, kind: str, out: _Outcome) -> None:
    rows = t.all(
        f"SELECT id, address, bcast_seen, waiting FROM participants WHERE space_id = ? AND {_LIVE} "
        "AND address != ? "
        "ORDER BY joined_at_utc, id",
        (space_id, sender.address),
    )
    if not rows:
        out.not_reached.append({"address": "broadcast", "reason": "no_live_participant"})
        return
    if kind in ("operator", "directive"):
        # The operator's broadcast is an instruction, not chatter: it goes to every
        # inbox (so it sorts with the operator's messages in a turn, S17). A
        # directive to broadcast records everyone it reaches (no inbox rows, no
        # broadcast-log entry: it is shown every turn instead).
        for pid, address, _, waiting in rows:
            _add(out, pid, address, "running", waiting)
        return
    out.bcast = True  # the broadcast log's cap is checked by the Batch, which counts
    for pid, address, _, _ in rows:
        out.reached.append(address)
        out.ring.append(pid)  # no delivery rows: they read the broadcast log by cursor


# --- reading the log ------------------------------------------------------------------
LOG_COLUMNS = (
    "id, space_id, seq, kind, sender, recipients, body, urgent, via, ref, reached, not_reached, "
    "idempotency_key, created_at_utc, thread, reply_to, importance, ack_required"
)


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
            row = t.one("SELECT seq FROM messages WHERE space_id = ? AND id = ?", (space_id, after))
            if row is None:
                raise errors.MessageNotFound(f"no message {after!r} in space {space_id}")
            start = max(start, row[0])
        sql = f"SELECT {LOG_COLUMNS} FROM messages WHERE space_id = ? AND seq > ?"
        params: list[Any] = [space_id, start]
        kind_list = list(kinds or [])
        if kind_list:
            sql += f" AND kind IN ({','.join('?' * len(kind_list))})"
            params += kind_list
        sql += " ORDER BY seq"
        if limit:
            sql += " LIMIT ?"
            params.append(limit)
        rows = t.all(sql, params)
    return [to_entry(r) for r in rows]
