"""broker doctor | backup PATH | vacuum: operating a store.

Each opens the store without creating anything (a missing store is one line,
or, for ``doctor``, one finding). ``doctor`` exits 0 when every check is ok or
informational, 8 when the worst finding is a warning, 9 when it is an error.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from broker.frontends.cli._common import (
    emit_json,
    emit_json_lines,
    is_terminal,
    json_option,
    main,
    needs_file,
)

# A progress bar for backups past this many pages (~100 MiB at 4 KiB pages).
PROGRESS_PAGES = 25_600


def _url() -> str | None:
    ctx = click.get_current_context()
    needs_file(ctx)  # doctor, backup and vacuum run where the file is
    root = ctx.find_root()
    return root.obj.get("url") if isinstance(root.obj, dict) else None


def _operator() -> Any:
    from broker import Operator, Store

    return Operator(Store(_url(), create=False))


def _size(n: int) -> str:
    return f"{n / (1 << 20):,.1f} MiB" if n >= 1 << 20 else f"{n / 1024:,.0f} KiB"


@main.command()
@json_option
def doctor(as_json: bool) -> None:
    """Check the store and say how to fix what is wrong.

    One line per check: severity, what was checked, what was found, and the
    command that fixes it. Run inside a git repository, it also checks the
    repository's git guard hook (one an earlier broker wrote is a warning).
    --json prints one JSON object per finding (JSON Lines). Exit status: 0
    clean (ok or info only), 8 warnings, 9 errors.
    """
    from broker.api.handles import Operator
    from broker.api.handles import doctor_exit_code as exit_code
    from broker.frontends.cli.guard import hook_findings

    # The git guard of the repository doctor runs in, if any (S39).
    findings = [*Operator.doctor(_url()), *hook_findings(Path("."))]
    if as_json:
        emit_json_lines(findings)
    else:
        for f in findings:
            click.echo(f"{f.severity:<8} {f.check:<13} {f.message}")
            if f.fix:
                click.echo(f"{'':<8} {'':<13} fix: {f.fix}")
    code = exit_code(findings)
    if code:
        click.get_current_context().exit(code)


@main.command()
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--force", is_flag=True, help="Overwrite PATH if it exists.")
@json_option
def backup(path: str, force: bool, as_json: bool) -> None:
    """Copy the store to PATH while it is in use (writers go on).

    One consistent snapshot through SQLite's backup API; the copy is
    integrity-checked before it is renamed into place, and the operator key
    file is copied beside it (PATH.operator-key), so PATH opens as a store.
    """
    op = _operator()
    bar: Any = None
    last = [0]

    def progress(done: int, total: int) -> None:
        nonlocal bar
        if bar is None and total >= PROGRESS_PAGES and is_terminal(sys.stderr):
            bar = click.progressbar(length=total, label="pages copied", file=sys.stderr)
            bar.__enter__()
        if bar is not None:
            bar.update(done - last[0])
            last[0] = done

    try:
        res = op.backup(path, force=force, progress=progress)
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)
    if as_json:
        emit_json(res)
    else:
        click.echo(
            f"{res.path}: {_size(res.bytes)}, {res.pages:,} pages, schema {res.schema}, "
            f"integrity {res.integrity}, {res.seconds:.2f} s"
        )
        if res.key_file:
            click.echo(f"operator key copied to {res.key_file}")


@main.command()
@json_option
def vacuum(as_json: bool) -> None:
    """Give the store's free pages back to the file system.

    Folds the WAL back, rewrites the database without its free pages and cuts
    the WAL, holding the writer lock: other writers wait, readers go on.
    """
    res = _operator().vacuum()
    if as_json:
        emit_json(res)
    else:
        click.echo(
            f"{res.path}: {_size(res.bytes_before)} -> {_size(res.bytes_after)} "
            f"(database and WAL), {res.seconds:.2f} s"
        )
