"""Export a space as files: the JSONL space layout (with ``--follow``) and the
Mailbox Protocol layout. ``docs/export.md`` documents every file and line.

Space layout (spec §Export layout), below ``root``::

    agentiflows/<af_id>/              an agentiflow (the run dir is the space)
    runs/<run_id>/messages/           a workflow run or a standalone run
    sessions/<ses_id>/messages/       a session
      space.json  log.jsonl  log.jsonl.lock  participants.jsonl  directory.jsonl
      board/posts.jsonl  board/directives.jsonl  board/claims.jsonl  board/keys.jsonl
      board/claims/<key>.json  board/reservations.jsonl
      mailboxes/broadcast.jsonl  mailboxes/cursors.jsonl
      mailboxes/<address>/inbox.jsonl  turns.jsonl  transcript.jsonl  history.jsonl

The package's parts:

- ``lines``: the line schemas (``Spec``), shared with the importer;
- ``files``: the space folder (safe paths, atomic files, appends, digests);
- ``cursors``: one cursor object per table, for the snapshot and for follow;
- ``space``: the snapshot and ``follow_space``;
- ``mailbox``: the Mailbox Protocol format and ``export_mailbox``.

Every name built from data (addresses, keys, subjects, ids) goes through
``broker.store.filenames.safe_name`` and every path through ``broker.store.filenames.inside``; an
``OSError`` becomes one line (``invalid_input`` for a bad path, exit 2;
``file_error`` for a file system that refuses, exit 10).
"""

from __future__ import annotations

from broker.interchange.export.files import ExportSummary, NoProgress, Progress
from broker.interchange.export.lines import (
    CURSORS,
    DIRECTORY,
    EVENTS,
    HISTORY,
    INBOX,
    JOURNAL,
    KEYS,
    LIVE_CLAIM,
    LOG,
    LOG_SUBSETS,
    MAILBOX_FILES,
    RESERVATIONS,
    SPACE,
    SPECS,
    TRANSCRIPT,
    TURNS,
    Field,
    Spec,
    layout_files,
    space_parts,
)
from broker.interchange.export.mailbox import export_mailbox, parse_mail, slug_of, subject_of
from broker.interchange.export.space import export_space, follow_space

__all__ = [
    "CURSORS",
    "DIRECTORY",
    "EVENTS",
    "HISTORY",
    "INBOX",
    "JOURNAL",
    "KEYS",
    "LIVE_CLAIM",
    "LOG",
    "LOG_SUBSETS",
    "MAILBOX_FILES",
    "RESERVATIONS",
    "SPACE",
    "SPECS",
    "TRANSCRIPT",
    "TURNS",
    "ExportSummary",
    "Field",
    "NoProgress",
    "Progress",
    "Spec",
    "export_mailbox",
    "export_space",
    "follow_space",
    "layout_files",
    "parse_mail",
    "slug_of",
    "space_parts",
    "subject_of",
]
