"""The Mailbox Protocol layout (spec §Mailbox layout): the message file format
(written here, parsed here for the importer) and the export of a space as a
``mail/`` tree.

A message file is ``To:``, ``From:``, ``Subject:`` and ``Date:`` header lines,
a ``---`` line, then the body exactly as sent. File names are
``NN_subject-slug_<hash>.txt``: ``NN`` orders a folder in delivery order.
"""

from __future__ import annotations

import hashlib
import os
import re
import unicodedata
from pathlib import Path
from typing import Any

from broker import errors
from broker.interchange.export.files import ExportSummary, NoProgress, Progress
from broker.interchange.export.lines import BATCH
from broker.spaces.spaces import resolve_id
from broker.store.filenames import inside, make_dirs, os_errors, safe_name, write_text_atomic
from broker.store.sql import stmt
from broker.store.sqlite import Store

_SPACE_KIND = stmt("export.space_kind")
_DIRECTORY = stmt("export.mail_directory")
_COUNTS = stmt("export.mail_counts")
_ROWS = stmt("export.mail_rows")
_MESSAGES = stmt("export.message_count")

_SLUG = re.compile(r"[^a-z0-9]+")
SUBJECT_MAX = 72
SLUG_MAX = 40
OPERATOR_FOLDER = "operator"
HEADERS = ("To", "From", "Subject", "Date")


class MailFormatError(ValueError):
    """A malformed message file; ``line`` is where (1-based)."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(message)
        self.line = line


def subject_of(body: str, urgent: bool = False) -> str:
    """The Subject: the body's first non-blank line, whitespace collapsed, cut at
    72 characters; ``(no subject)`` for a blank body; ``URGENT: `` first if urgent."""
    first = next((ln for ln in body.splitlines() if ln.strip()), "")
    text = " ".join("".join(c if c.isprintable() else " " for c in first).split())
    text = text[:SUBJECT_MAX] or "(no subject)"
    return f"URGENT: {text}" if urgent else text


def slug_of(subject: str) -> str:
    """``subject-slug``: ASCII, lowercase, words joined by '-', at most 40 characters."""
    ascii_text = unicodedata.normalize("NFKD", subject).encode("ascii", "ignore").decode()
    slug = _SLUG.sub("-", ascii_text.lower()).strip("-")[:SLUG_MAX].strip("-")
    return slug or "message"


def header_value(value: str) -> str:
    """A header value on one line: control characters become spaces."""
    return "".join(c if c.isprintable() else " " for c in value)


def mail_text(to: str, sender: str, subject: str, date: str, body: str) -> str:
    return (
        f"To: {header_value(to)}\nFrom: {header_value(sender)}\n"
        f"Subject: {header_value(subject)}\nDate: {date}\n---\n{body}"
    )


def mail_file_name(n: int, width: int, subject: str, uid: str) -> str:
    digest = hashlib.sha256(uid.encode()).hexdigest()[:6]
    return f"{n:0{width}d}_{slug_of(subject)}_{digest}.txt"


def header_name(name: str) -> str:
    """A header name as the protocol spells it (``from`` and ``FROM`` are ``From``)."""
    return name.strip().title()


def parse_mail(text: str) -> tuple[dict[str, str], str, int]:
    """Headers, body and the body's first line number of a message file.

    Header names are matched without regard to case; a header given twice is
    refused (which one would count?). Raises ``MailFormatError`` with the line."""
    headers: dict[str, str] = {}
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line.rstrip("\r") == "---":
            for need in ("To", "From"):
                if need not in headers:
                    raise MailFormatError(f"no {need}: header", 1)
            return headers, "\n".join(lines[i + 1 :]), i + 2
        name, sep, value = line.partition(":")
        if not sep or not name.strip() or " " in name.strip():
            raise MailFormatError("expected a 'Name: value' header or the '---' line", i + 1)
        key = header_name(name)
        if key in headers:
            raise MailFormatError(f"the {key}: header is given twice", i + 1)
        headers[key] = value.strip()
    raise MailFormatError("no '---' line between the headers and the body", len(lines))


def export_mailbox(
    store: Store,
    space_ref: str,
    root: str | os.PathLike[str],
    *,
    progress: Progress | None = None,
) -> ExportSummary:
    """Write the space as a Mailbox Protocol tree under ``root/mail/``.

    ``mail/dir/<id>.txt`` for every participant that has not left;
    ``mail/<id>/inbox/`` its waiting mail (ready or processing deliveries,
    unread broadcasts), ``mail/<id>/sent/`` the mail it has processed (done
    deliveries, broadcasts read: the protocol's "archive after reading"),
    ``mail/<id>/quarantine/`` quarantined deliveries, ``mail/<id>/drafts/``
    empty; ``mail/operator/inbox/`` what was sent to the operator."""
    with os_errors(root):
        return _export_mailbox(store, space_ref, Path(root), progress or NoProgress())


def _export_mailbox(store: Store, space_ref: str, root: Path, progress: Progress) -> ExportSummary:
    mail = inside(root, "mail")
    if mail.exists() and any(mail.iterdir()):
        raise errors.Conflict(
            f"{mail} already exists and is not empty: export the mailbox layout into an empty root"
        )
    make_dirs(root, "mail", "dir")
    with store.read() as t:
        space_id = resolve_id(t, space_ref)
        kind = t.one(_SPACE_KIND, {"space_id": space_id})["kind"]
        summary = ExportSummary(
            space=space_id, kind=kind, layout="mailbox", root=str(root), dir=str(mail)
        )
        params = {"space_id": space_id}
        for row in t.all(_DIRECTORY, params):
            _directory_entry(root, row, summary)
        counts = {(r["owner"], r["folder"]): r["n"] for r in t.all(_COUNTS, params)}
        progress.start(sum(counts.values()), f"export {space_id} (mailbox)")
        try:
            _mail_files(t.execute(_ROWS, params), root, counts, summary, progress)
        finally:
            progress.finish()
        summary.messages = t.one(_MESSAGES, params)["n"]
    return summary


def _directory_entry(root: Path, row: Any, summary: ExportSummary) -> None:
    name = safe_name(row["address"])
    for sub in ("inbox", "drafts", "sent"):
        make_dirs(root, "mail", name, sub)
    summary.participants += 1
    if row["status"] != "left":
        text = (
            f"id: {header_value(row['address'])}\n"
            f"role: {header_value(row['role'] or row['agent'])}\n"
            f"archetype: {header_value(row['archetype'] or '')}\n"
            f"task: {header_value(row['task'] or '')}\n"
        )
        write_text_atomic(inside(root, "mail", "dir", name + ".txt"), text)
        summary.files += 1


def _mail_files(
    cur: Any,
    root: Path,
    counts: dict[tuple[str, str], int],
    summary: ExportSummary,
    progress: Progress,
) -> None:
    """One file per mail row, numbered in FIFO order within its folder."""
    current: tuple[str, str] | None = None
    n = width = 0
    folder = root
    while batch := cur.fetchmany(BATCH):
        for row in batch:
            owner = row["owner"]
            if (owner, row["folder"]) != current:
                current = (owner, row["folder"])
                n, width = 0, max(2, len(str(counts.get(current, 0))))
                folder = make_dirs(root, "mail", safe_name(owner), row["folder"])
            n += 1
            subject = subject_of(row["body"], bool(row["urgent"]))
            name = mail_file_name(n, width, subject, f"{row['uid']}:{owner}")
            text = mail_text(owner, row["sender"], subject, row["at"], row["body"])
            write_text_atomic(inside(folder, name), text)
            summary.files += 1
            summary.deliveries += 1
            progress.advance(1)
