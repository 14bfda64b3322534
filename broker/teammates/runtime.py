"""Teammates (S26): persistent workers a lead spawns, messages and shuts down.

As ``docs/spec.md`` states it (S16, S26): a teammate stays
after its work, keeps its own history under its name, and talks both ways
through a durable mailbox. Here the mailbox is the teammate's inbox and its
turns (``broker.delivery.turns``), and each message re-enters the agent loop as one
turn handed to the teammate's handler.

The worker loop (``serve``) per turn:

1. ``next_turn(wait=...)``: idle is passive; it sleeps on the doorbell and
   wakes within milliseconds of new mail (S20).
2. History first: the turn's messages are appended to ``history`` (one row
   per message id, so a redelivered message is never appended twice, S16).
3. The handler runs (the turn).
4. Ack second: ``seen`` acks the turn. If the ack fails (the lease was lost and
   the turn will be redelivered), the history rows this turn appended are
   removed again, as S16 prescribes.

The runtime is a front end of the library: it uses ``broker.api.handles`` (the
operator joins teammates and reads their status; each teammate acts as its own
``Agent``) and nothing below it. ``serve`` uses only the agent's declared
operations (the turn's bookkeeping by its id: ``history.append``,
``history.undo``, ``turn.quarantine``), so the same loop runs a teammate
through the remote client (``broker agent run`` with ``BROKER_URL`` naming a
server).

A handler that raises quarantines the turn's input with the error as evidence,
sets the teammate ``failed`` and sends the failure to the lead. ``Team.shutdown``
stops the teammates first and then everything else; one failing close never
skips the rest.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from broker import errors
from broker.api.handles import Agent, Operator, Store, broker_command, check_env_names, child_env
from broker.model.records import HistoryEntry, SendResult, Turn

Handler = Callable[["TeammateContext", Turn], None]
Mode = Literal["thread", "process"]
IDLE_WAIT_S = 0.5  # a waiting worker re-checks its stop flag this often


@dataclass
class TeammateContext:
    """What a handler can do: speak as the teammate, never as anyone else."""

    name: str
    agent: Agent
    extra: dict[str, Any] = field(default_factory=dict)

    def send(self, to: str, text: str) -> SendResult:
        return self.agent.send(to, text)

    def reply(self, text: str) -> SendResult:
        """Report to the lead."""
        return self.agent.send("lead", text)


# --- the worker loop ------------------------------------------------------------------------
def failure_reason(exc: BaseException) -> str:
    """Why a handler failed, as the lead is told it (and ``agent run`` shows it)."""
    return f"{type(exc).__name__}: {exc}"[:2000]


def fail(agent: Agent, turn: Turn, exc: BaseException) -> None:
    """Failure semantics (S26): input quarantined, state failed, lead told."""
    reason = failure_reason(exc)
    if turn.id is not None:
        agent.quarantine_turn_input(turn.id, reason)
    agent.set_status("failed")
    with contextlib.suppress(errors.BrokerError):
        agent.send("lead", f"teammate {agent.address} failed on turn {turn.id}: {reason}")


def check_options(lease: float | None, idle_exit: float | None) -> None:
    """``serve``'s durations, checked before anything runs or is written (S33):
    ``broker agent run`` calls this before it joins."""
    from broker.api.handles import check_teammate_durations

    check_teammate_durations(lease, idle_exit)


def serve(
    agent: Agent,
    handler: Handler,
    *,
    stop: threading.Event | None = None,
    lease: float | None = None,
    max_turns: int | None = None,
    idle_exit: float | None = None,
    on_turn: Callable[[Turn, str, float], None] | None = None,
) -> str:
    """Run the teammate loop until stopped; returns the final status.

    ``idle_exit`` ends the loop after that many seconds without a turn
    (scripts and tests); ``max_turns`` after that many turns. ``on_turn(turn,
    outcome, seconds)`` is told how each turn ended: ``seen``, ``failed`` or
    ``redelivered`` (its lease was lost; it comes again)."""
    check_options(lease, idle_exit)
    stop = stop or threading.Event()
    ctx = TeammateContext(name=agent.address, agent=agent)
    taken = 0
    idle_since = time.monotonic()
    agent.set_status("idle")
    while not stop.is_set():
        try:
            turn = agent.next_turn(wait=IDLE_WAIT_S, lease=lease)
        except errors.SpaceNotRunning:
            break
        if turn.id is None:
            if idle_exit is not None and time.monotonic() - idle_since > idle_exit:
                break
            continue
        agent.set_status("running")
        started = time.monotonic()
        # By the turn's id: the store appends what the turn showed (served too).
        agent.append_turn_history(turn.id)  # history first ...
        try:
            handler(ctx, turn)
        except Exception as exc:  # noqa: BLE001 - any handler failure is the teammate's failure
            fail(agent, turn, exc)
            if on_turn is not None:
                on_turn(turn, "failed", time.monotonic() - started)
            return "failed"
        outcome = "seen"
        try:
            agent.seen(turn.id)  # ... ack second
        except errors.LeaseLost:
            agent.undo_turn_history(turn.id)  # it comes again: appended again then
            outcome = "redelivered"
        if on_turn is not None:
            on_turn(turn, outcome, time.monotonic() - started)
        agent.set_status("idle")
        taken += 1
        idle_since = time.monotonic()
        if max_turns is not None and taken >= max_turns:
            break
    with contextlib.suppress(errors.BrokerError):
        agent.set_status("shutdown")
    return "shutdown"


# --- the team (lead side) --------------------------------------------------------------------
@dataclass
class Teammate:
    name: str
    role: str
    address: str
    participant_id: str
    token: str
    mode: str
    agent: Agent
    """the teammate's identity in the lead's process (status, history)"""
    handler: Handler | None = None
    command: list[str] | None = None
    thread: threading.Thread | None = None
    process: Any = None  # multiprocessing.Process or subprocess.Popen
    restarts: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    env: dict[str, str] = field(default_factory=dict)
    """variables its process is given besides its identity (S39)"""


class Team:
    """A lead and its teammates in one space (S26). The operator joins the
    teammates on their behalf and reads their status."""

    def __init__(self, operator: Operator, lead: Agent, *, lease: float | None = None) -> None:
        self.operator = operator
        self.store: Store = lead.store
        self.lead = lead
        self.space_id = lead.space_id
        self.lease = lease
        self.teammates: dict[str, Teammate] = {}
        self._closers: list[tuple[str, Callable[[], None]]] = []
        self._supervising = threading.Event()
        self._supervisor: threading.Thread | None = None

    # -- spawning -------------------------------------------------------------------------------
    def spawn_teammate(
        self,
        name: str,
        role: str,
        prompt: str,
        handler: Handler | None = None,
        *,
        command: list[str] | None = None,
        mode: Mode = "thread",
        archetype: str = "specialist",
        agent: str | None = None,
        env: Mapping[str, str] | None = None,
        token: str | None = None,
    ) -> Teammate:
        """Join the teammate, durably write its first task into its inbox, start its worker.

        ``handler`` runs in a thread (``mode="thread"``) or a worker process
        (``mode="process"``; the handler must then be a module-level
        function); ``command`` runs ``broker agent run`` as a child process
        with the command as the per-turn handler (any language). A worker
        process and its command get exactly the teammate's identity and the
        store's URL (S39), plus the basics (``PATH``, ``HOME``, the locale)
        and the variables given in ``env`` (never a ``BROKER_*`` one).

        The runtime joins on the teammate's behalf with the operator key, which
        also continues a name that has joined before (an earlier team's) once
        its holder is gone (S40); ``token``, the teammate's last token (kept
        by a lead that restarted: ``Teammate.token``), continues it at once.
        The runtime keeps each teammate's token and restarts a killed worker
        with it (S32)."""
        if (handler is None) == (command is None):
            raise errors.InvalidInput("give exactly one of handler or command")
        if env and command is None and mode != "process":
            raise errors.InvalidInput(
                "env is for a teammate with its own process (command, or mode='process')",
                field="env",
            )
        check_env_names((), env)
        if name in self.teammates:
            raise errors.Conflict(f"teammate {name!r} already exists")
        me, joined = self.operator.join(  # on the teammate's behalf (S27, S40)
            self.space_id,
            name,
            token=token,
            role=role,
            archetype=archetype,
            agent=agent,
            parent=self.lead.address,
            pid=None,  # its worker holds the identity, not this process
        )
        # The first task is durable before any worker runs: a crash now loses nothing.
        self.lead.send(joined.address, prompt)
        mate = Teammate(
            name,
            role,
            joined.address,
            joined.participant_id,
            joined.token,
            "command" if command else mode,
            me,
            handler=handler,
            command=command,
            env=dict(env or {}),
        )
        self.teammates[name] = mate
        if command is not None:
            mate.process = self._start_command(mate, command)
        elif mode == "process":
            mate.process = self._start_process(mate, handler)  # type: ignore[arg-type]
        else:
            mate.thread = self._start_thread(mate, handler)  # type: ignore[arg-type]
        if mate.process is not None:
            self._ensure_supervisor()
        return mate

    def _agent(self, mate: Teammate) -> Agent:
        return Agent.connect(self.store, self.space_id, mate.address, mate.token)

    def _start_thread(self, mate: Teammate, handler: Handler) -> threading.Thread:
        me = self._agent(mate)
        th = threading.Thread(
            target=serve,
            args=(me, handler),
            kwargs={"stop": mate.stop, "lease": self.lease},
            name=f"teammate-{mate.name}",
            daemon=True,
        )
        th.start()
        return th

    def _start_process(self, mate: Teammate, handler: Handler) -> Any:
        proc = _mp_context().Process(
            target=_process_main,
            args=(
                str(self.store.url),
                self.space_id,
                mate.address,
                mate.token,
                handler,
                self.lease,
                mate.env,
            ),
            name=f"teammate-{mate.name}",
            daemon=True,
        )
        proc.start()
        return proc

    def _start_command(self, mate: Teammate, command: list[str]) -> subprocess.Popen[bytes]:
        env = child_env(
            space=self.space_id,
            address=mate.address,
            token=mate.token,
            reach=str(self.store.url),
            extra=mate.env,
        )
        args = [*broker_command(), "agent", "run", self.space_id, mate.address]
        if self.lease is not None:
            args += ["--ttl", str(self.lease)]
        args += [f"--env={name}" for name in mate.env]  # handed on to the command
        # Its own process group, so the teammate and its command live and die together.
        return subprocess.Popen([*args, "--", *command], env=env, start_new_session=True)

    # -- supervision: a worker process killed from outside is restarted ---------------------------
    def _ensure_supervisor(self) -> None:
        if self._supervisor is None:
            self._supervisor = threading.Thread(
                target=self._supervise, name="team-supervisor", daemon=True
            )
            self._supervisor.start()

    def _supervise(self) -> None:
        while not self._supervising.wait(0.05):
            for mate in list(self.teammates.values()):
                if mate.process is None or mate.stop.is_set() or _alive(mate.process):
                    continue
                status = self.operator.participant(self.space_id, mate.address).status
                if status in ("failed", "shutdown", "left"):
                    continue  # it ended on purpose (or failed): not ours to restart
                mate.restarts += 1
                if mate.command is not None:
                    mate.process = self._start_command(mate, mate.command)
                elif mate.handler is not None:
                    mate.process = self._start_process(mate, mate.handler)

    # -- messaging ------------------------------------------------------------------------------
    def send_message(self, to: str, content: str) -> SendResult:
        """To the lead or an existing teammate; anything else is a clear error."""
        if (
            to != "lead"
            and to not in self.teammates
            and to not in {m.address for m in self.teammates.values()}
        ):
            known = ", ".join(["lead", *sorted(self.teammates)])
            raise errors.ParticipantNotFound(f"no teammate {to!r}: known are {known}", address=to)
        address = self.teammates[to].address if to in self.teammates else to
        return self.lead.send(address, content)

    def status(self) -> dict[str, str]:
        everyone = {p.address: p.status for p in self.operator.participants(self.space_id)}
        return {name: everyone.get(m.address, "unknown") for name, m in self.teammates.items()}

    def history(self, name: str) -> list[HistoryEntry]:
        """A teammate's history (S26: it keeps its own, under its name), oldest first."""
        if name not in self.teammates:
            known = ", ".join(sorted(self.teammates)) or "none"
            raise errors.ParticipantNotFound(f"no teammate {name!r}: known are {known}")
        return self.teammates[name].agent.history()

    def add_closer(self, name: str, fn: Callable[[], None]) -> None:
        """Something else to close at shutdown, after the teammates."""
        self._closers.append((name, fn))

    # -- shutdown -------------------------------------------------------------------------------
    def shutdown(self, timeout: float = 5.0) -> list[tuple[str, BaseException]]:
        """Stop every teammate, then the supervisor, then the other closers.
        Every close is attempted; failures are collected and returned."""
        failures: list[tuple[str, BaseException]] = []
        self._supervising.set()
        for mate in self.teammates.values():
            try:
                self._stop_mate(mate, timeout)
            except Exception as exc:  # noqa: BLE001 - keep closing the rest
                failures.append((f"teammate {mate.name}", exc))
        if self._supervisor is not None:
            self._supervisor.join(timeout)
        for name, fn in self._closers:
            try:
                fn()
            except Exception as exc:  # noqa: BLE001
                failures.append((name, exc))
        return failures

    def _stop_mate(self, mate: Teammate, timeout: float) -> None:
        mate.stop.set()
        if mate.thread is not None:
            mate.thread.join(timeout)
        if mate.process is not None and _alive(mate.process):
            with contextlib.suppress(ProcessLookupError):
                os.kill(mate.process.pid, signal.SIGTERM)
            _join(mate.process, timeout)
        status = self.operator.participant(self.space_id, mate.address).status
        if status not in ("failed", "left"):
            with contextlib.suppress(errors.ParticipantLeft):
                mate.agent.set_status("shutdown")


def _mp_context() -> Any:
    """Worker processes come from a fork server, never from a fork of this
    process: a fork taken while another thread is inside SQLite copies SQLite's
    mutexes locked and the child hangs in its first connect. The fork server is
    a fresh single-threaded process, so its forks are safe and still cheap.
    Handlers must therefore be picklable (module-level functions)."""
    import multiprocessing as mp

    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["broker.teammates.runtime"])
    return ctx


def _alive(proc: Any) -> bool:
    if isinstance(proc, subprocess.Popen):
        return proc.poll() is None
    return bool(proc.is_alive())


def _join(proc: Any, timeout: float) -> None:
    if isinstance(proc, subprocess.Popen):
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    else:
        proc.join(timeout)
        if proc.is_alive():
            proc.kill()
            proc.join()


def _process_main(
    url: str,
    space_id: str,
    address: str,
    token: str,
    handler: Handler,
    lease: float | None,
    env: dict[str, str],
) -> None:
    # A fork of the fork server carries the lead's environment: what the
    # handler reads or starts gets the teammate's alone (S39).
    child = child_env(space=space_id, address=address, token=token, reach=url, extra=env)
    os.environ.clear()
    os.environ.update(child)
    store = Store(url)
    # A restarted worker gets its killed predecessor's leases back at once (S32).
    me = Agent.connect(store, space_id, address, token)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        serve(me, handler, stop=stop, lease=lease)
    except Exception:  # noqa: BLE001 - the supervisor decides from the status
        traceback.print_exc()
        raise SystemExit(1) from None
