"""``broker migrate-store --into URL``: copy every space of a store into another
(SQLite -> PostgreSQL or back), through the JSONL space layout.

Each space is exported (``broker.interchange.export``), the whole tree imported into the
target in one transaction (``broker.interchange.importer``: all or nothing; a space id the
target already has refuses the lot), and then exported again from the target
and compared with the first tree, file by file and byte by byte: the copy is
reported ``identical`` only if every file matches. The source is only read.
The two trees live in a scratch folder beside the source store
(``broker.store.scratch``: 0700, removed on every exit path, S47).

An export never holds a secret, but a copy of a whole store by its operator
carries their hashes across in the import's transaction, so nothing has to be
issued again: each space's join key, each participant's token (an agent goes
on with the token it holds, pointed at the new store), and the operator key.
The operator key is carried into a target that holds no space yet (new, or
only migrated by ``db upgrade``), and its key file then holds the source's key
(BROKER_OPERATOR_KEY set and no file there: the variable stays the key); a
target that already holds spaces keeps its own operator key, and the result
says so (``operator_key``: ``carried``, ``same`` or ``kept``).
"""

from __future__ import annotations

import filecmp
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from broker import errors
from broker.store import keys
from broker.store.scratch import scratch
from broker.store.sql import stmt
from broker.store.sqlite import Store

_JOIN_KEYS = stmt("trust.join_key_hashes")
_TOKENS = stmt("trust.token_hashes")
_SPACES = stmt("ops.spaces_count")

KeyOutcome = Literal["carried", "same", "kept"]


@dataclass
class StoreCopy:
    """What ``migrate_store`` copied."""

    to: str  # the target URL, its password hidden
    spaces: list[str] = field(default_factory=list)
    files: int = 0  # files of the export tree, compared after the copy
    identical: bool = False
    join_keys: int = 0  # spaces whose join key was carried
    tokens: int = 0  # participants whose token was carried
    operator_key: KeyOutcome = "kept"
    key_file: str | None = None  # the target's key file, written with the carried key

    def as_dict(self) -> dict[str, Any]:
        return {
            "to": self.to,
            "spaces": self.spaces,
            "files": self.files,
            "identical": self.identical,
            "join_keys": self.join_keys,
            "tokens": self.tokens,
            "operator_key": self.operator_key,
            "key_file": self.key_file,
        }


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def migrate_store(source: Store, to_url: str, operator_key: str) -> StoreCopy:
    """Copy every space of ``source`` into the store at ``to_url`` (module doc);
    ``operator_key`` is the source's, which its operator presented."""
    from broker.interchange.export import export_space
    from broker.interchange.importer import import_dir
    from broker.spaces.participants import carry_tokens
    from broker.spaces.spaces import carry_join_keys, list_spaces

    if not isinstance(to_url, str) or "://" not in to_url:
        raise errors.InvalidInput(
            f"bad --into {to_url!r}: a store URL (sqlite:///PATH or postgresql+psycopg://...)",
            field="to",
        )
    target = Store(to_url)  # created and migrated if it is empty
    try:
        if target.url == source.url:
            raise errors.InvalidInput("--into names the store being copied", field="to")
        ids = [s.id for s in list_spaces(source)]
        now = source.now_ts()  # one "now" for both exports: live claims read the same
        with source.read() as t:  # the secrets' hashes, which no export holds
            wanted = set(ids)
            join_keys = [
                {"space_id": r["id"], "key_hash": r["join_key_hash"]}
                for r in t.all(_JOIN_KEYS)
                if r["id"] in wanted
            ]
            tokens = [
                {"id": r["id"], "token_hash": r["token_hash"]}
                for r in t.all(_TOKENS)
                if r["space_id"] in wanted
            ]
            source_key = keys.operator_key_hash(t)
        copy = StoreCopy(to=target.display, spaces=ids)
        # Beside the source, private, removed on every exit path (S47): not
        # the shared temp folder, where a killed run left a plaintext copy.
        with scratch(source, "migrate") as tmp:
            first, again = tmp / "from", tmp / "check"
            for sid in ids:
                export_space(source, sid, first, now=now)
            with target.write() as t:
                held = keys.operator_key_hash(t)
                if held is not None and held == source_key:
                    copy.operator_key = "same"
                elif int(t.one(_SPACES)["n"]) == 0:
                    keys.take_operator_key(target, t, operator_key)
                    copy.operator_key = "carried"
                if ids:
                    import_dir(target, first, tx=t)
                    carry_join_keys(t, join_keys)
                    carry_tokens(t, tokens)
            copy.join_keys, copy.tokens = len(join_keys), len(tokens)
            if copy.operator_key == "carried":
                written = keys.write_key_file(target, operator_key)
                copy.key_file = str(written) if written is not None else None
            for sid in ids:
                export_space(target, sid, again, now=now)
            names = _files(first)
            copy.files = len(names)
            copy.identical = names == _files(again) and all(
                filecmp.cmp(first / n, again / n, shallow=False) for n in names
            )
        return copy
    finally:
        target.close()
