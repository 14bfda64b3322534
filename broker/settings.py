"""Where the store lives and the limits it enforces.

``BROKER_HOME`` is the folder of the embedded SQLite file (default: the XDG data
folder, ``~/.local/share/broker``); ``BROKER_URL`` overrides the database URL
entirely (``sqlite:////path/to/file.db`` or, later, ``postgresql://...``).
Limits have defaults here and can be overridden per space (``space create
--setting key=value``); the space's value wins.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

DB_FILENAME = "broker.db"


class Limits(BaseModel):
    """Per-space limits (S7, S10, S11, S15). Every field can be set per space."""

    # Built on first validation (a space with custom settings), not at import.
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    body_max_bytes: int = Field(65536, ge=1, description="largest message body, UTF-8 bytes")
    inbox_cap: int = Field(256, ge=1, description="waiting deliveries per recipient (inbox_full)")
    broadcast_cap: int = Field(
        1024, ge=1, description="broadcasts a live participant may have unread (broadcast_full)"
    )
    log_max_mb: float = Field(
        64, gt=0, description="log size past which sends fail (messaging_full)"
    )
    max_deliveries: int = Field(5, ge=1, description="deliveries before quarantine (S15)")
    lease_seconds: float = Field(30.0, gt=0, description="default claim lease")


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
