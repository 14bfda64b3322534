"""broker export / broker import: a space as files, and back (docs/export.md)."""

from __future__ import annotations

import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

import click

from broker import errors
from broker.frontends.cli._common import (
    emit_json,
    is_terminal,
    json_option,
    keyvals,
    main,
    store,
)

LAYOUTS = ("space", "mailbox")


def safe_line(text: object) -> str:
    """Text for a terminal (S31): control and other unprintable characters (ESC,
    CR, line breaks, bidi overrides) shown escaped; names in an import tree and
    problems quoting them come from agents."""
    return "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(text)
    )


class _Bar:
    """Progress of an export or import as a bar on stderr (when it is a terminal)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and is_terminal(sys.stderr)
        self.bar: Any = None
        self.pending = 0
        self.drawn = 0.0

    def start(self, total: int, label: str) -> None:
        if self.enabled:
            self.bar = click.progressbar(length=max(total, 1), label=label, file=sys.stderr)
            self.bar.__enter__()
            self.drawn = time.monotonic()

    def advance(self, n: int) -> None:
        if self.bar is None:
            return
        self.pending += n
        if time.monotonic() - self.drawn >= 0.1:  # redraw at most 10 times a second
            self.bar.update(self.pending)
            self.pending, self.drawn = 0, time.monotonic()

    def finish(self) -> None:
        if self.bar is not None:
            self.bar.update(self.pending)
            self.bar.__exit__(None, None, None)
            self.bar, self.pending = None, 0


@main.command("export")
@click.argument("run_id")
@click.option(
    "--root",
    type=click.Path(path_type=Path),
    default=".",
    show_default=True,
    help="Folder to write the layout under.",
)
@click.option(
    "--layout",
    type=click.Choice(LAYOUTS),
    default="space",
    show_default=True,
    help="space: the JSONL layout; mailbox: mail/dir, mail/<id>/inbox (Mailbox Protocol).",
)
@click.option(
    "--follow",
    is_flag=True,
    help="After the snapshot, append new rows as they commit until the space stops "
    "(or SIGINT/SIGTERM). Space layout only.",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@json_option
def export_cmd(
    run_id: str, root: Path, layout: str, follow: bool, quiet: bool, as_json: bool
) -> None:
    """Write the space RUN_ID as files under --root (see docs/export.md).

    The space layout goes to agentiflows/<af_id>/, runs/<run_id>/messages/ or
    sessions/<ses_id>/messages/: log.jsonl, participants.jsonl, board/,
    mailboxes/. Names built from addresses and keys never leave the root."""
    from broker.api.handles import Operator

    operator = Operator(store())
    progress = _Bar(not quiet)
    if layout == "mailbox":
        if follow:
            raise errors.InvalidInput("--follow works with the space layout only", field="follow")
        summary = operator.export_mailbox(run_id, root, progress=progress)
    elif follow:
        stop = threading.Event()

        def on_signal(signum: int, frame: FrameType | None) -> None:
            stop.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)

        def ready(s: Any) -> None:
            if not as_json:
                click.echo(f"following {s.space} into {s.dir} (until it stops; Ctrl-C ends)")

        summary = operator.export_space(
            run_id, root, follow=True, stop=stop, progress=progress, on_ready=ready
        )
    else:
        summary = operator.export_space(run_id, root, progress=progress)
    data = summary.as_dict()
    if as_json:
        emit_json(data)
        return
    keyvals(
        [(k, safe_line(v)) for k, v in data.items() if not (k == "appended_lines" and not follow)]
    )


@main.command("import")
@click.argument("folder", type=click.Path(path_type=Path))
@click.option(
    "--layout",
    type=click.Choice(("auto", *LAYOUTS)),
    default="auto",
    show_default=True,
    help="What FOLDER holds: an exported space layout, or a mail/ tree (auto: look).",
)
@click.option(
    "--skip-bad",
    is_flag=True,
    help="Import the good lines and report the bad ones (default: import nothing if any is bad).",
)
@click.option(
    "--kind",
    type=click.Choice(("run", "workflow", "session", "agentiflow")),
    default="run",
    show_default=True,
    help="Mailbox layout: the kind of the space created.",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@json_option
def import_cmd(
    folder: Path, layout: str, skip_bad: bool, kind: str, quiet: bool, as_json: bool
) -> None:
    """Import FOLDER (an export root, a space folder, or a mail/ tree) into the store.

    All in one transaction: a bad line is reported as FILE:LINE and nothing is
    imported, unless --skip-bad. Tokens are not exported: participants re-join
    to get a new one."""
    from broker.api.handles import Operator

    try:
        summary = Operator(store(create=True)).import_dir(
            folder, layout=layout, skip_bad=skip_bad, kind=kind, progress=_Bar(not quiet)
        )
    except errors.InvalidInput as exc:
        for problem in exc.fields.get("problems", ()):
            click.echo(f"bad line: {safe_line(problem)}", err=True)
        raise
    for problem in summary.skipped:
        click.echo(f"skipped: {safe_line(problem)}", err=True)
    data = summary.as_dict()
    if as_json:
        emit_json(data)
        return
    data["spaces"] = ", ".join(data["spaces"])
    data["skipped"] = len(data["skipped"])
    keyvals([(k, safe_line(v)) for k, v in data.items()])
