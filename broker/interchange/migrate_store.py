"""``broker migrate-store --into URL``: copy every space of a store into another
(SQLite -> PostgreSQL or back), through the JSONL space layout.

Each space is exported (``broker.interchange.export``), the whole tree imported into the
target in one transaction (``broker.interchange.importer``: all or nothing; a space id the
target already has refuses the lot), and then exported again from the target
and compared with the first tree, file by file and byte by byte: the copy is
reported ``identical`` only if every file matches. Tokens are not copied (an
export never holds them): agents re-join on the target, as after ``import``.
The source is only read. The two trees live in a scratch folder beside the
source store (``broker.store.scratch``: 0700, removed on every exit path).
"""

from __future__ import annotations

import filecmp
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker import errors
from broker.store.scratch import scratch
from broker.store.sqlite import Store


@dataclass
class StoreCopy:
    """What ``migrate_store`` copied."""

    to: str  # the target URL, its password hidden
    spaces: list[str] = field(default_factory=list)
    files: int = 0  # files of the export tree, compared after the copy
    identical: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "to": self.to,
            "spaces": self.spaces,
            "files": self.files,
            "identical": self.identical,
        }


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def migrate_store(source: Store, to_url: str) -> StoreCopy:
    from broker.interchange.export import export_space
    from broker.interchange.importer import import_dir
    from broker.spaces.spaces import list_spaces

    if not isinstance(to_url, str) or "://" not in to_url:
        raise errors.InvalidInput(
            f"bad --into {to_url!r}: a store URL (sqlite:///PATH or postgresql+psycopg://...)",
            field="to",
        )
    target = Store(to_url)  # created and migrated if it is empty
    try:
        if target.url == source.url:
            raise errors.InvalidInput("--into names the store being copied", field="to")
        display = getattr(target, "display", target.url)
        ids = [s.id for s in list_spaces(source)]
        now = source.now_ts()  # one "now" for both exports: live claims read the same
        # Beside the source, private, removed on every exit path (S47): not
        # the shared temp folder, where a killed run left a plaintext copy.
        with scratch(source, "migrate") as tmp:
            first, again = tmp / "from", tmp / "check"
            for sid in ids:
                export_space(source, sid, first, now=now)
            if ids:
                import_dir(target, first)
            for sid in ids:
                export_space(target, sid, again, now=now)
            names = _files(first)
            same = names == _files(again) and all(
                filecmp.cmp(first / n, again / n, shallow=False) for n in names
            )
        return StoreCopy(to=display, spaces=ids, files=len(names), identical=same)
    finally:
        target.close()
