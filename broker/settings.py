"""Where the store lives and the limits it enforces.

``BROKER_HOME`` is the folder of the embedded SQLite file (default: the XDG data
folder, ``~/.local/share/broker``); ``BROKER_URL`` overrides the database URL
entirely (``sqlite:////path/to/file.db`` or, later, ``postgresql://...``).
Limits have defaults here and can be overridden per space (``space create
--setting key=value``); the space's value wins.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from broker.vocab import ABOVE_LOW, SETTING_BOUNDS

DB_FILENAME = "broker.db"


# The documented bounds (S33) live in broker.vocab (SETTING_BOUNDS): the CLI
# prints them without importing pydantic.
BOUNDS = SETTING_BOUNDS
_ABOVE_LOW = ABOVE_LOW


def _bound(name: str, default: float, description: str) -> Any:
    low, high = BOUNDS[name]
    if name in _ABOVE_LOW:
        return Field(default, gt=low, le=high, description=description)
    return Field(default, ge=low, le=high, description=description)


class Limits(BaseModel):
    """Per-space limits (S7, S10, S11, S15, S30). Every field can be set per space
    and must be finite and inside ``BOUNDS`` (S33)."""

    # Built on first validation (a space with custom settings), not at import.
    # nan and inf are refused outright: an infinite lease overflows a timestamp.
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True, allow_inf_nan=False)

    body_max_bytes: int = _bound(
        "body_max_bytes", 65536, "largest message body, UTF-8 bytes (1 to 1048576)"
    )
    inbox_cap: int = _bound(
        "inbox_cap", 256, "waiting deliveries per recipient, inbox_full past it (1 to 1000000000)"
    )
    broadcast_cap: int = _bound(
        "broadcast_cap",
        1024,
        "broadcasts a live participant may have unread, broadcast_full past it (1 to 1000000000)",
    )
    log_max_mb: float = _bound(
        "log_max_mb",
        64,
        "log size in MiB past which sends fail, messaging_full (0 < x <= 1048576, 1 TiB)",
    )
    max_deliveries: int = _bound(
        "max_deliveries", 5, "deliveries before quarantine, S15 (1 to 10000)"
    )
    lease_seconds: float = _bound(
        "lease_seconds", 30.0, "default claim lease in seconds (0 < x <= 604800, 7 days)"
    )
    sender_share: float = _bound(
        "sender_share",
        0.5,
        "the most one sender may hold of another's inbox_cap and of log_max_mb, S30 (0 < x <= 1)",
    )

    def sender_inbox_cap(self) -> int:
        """Waiting deliveries one sender may hold in one inbox (at least 1)."""
        return max(1, int(self.inbox_cap * self.sender_share))

    @classmethod
    def lenient(cls, stored: dict[str, Any]) -> Limits:
        """The limits in effect for settings already in a store, which may predate
        the bounds (or come from an old import): a number above its bound is
        clamped to the bound, one below it (or not a number at all) falls back
        to the default, and an unknown key is ignored. A send never fails on a stored setting; the
        operator sees the values in effect in ``space show`` and fixes them
        with ``space set``."""
        good: dict[str, Any] = {}
        for name, value in stored.items():
            if name not in BOUNDS:
                continue
            try:
                good[name] = getattr(cls(**{name: value}), name)
                continue
            except (ValueError, TypeError):
                pass
            fixed = _clamp(name, value)
            if fixed is not None:
                good[name] = fixed
        return cls(**good)


def _clamp(name: str, value: Any) -> float | None:
    """``value`` moved inside ``BOUNDS[name]``; None: use the default."""
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    low, high = BOUNDS[name]
    if math.isnan(number) or number < low or (number == low and name in _ABOVE_LOW):
        return None
    number = min(number, high)
    return int(number) if Limits.model_fields[name].annotation is int else number


@dataclass(frozen=True)
class StoreSettings:
    """Connection-level settings, from the environment unless given.

    A dataclass, not a pydantic model: it is read on every CLI call, and the
    environment is checked by hand below."""

    url: str
    synchronous: Literal["NORMAL", "FULL"] = "NORMAL"
    busy_timeout_ms: int = 10_000

    @classmethod
    def from_env(cls, url: str | None = None) -> StoreSettings:
        sync = os.environ.get("BROKER_SYNCHRONOUS", "NORMAL").upper()
        if sync not in ("NORMAL", "FULL"):
            from broker.errors import InvalidInput

            raise InvalidInput(f"BROKER_SYNCHRONOUS must be NORMAL or FULL, not {sync!r}")
        busy = os.environ.get("BROKER_BUSY_TIMEOUT_MS", "10000")
        if not busy.isdigit():
            from broker.errors import InvalidInput

            raise InvalidInput(f"BROKER_BUSY_TIMEOUT_MS must be a whole number of ms, not {busy!r}")
        return cls(
            url=url or os.environ.get("BROKER_URL") or default_url(),
            synchronous=sync,  # type: ignore[arg-type]
            busy_timeout_ms=int(busy),
        )


def broker_home() -> Path:
    home = os.environ.get("BROKER_HOME")
    if home:
        return Path(home).expanduser()
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "broker"


def default_url() -> str:
    return f"sqlite:///{broker_home() / DB_FILENAME}"
