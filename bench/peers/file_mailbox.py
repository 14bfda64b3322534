"""A file mailbox as file-based swarms run it (spec §Mailbox layout, S13).

Send: write the message (``To/From/Subject/---`` format) into the sender's
``drafts/``, flush and fsync it, then deliver it atomically by renaming it into
the recipient's ``inbox/`` as ``<created_at_utc>_<id>.txt`` (the name sorts in
the queue's FIFO order ``(created_at_utc, id)``, S13). Claim: list the inbox,
take the first name in order and rename it into ``processing/`` (the atomic
lease: a rename that fails means another claimer won, so try the next); read
it. Ack: rename it into ``done/``. Renames are not followed by a directory
fsync (the protocol does not ask for one), which is its fastest correct use.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

from broker.ids import fmt_ts, new_id


def message_text(sender: str, to: str, subject: str, text: str) -> bytes:
    return f"To: {to}\nFrom: {sender}\nSubject: {subject}\n---\n{text}\n".encode()


def body_of(data: bytes) -> str:
    return data.decode().split("\n---\n", 1)[1][:-1]


class FileMailbox:
    system = "file_mailbox"
    how = (
        "mailbox protocol: write to drafts/ + fsync + rename into inbox/ per send; per claim "
        "list inbox/, sort, rename the first into processing/ and read it; ack = rename "
        "into done/"
    )
    batch_how = (
        "no batch form in the protocol: a batch send is 100 single deliveries; a batch claim "
        "lists the inbox once and renames up to 100 files"
    )

    def __init__(self, folder: Path, who: str = "worker") -> None:
        self.root = folder / "mail"
        self.drafts = self.root / "sender" / "drafts"
        self.inbox = self.root / who / "inbox"
        self.processing = self.root / who / "processing"
        self.done = self.root / who / "done"
        for d in (self.drafts, self.inbox, self.processing, self.done):
            d.mkdir(parents=True, exist_ok=True)
        self._n = 0

    def _write(self, text: str, sync: bool) -> None:
        self._n += 1
        mid = new_id()
        name = f"{fmt_ts(datetime.now(UTC))}_{mid}.txt"
        draft = self.drafts / f"{self._n:02d}_bench.txt"
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, message_text("sender", "worker", "bench", text))
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(draft, self.inbox / name)

    def put(self, text: str) -> None:
        self._write(text, sync=True)

    def put_many(self, texts: list[str]) -> None:
        for text in texts:
            self._write(text, sync=True)

    def preload(self, texts: list[str]) -> None:
        for text in texts:
            self._write(text, sync=False)  # setup only: the timed part fsyncs
        os.sync()

    def claim(self, k: int) -> list[Path]:
        got: list[Path] = []
        for name in sorted(os.listdir(self.inbox)):
            target = self.processing / name
            try:
                os.rename(self.inbox / name, target)
            except FileNotFoundError:
                continue  # another claimer renamed it first
            got.append(target)
            if len(got) >= k:
                break
        return got

    def claim_ack(self) -> list[str]:
        return self.claim_ack_many(1)

    def claim_ack_many(self, k: int) -> list[str]:
        out: list[str] = []
        for path in self.claim(k):
            out.append(self.read_ack(path))
        return out

    def read_ack(self, path: Path) -> str:
        """Read a claimed message, then ack it (rename into done/)."""
        with open(path, "rb") as f:
            text = body_of(f.read())
        os.rename(path, self.done / path.name)
        return text

    def close(self) -> None:
        pass
