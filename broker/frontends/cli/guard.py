"""broker guard ...: a git pre-commit hook that honours path reservations (S37).

``install`` writes ``pre-commit`` into the repository's hooks folder (``git
rev-parse --git-path hooks``, so ``core.hooksPath`` and worktrees are
respected). The hook runs ``broker guard pre-commit``, which lists the staged
changes (added, modified, deleted, and both sides of a rename) and asks the
broker who holds what covers them (``Agent.check_paths``, or the operator's
check when the committer has no identity): a path held exclusively by someone
other than the committing agent refuses the commit, naming holder, pattern and
expiry. Every name is checked, whatever it holds: a control character in a
file name is matched like any other (``src/**`` covers ``src/a\\nb.py``), a
byte that is not UTF-8 as U+FFFD; names are escaped when printed (S31).

Without an agent identity the check is the operator's, which needs the
operator key: a committer with neither is told how to set one up, or to skip
the check (exit 4). Failing open would let any commit through the moment the
hook's environment is wrong, so it does not.

``BROKER_GUARD=off`` is read first and always lets the commit through, even
when nothing could be checked; the override is logged in the space's log as a
board post by the committing agent (what it would have refused, or that
nothing was), so the others see it. When it cannot be posted (no identity, a
broker error) the hook says why on stderr.

The hook runs the broker by its interpreter's absolute path in isolated
mode (``broker.launch.broker_command``): git runs hooks from the repository's top
folder, and ``python -m broker`` from there would run a ``broker`` package
planted in the working tree (S39). ``install`` replaces a hook an earlier
broker wrote (``broker doctor``, run inside the repository, flags one still
in place).

A pre-commit hook that is not ours is never overwritten silently: ``install``
refuses, and with ``--force`` keeps it as ``pre-commit.pre-broker`` and runs it
first (chained); ``uninstall`` puts it back.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import click

from broker import envvars, errors
from broker.frontends.cli._common import (
    agent,
    emit_json_lines,
    identity_options,
    json_option,
    main,
    operator,
    server,
)
from broker.frontends.cli._output import emit, safe

if TYPE_CHECKING:
    from broker.api.handles import Agent
    from broker.model.records import Finding, PathCheck

MARKER = "# broker guard hook"
# Hooks without this line run `python -m broker` from the repository's top
# folder, where git runs hooks: a planted broker/__main__.py ran instead (S39).
FORMAT = "# hook format 2: runs broker by its interpreter, isolated"
CHAINED = "pre-commit.pre-broker"
# Paths per check call: a slice of a large commit (a check is bounded, S41).
CHECK_SLICE = 200
HOOK = """#!/bin/sh
{marker}: written by `broker guard install`, removed by `broker guard uninstall`.
{format}
# Refuses a commit touching paths another participant reserved exclusively (S37).
# BROKER_GUARD=off overrides; the override is posted on the board.
here=$(dirname "$0")
if [ -x "$here/{chained}" ]; then
  "$here/{chained}" "$@" || exit $?
fi
exec {command} guard pre-commit{space}
"""


def _git(repo: Path, *args: str) -> str:
    try:
        done = subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, check=False
        )
    except FileNotFoundError:
        raise errors.InvalidInput("git is not installed (or not on PATH)") from None
    if done.returncode != 0:
        why = done.stderr.strip().splitlines()
        raise errors.InvalidInput(
            f"{repo}: git {args[0]} failed: {why[-1] if why else done.returncode}", field="repo"
        )
    return done.stdout


def _hooks(repo: Path) -> Path:
    _git(repo, "rev-parse", "--git-dir")  # not a repository: one clear error
    hooks = Path(_git(repo, "rev-parse", "--git-path", "hooks").strip())
    return hooks if hooks.is_absolute() else (repo / hooks).resolve()


def _ours(path: Path) -> bool:
    try:
        return MARKER in path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return False


def hook_findings(repo: Path) -> list[Finding]:
    """``broker doctor``'s word on the guard of the repository holding
    ``repo``: nothing outside a repository or without broker's hook; a
    warning for a hook an earlier broker wrote (it runs ``python -m broker``
    from the working tree, where any agent can plant a ``broker`` package)."""
    from broker.model.records import Finding

    try:
        hook = _hooks(repo) / "pre-commit"
        top = _git(repo, "rev-parse", "--show-toplevel").strip()
    except errors.BrokerError:
        return []
    if not _ours(hook):
        return []
    if FORMAT in hook.read_text(encoding="utf-8", errors="replace"):
        return [Finding("guard", "ok", f"git guard hook {hook}: current", None, str(hook))]
    return [
        Finding(
            "guard",
            "warning",
            f"the git guard hook {hook} was written by an earlier broker: it runs "
            "`python -m broker` from the working tree, so a broker package planted there "
            "runs in every committer's process with their secrets",
            f"broker guard install --repo {shlex.quote(top)}",
            str(hook),
        )
    ]


repo_option = click.option(
    "--repo",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="The git repository (any folder inside it).",
)


@main.group()
def guard() -> None:
    """A git pre-commit hook refusing commits on paths reserved by others (S37)."""


@guard.command("install")
@repo_option
@click.option("--force", is_flag=True, help="Keep an existing foreign hook and run it first.")
@click.option(
    "--space",
    envvar="BROKER_SPACE",
    metavar="RUN_ID",
    help="The space whose reservations apply, when the committer's BROKER_SPACE is unset "
    "[default: env BROKER_SPACE at install time].",
)
@json_option
def install(repo: Path, force: bool, space: str | None, as_json: bool) -> None:
    """Write the pre-commit hook into the repository at --repo."""
    hooks = _hooks(repo)
    hook = hooks / "pre-commit"
    chained = hooks / CHAINED
    note = ""
    # A hook may be a link to a shared script (a link is moved, never
    # written through), but what it or the chained hook points at must be
    # a regular file: reading a FIFO would hang, and a device may never end.
    from broker.api.handles import check_writable_target, make_private_dirs

    for path in (hook.resolve(), chained.resolve()):
        check_writable_target(str(path), "repo")
    if hook.exists() and not _ours(hook):
        if not force:
            raise errors.Conflict(
                f"{hook} exists and is not broker's: pass --force to keep it (as {CHAINED}, "
                "run before the guard)",
                hook=str(hook),
            )
        if chained.exists():
            raise errors.Conflict(f"{chained} exists already: move one of the two hooks away")
        hook.rename(chained)
        note = f" (the existing hook is kept as {CHAINED} and runs first)"
    make_private_dirs(hooks)  # core.hooksPath may name a folder not made yet (S47)
    from broker.api.handles import broker_command

    text = HOOK.format(
        marker=MARKER,
        format=FORMAT,
        chained=CHAINED,
        command=shlex.join(broker_command()),
        space=f" --default-space {shlex.quote(space)}" if space else "",
    )
    # A fresh temp file (never a fixed name that a planted symlink could
    # redirect), made executable, then renamed: a commit meanwhile sees the
    # old hook or the new one.
    fd, tmp = tempfile.mkstemp(prefix=".pre-commit.", suffix=".broker-tmp", dir=hooks)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            # Executable by every committer: git skips, with a mere hint, a
            # hook it cannot run, and the guard would be off for them.
            os.fchmod(fh.fileno(), 0o755)
        os.replace(tmp, hook)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    emit(
        {"hook": str(hook), "chained": str(chained) if chained.exists() else None},
        as_json,
        f"installed {safe(hook)}{note}",
    )


@guard.command("uninstall")
@repo_option
@json_option
def uninstall(repo: Path, as_json: bool) -> None:
    """Remove the hook (and put back a hook it chained)."""
    hooks = _hooks(repo)
    hook, chained = hooks / "pre-commit", hooks / CHAINED
    removed = restored = False
    if not hook.exists():
        text = f"no pre-commit hook in {safe(hooks)}: nothing to remove"
    elif not _ours(hook):
        raise errors.Conflict(f"{hook} is not broker's: left alone", hook=str(hook))
    else:
        hook.unlink()
        removed = True
        text = f"removed {safe(hook)}"
        if chained.exists():
            chained.rename(hook)
            restored = True
            text = f"removed the guard; restored the previous hook {safe(hook)}"
    emit({"hook": str(hook), "removed": removed, "restored": restored}, as_json, text)


def _staged_raw(repo: Path) -> str:
    """``git diff --cached --name-status -z``, names decoded as UTF-8 with the
    bytes that are not kept as lone surrogates (``surrogateescape``): a file
    name is bytes, and no name may crash the hook."""
    args = ("diff", "--cached", "--name-status", "-z", "-M", "--no-ext-diff")
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=False)
    except FileNotFoundError:
        raise errors.InvalidInput("git is not installed (or not on PATH)") from None
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise errors.InvalidInput(
            f"{repo}: git diff failed: {why[-1] if why else done.returncode}", field="repo"
        )
    return done.stdout.decode("utf-8", "surrogateescape")


def staged(repo: Path) -> list[tuple[str, str]]:
    """(path, change) of every staged change: added, modified, deleted, and both
    sides of a rename (the old path is deleted, the new one added)."""
    fields = _staged_raw(repo).split("\0")
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(fields) and fields[i]:
        status = fields[i]
        kind = status[:1]
        if kind in ("R", "C"):
            old, new = fields[i + 1], fields[i + 2]
            if kind == "R":
                out.append((old, f"renamed to {new}"))
            out.append((new, f"renamed from {old}" if kind == "R" else f"copied from {old}"))
            i += 3
            continue
        change = {"A": "added", "D": "deleted", "M": "modified", "T": "type changed"}
        out.append((fields[i + 1], change.get(kind, "changed")))
        i += 2
    return out


def checked_name(path: str) -> str:
    """The path as the broker checks it: a byte that is not UTF-8 (kept as a
    lone surrogate) becomes U+FFFD, which every wildcard matches as it would
    the byte (no pattern can name either). Control characters stay: a
    reservation covers ``src/a\\nb.py`` like any other name (S37)."""
    return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in path)


BYPASS = "fix that, or commit with BROKER_GUARD=off to skip the check"
NO_IDENTITY = (
    "the guard has no identity to check the staged paths with: set BROKER_AS and "
    "BROKER_TOKEN to the committing agent's (`broker join` prints its token), or give the "
    "operator key (BROKER_OPERATOR_KEY, or the store's key file); or commit with "
    "BROKER_GUARD=off to skip the check"
)


@guard.command("pre-commit")
@repo_option
@click.option("--default-space", metavar="RUN_ID", help="Used when BROKER_SPACE is unset.")
@identity_options
@json_option
def pre_commit(
    repo: Path,
    default_space: str | None,
    space: str | None,
    as_: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """Check the staged changes (what the hook runs). Exit 5 (conflict) when a
    staged path is held exclusively by someone else. Without an agent identity
    the check is the operator's (it needs the operator key; without it: exit
    4, saying how to configure or bypass). BROKER_GUARD=off is honoured before
    anything else: the commit goes through, and the override is posted on the
    board when it can be. --json: one line per staged path (what `board check
    --json` prints)."""
    space = space or default_space
    if not envvars.switch("BROKER_GUARD", True):  # off (any spelling), or invalid_input
        _override(repo, space, as_, token)
        return
    changes = staged(repo)
    if not space:
        click.echo("broker guard: no BROKER_SPACE: nothing checked", err=True)
        return
    if not changes:
        return
    try:
        me, checks, shown = _check(space, as_, token, changes)
    except errors.BrokerError as exc:  # say how to get past it: the commit waits on this
        if exc.message != NO_IDENTITY:
            exc.message = f"{exc.message} (the guard could not check the staged paths: {BYPASS})"
            exc.args = (exc.message,)
        raise
    if as_json:
        emit_json_lines(checks)
    lines = _refusals(me, checks, shown)
    if lines:
        blocked = [c.path for c in checks if c.blocked]
        click.echo(
            f"broker guard: commit refused: {len(blocked)} staged path(s) reserved by "
            "someone else:\n" + "\n".join(lines),
            err=True,
        )
        raise errors.Conflict(
            "wait for the reservations to end, ask their holders, or commit with "
            "BROKER_GUARD=off (the override is posted on the board)",
            paths=blocked,
        )


def _check(
    space: str, as_: str | None, token: str | None, changes: list[tuple[str, str]]
) -> tuple[Agent | None, list[PathCheck], dict[str, tuple[str, str]]]:
    """Ask the broker about the staged paths: as the committing agent, else as
    the operator. ``shown`` maps each checked path to (its name, its change)."""
    shown: dict[str, tuple[str, str]] = {}
    for path, change in changes:
        name = checked_name(path)
        if name in shown:  # two names that differ only in bytes that are not UTF-8
            change = f"{shown[name][1]}; {change}"
        # A byte that is not UTF-8 is shown escaped, as \xff (never raw, S31).
        raw = "".join(
            f"\\x{ord(c) - 0xDC00:02x}" if 0xDC80 <= ord(c) <= 0xDCFF else c for c in path
        )
        shown[name] = (raw, change)
    paths = list(shown)
    # A slice at a time: one check is bounded in paths and time (S41), a commit is not.
    slices = [paths[i : i + CHECK_SLICE] for i in range(0, len(paths), CHECK_SLICE)]
    me = agent(space, as_, token) if token and (as_ or server() is not None) else None
    if me is not None:
        return me, [c for part in slices for c in me.check_paths(part)], shown
    try:
        op = operator()
        return None, [c for part in slices for c in op.check_paths(space, part)], shown
    except errors.AuthError:
        raise errors.AuthError(NO_IDENTITY) from None


def _refusals(
    me: Agent | None, checks: list[PathCheck], shown: dict[str, tuple[str, str]]
) -> list[str]:
    """One line per blocked path and exclusive holder, every name escaped (S31)."""
    lines = []
    for c in checks:
        if not c.blocked:
            continue
        name, change = shown.get(c.path, (c.path, "changed"))
        for r in c.held_by:
            if r.mode == "exclusive" and r.holder != (me.address if me else None):
                why = f": {r.reason}" if r.reason else ""
                lines.append(
                    f"  {safe(name)} ({safe(change)}): {safe(r.pattern)!r} held "
                    f"exclusively by {safe(r.holder)} until {r.expires_at} "
                    f"(fence {r.fence}){safe(why)}"
                )
    return lines


def _override(repo: Path, space: str | None, as_: str | None, token: str | None) -> None:
    """BROKER_GUARD=off: the commit goes through whatever happens here. The
    override is posted on the board (the log) as the committer, with what the
    guard would have refused, so the holders see it; anything that stops the
    post (no identity, a broker or git error) is said on stderr, never fatal."""
    try:
        if not space:
            raise errors.InvalidInput("no BROKER_SPACE")
        if not (token and (as_ or server() is not None)):
            raise errors.AuthError("no BROKER_AS/BROKER_TOKEN to post it as")
        changes = staged(repo)
        me, checks, shown = _check(space, as_, token, changes) if changes else (None, [], {})
        me = me or agent(space, as_, token)
        lines = _refusals(me, checks, shown)
        what = (
            "it would have refused:\n" + "\n".join(lines)
            if lines
            else "no staged path was reserved by anyone else"
        )
        n = len(changes)
        result = me.post(f"guard override (BROKER_GUARD=off): committed {n} staged path(s); {what}")
    except Exception as exc:  # noqa: BLE001 - nothing may block an override, not even a bug
        why = exc.message if isinstance(exc, errors.BrokerError) else repr(exc)
        click.echo(
            "broker guard: BROKER_GUARD=off: commit allowed; the override is NOT logged "
            f"({safe(why)})",
            err=True,
        )
        return
    click.echo(
        f"broker guard: BROKER_GUARD=off: commit allowed; override posted ({result.id})", err=True
    )
