"""The send transaction (S6-S12): checks, caps, one log row and its deliveries.

Every send is one write transaction that appends exactly one log row carrying
its outcome (who it reached, and why not for each it did not) and one delivery
per reached inbox. ``Batch`` holds the space's counters for the transaction
(derived from the log, revision 0017: no space row is written); ``append`` is
the log's other writer (rows outside a send: receipts, imports).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from functools import lru_cache
from typing import Any, TypedDict, Unpack

from broker import errors
from broker.delivery import inbox, wake
from broker.ids import by_id, message_id, parse_ts, seq_in_id
from broker.mail.recipients import Outcome, Sender, blocks, resolve
from broker.mail.threads import PLAIN, Mail, thread_of
from broker.model.records import NotReached, SendResult
from broker.model.records.mail import mail_of
from broker.spaces import shares
from broker.spaces.addressing import Target
from broker.spaces.spaces import caps_of, limits_of
from broker.store.settings import Limits
from broker.store.sql import stmt
from broker.store.sqlite import Store, Tx
from broker.vocab import human_size

_SPACE = stmt("messages.space")
_INSERT_MESSAGE = stmt("messages.insert_message")
_INSERT_ALIAS = stmt("messages.insert_alias")
_SEQ_OF = stmt("messages.seq_of")
_LOGGED_KEY = stmt("messages.logged_key")
_LAST_AT = stmt("messages.last_at")
_SENDER_LOG_BYTES = stmt("usage.sender_log_bytes")
_SENDER_WAITING = stmt("usage.sender_waiting")

# The space row a batch starts from: (state, settings JSON, last_seq, log_bytes, last_bcast).
SpaceRow = tuple[str, str, int, int, int]


class Sent(TypedDict, total=False):
    """What a send carries besides its kind, targets and text (``Batch.add``
    reads each with its default): urgent (False), via, key (the idempotency
    key), ref (None) and its mail attributes (``PLAIN``)."""

    urgent: bool
    via: str | None
    key: str | None
    ref: str | None
    mail: Mail


def send_in_tx(
    store: Store,
    t: Tx,
    space_id: str,
    sender: Sender,
    kind: str,
    targets: list[Target],
    text: str,
    *,
    deliver: bool = True,
    space: SpaceRow | None = None,
    known: tuple[Any, ...] | None = None,
    last_at: str | None = None,
    now: str | None = None,
    **sent: Unpack[Sent],
) -> SendResult:
    """The send itself, inside the caller's write transaction: checks, resolves
    ``targets`` (S6), applies the caps (S7), appends one log row with the
    outcome and one delivery per reached inbox. ``deliver=False`` records the
    outcome without inbox rows (directives are shown every turn instead).
    ``space``: the space row when the caller already read it in ``t``
    ``known``: the row of the one participant ``targets`` names, likewise;
    ``last_at``: the space's last log time, likewise, and ``now`` the store's
    time read in ``t`` (``Batch``)."""
    if known is not None and space is not None and kind == "direct" and deliver:
        one = send_one(store, t, space_id, sender, targets, text, known, space, last_at, now, sent)
        if one is not None:
            return one
    batch = Batch(
        store, t, space_id, sender, deliver=deliver, space=space, last_at=last_at, now=now
    )
    if known is not None:
        batch.known[known[1]] = known
    result = batch.add(kind, targets, text, **sent)
    batch.flush()
    return result


def send_one(
    store: Store,
    t: Tx,
    space_id: str,
    sender: Sender,
    targets: list[Target],
    text: str,
    known: tuple[Any, ...],
    space: SpaceRow,
    last_at: str | None,
    now: str | None,
    sent: Sent,
) -> SendResult | None:
    """The everyday send, written without a ``Batch``: an agent's plain direct
    message to the one participant ``known`` (its row read with the caller),
    in a running space where no rule can refuse or divert it. None when any
    rule might (a cap or share in reach, a contact policy, a recipient that
    left, an idempotency key, a reply, an urgent or operator send...): the
    ``Batch`` then judges every rule. So this path writes nothing a ``Batch``
    would not write for the same send (``tests/contract/test_send_one.py``
    runs both on the same stores); it spares the lock the Batch's objects, about
    a quarter of a send's Python inside it (spec §Targets, stop 52)."""
    state, settings, last_seq, log_bytes, _ = space
    mail = sent.get("mail", PLAIN)
    if (
        state != "running"
        or len(targets) != 1
        or sender.participant_id is None  # the operator: exempt from the caps (S30)
        or sent.get("key") is not None
        or sent.get("urgent")
        or sent.get("via") is not None
        or sent.get("ref") is not None
        or mail["reply_to"] is not None
    ):
        return None
    pid, address, status, waiting, policy, _, _ = known
    target = targets[0]
    caps = caps_of(settings)
    if (
        address != target.value  # read by another spelling: the Batch reads it again
        or status == "left"
        or (policy is not None and not sender.is_lead)
        or log_bytes >= caps.quiet_log_bytes
        or waiting >= caps.quiet_inbox
    ):
        return None
    body_bytes = len(text.encode("utf-8"))
    if body_bytes > limits_of(settings).body_max_bytes:
        return None  # refused by the Batch, which names the cap
    store.lock_space(t, space_id)  # as a Batch does: the sequence stays gap-free (PostgreSQL)
    seq = last_seq + 1
    mid = message_id(seq)
    recipients, reached, not_reached, size = _sized(body_bytes, targets, [address], [])
    at = stamp(store, t, space_id, last_at, now)
    row = log_row(
        mid, space_id, seq, "direct", sender.address, recipients, text, reached, not_reached,
        1, size, at,
    )  # fmt: skip
    row.update(mail)
    insert_rows(t, (row,), defer=True)
    inbox.insert_rows(
        t, ({"space_id": space_id, "message_seq": seq, "recipient_id": pid},), sent=True
    )
    wake.ring_at_commit(t, wake.keys_of(space_id, (pid,)))
    return SendResult(
        id=mid, seq=seq, kind="direct", reached=[address], not_reached=[], duplicate=False
    )


class Batch:
    """Sends appended in one transaction: the space row is read once (or handed
    over by the authorization read), each distinct ``to`` form is resolved
    once, and the rows go in with one statement per table at ``flush``. One
    send is a batch of one."""

    def __init__(
        self,
        store: Store,
        t: Tx,
        space_id: str,
        sender: Sender,
        *,
        deliver: bool = True,
        space: SpaceRow | None = None,
        last_at: str | None = None,
        now: str | None = None,
    ) -> None:
        """``last_at``: the space's last log time as the caller's read in ``t``
        read it ('' for an empty log; None: read it at the first stamp);
        ``now``: the store's time read inside ``t`` (None: read at the first stamp)."""
        self.store, self.t, self.space_id, self.sender = store, t, space_id, sender
        self.deliver = deliver
        store.lock_space(t, space_id)  # the sequence stays gap-free (PostgreSQL)
        row: SpaceRow = space or tuple(t.one(_SPACE, {"space_id": space_id}))
        state, settings = row[0], row[1]
        self.seq, self.log_bytes, self.bcast_no = int(row[2]), int(row[3]), int(row[4])
        if state != "running":
            raise errors.SpaceNotRunning(
                f"space {space_id} is {state}: it takes no message", space_id=space_id
            )
        self.limits = limits_of(settings)
        self.caps = caps_of(settings)  # computed once per settings, not per send
        self.resolved: dict[tuple[str, str, str], Outcome] = {}
        self.waiting: dict[str, int] = {}  # recipient -> waiting deliveries, counting this batch
        # key -> (its first result, the log row it wrote), for a repeat in this batch
        self.keys: dict[str, tuple[SendResult, dict[str, Any]]] = {}
        self.messages: list[dict[str, Any]] = []
        self.deliveries: list[dict[str, Any]] = []
        self.woken: set[str] = set()
        # S30: the operator passes every space cap; agents are held to their share.
        # The operator is the one sender without a participant (Sender(OPERATOR, None)).
        self.exempt = sender.participant_id is None
        self.sender_bytes: int | None = None  # this sender's log bytes, read when needed
        self.held: dict[str, int] = {}  # recipient -> this sender's deliveries waiting there
        # S42: the sender's share group, and what it holds, read when needed.
        self.group: shares.Group | None = None
        self.group_bytes: int | None = None
        self.group_held: dict[str, int] = {}  # recipient -> the group's deliveries there
        self.known: dict[str, tuple[Any, ...]] = {}  # address -> participant row read already
        # The space's last log time (S44): handed over, or read at the first stamp.
        self.last_at: str | None = None
        self.known_last_at, self.known_now = last_at, now

    # --- one send, in named steps ---------------------------------------------------------
    def add(self, kind: str, targets: list[Target], text: str, **sent: Unpack[Sent]) -> SendResult:
        urgent, via, ref = sent.get("urgent", False), sent.get("via"), sent.get("ref")
        key, mail = sent.get("key"), sent.get("mail", PLAIN)
        if key is not None:
            first = self.keys.get(key) or self._logged_key(key)
            if first is not None:
                _same_send(key, first[1], kind, targets, text, urgent, mail)
                return first[0]  # S12: the first result, nothing written
        body_bytes = self._check_body(text)
        if not self.exempt:
            self._check_log(self.limits)
        out = self._outcome(kind, targets)
        if mail["reply_to"] is not None:
            viewer = None if self.exempt else self.sender.address  # the operator sees all
            mail = thread_of(self.t, self.space_id, mail, viewer)
        delivered = self._apply_caps(out)
        self.woken.update(out.ring)
        self.woken.update(delivered)
        result = self._log_row(kind, targets, text, body_bytes, out, urgent, via, ref, key, mail)
        self.deliveries += [
            {  # no id: derived from the message's (revision 0024)
                "space_id": self.space_id,
                "message_seq": result.seq,
                "recipient_id": pid,
            }
            for pid in delivered
        ]
        if key is not None:
            self.keys[key] = (replace(result, duplicate=True), self.messages[-1])
        return result

    def _check_body(self, text: str) -> int:
        """S7: the body's UTF-8 size, refused past ``body_max_bytes``."""
        body_bytes = len(text.encode("utf-8"))
        cap = self.limits.body_max_bytes
        if body_bytes > cap:
            raise errors.BodyTooLarge(
                f"message body is {body_bytes} bytes; the cap is {cap}",
                field="text",
                size=body_bytes,
                cap=cap,
            )
        return body_bytes

    def _outcome(self, kind: str, targets: list[Target]) -> Outcome:
        """Every ``to`` form resolved and merged; contact policies applied (S38).
        Each address is reported once, however many forms named it."""
        out = Outcome()
        for target in targets:
            out.merge(self._resolve(kind, target))
        if kind == "direct" and out.deliver and not self.sender.is_lead:
            self._contact_policies(out)
        if out.not_reached:
            out.not_reached = [
                dict(p) for p in dict.fromkeys(tuple(n.items()) for n in out.not_reached)
            ]
        return out

    def _apply_caps(self, out: Outcome) -> list[str]:
        """S7, S30: the inboxes this send lands in (the others go to
        ``not_reached`` with their reason), and the broadcast log's cap."""
        limits = self.limits
        delivered: list[str] = []
        for pid, (address, waiting, _) in out.deliver.items():
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
                if pid in self.group_held:
                    self.group_held[pid] += 1
        if out.bcast:
            if not self.exempt and self.bcast_no - out.slowest >= limits.broadcast_cap:
                out.bcast, out.reached, out.ring = False, [], []
                out.not_reached.append({"address": "broadcast", "reason": "broadcast_full"})
            else:
                self.bcast_no += 1
        return delivered

    def _log_row(
        self,
        kind: str,
        targets: list[Target],
        text: str,
        body_bytes: int,
        out: Outcome,
        urgent: bool,
        via: str | None,
        ref: str | None,
        key: str | None,
        mail: Mail,
    ) -> SendResult:
        """The log row of this send, with the next seq; the counters move with it."""
        self.seq += 1
        mid = message_id(self.seq)
        recipients, reached_json, not_reached_json, size = _sized(
            body_bytes, targets, out.reached, out.not_reached
        )
        self.log_bytes += size
        if self.sender_bytes is not None:
            self.sender_bytes += size
        if self.group_bytes is not None:
            self.group_bytes += size
        row = log_row(
            mid, self.space_id, self.seq, kind, self.sender.address, recipients, text,
            reached_json, not_reached_json, len(out.reached), size, self._stamp(),
        )  # fmt: skip
        row.update(mail)
        bcast_no = self.bcast_no if out.bcast else None
        row.update(urgent=urgent, via=via, ref=ref, bcast_no=bcast_no, idempotency_key=key)
        self.messages.append(row)
        return SendResult(
            id=mid,
            seq=self.seq,
            kind=kind,
            reached=out.reached,
            not_reached=[NotReached(**n) for n in out.not_reached],
            duplicate=False,
        )

    def _stamp(self) -> str:
        """This row's time: never earlier than the space's last (S44)."""
        if self.last_at is None:
            self.last_at = stamp(
                self.store, self.t, self.space_id, self.known_last_at, self.known_now
            )
            return self.last_at
        self.last_at = max(self.store.now_ts(), self.last_at)
        return self.last_at

    # --- the checks -----------------------------------------------------------------------
    def _check_log(self, limits: Limits) -> None:
        """S11, S30, S42: past ``log_max_mb`` an agent's send is refused, and so
        it is once the sender holds ``sender_share`` of it, or its share group
        holds the group's share. What they hold is read only when the whole
        log is past the smallest share (below it nobody can hold more), then
        kept up to date in the batch."""
        caps = self.caps
        cap = caps.log_bytes
        if self.log_bytes >= cap:
            raise errors.MessagingFull(
                f"the log of space {self.space_id} passed log_max_mb ({limits.log_max_mb:g} MB): sends are refused",
                space_id=self.space_id,
            )
        share = caps.sender_log_bytes
        if self.log_bytes < min(share, caps.join_key_log_bytes):
            return
        if self.log_bytes >= share:
            if self.sender_bytes is None:
                row = self.t.one(
                    _SENDER_LOG_BYTES, {"space_id": self.space_id, "sender": self.sender.address}
                )
                self.sender_bytes = (int(row[0]) if row else 0) + self._pending_bytes()
            if self.sender_bytes >= share:
                raise errors.MessagingFull(
                    f"{self.sender.address} holds {human_size(self.sender_bytes)} of the log of "
                    f"space {self.space_id}: its sender_share ({limits.sender_share:g} of "
                    f"log_max_mb {limits.log_max_mb:g} MB) is used up; sends from it are refused",
                    space_id=self.space_id,
                    sender=self.sender.address,
                    reason="sender_share",
                )
        self._check_group_log(limits)

    def _pending_bytes(self) -> int:
        # This batch's rows (all this sender's) are not in the table yet.
        return sum(m["size_bytes"] for m in self.messages)

    def _group(self) -> shares.Group:
        if self.group is None:
            self.group = shares.group_of(self.t, self.space_id, self.sender.address)
        return self.group

    def _check_group_log(self, limits: Limits) -> None:
        """S42: the sender's share group (the join key's newcomers, or a
        parent with the children it admitted) holds its share of the log together."""
        group = self._group()
        if not group.shared:
            return  # one sender alone: its own share is the bound
        setting = "join_key_share" if group.join_key else "sender_share"
        share = getattr(limits, setting)
        cap = self.caps.join_key_log_bytes if group.join_key else self.caps.sender_log_bytes
        if self.log_bytes < cap:
            return
        if self.group_bytes is None:
            held = shares.log_bytes(self.t, self.space_id, group.members)
            self.group_bytes = held + self._pending_bytes()
        if self.group_bytes >= cap:
            raise errors.MessagingFull(
                f"{group.describe()} hold {human_size(self.group_bytes)} of the log of space "
                f"{self.space_id} together: their {setting} ({share:g} of log_max_mb "
                f"{limits.log_max_mb:g} MB) is used up; sends from {self.sender.address} are "
                "refused",
                space_id=self.space_id,
                sender=self.sender.address,
                reason=setting,
                group=group.name,
            )

    def _over_share(self, pid: str, now_waiting: int, limits: Limits) -> bool:
        """S30, S42: does this sender, or its share group, hold its share of
        ``pid``'s inbox? Counted only when the inbox itself holds that share
        (below it, nobody can)."""
        cap = self.caps.sender_inbox
        if now_waiting < min(cap, self.caps.join_key_inbox):
            return False
        if now_waiting >= cap:
            held = self.held.get(pid)
            if held is None:
                row = self.t.one(
                    _SENDER_WAITING, {"recipient_id": pid, "sender": self.sender.address}
                )
                held = self.held[pid] = int(row[0]) + self._pending_deliveries(pid)
            if held >= cap:
                return True
        group = self._group()
        if not group.shared:
            return False
        group_cap = self.caps.join_key_inbox if group.join_key else cap
        if now_waiting < group_cap:
            return False
        together = self.group_held.get(pid)
        if together is None:
            together = shares.waiting(self.t, pid, group.members) + self._pending_deliveries(pid)
            self.group_held[pid] = together
        return together >= group_cap

    def _pending_deliveries(self, pid: str) -> int:
        # Deliveries added by this batch are not in the table yet.
        return sum(1 for d in self.deliveries if d["recipient_id"] == pid)

    def _contact_policies(self, out: Outcome) -> None:
        """Drop the recipients whose contact policy refuses this sender (S38);
        the rules came with the recipients' rows."""
        if self.sender.participant_id is None:
            return  # the operator
        for pid, (address, _, rule) in list(out.deliver.items()):
            if blocks(rule, self.sender.address):
                del out.deliver[pid]
                out.not_reached.append({"address": address, "reason": "contact_policy"})

    def _logged_key(self, key: str) -> tuple[SendResult, Any] | None:
        """The first result of this sender's idempotency key already in the log
        (S12), and its row. Keys are per sender (S45): another sender's use of
        the same key is never read, so nothing tells who used it."""
        dup = self.t.one(
            _LOGGED_KEY, {"space_id": self.space_id, "sender": self.sender.address, "key": key}
        )
        if dup is None:
            return None
        result = SendResult(
            id=dup["id"],
            seq=dup["seq"],
            kind=dup["kind"],
            reached=json.loads(dup["reached"]),
            not_reached=[NotReached(**n) for n in json.loads(dup["not_reached"])],
            duplicate=True,
        )
        return result, dup

    def _resolve(self, kind: str, target: Target) -> Outcome:
        """Resolve one ``to`` form once per batch (waiting counts are kept here)."""
        cache_key = (kind if target.kind == "broadcast" else "", target.kind, target.value)
        out = self.resolved.get(cache_key)
        if out is None:
            known = self.known.get(target.value)
            out = self.resolved[cache_key] = resolve(
                self.t, self.space_id, self.sender, kind, target, known
            )
        return out

    # --- the writes -----------------------------------------------------------------------
    def flush(self) -> None:
        """Write what was added: the log rows, the deliveries. The space's
        counters move with the log rows (they are derived from them)."""
        t = self.t
        if not self.messages:
            return
        # Deferred: no answer is read, so on PostgreSQL they go with the COMMIT
        # (or the next read) in one round trip; a refusal is raised there.
        insert_rows(t, self.messages, defer=True)
        inbox.insert_rows(t, self.deliveries, sent=True)  # the one writer of deliveries
        wake.ring_at_commit(t, wake.keys_of(self.space_id, self.woken))
        self.messages, self.deliveries, self.woken = [], [], set()
        self.held, self.group_held = {}, {}  # the flushed deliveries are in the table now


def _same_send(
    key: str,
    first: Any,
    kind: str,
    targets: list[Target],
    text: str,
    urgent: bool,
    mail: Mail,
) -> None:
    """S12: a key's repeat must be the same send (kind, recipients, text, mail
    fields); the same key on a different message is a ``conflict``, not a
    silent duplicate that would report another message's result. ``first`` is
    the first send's log row (read by name). A reply's thread is compared only
    when the repeat names one: the first row holds the one it inherited."""
    given, logged = mail_of(mail), mail_of(first)
    differs = [
        name
        for name, same in (
            ("kind", first["kind"] == kind),
            ("to", first["recipients"] == _json_list(tuple(tg.text for tg in targets))),
            ("text", first["body"] == text),
            ("urgent", bool(first["urgent"]) == urgent),
            *((n, given[n] == logged[n]) for n in given if n != "thread" or mail[n] is not None),
        )
        if not same
    ]
    if differs:
        raise errors.Conflict(
            f"idempotency key {key!r} was first used for a different message (its "
            f"{', '.join(differs)} differ{'s' if len(differs) == 1 else ''}): a repeat "
            "must be the same send; use a new key for a new message",
            field="idempotency_key",
        )


def _sized(
    body_bytes: int, targets: list[Target], reached: list[str], not_reached: list[Any]
) -> tuple[str, str, str, int]:
    """A log row's recipients, reached and not_reached JSON, and its size."""
    recipients = _json_list(tuple(tg.text for tg in targets))
    reached_json = _json_list(tuple(reached))
    not_reached_json = json.dumps(not_reached) if not_reached else "[]"
    size = body_bytes + len(recipients) + len(reached_json) + len(not_reached_json)
    return recipients, reached_json, not_reached_json, size


@lru_cache(maxsize=4096)
def _json_list(items: tuple[str, ...]) -> str:
    """JSON of a list of addresses; a batch repeats the same few many times."""
    return json.dumps(list(items))


def stamp(
    store: Store, t: Tx, space_id: str, last: str | None = None, now: str | None = None
) -> str:
    """The time of a new log row of the space (S44): the store's clock, never
    earlier than the space's last row, whatever the clock of the process that
    writes it (a wall clock stepped back, a host behind the others). The
    store's clock is moved up to that time too, so the leases this process
    judges next run on from there. ``last``: that row's time as already read
    in ``t`` ('' for an empty log), else it is read here; ``now``: the store's
    time as read inside ``t`` (after its lock: no later writer reads an
    earlier one), else it is read here."""
    if now is None:
        now = store.now_ts()
    if last is None:
        row = t.one(_LAST_AT, {"space_id": space_id})
        last = row[0] if row is not None else ""
    if last > now:
        store.clock.floor(parse_ts(last))
        now = store.now_ts()
    return now


def log_row(
    mid: str,
    space_id: str,
    seq: int,
    kind: str,
    sender: str,
    recipients: str,
    body: str,
    reached: str,
    not_reached: str,
    reached_n: int,
    size: int,
    at: str,
) -> dict[str, Any]:
    """A new log row by its columns' names, with what every row has; it is
    plain in the rest (not urgent, no via, ref, idempotency key, broadcast
    number or mail attributes). Its writers set what differs: ``Batch``,
    ``send_one``, ``append``."""
    return {
        "id": mid,
        "space_id": space_id,
        "seq": seq,
        "kind": kind,
        "sender": sender,
        "recipients": recipients,
        "body": body,
        "urgent": False,
        "via": None,
        "ref": None,
        "reached": reached,
        "not_reached": not_reached,
        "reached_n": reached_n,
        "bcast_no": None,
        "idempotency_key": None,
        "size_bytes": size,
        "created_at_utc": at,
        **PLAIN,
    }


def insert_rows(t: Tx, rows: Sequence[dict[str, Any]], *, defer: bool = False) -> None:
    """The one writer of ``messages``: a send's rows, whose ids name their seq
    (``broker.ids.message_id``)."""
    # executemany costs ~15 us more than execute for one row: a single send is the hot path.
    if len(rows) == 1:
        (t.defer if defer else t.execute)(_INSERT_MESSAGE, rows[0])
    elif rows:
        t.many(_INSERT_MESSAGE, rows)


def restore_rows(t: Tx, rows: Sequence[dict[str, Any]]) -> None:
    """The importer's rows of ``messages``, ids as given (each refusal read at
    its row). The log has no index of ids (revision 0018): an id already in
    the space is refused here, and an id that does not name its row's seq
    gets an alias (``message_aliases``, written only here), so a lookup by id
    finds it."""
    for row in rows:
        mid, space_id, seq = row["id"], row["space_id"], row["seq"]
        if t.one(_SEQ_OF, {"space_id": space_id, **by_id(mid)}) is not None:
            raise errors.StoreError(f"message {mid} is already in the log of space {space_id}")
        t.execute(_INSERT_MESSAGE, row)
        if seq_in_id(mid) != seq:
            t.execute(_INSERT_ALIAS, {"space_id": space_id, "id": mid, "seq": seq})


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
    Sends go through ``Batch`` or ``send_one``: with this one they are the only
    writers of ``messages``."""
    store.lock_space(t, space_id)
    now = stamp(store, t, space_id)
    reached_json = json.dumps(reached or [])
    not_reached_json = json.dumps(not_reached or [])
    size = len(body.encode("utf-8")) + len(recipients) + len(reached_json) + len(not_reached_json)
    seq = int(t.one(_SPACE, {"space_id": space_id})["last_seq"]) + 1
    mid = message_id(seq)
    row = log_row(
        mid, space_id, seq, kind, sender, recipients, body, reached_json, not_reached_json,
        len(reached or []), size, now,
    )  # fmt: skip
    row.update(urgent=urgent, via=via, ref=ref, bcast_no=bcast_no, idempotency_key=key)
    t.execute(_INSERT_MESSAGE, row)
    return mid, seq, now


def append_receipt(
    store: Store, t: Tx, space_id: str, sender: str, turn_id: str, message_ids: list[str]
) -> str:
    """A ``seen`` receipt (S18). Receipts are written even past ``log_max_mb`` (S11)."""
    mid, _, _ = append(store, t, space_id, "seen", sender, json.dumps(message_ids), ref=turn_id)
    wake.ring_at_commit(t, [wake.space_key(space_id)])
    return mid
