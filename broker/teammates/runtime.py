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
``Agent``) and nothing below it.

A handler that raises quarantines the turn's input with the error as evidence,
sets the teammate ``failed`` and sends the failure to the lead. ``Team.shutdown``
stops the teammates first and then everything else; one failing close never
skips the rest.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from broker import errors
from broker.api.handles import Agent, Operator, Store
from broker.model.records import HistoryEntry, SendResult, Turn, to_dict

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
    agent.quarantine_turn(turn, reason)
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
        fresh = agent.append_history(turn)  # history first ...
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
            agent.undo_history(fresh)  # the turn will come again: it must be appended again then
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


# --- commands as handlers (any-language teammates) -------------------------------------------
def turn_json(turn: Turn) -> str:
    data = to_dict(turn)
    data["content"] = turn.content
    return json.dumps(data, ensure_ascii=False)


def command_handler(
    command: list[str],
    env: dict[str, str] | None = None,
    timeout: float = 600.0,
    on_stderr: Callable[[str], None] | None = None,
    on_note: Callable[[str], None] | None = None,
) -> Handler:
    """Run ``command`` once per turn with the turn as JSON on stdin.

    Each stdout line that is a JSON object with a ``"to"`` is a message sent as
    the teammate: ``{"to", "text"}``, and optionally ``thread``, ``reply_to``,
    ``importance``, ``ack_required``, ``idempotency_key`` (``msg send``'s
    fields; any other field is refused, naming it: S10). The other non-empty
    lines together are one reply to the lead. A turn's output is sent as one
    batch, in one transaction (``Agent.send_many``): a line that is refused
    (an unknown field, an empty text, a bad address) fails the turn and
    nothing of its output is sent; a message that reaches nobody is logged
    as such (S8) and the rest is sent; ``on_note`` is told of it.
    A non-zero exit is a failure (input quarantined, teammate failed), and
    then nothing is sent either. ``on_stderr`` receives each line the command
    writes to stderr as it comes (`broker agent run` shows them); the last
    one is kept for the failure."""

    def handle(ctx: TeammateContext, turn: Turn) -> None:
        ident = ctx.agent.identity
        child_env = {**os.environ, **(env or {})}
        child_env.update(
            BROKER_SPACE=ident.space_id,
            BROKER_AS=ident.address,
            BROKER_TOKEN=ctx.extra.get("token", ""),
        )
        if on_stderr is None:
            proc = subprocess.run(
                command,
                input=turn_json(turn),
                capture_output=True,
                text=True,
                env=child_env,
                timeout=timeout,
            )
            returncode, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
        else:
            returncode, stdout, stderr = _run_streaming(
                command, turn_json(turn), child_env, timeout, on_stderr
            )
        items, lines = _output_items(stdout)
        if returncode != 0:
            tail = (stderr.strip().splitlines() or ["(no stderr)"])[-1]
            raise errors.HandlerFailed(
                f"command exited {returncode}: {tail}{_unsent(items)}", returncode=returncode
            )
        try:
            results = ctx.agent.send_many(items)
        except errors.InvalidInput as exc:
            n = exc.fields.get("item")
            where = f"stdout line {lines[n]}" if isinstance(n, int) else "its output"
            said = exc.message.split(": ", 1)[1] if isinstance(n, int) else exc.message
            raise errors.HandlerFailed(f"{where}: {said}{_unsent(items)}") from None
        for n, result in enumerate(results):
            for miss in result.not_reached:
                if on_note is not None:
                    on_note(f"stdout line {lines[n]} did not reach {miss.address}: {miss.reason}")

    return handle


def _output_items(stdout: str) -> tuple[list[dict[str, Any]], list[int | str]]:
    """The messages of a command's output (see ``command_handler``) and, for
    each, the stdout line it came from (the reply to the lead: its lines)."""
    items: list[dict[str, Any]] = []
    lines: list[int | str] = []
    plain: list[str] = []
    plain_at: list[int] = []
    for n, line in enumerate(stdout.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            obj = None
        if isinstance(obj, dict) and "to" in obj:
            items.append(obj)  # checked whole by send_many, unknown fields too
            lines.append(n)
        else:
            plain.append(line)
            plain_at.append(n)
    if plain:
        items.append({"to": "lead", "text": "\n".join(plain)})
        first, last = plain_at[0], plain_at[-1]
        span = str(first) if first == last else f"{first}-{last}"
        lines.append(f"{span} (the reply to the lead)")
    return items, lines


def _unsent(items: list[dict[str, Any]]) -> str:
    n = len(items)
    if not n:
        return ""
    return f"; nothing of the turn's output was sent ({n} message{'' if n == 1 else 's'})"


def _run_streaming(
    command: list[str],
    stdin_text: str,
    env: dict[str, str],
    timeout: float,
    on_stderr: Callable[[str], None],
) -> tuple[int, str, str]:
    """``subprocess.run`` with stderr handed to ``on_stderr`` line by line as it
    comes; returns (exit status, stdout, the last stderr line)."""
    proc = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    last = [""]
    out: list[str] = []

    def read_stdout(stream: Any) -> None:
        out.append(stream.read())

    def pump_stderr(stream: Any) -> None:
        for line in stream:
            if line.strip():
                last[0] = line
            on_stderr(line.rstrip("\n"))

    def feed_stdin(stream: Any) -> None:
        # A writer thread: a command that prints before it reads all of a large
        # turn must not deadlock against us.
        with contextlib.suppress(BrokenPipeError, OSError):
            stream.write(stdin_text)
            stream.close()

    threads = [
        threading.Thread(target=read_stdout, args=(proc.stdout,), daemon=True),
        threading.Thread(target=pump_stderr, args=(proc.stderr,), daemon=True),
        threading.Thread(target=feed_stdin, args=(proc.stdin,), daemon=True),
    ]
    for t in threads:
        t.start()
    try:
        proc.wait(timeout)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        for t in threads:
            t.join(5)
    return proc.returncode, "".join(out), last[0]


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
        token: str | None = None,
    ) -> Teammate:
        """Join the teammate, durably write its first task into its inbox, start its worker.

        ``handler`` runs in a thread (``mode="thread"``) or a worker process
        (``mode="process"``; the handler must then be a module-level function); ``command`` runs ``broker agent run`` as a child
        process with the command as the per-turn handler (any language).

        The runtime joins on the teammate's behalf with the operator key, which
        also continues a name that has joined before (an earlier team's) once
        its holder is gone (S40); ``token``, the teammate's last token (kept
        by a lead that restarted: ``Teammate.token``), continues it at once.
        The runtime keeps each teammate's token and restarts a killed worker
        with it (S32)."""
        if (handler is None) == (command is None):
            raise errors.InvalidInput("give exactly one of handler or command")
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
            ),
            name=f"teammate-{mate.name}",
            daemon=True,
        )
        proc.start()
        return proc

    def _start_command(self, mate: Teammate, command: list[str]) -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            "BROKER_URL": str(self.store.url),
            "BROKER_SPACE": self.space_id,
            "BROKER_AS": mate.address,
            "BROKER_TOKEN": mate.token,
        }
        args = [sys.executable, "-m", "broker", "agent", "run", self.space_id, mate.address]
        if self.lease is not None:
            args += ["--ttl", str(self.lease)]
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
    url: str, space_id: str, address: str, token: str, handler: Handler, lease: float | None
) -> None:
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
