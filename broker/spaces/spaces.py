"""Message spaces (S1): create, list, resolve a run id, stop, archive."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from broker import errors
from broker.delivery import wake
from broker.ids import new_id
from broker.model.fields import Record
from broker.model.inputs import SpaceSettings
from broker.spaces.roster import leave_all
from broker.store import keys
from broker.store.settings import BOUNDS, Caps, Limits
from broker.store.sql import stmt, stmts
from broker.store.sqlite import Rows, Store, Tx
from broker.vocab import SpaceKind

if TYPE_CHECKING:
    from broker.model.records import CreatedSpace, JoinKey, Space

PREFIX: dict[str, str] = {"agentiflow": "af_", "workflow": "run_", "session": "ses_", "run": "run_"}
_REF = re.compile(r"[a-z0-9_]{1,40}")
_SET_JOIN_KEY = stmt("trust.set_join_key")
_CARRY_JOIN_KEY = stmt("trust.carry_join_key")
_SQL = stmts(
    "spaces",
    "set_settings",
    "insert",
    "exact_id",
    "by_prefix",
    "get",
    "list_all",
    "list_in_state",
    "set_state",
)


def to_model(row: Mapping[str, Any]) -> Space:
    """The one space row mapper: a row of ``spaces.get``/``list_all``/``list_in_state``."""
    from broker.model.records import Space  # built on first use (records_space)

    return Space(
        id=row["id"],
        kind=row["kind"],
        state=row["state"],
        settings=json.loads(row["settings"]),
        created_at_utc=row["created_at_utc"],
        updated_at_utc=row["updated_at_utc"],
    )


def insert_rows(t: Tx, rows: Rows) -> None:
    """Write whole space rows (every column, by name): the one writer of
    ``spaces`` inserts, used by ``create`` and by the importer."""
    t.many(_SQL["insert"], rows)
    wake.ring_at_commit(t, [wake.SPACES_KEY])


def carry_join_keys(t: Tx, rows: Rows) -> None:
    """Give copied spaces their join keys back (``{space_id, key_hash}`` rows from
    the store they were copied from, ``broker migrate-store``): the key the
    agents hold still lets newcomers in."""
    t.many(_CARRY_JOIN_KEY, rows)


def validate_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """Check overrides against their bounds (``inputs.SpaceSettings``, S33) and
    return them normalised (a decimal setting as a float)."""
    if not isinstance(settings, dict):
        raise errors.InvalidInput(
            f"bad space settings {settings!r}: a mapping of KEY to VALUE", field="settings"
        )
    checked: dict[str, Any] = _SETTINGS.convert(settings)
    return checked


_SETTINGS = Record("A space's settings.", SpaceSettings, noun="space setting")
_SETTINGS.bind("settings")


@lru_cache(maxsize=256)
def limits_of(settings_json: str) -> Limits:
    """The limits of a space from its settings column (cached: it is on every send).

    Lenient (``Limits.lenient``): settings stored before the bounds existed are
    clamped, never a reason for a send to fail."""
    if settings_json == "{}":
        return _DEFAULT_LIMITS
    try:
        stored = json.loads(settings_json)
    except ValueError:
        stored = {}
    return Limits.lenient(stored if isinstance(stored, dict) else {})


_DEFAULT_LIMITS = Limits()


@lru_cache(maxsize=256)
def caps_of(settings_json: str) -> Caps:
    """The caps of a space from its settings column (``Limits.caps``), cached
    like ``limits_of``: a send checks them all, each a decimal product."""
    return limits_of(settings_json).caps()


def _new_join_key(store: Store, t: Tx, space_id: str) -> str:
    key = keys.new_key()
    t.execute(
        _SET_JOIN_KEY, {"key_hash": keys.digest(key), "now": store.now_ts(), "space_id": space_id}
    )
    return key


def rotate_join_key(store: Store, space_ref: str, *, tx: Tx | None = None) -> JoinKey:
    """A new join key for a space (one made before join keys, or whose key was
    lost or leaked): the old key stops working at once; participants already
    in keep their tokens."""
    with store.write(tx) as t:
        space_id = resolve_id(t, space_ref)
        from broker.model.records import JoinKey

        return JoinKey(space_id=space_id, join_key=_new_join_key(store, t, space_id))


def create(
    store: Store,
    kind: SpaceKind | str,
    *,
    settings: dict[str, Any] | None = None,
    tx: Tx | None = None,
) -> CreatedSpace:
    """A new running space and its join key (S27: shown this once, stored hashed)."""
    if kind not in PREFIX:
        raise errors.InvalidInput(
            f"unknown space kind {kind!r}: use one of {', '.join(PREFIX)}", field="kind"
        )
    overrides = validate_settings(settings or {})
    now = store.now_ts()
    sid = PREFIX[kind] + new_id().lower()
    with store.write(tx) as t:
        row = {
            "id": sid,
            "kind": kind,
            "state": "running",
            "settings": json.dumps(overrides, sort_keys=True),
            "last_seq": 0,
            "last_bcast": 0,
            "log_bytes": 0,
            "created_at_utc": now,
            "updated_at_utc": now,
        }
        insert_rows(t, [row])
        join_key = _new_join_key(store, t, sid)
    from broker.model.records import CreatedSpace

    return CreatedSpace(
        join_key=join_key,
        id=sid,
        kind=kind,  # type: ignore[arg-type]  # checked against PREFIX above
        state="running",
        settings=overrides,
        created_at_utc=now,
        updated_at_utc=now,
    )


def set_settings(
    store: Store, ref: str, settings: dict[str, Any], *, tx: Tx | None = None
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """Change a space's overrides (S30, S33): ``settings`` are checked against the
    bounds like at create, then merged over the stored ones. Returns the space
    id with the overrides before and after; ``broker.spaces.usage.set_space`` logs it."""
    if not settings:
        raise errors.InvalidInput(
            "no setting given: use KEY=VALUE, e.g. inbox_cap=512", field="settings"
        )
    changes = validate_settings(settings)
    with store.write(tx) as t:
        sid = resolve_id(t, ref)
        row = t.one(_SQL["get"], {"space_id": sid})
        state, text = row["state"], row["settings"]
        if state != "running":
            raise errors.Conflict(f"space {sid} is {state}: its settings no longer apply")
        stored = json.loads(text)
        before = stored if isinstance(stored, dict) else {}
        # A stored value from before the bounds is replaced by the one in effect.
        in_effect = Limits.lenient(before).to_dict(include={k for k in before if k in BOUNDS})
        after = in_effect | changes
        t.execute(
            _SQL["set_settings"],
            {"settings": json.dumps(after, sort_keys=True), "now": store.now_ts(), "space_id": sid},
        )
    return sid, before, after


def resolve_id(tx: Tx, ref: str) -> str:
    """A run id as full id, compact form (no kind prefix) or unique prefix (S1)."""
    text = ref.strip().lower()
    if not text:
        raise errors.InvalidInput("run id is empty", field="run_id")
    if not _REF.fullmatch(text):
        raise errors.InvalidInput(
            f"bad run id {ref!r}: letters, digits and '_' only", field="run_id"
        )
    row = tx.one(_SQL["exact_id"], {"id": text})
    if row:
        return str(row["id"])
    pattern = text.replace("_", "\\_") + "%"
    rows = tx.all(_SQL["by_prefix"], {"pattern": pattern})
    if not rows:
        raise errors.SpaceNotFound(f"no space matches run id {ref!r}", run_id=ref)
    if len(rows) > 1:
        raise errors.AmbiguousId(ref, [r["id"] for r in rows])
    return str(rows[0]["id"])


def get(store: Store, ref: str, *, tx: Tx | None = None) -> Space:
    with store.read(tx) as t:
        sid = resolve_id(t, ref)
        row = t.one(_SQL["get"], {"space_id": sid})
    return to_model(row)


def list_spaces(store: Store, *, state: str | None = None, tx: Tx | None = None) -> list[Space]:
    with store.read(tx) as t:
        rows = t.all(_SQL["list_in_state"], {"state": state}) if state else t.all(_SQL["list_all"])
    return [to_model(r) for r in rows]


def _set_state(
    store: Store, ref: str, state: str, allowed_from: tuple[str, ...], tx: Tx | None
) -> Space:
    with store.write(tx) as t:
        sid = resolve_id(t, ref)
        was = t.one(_SQL["get"], {"space_id": sid})["state"]
        if was != state:
            if was not in allowed_from:
                raise errors.Conflict(f"space {sid} is {was}; it cannot become {state}")
            t.execute(_SQL["set_state"], {"state": state, "now": store.now_ts(), "space_id": sid})
            if state != "running":
                leave_all(store, t, sid, reason=f"space {state}")
        space = to_model(t.one(_SQL["get"], {"space_id": sid}))
        # Waiters (a follow, a blocked claim) learn of the stop once it is
        # visible: at the commit, also when ``tx`` is the caller's.
        wake.ring_at_commit(t, [wake.space_key(sid), wake.SPACES_KEY, wake.state_key(sid)])
    return space


def stop(store: Store, ref: str, *, tx: Tx | None = None) -> Space:
    return _set_state(store, ref, "stopped", ("running",), tx)


def archive(store: Store, ref: str, *, tx: Tx | None = None) -> Space:
    return _set_state(store, ref, "archived", ("running", "stopped"), tx)
