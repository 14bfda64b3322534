"""Import exported spaces back into a store: the JSONL space layout and the
Mailbox Protocol layout (including a live ``mail/`` tree from a file-based swarm).

Everything is imported in ONE write transaction. Each file is streamed line by
line (memory does not grow with the number of messages); every field of every
line is checked (S33, ``checks``), and every bad line is reported with its file
and line number; if there is any, nothing is imported, unless ``skip_bad`` is
set, in which case the bad lines are skipped and reported. The tree is read
without following symlinks (``tree``). Rows go in through the tables' owners'
insert functions (``write``).

Restoring rows (operator messages included) is an operator action: the
library surface is ``Operator.import_dir`` (S29). A mail file never becomes an
operator message (``mailbox``).

The package's parts: ``report`` (problems, summary, all-or-nothing),
``checks`` (field checks), ``tree`` (no symlinks), ``lines`` (reading lines,
batch writes), ``write`` (the per-table writers), ``space`` and ``mailbox``
(the two layouts).
"""

from __future__ import annotations

import os
from pathlib import Path

from broker import errors
from broker.interchange.export.files import NoProgress, Progress
from broker.interchange.export.mailbox import parse_mail
from broker.interchange.importer.checks import check
from broker.interchange.importer.mailbox import import_mailbox
from broker.interchange.importer.report import (
    BadLine,
    ImportFailed,
    ImportSummary,
    Problem,
    Run,
)
from broker.interchange.importer.space import find_spaces, import_spaces
from broker.interchange.importer.tree import Tree
from broker.spaces.spaces import PREFIX
from broker.store.filenames import os_errors
from broker.store.sqlite import Store, Tx

LAYOUTS = ("auto", "space", "mailbox")


def import_dir(
    store: Store,
    path: str | os.PathLike[str],
    *,
    layout: str = "auto",
    skip_bad: bool = False,
    kind: str = "run",
    progress: Progress | None = None,
    tx: Tx | None = None,
) -> ImportSummary:
    """Import an exported space layout or a mailbox tree found at ``path``
    (inside ``tx`` when given: the caller's transaction commits it)."""
    root = Path(path)
    if layout not in LAYOUTS:
        raise errors.InvalidInput(f"unknown layout {layout!r}: space or mailbox")
    if kind not in PREFIX:
        raise errors.InvalidInput(f"unknown space kind {kind!r}: use one of {', '.join(PREFIX)}")
    run = Run(str(root), skip_bad, progress or NoProgress())
    with os_errors(root, "import from"), Tree(root, run) as tree:
        if layout == "auto":
            layout = detect_layout(tree)
        if layout == "mailbox":
            return import_mailbox(store, tree, kind, run, tx)
        summary = ImportSummary(layout="space", source=str(root))
        try:
            with store.write(tx) as t:
                import_spaces(t, tree, run, summary)
                run.finish(summary)
        finally:
            run.progress.finish()
        return summary


def detect_layout(tree: Tree | Path) -> str:
    """``space`` or ``mailbox``, from what the folder holds."""
    if isinstance(tree, Path):
        with Tree(tree, Run(str(tree), False, NoProgress())) as opened:
            return detect_layout(opened)
    if tree.kind("space.json") in ("file", "symlink") or any(
        tree.is_dir(d) for d in ("agentiflows", "runs", "sessions")
    ):
        return "space"
    if tree.is_dir("mail") or tree.is_dir("dir"):
        return "mailbox"
    raise errors.InvalidInput(
        f"{tree.root} holds neither an exported space (space.json, agentiflows/, runs/, "
        "sessions/) nor a mailbox tree (mail/): pass --layout"
    )


__all__ = [
    "BadLine",
    "ImportFailed",
    "ImportSummary",
    "Problem",
    "check",
    "detect_layout",
    "find_spaces",
    "import_dir",
    "parse_mail",
]
