"""broker guard ...: a git pre-commit hook that honours path reservations (S37).

``install`` writes ``pre-commit`` into the repository's hooks folder (``git
rev-parse --git-path hooks``, so ``core.hooksPath`` and worktrees are
respected). The hook runs ``broker guard pre-commit``, which lists the staged
changes (added, modified, deleted, and both sides of a rename) and asks the
broker who holds what covers them (``Agent.check_paths``, or the operator's
check when the committer has no identity): a path held exclusively by someone
other than the committing agent refuses the commit, naming holder, pattern and
expiry.

``BROKER_GUARD=off`` lets the commit through, and the override is logged in
the space's log as a board post by the committing agent (what it would have
refused, or that nothing was), so the others see it; without an identity it
cannot be posted and the hook says so on stderr.

A pre-commit hook that is not ours is never overwritten silently: ``install``
refuses, and with ``--force`` keeps it as ``pre-commit.pre-broker`` and runs it
first (chained); ``uninstall`` puts it back.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from broker import errors
from broker.cli._common import (
    agent,
    emit_json,
    emit_json_lines,
    identity_options,
    json_option,
    main,
    operator,
)
from broker.cli._output import safe

if TYPE_CHECKING:
    from broker.client import Agent

MARKER = "# broker guard hook"
CHAINED = "pre-commit.pre-broker"
HOOK = """#!/bin/sh
{marker}: written by `broker guard install`, removed by `broker guard uninstall`.
# Refuses a commit touching paths another participant reserved exclusively (S37).
# BROKER_GUARD=off overrides; the override is posted on the board.
here=$(dirname "$0")
if [ -x "$here/{chained}" ]; then
  "$here/{chained}" "$@" || exit $?
fi
exec {python} -m broker guard pre-commit{space}
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
    hooks.mkdir(parents=True, exist_ok=True)
    text = HOOK.format(
        marker=MARKER,
        chained=CHAINED,
        python=shlex.quote(sys.executable),
        space=f" --default-space {shlex.quote(space)}" if space else "",
    )
    tmp = hooks / "pre-commit.broker-tmp"
    tmp.write_text(text, encoding="utf-8")
    tmp.chmod(0o755)
    tmp.replace(hook)  # atomic: a commit meanwhile sees the old hook or the new one
    if as_json:
        emit_json({"hook": str(hook), "chained": str(chained) if chained.exists() else None})
    else:
        click.echo(f"installed {safe(hook)}{note}")


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
    if as_json:
        emit_json({"hook": str(hook), "removed": removed, "restored": restored})
    else:
        click.echo(text)


def staged(repo: Path) -> list[tuple[str, str]]:
    """(path, change) of every staged change: added, modified, deleted, and both
    sides of a rename (the old path is deleted, the new one added)."""
    raw = _git(repo, "diff", "--cached", "--name-status", "-z", "-M", "--no-ext-diff")
    fields = raw.split("\0")
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
    staged path is held exclusively by someone else; BROKER_GUARD=off lets the
    commit through and posts the override on the board. --json: one line per
    staged path (what `board check --json` prints)."""
    space = space or default_space
    changes = staged(repo)
    if not space:
        click.echo("broker guard: no BROKER_SPACE: nothing checked", err=True)
        return
    if not changes:
        return
    me = agent(space, as_, token) if (as_ and token) else None
    by_path = dict(changes)
    paths = list(by_path)
    checks = me.check_paths(paths) if me is not None else operator().check_paths(space, paths)
    blocked = [c for c in checks if c.blocked]
    if as_json:
        emit_json_lines(checks)
    lines = []
    for c in blocked:
        for r in c.held_by:
            if r.mode == "exclusive" and r.holder != (me.address if me else None):
                why = f": {r.reason}" if r.reason else ""
                lines.append(
                    f"  {safe(c.path)} ({safe(by_path[c.path])}): {safe(r.pattern)!r} held "
                    f"exclusively by {safe(r.holder)} until {r.expires_at} "
                    f"(fence {r.fence}){safe(why)}"
                )
    if os.environ.get("BROKER_GUARD", "").lower() == "off":
        _override(me, len(paths), lines)
        return
    if blocked:
        click.echo(
            f"broker guard: commit refused: {len(blocked)} staged path(s) reserved by "
            "someone else:\n" + "\n".join(lines),
            err=True,
        )
        raise errors.Conflict(
            "wait for the reservations to end, ask their holders, or commit with "
            "BROKER_GUARD=off (the override is posted on the board)",
            paths=[c.path for c in blocked],
        )


def _override(me: Agent | None, n: int, lines: list[str]) -> None:
    """Post the override on the board (the log), so the holders see it."""
    what = (
        "it would have refused:\n" + "\n".join(lines)
        if lines
        else "no staged path was reserved by anyone else"
    )
    text = f"guard override (BROKER_GUARD=off): committed {n} staged path(s); {what}"
    if me is None:
        click.echo(
            "broker guard: BROKER_GUARD=off: commit allowed; the override is NOT logged "
            "(no BROKER_AS/BROKER_TOKEN to post it as)",
            err=True,
        )
        return
    try:
        result = me.post(text)
    except errors.BrokerError as exc:
        click.echo(
            f"broker guard: BROKER_GUARD=off: the override could not be posted: {exc}", err=True
        )
        return
    click.echo(
        f"broker guard: BROKER_GUARD=off: commit allowed; override posted ({result.id})", err=True
    )
