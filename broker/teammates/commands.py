"""Commands as teammates' handlers (S26): any-language teammates.

``command_handler`` runs a command once per turn with the turn as JSON on its
stdin and sends what it prints as the teammate, one batch per turn; ``broker
agent run`` (and so a ``Team``'s command teammate) is built on it. The
command's environment is exactly the teammate's (S39).
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from broker import errors
from broker.api.handles import check_env_names, child_env
from broker.model.records import Turn, to_dict

if TYPE_CHECKING:
    from broker.teammates.runtime import Handler, TeammateContext


def turn_json(turn: Turn) -> str:
    data = to_dict(turn)
    data["content"] = turn.content
    return json.dumps(data, ensure_ascii=False)


def command_handler(
    command: list[str],
    env: Mapping[str, str] | None = None,
    timeout: float = 600.0,
    on_stderr: Callable[[str], None] | None = None,
    on_note: Callable[[str], None] | None = None,
    *,
    passed: Iterable[str] = (),
) -> Handler:
    """Run ``command`` once per turn with the turn as JSON on stdin.

    Its environment is exactly the teammate's (S39, ``broker.launch.child_env``):
    its identity, the store's URL, the basics (``PATH``, ``HOME``, the locale),
    the variables of this environment named in ``passed`` and those given in
    ``env``; never the operator key or a join key.

    Each stdout line that is a JSON object with a ``"to"`` is a message sent as
    the teammate: ``{"to", "text"}``, and optionally the other fields of
    ``msg send`` (``SendInput``: ``thread``, ``idempotency_key``, ...; any
    other field is refused, naming it: S10). The other non-empty
    lines together are one reply to the lead. A turn's output is sent as one
    batch, in one transaction (``Agent.send_many``): a line that is refused
    (an unknown field, an empty text, a bad address) fails the turn and
    nothing of its output is sent; a message that reaches nobody is logged
    as such (S8) and the rest is sent; ``on_note`` is told of it.
    A non-zero exit is a failure (input quarantined, teammate failed), and
    then nothing is sent either. ``on_stderr`` receives each line the command
    writes to stderr as it comes (`broker agent run` shows them); the last
    one is kept for the failure."""

    passed = tuple(passed)
    check_env_names(passed, env)  # refused before any turn is taken

    def handle(ctx: TeammateContext, turn: Turn) -> None:
        environment = child_env(
            space=ctx.agent.space_id,
            address=ctx.agent.address,
            token=ctx.extra.get("token", ""),
            reach=reach(ctx.agent),
            passed=passed,
            extra=env,
        )
        if on_stderr is None:
            proc = subprocess.run(
                command,
                input=turn_json(turn),
                capture_output=True,
                text=True,
                env=environment,
                timeout=timeout,
            )
            returncode, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
        else:
            returncode, stdout, stderr = _run_streaming(
                command, turn_json(turn), environment, timeout, on_stderr
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
            # the line names the item: its field is named as the line wrote it
            said = re.sub(rf"items\[{n}\](?:\.|: )", "", exc.message, count=1)
            raise errors.HandlerFailed(f"{where}: {said}{_unsent(items)}") from None
        for n, result in enumerate(results):
            for miss in result.not_reached:
                if on_note is not None:
                    on_note(f"stdout line {lines[n]} did not reach {miss.address}: {miss.reason}")

    return handle


def reach(agent: Any) -> str:
    """Where the teammate's command reaches the broker (S39): the server's URL
    when the teammate runs through the remote client (its ``conn``), else the
    store's URL."""
    conn = getattr(agent, "conn", None)
    return str(conn.url) if conn is not None else str(agent.store.url)


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
