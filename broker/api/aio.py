"""The asyncio twins of ``broker.api.handles``: ``AsyncAgent`` and ``AsyncOperator``.

They have the same methods as ``Agent`` and ``Operator`` (a test keeps the
two sets equal), as coroutines, for servers that hold many agents in one
event loop (``broker serve``, ``broker mcp``):

- The database work of each call runs in a small pool of worker threads
  (SQLite is a blocking library; each worker keeps its own connection). A
  cancelled call still finishes its statement before the cancellation goes
  on, so when ``await`` raises ``CancelledError`` nothing is left in flight.
- Waiting (``claim(wait=...)``, ``next_turn(wait=...)``, ``follow``) parks on
  the doorbell (S20) without holding a thread or a file descriptor: the
  ``broker.delivery.wake.Waiter``'s bell, rung by the process's one doorbell,
  settles a future of the event loop (S41). The order is
  the one ``broker.delivery.wake`` documents, with the Waiter's own steps: the
  doorbell is bound and the change marker read *before* the database is
  checked, every wait starts by comparing the marker (a commit in between is
  never slept through, even if its ring was lost), and every
  ``wake.SAFETY_S`` seconds the store's keeper (``waits.Keeper``: one thread
  for every parked wait of the process) looks at the marker again and keeps
  the waiting callers' heartbeats in one transaction.
- Cancelling a waiting claim never loses a message nor hands it out twice:
  if the claim statement already ran when the cancellation lands, its lease
  is released (shielded from further cancellation) and the messages are
  ready again at once. A turn taken by a cancelled ``next_turn`` is kept and
  returned by this handle's next ``next_turn`` (while its lease lasts), so
  what it showed is neither lost nor shown twice.

Example::

    agent = await AsyncAgent.connect(store, space, "lynx", token)
    lease = await agent.claim(wait=30)
    for d in lease.deliveries:
        ...
    await agent.ack(lease.lease_token)
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import math
import os
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Concatenate, ParamSpec, TypeVar

from broker import errors
from broker.api import parking
from broker.api.declaration import Operation
from broker.api.handles import Agent, Operator
from broker.delivery import inbox, waits, wake
from broker.ids import parse_ts
from broker.model.fields import Input
from broker.model.records import (
    ClaimGrant,
    Finding,
    Joined,
    Lease,
    LogEntry,
    Turn,
)
from broker.spaces import auth, spaces
from broker.spaces.auth import Identity
from broker.store.sqlite import Store, Tx

P = ParamSpec("P")
R = TypeVar("R")

# The bounds a server puts on its twins' parked waits (S41); front ends reach them here.
Parking = parking.Parking

# How a twin runs the database step of a parked wait (a claim or a turn, when
# its doorbell rings): ``writer(fn)`` runs ``fn(tx)`` in a write transaction and
# answers its result. A server gives its group committer (``broker serve``: the
# woken claim shares a transaction with its neighbours, with no thread of its
# own and no wait for the writer lock behind the committer's batches); None:
# the twin's own worker thread and transaction.
Writer = Callable[[Callable[[Tx], Any]], Awaitable[Any]]

WORKERS = 16  # threads for the blocking part of calls (each holds one SQLite connection)
MAX_WAIT_S = 86_400.0  # the longest wait a call may ask for (S33: bounded numbers)

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
_waiting = 0  # coroutines parked on a doorbell right now (this process)


def _executor() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="broker-aio")
    return _pool


def _reset_after_fork() -> None:
    global _pool, _pool_lock, _waiting
    _pool, _pool_lock, _waiting = (
        None,
        threading.Lock(),
        0,
    )  # the parent's threads do not exist here


os.register_at_fork(after_in_child=_reset_after_fork)


def waiting() -> int:
    """How many coroutines of this process are parked on a doorbell now."""
    return _waiting


def check_wait(wait: float) -> float:
    """A wait in seconds: a finite number from 0 to ``MAX_WAIT_S`` (S33)."""
    if isinstance(wait, bool) or not isinstance(wait, int | float):
        raise errors.InvalidInput(f"bad wait {wait!r}: a number of seconds", field="wait")
    if not (math.isfinite(wait) and 0 <= wait <= MAX_WAIT_S):
        raise errors.InvalidInput(f"bad wait {wait!r}: 0 to {MAX_WAIT_S:g} seconds", field="wait")
    return float(wait)


# --- running blocking calls -----------------------------------------------------------
async def run(fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
    """``fn(*args, **kwargs)`` in a worker thread. Cancelling the caller waits
    for ``fn`` to finish (it cannot be stopped half-way) before ``CancelledError``
    propagates, so nothing runs on behind the caller's back."""
    return await _run_undoable(functools.partial(fn, *args, **kwargs), None)


async def _run_undoable(fn: Callable[[], R], undo: Callable[[R], object] | None) -> R:
    """Run ``fn`` in a worker thread. If the caller is cancelled after ``fn``
    produced a result, ``undo(result)`` runs (in a worker, shielded) before the
    cancellation propagates: what the call took is given back, not dropped."""
    loop = asyncio.get_running_loop()
    ctx = contextvars.copy_context()
    return await _undoable(loop.run_in_executor(_executor(), ctx.run, fn), undo, ctx)


async def _undoable(
    fut: asyncio.Future[R], undo: Callable[[R], object] | None, ctx: contextvars.Context
) -> R:
    """Await ``fut`` (a worker's call, or a write job of a ``Writer``), which a
    cancellation does not stop: if the caller is cancelled and ``fut`` produced
    a result, ``undo(result)`` runs (in a worker, shielded) before the
    cancellation propagates."""
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        done = await _outlive(fut)
        if undo is not None and done is not None:
            loop = asyncio.get_running_loop()
            await _outlive(loop.run_in_executor(_executor(), ctx.run, undo, done[0]))
        raise


async def _outlive(fut: asyncio.Future[R]) -> tuple[R] | None:
    """Wait for ``fut`` through any number of cancellations: ``(result,)``, or
    None if it failed (the caller is being cancelled: its error is moot)."""
    while True:
        try:
            return (await asyncio.shield(fut),)
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                continue  # shield raised for our own cancellation; the result is there
            if fut.cancelled():
                return None
        except Exception:  # noqa: BLE001 - see the docstring
            return None


def _in_thread(
    fn: Callable[Concatenate[Any, P], R],
) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, R]]:
    """An async method calling the sync handle's method ``fn`` in a worker thread."""
    name = fn.__name__

    async def method(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
        bound: Callable[P, R] = getattr(self.sync, name)
        return await run(bound, *args, **kwargs)

    functools.update_wrapper(method, fn)
    method.__doc__ = f"Async ``{fn.__qualname__}`` (runs in a worker thread).\n\n{fn.__doc__ or ''}"
    return method


# --- the doorbell, awaited ----------------------------------------------------------------
class Doorbell:
    """A ``broker.delivery.wake.Waiter`` the event loop watches. Create it (``async
    with``) *before* checking the database, then ``await wait(timeout)``:
    True when rung (or a commit was seen at a safety tick), False at timeout.
    A ring is a hint only: re-check the database after every return.

    No lost wake-up (S20): the Waiter reads the store's change marker when it
    is made, and every ``wait()`` starts with the Waiter's own entry check
    (``Waiter.enter``), so a commit that landed between the caller's check and
    its ``wait()`` (even one whose ring was lost) returns at once. The steps
    are the Waiter's, only the blocking is the event loop's.

    While it sleeps it is parked with its store's ``waits.Keeper``, which does
    for every parked wait of the process at once what each did alone before:
    the safety tick (one marker read per ``wake.SAFETY_S``; a probe, when the
    wait has one, says whether a missed commit concerns it) and the caller's
    heartbeat (``pulse``: the beats due, in one transaction). A sleeping wait
    holds one timer, its own end, and no thread."""

    def __init__(
        self,
        store: Store,
        keys: Iterable[str],
        *,
        pulse: auth.Pulse | None = None,
        probe: waits.Probe | None = None,
        close_off_loop: bool = False,
    ) -> None:
        self.store = store
        self.waiter = wake.Waiter(store, keys)  # bound (or counted), marker read
        self.pulse = pulse  # the caller this wait keeps live (S27), if any
        self.probe = probe
        self.close_off_loop = close_off_loop

    async def __aenter__(self) -> Doorbell:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.close_off_loop:
            # A server's wait: the answer goes first. Closing the last waiter of
            # a key removes its marker and folder (an rmdir: ~0.5 ms here, more
            # on a busy disk) and is a thread's work like any file's; a ring
            # meanwhile sets a bell nobody waits on. Unregistering is
            # thread-safe, and a next wait on the key, made before or after
            # it, keeps or makes its own marker (``doorbells``).
            _executor().submit(self.close)
            return
        self.close()

    def close(self) -> None:
        self.waiter.close()

    async def wait(self, timeout: float) -> bool:
        """Sleep until rung or ``timeout`` seconds; True if something may have
        changed since the Doorbell was made or the previous ``wait()`` returned."""
        global _waiting
        if self.waiter.enter():
            return True  # committed since the marker was read: re-check now
        if timeout <= 0:
            return self.waiter.woken("timeout")
        keeper = waits.keeper(self.store)
        watch = keeper.add(self.waiter.bell, self.pulse, self.probe)
        _waiting += 1
        try:
            if self.waiter.polling:
                return await self._poll(timeout)
            return await self._wait(timeout, watch)
        finally:
            _waiting -= 1
            keeper.remove(watch)

    async def _wait(self, timeout: float, watch: waits.Watch) -> bool:
        loop = asyncio.get_running_loop()
        bell = self.waiter.bell
        self.waiter.sleeping()
        fut: asyncio.Future[bool] = loop.create_future()
        timer = loop.call_later(timeout, _settle, fut, False)
        # Rung from the doorbell's (or the keeper's) thread: settled in the loop.
        bell.wake_with(functools.partial(loop.call_soon_threadsafe, _settle, fut, True))
        if bell.rung:
            _settle(fut, True)  # rung before the waker was in place
        try:
            rung = await fut
        finally:
            timer.cancel()
            bell.wake_with(None)
        if not rung:
            return self.waiter.woken("timeout")
        # The keeper's tick: a commit rang nobody and may concern this wait.
        return self.waiter.woken("tick" if watch.ticked else "rung")

    async def _poll(self, timeout: float) -> bool:
        # No sockets (a sandbox without AF_UNIX): watch the Waiter's change marker.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.waiter.sleeping()
            await asyncio.sleep(wake.FALLBACK_POLL_S)
            if self.waiter.changed():
                return self.waiter.woken("polled")
        return self.waiter.woken("timeout")


def _settle(fut: asyncio.Future[bool], value: bool) -> None:
    if not fut.done():
        fut.set_result(value)


# --- the agent ------------------------------------------------------------------------------
class AsyncAgent:
    """A participant acting in its space, for asyncio code: the methods of
    ``broker.api.handles.Agent`` as coroutines (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        identity: Identity,
        parking: Parking | None = None,
        writer: Writer | None = None,
    ) -> None:
        self.sync = Agent(store, identity)
        self._turn: Turn | None = None  # taken by a cancelled next_turn, returned next
        self.parking = parking  # a server's bounds on parked waits (S41); None: unbounded
        self.writer = writer  # where a parked wait's steps run (``Writer``); None: a worker

    @classmethod
    def wrap(
        cls, agent: Agent, parking: Parking | None = None, writer: Writer | None = None
    ) -> AsyncAgent:
        """The async twin of an existing ``Agent`` (same store, same identity);
        a server gives its ``Parking`` (``broker.api.parking``) and its group
        committer (``Writer``)."""
        return cls(agent.store, agent.identity, parking, writer)

    async def _step(self, fn: Callable[[Tx | None], R], undo: Callable[[R], object]) -> R:
        """One check of a parked wait, ``fn(tx)``: in the server's ``writer``
        if it gave one (a transaction shared with its neighbours), else in a
        worker's own transaction (``fn(None)``). Either way a cancellation
        lets it finish and ``undo`` gives back what it took."""
        if self.writer is None:
            return await _run_undoable(functools.partial(fn, None), undo)
        job = asyncio.ensure_future(self.writer(fn))  # the committer's is a future: no task
        return await _undoable(job, undo, contextvars.copy_context())

    def _park(self, stack: contextlib.ExitStack) -> bool:
        """Count the wait about to park in ``stack`` (its call's), or refuse it (S41)."""
        if self.parking is not None:
            stack.enter_context(self.parking.park(self.identity))
        return True

    @classmethod
    async def connect(cls, store: Store, space: str, address: str, token: str | None) -> AsyncAgent:
        """``Agent.connect``: the participant ``address`` of ``space``, by its token."""
        return cls.wrap(await run(Agent.connect, store, space, address, token))

    @classmethod
    async def join(
        cls, store: Store, space: str, codename: str, **fields: Any
    ) -> tuple[AsyncAgent, Joined]:
        """``Agent.join``: join ``space`` as ``codename``; the token is in ``Joined``."""
        agent, joined = await run(Agent.join, store, space, codename, **fields)
        return cls.wrap(agent), joined

    @classmethod
    async def from_token(cls, store: Store, token: str | None) -> AsyncAgent:
        """``Agent.from_token``: the participant a token belongs to (served mode)."""
        return cls.wrap(await run(Agent.from_token, store, token))

    @property
    def store(self) -> Store:
        return self.sync.store

    @property
    def identity(self) -> Identity:
        return self.sync.identity

    @property
    def process(self) -> str | None:
        return self.sync.process

    async def call(self, op: Operation, inp: Input, tx: Tx | None = None) -> Any:
        """``Agent.call``: a declared operation with its checked input record; a
        wait parks on the doorbell (the operation's own coroutine), anything
        else runs on a worker thread."""
        if op.waits is not None and getattr(inp, op.waits) > 0 and tx is None:
            return await getattr(self, op.method)(**inp.values())
        return await run(self.sync.call, op, inp, tx)

    @property
    def address(self) -> str:
        return self.sync.address

    @property
    def space_id(self) -> str:
        return self.sync.space_id

    @property
    def transient(self) -> bool:
        return self.sync.transient

    send = _in_thread(Agent.send)
    send_many = _in_thread(Agent.send_many)
    status = _in_thread(Agent.status)
    search = _in_thread(Agent.search)
    contact_policy = _in_thread(Agent.contact_policy)
    set_contact_policy = _in_thread(Agent.set_contact_policy)
    post = _in_thread(Agent.post)
    leave = _in_thread(Agent.leave)
    board_read = _in_thread(Agent.board_read)
    directive = _in_thread(Agent.directive)
    retract = _in_thread(Agent.retract)
    reserve = _in_thread(Agent.reserve)
    release_reservation = _in_thread(Agent.release_reservation)
    renew_reservation = _in_thread(Agent.renew_reservation)
    check_paths = _in_thread(Agent.check_paths)
    release_key = _in_thread(Agent.release_key)
    renew_key = _in_thread(Agent.renew_key)
    ack = _in_thread(Agent.ack)
    release = _in_thread(Agent.release)
    extend = _in_thread(Agent.extend)
    quarantine = _in_thread(Agent.quarantine)
    seen = _in_thread(Agent.seen)
    set_status = _in_thread(Agent.set_status)
    quarantine_turn = _in_thread(Agent.quarantine_turn)
    append_history = _in_thread(Agent.append_history)
    undo_history = _in_thread(Agent.undo_history)
    append_turn_history = _in_thread(Agent.append_turn_history)
    undo_turn_history = _in_thread(Agent.undo_turn_history)
    quarantine_turn_input = _in_thread(Agent.quarantine_turn_input)
    history = _in_thread(Agent.history)
    me = _in_thread(Agent.me)
    granted = _in_thread(Agent.granted)

    def doorbell(self) -> Doorbell:
        """The Doorbell of this participant's inbox (S20): rung when mail for it
        commits. Open it (``async with``) *before* checking what waits, then
        ``await wait(timeout)`` and check again: nothing committed in between
        is slept through. Async only: a front end's watcher (``broker mcp``
        tells its clients when mail arrives) waits on it without a thread."""
        return Doorbell(self.store, [wake.participant_key(self.identity.participant_id)])

    # --- calls that take messages: never lost to a cancellation ---------------------
    def _give_back(self, lease: Lease) -> None:
        """Undo a claim whose caller was cancelled: its messages are ready again now."""
        if lease.deliveries:
            with contextlib.suppress(errors.BrokerError):  # already expired and re-claimed
                self.sync.release(lease.lease_token)

    async def ack_and_claim(
        self,
        lease_token: str,
        ids: Iterable[str] | None = None,
        limit: int = 1,
        lease: float | None = None,
        *,
        tx: Tx | None = None,
    ) -> Lease:
        """Async ``Agent.ack_and_claim``: ack and claim the next ``limit`` in one transaction."""
        call = functools.partial(self.sync.ack_and_claim, lease_token, ids, limit, lease, tx=tx)
        return await _run_undoable(call, self._give_back if tx is None else None)

    async def claim(
        self,
        limit: int = 1,
        lease: float | None = None,
        wait: float = 0.0,
        owner: str | None = None,
        *,
        tx: Tx | None = None,
    ) -> Lease:
        """Async ``Agent.claim``: up to ``limit`` oldest inbox messages under a
        lease of ``lease`` seconds. With ``wait`` > 0, waits on the inbox's
        doorbell (without a thread) until something can be claimed or ``wait``
        seconds pass; an empty lease means nothing came. Cancelling it never
        loses a message (see the module docstring)."""
        wait = check_wait(wait)
        if wait <= 0 or tx is not None:
            call = functools.partial(self.sync.claim, limit, lease, wait, owner, tx=tx)
            return await _run_undoable(call, self._give_back if tx is None else None)
        owner = owner or inbox.default_owner(self.identity)
        deadline = time.monotonic() + wait
        step = functools.partial(self._claim_step, limit, lease, owner)
        pulse = auth.Pulse(self.store, self.identity)  # waiting keeps the caller live (S27)
        probe = waits.Probe(inbox.claimable_among, self.identity.participant_id)
        async with self._doorbell(pulse, probe) as bell:
            with contextlib.ExitStack() as parked:
                counted = False
                while True:
                    got, expiry = await self._step(step, lambda r: self._give_back(r[0]))
                    left = deadline - time.monotonic()
                    if got.deliveries or left <= 0:
                        return got
                    counted = counted or self._park(parked)
                    await self._sleep(bell, pulse, waits.until(self.store, expiry, left))

    async def claim_key(
        self, key: str, ttl: float = 300.0, *, wait: float = 0.0, tx: Tx | None = None
    ) -> ClaimGrant:
        """Async ``Agent.claim_key``. With ``wait`` > 0, a key someone else holds
        is waited for on its doorbell (without a thread) until released, until
        its claim runs out, or ``wait`` seconds (then ``ClaimHeld``). A grant
        made as the waiting caller was cancelled is released, not kept."""
        from broker.board import claims

        wait = claims.check_wait(wait)
        if wait <= 0 or tx is not None:
            return await run(self.sync.claim_key, key, ttl, wait=wait, tx=tx)
        deadline = time.monotonic() + wait
        attempt = functools.partial(self.sync.claim_key, key, ttl)
        pulse = auth.Pulse(self.store, self.identity)  # waiting keeps the caller live (S27)
        board_key = [wake.board_key(self.space_id, key)]
        async with Doorbell(self.store, board_key, pulse=pulse) as bell:
            with contextlib.ExitStack() as parked:
                counted = False
                while True:
                    try:
                        return await _run_undoable(attempt, self._give_back_key)
                    except errors.ClaimHeld as exc:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            raise
                        counted = counted or self._park(parked)
                        until = waits.until(self.store, exc.fields["expires_at"], left)
                        await self._sleep(bell, pulse, until)

    def _give_back_key(self, grant: ClaimGrant) -> None:
        """Undo a key claim whose waiting caller was cancelled: the key is free again."""
        with contextlib.suppress(errors.BrokerError):  # already expired and claimed again
            self.sync.release_key(grant.key, grant.fence)

    @staticmethod
    async def _sleep(bell: Doorbell, pulse: auth.Pulse, timeout: float) -> None:
        """``waits.block``'s sleep on the event loop: until rung or ``timeout``
        (the wait's end or just past the next lease expiry: no commit rings
        that). The caller's heartbeat is kept by the store's keeper while the
        wait sleeps (``pulse``, given to the Doorbell); a beat it was refused
        rings the wait, whose re-check says why."""
        assert bell.pulse is pulse
        await bell.wait(timeout)

    def _doorbell(self, pulse: auth.Pulse, probe: waits.Probe | None = None) -> Doorbell:
        """The inbox's Doorbell for a wait that keeps this caller live (a
        server's twin closes it off the event loop, after its answer)."""
        key = [wake.participant_key(self.identity.participant_id)]
        off_loop = self.writer is not None
        return Doorbell(self.store, key, pulse=pulse, probe=probe, close_off_loop=off_loop)

    def _claim_step(
        self, limit: int, lease: float | None, owner: str, tx: Tx | None
    ) -> tuple[Lease, str | None]:
        got = self.sync.claim(limit, lease, 0.0, owner, tx=tx)
        return got, (None if got.deliveries else self._next_expiry(tx))

    def _next_expiry(self, tx: Tx | None = None) -> str | None:
        with self.store.read(tx) as t:
            return inbox.next_expiry(t, self.identity.participant_id)

    # --- turns -------------------------------------------------------------------------
    def _keep_turn(self, turn: Turn) -> None:
        if turn.id is not None:
            self._turn = turn

    def _kept_turn(self) -> Turn | None:
        turn, self._turn = self._turn, None
        if turn is None or turn.expires_at is None:
            return None
        if parse_ts(turn.expires_at) <= self.store.now():
            return None  # its lease ran out: its messages come back by themselves (S18)
        return turn

    async def next_turn(
        self,
        wait: float = 0.0,
        lease: float | None = None,
        limit: int | None = None,
        *,
        tx: Tx | None = None,
    ) -> Turn:
        """Async ``Agent.next_turn``: what to show the model before its next
        call (S17). With ``wait`` > 0, waits on the doorbell until something new
        arrives or ``wait`` passes. A turn a cancelled call had taken is returned
        by the next call (while its lease lasts)."""
        wait = check_wait(wait)
        if tx is None and (kept := self._kept_turn()) is not None:
            await run(self.sync.granted)  # refused like any call once it left (S4)
            return kept
        if wait <= 0 or tx is not None:
            call = functools.partial(self.sync.next_turn, wait, lease, limit, tx=tx)
            return await _run_undoable(call, self._keep_turn if tx is None else None)
        deadline = time.monotonic() + wait
        step = functools.partial(self._turn_step, lease, limit)
        pulse = auth.Pulse(self.store, self.identity)  # waiting keeps the caller live (S27)
        async with self._doorbell(pulse) as bell:
            with contextlib.ExitStack() as parked:
                counted = False
                while True:
                    turn, expiry = await self._step(step, lambda r: self._keep_turn(r[0]))
                    left = deadline - time.monotonic()
                    if turn.id is not None or left <= 0:
                        return turn
                    counted = counted or self._park(parked)
                    await self._sleep(bell, pulse, waits.until(self.store, expiry, left))

    def _turn_step(
        self, lease: float | None, limit: int | None, tx: Tx | None
    ) -> tuple[Turn, str | None]:
        turn = self.sync.next_turn(0.0, lease, limit, tx=tx)
        return turn, (None if turn.id is not None else self._next_expiry(tx))


# --- the operator ---------------------------------------------------------------------------
class AsyncOperator:
    """The operator's surface for asyncio code: the methods of
    ``broker.api.handles.Operator`` as coroutines, and ``follow`` (the log as it
    grows, awaiting the space's doorbell). Arguments are ``Operator``'s."""

    def __init__(self, store: Store, **kwargs: Any) -> None:
        self.sync = Operator(store, **kwargs)

    @classmethod
    def wrap(cls, operator: Operator) -> AsyncOperator:
        """The async twin of an existing ``Operator`` (already verified)."""
        self = cls.__new__(cls)
        self.sync = operator
        return self

    @property
    def store(self) -> Store:
        return self.sync.store

    @property
    def via(self) -> str:
        return self.sync.via

    @property
    def key(self) -> str:
        return self.sync.key

    async def call(self, op: Operation, inp: Input, tx: Tx | None = None) -> Any:
        """``Operator.call``: a declared operation with its checked input record."""
        return await run(self.sync.call, op, inp, tx)

    def doorbell(self, space_id: str | None = None) -> Doorbell:
        """The Doorbell of what an operator watches in a space (a full id): rung
        by its sends, joins, leaves, status changes and every change of a claim
        or a reservation; without a space, by spaces created, stopped, archived
        or purged. Open it (``async with``) before reading, then ``await
        wait(timeout)`` and read again. Async only: the server's live views
        (the console) wait on it without a thread. An inbox's claim or ack
        rings nobody (the hot path stays as it was): the safety tick sees it."""
        if space_id is None:
            return Doorbell(self.store, [wake.SPACES_KEY])
        return Doorbell(self.store, [wake.state_key(space_id), wake.space_key(space_id)])

    send = _in_thread(Operator.send)
    log = _in_thread(Operator.log)
    threads = _in_thread(Operator.threads)
    search = _in_thread(Operator.search)
    status = _in_thread(Operator.status)
    participants = _in_thread(Operator.participants)
    admit = _in_thread(Operator.admit)
    messages = _in_thread(Operator.messages)
    participant = _in_thread(Operator.participant)
    quarantined = _in_thread(Operator.quarantined)
    requeue = _in_thread(Operator.requeue)
    transcript = _in_thread(Operator.transcript)
    spaces = _in_thread(Operator.spaces)
    get_space = _in_thread(Operator.get_space)
    stop_space = _in_thread(Operator.stop_space)
    set_space = _in_thread(Operator.set_space)
    space_usage = _in_thread(Operator.space_usage)
    archive_space = _in_thread(Operator.archive_space)
    prune = _in_thread(Operator.prune)
    board = _in_thread(Operator.board)
    claims = _in_thread(Operator.claims)
    reservations = _in_thread(Operator.reservations)
    check_paths = _in_thread(Operator.check_paths)
    release_reservation = _in_thread(Operator.release_reservation)
    release_key = _in_thread(Operator.release_key)
    claim_journal = _in_thread(Operator.claim_journal)
    queue_stats = _in_thread(Operator.queue_stats)
    activity = _in_thread(Operator.activity)
    retract = _in_thread(Operator.retract)
    backup = _in_thread(Operator.backup)
    vacuum = _in_thread(Operator.vacuum)
    export_space = _in_thread(Operator.export_space)
    export_mailbox = _in_thread(Operator.export_mailbox)
    import_dir = _in_thread(Operator.import_dir)
    purge_space = _in_thread(Operator.purge_space)
    migrate_store = _in_thread(Operator.migrate_store)
    rotate_join_key = _in_thread(Operator.rotate_join_key)
    create_space = _in_thread(Operator.create_space)

    @classmethod
    async def doctor(cls, store: Store | str | None = None) -> list[Finding]:
        """Async ``Operator.doctor`` (needs no operator key)."""
        return await run(Operator.doctor, store)

    async def join(self, space: str, codename: str, **fields: object) -> tuple[AsyncAgent, Joined]:
        """Async ``Operator.join``: on an agent's behalf, with the operator key."""
        agent, joined = await run(functools.partial(self.sync.join, space, codename, **fields))
        return AsyncAgent.wrap(agent), joined

    async def follow(
        self,
        space: str,
        *,
        after: str | int | None = None,
        kinds: Iterable[str] | None = None,
        sender: str | None = None,
        to: str | None = None,
        since: str | None = None,
        idle_timeout: float | None = None,
    ) -> AsyncIterator[list[LogEntry]]:
        """``Operator.follow`` for asyncio: batches of new log entries of ``space``
        (after ``after``, a message id or a seq; filtered as ``log``) as they
        commit, until the space stops running, or ``idle_timeout`` seconds pass
        without news. Waits on the space's doorbell, never by polling the log."""
        if idle_timeout is not None:
            idle_timeout = check_wait(idle_timeout)
        found = await run(spaces.get, self.store, space)
        kind_list = list(kinds or ())
        seq: str | int | None = after
        async with Doorbell(self.store, [wake.space_key(found.id)]) as bell:
            while True:
                batch = await self.log(
                    found.id, after=seq, kinds=kind_list, sender=sender, to=to, since=since
                )
                if batch:
                    seq = batch[-1].seq
                    yield batch
                    continue
                state = (await run(spaces.get, self.store, found.id)).state
                if state != "running":
                    return  # rows committed before the stop were read just above
                rung = await bell.wait(idle_timeout if idle_timeout is not None else 3600.0)
                if not rung and idle_timeout is not None:
                    return
