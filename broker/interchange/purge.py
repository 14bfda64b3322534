"""Retention: purge an archived space (spec §Retention).

``purge_space`` exports the space to the JSONL layout, verifies the export
(every file read back from disk and its SHA-256 compared with what the database
gave; each file's line count compared with its table's row count), then deletes
the space's rows in ONE write transaction, journaled in ``purges``:

1. a read transaction writes the export (keeping each file's digest) and takes
   a fingerprint of every row of the space;
2. every file and folder of the export is fsynced (S46: nothing is deleted
   before its export is on disk), the files are read back and compared; the
   counts are compared;
3. a write transaction re-takes the fingerprint (nothing changed since the
   export, or nothing is deleted), writes the journal row and the ``purging``
   marker, deletes every row of the space (each count checked), removes the
   marker and the space.

The append-only triggers let a DELETE through only for the space named in
``purging`` (a trigger refuses the marker unless the space is archived), so this
is the only way rows leave the store. The write lock is held for the
fingerprint and the deletes only, not for the export.
"""

from __future__ import annotations

import getpass
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker import errors
from broker.delivery import wake
from broker.ids import new_id
from broker.interchange.export.files import FileDigest, NoProgress, Progress
from broker.interchange.export.space import snapshot
from broker.model.records import Purged
from broker.spaces.spaces import resolve_id
from broker.store.filenames import os_errors
from broker.store.sql import stmt
from broker.store.sqlite import Store, Tx

# Children first (foreign keys). Every table with a space_id column (a test checks).
TABLES = (
    "deliveries",
    "turns",
    "transcript",
    "history",
    "participant_events",
    "claim_journal",
    "board_claims",
    "reservations",
    "messages",
    "participants",
)
_SPACE = stmt("purge.space")
_ROWS = {t: stmt(f"purge.rows_{t}") for t in ("spaces", *TABLES)}
_DELETE = {t: stmt(f"purge.delete_{t}") for t in TABLES}
_JOURNAL = stmt("purge.journal")
_MARK = stmt("purge.mark")
_UNMARK = stmt("purge.unmark")
_DELETE_SPACE = stmt("purge.delete_space")
_DELETE_ALIASES = stmt("purge.delete_message_aliases")
_PURGES = stmt("purge.purges")

# How each table shows in the export: the files holding one line per row.
_FILES: dict[str, Callable[[str], bool]] = {
    "messages": lambda rel: rel == "log.jsonl",
    "participants": lambda rel: rel == "directory.jsonl",
    "participant_events": lambda rel: rel == "participants.jsonl",
    "claim_journal": lambda rel: rel == "board/claims.jsonl",
    "board_claims": lambda rel: rel == "board/keys.jsonl",
    "reservations": lambda rel: rel == "board/reservations.jsonl",
    "deliveries": lambda rel: _mailbox(rel, "inbox.jsonl"),
    "turns": lambda rel: _mailbox(rel, "turns.jsonl"),
    "transcript": lambda rel: _mailbox(rel, "transcript.jsonl"),
    "history": lambda rel: _mailbox(rel, "history.jsonl"),
}

Fingerprint = dict[str, tuple[int, int]]  # table -> (rows, sum of row hashes mod 2**64)


def _mailbox(rel: str, file: str) -> bool:
    parts = rel.split("/")
    return len(parts) == 3 and parts[0] == "mailboxes" and parts[2] == file


def fingerprint(t: Tx, space_id: str) -> Fingerprint:
    """Every row of the space, every column, reduced to (count, checksum) per
    table: equal fingerprints in two transactions mean nothing changed between
    them (the hashes are Python's, compared within one process)."""
    out: Fingerprint = {}
    for table, query in _ROWS.items():
        n = total = 0
        cur = t.execute(query, {"space_id": space_id})
        while batch := cur.fetchmany(1000):
            n += len(batch)
            total += sum(hash(tuple(row)) for row in batch)
        out[table] = (n, total % 2**64)
    return out


def _archived(t: Tx, space_ref: str) -> Any:
    space = t.one(_SPACE, {"space_id": resolve_id(t, space_ref)})
    if space["state"] != "archived":
        raise errors.Conflict(
            f"space {space['id']} is {space['state']}: only an archived space can be purged "
            f"(broker space archive {space['id']} first)",
            space_id=space["id"],
            state=space["state"],
        )
    return space


def _check_counts(digests: dict[str, FileDigest], prints: Fingerprint) -> None:
    """Each table's rows appear as lines in its files, one line per row."""
    for table, holds in _FILES.items():
        lines = sum(d.lines for rel, d in digests.items() if holds(rel))
        if lines != prints[table][0]:
            raise errors.Conflict(
                f"export check failed: {table} has {prints[table][0]} rows but the export "
                f"holds {lines} lines for it; nothing was deleted"
            )


def purge_space(
    store: Store,
    space_ref: str,
    export_dir: str | os.PathLike[str],
    *,
    via: str = "cli",
    progress: Progress | None = None,
) -> Purged:
    """Export the archived space to ``export_dir``, verify it, delete its rows
    (see the module doc). Refused (``conflict``, nothing deleted) for a running
    or stopped space, or when the export does not match the database."""
    root = Path(export_dir)
    with os_errors(root):
        with store.read() as t:
            space = _archived(t, space_ref)
            sid = space["id"]
            writer = snapshot(store, t, sid, root, progress=progress or NoProgress(), digests=True)
            before = fingerprint(t, sid)
        folder = writer.folder
        folder.sync()  # on disk before anything is deleted (S46)
        folder.verify()
        assert folder.digests is not None
        _check_counts(folder.digests, before)
        with store.write() as t:
            _archived(t, sid)
            if fingerprint(t, sid) != before:
                raise errors.Conflict(
                    f"space {sid} changed while it was being exported; nothing was deleted: "
                    "purge it again"
                )
            purged = Purged(
                id=new_id(),
                space_id=sid,
                kind=space["kind"],
                export_dir=str(folder.dir),
                digest=folder.manifest(),
                files=len(folder.digests),
                counts={table: before[table][0] for table in TABLES},
                at_utc=store.now_ts(),
            )
            _delete(t, purged, via)
    return purged


def _delete(t: Tx, purged: Purged, via: str) -> None:
    t.execute(
        _JOURNAL,
        {
            "id": purged.id,
            "space_id": purged.space_id,
            "space_kind": purged.kind,
            "via": via,
            "os_user": _os_user(),
            "pid": os.getpid(),
            "export_dir": purged.export_dir,
            "digest": purged.digest,
            "files": purged.files,
            "counts": json.dumps(purged.counts),
            "at_utc": purged.at_utc,
        },
    )
    params = {"space_id": purged.space_id}
    t.execute(_MARK, {**params, "purge_id": purged.id})
    for table in TABLES:
        deleted = t.execute(_DELETE[table], params).rowcount
        if deleted != purged.counts[table]:
            raise errors.StoreError(
                f"purge of {purged.space_id} deleted {deleted} {table} rows, expected "
                f"{purged.counts[table]}; rolled back, nothing was deleted"
            )
    t.execute(_DELETE_ALIASES, params)
    t.execute(_UNMARK, params)
    t.execute(_DELETE_SPACE, params)
    wake.ring_at_commit(t, [wake.SPACES_KEY])  # the console's list of spaces


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry and no LOGNAME/USER
        return str(os.geteuid())


def purges(store: Store) -> list[dict[str, Any]]:
    """The store's purge journal, oldest first."""
    with store.read() as t:
        rows = t.rows(_PURGES)
    for row in rows:
        row["counts"] = json.loads(row["counts"])
    return rows
