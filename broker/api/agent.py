"""``Agent``: a participant acting in its space (the public API; ``broker.api.handles``
re-exports it)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal

from broker.api.declaration import Operation, declared, operation
from broker.api.mail import AgentMail
from broker.api.operations import (
    ACK,
    ACK_AND_CLAIM,
    BOARD_READ,
    CLAIM,
    CLAIM_KEY,
    DIRECTIVE,
    EXTEND,
    GRANTED,
    HISTORY,
    LEAVE,
    ME,
    NEXT_TURN,
    POST,
    QUARANTINE,
    RELEASE,
    RELEASE_KEY,
    RENEW_KEY,
    RETRACT,
    SEEN,
    SEND,
    SEND_MANY,
    SET_STATUS,
    TURN_HISTORY,
    TURN_HISTORY_UNDO,
    TURN_QUARANTINE,
)
from broker.api.reservations import AgentPaths
from broker.model.fields import Input
from broker.model.inputs import JoinInput, SendInput
from broker.model.records import (
    ClaimGrant,
    JournalEntry,
    Lease,
    SendResult,
    Turn,
    TurnMessages,
    TurnSeen,
)
from broker.model.typecheck import checked, self_checked
from broker.spaces import participants
from broker.spaces.auth import Identity
from broker.store import procs
from broker.store.sqlite import Store as Store
from broker.store.sqlite import Tx
from broker.vocab import BOARD_READ_DEFAULT

TeammateStatus = Literal["running", "idle", "failed", "shutdown"]

if TYPE_CHECKING:  # annotations only: built where the call runs
    from broker.model.records import BoardEntry, HistoryEntry, Joined, Participant


@checked
class Agent(AgentPaths, AgentMail):
    """A participant acting in its space.

    The leases and turns an Agent takes are held by this process (S32): if it
    dies, the participant's next connection from another process gets them
    back at once. ``transient=True`` is for a process that ends before its
    leases do (one CLI call per tool call): its leases end only by expiry."""

    def __init__(self, store: Store, identity: Identity, *, transient: bool = False) -> None:
        self.store = store
        self.identity = identity
        self.transient = transient

    @classmethod
    def connect(
        cls,
        store: Store,
        space: str,
        address: str,
        token: str | None,
        *,
        transient: bool = False,
    ) -> Agent:
        """The participant ``address`` of ``space``, authenticated by its token
        (S10). Its processing deliveries held by a process that is gone come
        back to ready at once (restart recovery, S32)."""
        from broker.delivery import inbox

        agent = cls(
            store, participants.authenticate(store, space, address, token), transient=transient
        )
        inbox.recover_on_connect(store, agent.identity.participant_id)
        return agent

    @property
    def process(self) -> str | None:
        """The process holding this agent's leases (S32); None when transient."""
        return None if self.transient else procs.this_process()

    @self_checked
    def call(self, op: Operation, inp: Input | Mapping[str, Any], tx: Tx | None = None) -> Any:
        """Run the declared operation ``op`` as this participant: ``inp`` is its
        checked input record (or its fields by name, checked here). Every
        surface's way in (the methods below, the HTTP API, MCP): the record
        goes down to the library function whole."""
        op = operation(op)
        inp = op.accept("agent", inp)
        extra = {name: getattr(self, name) for name in op.context}
        return op.fn(self.store, self.identity, inp, tx=tx, **extra)

    @classmethod
    def join(
        cls,
        store: Store,
        space: str,
        codename: str,
        *,
        join_key: str | None = None,
        operator_key: str | None = None,
        parent_token: str | None = None,
        token: str | None = None,
        **fields: object,
    ) -> tuple[Agent, Joined]:
        """Join ``space`` as ``codename`` (S27) with one credential: the
        space's ``join_key``, the store's ``operator_key``, or a parent's
        ``parent_token`` (the child's parent is then that participant, and its
        grant at most the parent's, S28). ``token``: the address's last token,
        which alone continues an address that has joined before (a retry, a
        restart, a re-join after leaving); otherwise only its recorded
        parent's token or the operator key can, never the join key (S40:
        ``forbidden``). A wrong or missing credential is ``auth_failed``; a
        live holder without its token, ``conflict``; nothing is written
        either way. A re-join keeps the ``step``, ``parent``, ``role``,
        ``archetype`` and ``task`` it does not name; ``""`` clears one."""
        fields.setdefault("pid", os.getpid())  # this process holds the identity: prune may check it
        credential = participants.Credential(join_key, operator_key, parent_token, token)
        joined = participants.join(
            store,
            space,
            JoinInput.parse({"codename": codename, **fields}),
            credential=credential,
        )
        return cls.connect(store, joined.space_id, joined.address, joined.token), joined

    @classmethod
    def from_token(cls, store: Store, token: str | None) -> Agent:
        """The participant ``token`` belongs to (served mode: the Bearer token
        alone names its holder, in whichever space)."""
        return cls(store, participants.authenticate_token(store, token))

    @classmethod
    def _after_leave(cls, store: Store, token: str | None) -> Agent:
        """``from_token`` that also names a participant that has left: for the
        operations that still answer it (``Operation.after_leave``: its own row,
        S4). The server's only; every other call of it is refused as ever."""
        return cls(store, participants.authenticate_token(store, token, after_leave=True))

    @property
    def address(self) -> str:
        return self.identity.address

    @property
    def space_id(self) -> str:
        return self.identity.space_id

    @declared(SEND)
    def send(
        self,
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
        """``msg.send``. ``reply_to`` (a message id) or ``thread`` (a short name)
        put it in a thread (S35); ``importance`` is low, normal or high;
        ``ack_required`` lets ``status`` say who has seen it."""
        return self.call(SEND, SEND.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(SEND_MANY)
    def send_many(
        self, items: Iterable[Mapping[str, Any] | SendInput], *, tx: Tx | None = None
    ) -> list[SendResult]:
        """``msg.send_many``: many messages in one transaction, each ``msg.send``'s
        fields by name (``{"to", "text", ...}``); all or none are sent (a refusal
        names the item: ``items[2].to``)."""
        if isinstance(items, Iterable) and not isinstance(items, list | tuple | str | Mapping):
            items = list(items)  # a generator: its items (anything else the record refuses)
        return self.call(SEND_MANY, SEND_MANY.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(POST)
    def post(
        self,
        text: str,
        *,
        addressed_to: Iterable[str] = (),
        idempotency_key: str | None = None,
        tx: Tx | None = None,
    ) -> SendResult:
        """``board.post``: a channel post, or addressed (it also lands in their inboxes)."""
        return self.call(POST, POST.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(LEAVE)
    def leave(self, *, tx: Tx | None = None) -> None:
        """Leave the space: this participant is ``left`` in the directory and its
        journal, and every later call with its token is refused (S4), settling
        its leases included. Its inbox stays as it is: what it holds comes back
        when the lease expires, for it to claim once it re-joins."""
        self.call(LEAVE, LEAVE.take(locals()), tx)

    @declared(ME)
    def me(self, *, tx: Tx | None = None) -> Participant:
        """This participant's own row as of now: its status, grant (``tools``),
        heartbeat and ``waiting`` (deliveries ready or being processed). Writes
        nothing; still answers after ``leave`` (status ``left``)."""
        return self.call(ME, ME.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(GRANTED)
    def granted(self, *, tx: Tx | None = None) -> list[str]:
        """The broker tools (S24) this participant holds now, sorted, re-read
        from its row (a grant changed since it joined counts at once). Refused
        like any call once it has left or its space stopped."""
        return self.call(GRANTED, GRANTED.take(locals()), tx)  # type: ignore[no-any-return]

    # --- the board (S21-S24) -------------------------------------------------------
    @declared(BOARD_READ)
    def board_read(
        self, *, after: str | None = None, limit: int = BOARD_READ_DEFAULT, tx: Tx | None = None
    ) -> list[BoardEntry]:
        """``board.read``: posts, directives and retractions after the cursor ``after``."""
        return self.call(BOARD_READ, BOARD_READ.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(DIRECTIVE)
    def directive(
        self,
        to: str | Iterable[str],
        text: str,
        *,
        idempotency_key: str | None = None,
        tx: Tx | None = None,
    ) -> SendResult:
        """``board.directive``: a standing instruction, shown every turn until retracted."""
        return self.call(DIRECTIVE, DIRECTIVE.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(RETRACT)
    def retract(self, directive_id: str, *, tx: Tx | None = None) -> SendResult:
        """``board.retract``: lift a directive this agent issued."""
        return self.call(RETRACT, RETRACT.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(CLAIM_KEY)
    def claim_key(
        self, key: str, ttl: float = 300.0, *, wait: float = 0.0, tx: Tx | None = None
    ) -> ClaimGrant:
        """``board.claim``: an exclusive lease on a board key, with a fencing token.
        With ``wait`` > 0, a key someone else holds is waited for, up to ``wait``
        seconds (woken by its release); still held then: ``ClaimHeld``."""
        return self.call(CLAIM_KEY, CLAIM_KEY.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(RELEASE_KEY)
    def release_key(self, key: str, fence: int, *, tx: Tx | None = None) -> JournalEntry:
        """``board.release``: free a key held with the fencing token ``fence``."""
        return self.call(RELEASE_KEY, RELEASE_KEY.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(RENEW_KEY)
    def renew_key(
        self, key: str, fence: int, ttl: float = 300.0, *, tx: Tx | None = None
    ) -> ClaimGrant:
        """Extend a live claim held with ``fence`` to ``ttl`` seconds from now (same fence)."""
        return self.call(RENEW_KEY, RENEW_KEY.take(locals()), tx)  # type: ignore[no-any-return]

    # --- the inbox queue (S13-S16) -------------------------------------------------
    @declared(CLAIM)
    def claim(
        self,
        limit: int = 1,
        lease: float | None = None,
        wait: float = 0.0,
        owner: str | None = None,
        *,
        tx: Tx | None = None,
    ) -> Lease:
        """Claim up to ``limit`` oldest inbox messages under a lease (``lease`` seconds)."""
        return self.call(CLAIM, CLAIM.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(ACK)
    def ack(
        self, lease_token: str, ids: Iterable[str] | None = None, *, tx: Tx | None = None
    ) -> int:
        """Ack message ``ids`` of the lease ``lease_token`` (None: the whole lease);
        a repeat returns 0."""
        return ACK.answer(self.call(ACK, ACK.take(locals()), tx))  # type: ignore[no-any-return]

    @declared(RELEASE)
    def release(
        self,
        lease_token: str,
        ids: Iterable[str] | None = None,
        *,
        error: str | None = None,
        tx: Tx | None = None,
    ) -> int:
        """Give messages back for replay (their delivery count stays)."""
        return RELEASE.answer(self.call(RELEASE, RELEASE.take(locals()), tx))  # type: ignore[no-any-return]

    @declared(EXTEND)
    def extend(
        self,
        lease_token: str,
        seconds: float | None = None,
        ids: Iterable[str] | None = None,
        *,
        tx: Tx | None = None,
    ) -> str:
        """Push the lease's expiry to now + ``seconds``; returns the new expiry."""
        return EXTEND.answer(self.call(EXTEND, EXTEND.take(locals()), tx))  # type: ignore[no-any-return]

    @declared(QUARANTINE)
    def quarantine(
        self,
        lease_token: str,
        message_id: str,
        reason: str,
        *,
        error: str | None = None,
        tx: Tx | None = None,
    ) -> None:
        """Set a bad message aside with its evidence; the queue goes on."""
        self.call(QUARANTINE, QUARANTINE.take(locals()), tx)

    @declared(ACK_AND_CLAIM)
    def ack_and_claim(
        self,
        lease_token: str,
        ids: Iterable[str] | None = None,
        limit: int = 1,
        lease: float | None = None,
        *,
        tx: Tx | None = None,
    ) -> Lease:
        """Ack and claim the next ``limit`` in one transaction."""
        return self.call(ACK_AND_CLAIM, ACK_AND_CLAIM.take(locals()), tx)  # type: ignore[no-any-return]

    # --- turns (S17-S19) -----------------------------------------------------------
    @declared(NEXT_TURN)
    def next_turn(
        self,
        wait: float = 0.0,
        lease: float | None = None,
        limit: int | None = None,
        *,
        tx: Tx | None = None,
    ) -> Turn:
        """What to show the model before its next call, framed and in order."""
        return self.call(NEXT_TURN, NEXT_TURN.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(SEEN)
    def seen(self, turn_id: str, *, tx: Tx | None = None) -> TurnSeen:
        """Confirm a turn once the model call returned."""
        return self.call(SEEN, SEEN.take(locals()), tx)  # type: ignore[no-any-return]

    # --- what the teammates runtime needs (S16, S26) -----------------------------------
    @declared(SET_STATUS)
    def set_status(self, status: TeammateStatus, *, tx: Tx | None = None) -> None:
        """This agent's own status (S5, S26: the teammate runtime sets it),
        refreshing its heartbeat. A participant that left cannot (ParticipantLeft)."""
        self.call(SET_STATUS, SET_STATUS.take(locals()), tx)

    def quarantine_turn(self, turn: Turn, reason: str) -> int:
        """Set a failed turn's inbox messages aside with ``reason`` as evidence
        (S15, S26); how many (those already redelivered to a later turn are not)."""
        from broker.delivery import turns

        return turns.quarantine(self.store, self.identity, turn, reason)

    def append_history(self, turn: Turn, *, tx: Tx | None = None) -> list[str]:
        """Append the turn's messages (not its directives) to this agent's
        history, once per message id (S16: history first, ack second); the ids
        appended now."""
        from broker.delivery import history

        return history.append(self.store, self.identity, turn, tx=tx)

    def undo_history(self, message_ids: Iterable[str], *, tx: Tx | None = None) -> int:
        """Remove these ids from this agent's history again: the turn's ack was
        lost and the redelivered turn will append them (S16). How many went."""
        from broker.delivery import history

        return history.undo(self.store, self.identity, list(message_ids), tx=tx)

    # The same bookkeeping by the turn's id (what a served teammate sends): the
    # store reads what the turn showed itself.
    @declared(TURN_HISTORY)
    def append_turn_history(self, turn_id: str, *, tx: Tx | None = None) -> TurnMessages:
        """``history.append``: the turn's messages appended to this agent's
        history, each once (S16); the ids appended now."""
        return self.call(TURN_HISTORY, TURN_HISTORY.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(TURN_HISTORY_UNDO)
    def undo_turn_history(self, turn_id: str, *, tx: Tx | None = None) -> TurnMessages:
        """``history.undo``: what the turn appended, removed again (S16)."""
        return self.call(TURN_HISTORY_UNDO, TURN_HISTORY_UNDO.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(TURN_QUARANTINE)
    def quarantine_turn_input(
        self, turn_id: str, reason: str, *, tx: Tx | None = None
    ) -> TurnMessages:
        """``turn.quarantine``: a failed turn's inbox messages set aside (S15, S26)."""
        return self.call(TURN_QUARANTINE, TURN_QUARANTINE.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(HISTORY)
    def history(self, *, tx: Tx | None = None) -> list[HistoryEntry]:
        """This agent's history, oldest first."""
        return self.call(HISTORY, HISTORY.take(locals()), tx)  # type: ignore[no-any-return]
