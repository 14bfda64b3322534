"""Where the store lives and the limits it enforces.

``BROKER_HOME`` is the folder of the embedded SQLite file (default: the XDG data
folder, ``~/.local/share/broker``); ``BROKER_URL`` overrides the database URL
entirely (``sqlite:////path/to/file.db`` or ``postgresql+psycopg://USER@HOST:PORT/DB``).
Limits have defaults here and can be overridden per space (``space create
--setting key=value``); the space's value wins.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from broker.record_type import record
from broker.vocab import INT_SETTINGS, SETTING_BOUNDS

DB_FILENAME = "broker.db"
MB = 1024 * 1024  # log_max_mb counts mebibytes (S11)


# The documented bounds (S33) live in broker.vocab (SETTING_BOUNDS): the CLI
# prints them without importing pydantic.
BOUNDS = SETTING_BOUNDS


@record
class Limits:
    """Per-space limits (S7, S10, S11, S15, S30) in effect: the defaults below,
    overridden per space. A plain record, not a pydantic model: every send and
    claim reads it, and pydantic's import is most of a CLI call's start-up.
    What an operator sets is checked against the bounds by the settings record
    ``broker.model.inputs.SpaceSettings`` (``spaces.validate_settings``); what is read
    back from a store is made safe by ``lenient``."""

    body_max_bytes: int = 65536
    inbox_cap: int = 256
    broadcast_cap: int = 1024
    log_max_mb: float = 64
    max_deliveries: int = 5
    lease_seconds: float = 30.0
    # How long a participant with no recorded process (a CLI or served join)
    # stays live after its last call (S27, S40): longer than any model call,
    # so nobody continues its address while it thinks.
    live_seconds: float = 3600.0
    sender_share: float = 0.5
    join_key_share: float = 0.5
    holds_cap: int = 100
    space_holds_cap: int = 1000

    def sender_inbox_cap(self) -> int:
        """Waiting deliveries one sender may hold in one inbox (at least 1):
        ``sender_share × inbox_cap`` rounded down, exactly as decimals (0.29 ×
        100 is 29, S30)."""
        return max(1, math.floor(decimal_product(self.inbox_cap, self.sender_share)))

    def log_cap_bytes(self) -> float:
        """The log's size past which agents' sends fail (S11): ``log_max_mb`` MiB."""
        return decimal_product(self.log_max_mb, MB)

    def sender_log_cap_bytes(self) -> float:
        """The bytes of the log one sender may hold (S30): ``sender_share`` of the log's cap."""
        return decimal_product(self.log_cap_bytes(), self.sender_share)

    def join_key_inbox_cap(self) -> int:
        """Waiting deliveries the join key's newcomers may hold in one inbox
        together (at least 1, S42): ``join_key_share × inbox_cap`` rounded down."""
        return max(1, math.floor(decimal_product(self.inbox_cap, self.join_key_share)))

    def join_key_log_cap_bytes(self) -> float:
        """The bytes of the log the join key's newcomers may hold together (S42)."""
        return decimal_product(self.log_cap_bytes(), self.join_key_share)

    def caps(self) -> Caps:
        """The caps a send checks, each computed once (``spaces.caps_of`` caches
        them per settings: a send reads them all)."""
        log, sender_log, join_key_log = (
            self.log_cap_bytes(),
            self.sender_log_cap_bytes(),
            self.join_key_log_cap_bytes(),
        )
        sender_inbox, join_key_inbox = self.sender_inbox_cap(), self.join_key_inbox_cap()
        return Caps(
            log_bytes=log,
            sender_log_bytes=sender_log,
            join_key_log_bytes=join_key_log,
            sender_inbox=sender_inbox,
            join_key_inbox=join_key_inbox,
            quiet_log_bytes=min(log, sender_log, join_key_log),
            quiet_inbox=min(self.inbox_cap, sender_inbox, join_key_inbox),
        )

    def to_dict(self, include: set[str] | None = None) -> dict[str, Any]:
        """The limits by name (all, or the names in ``include``)."""
        return {name: getattr(self, name) for name in BOUNDS if include is None or name in include}

    @classmethod
    def lenient(cls, stored: dict[str, Any]) -> Limits:
        """The limits in effect for settings already in a store, which may predate
        the bounds (or come from an old import): a number above its bound is
        clamped to the bound, one below it (or not a number at all) falls back
        to the default, and an unknown key is ignored. A send never fails on a stored setting; the
        operator sees the values in effect in ``space show`` and fixes them
        with ``space set``. (A value inside its bounds is kept as it is, an int
        setting as int: the same as validating it with ``SpaceSettings`` first,
        which tests/unit/model/test_validate.py checks.)"""
        good: dict[str, Any] = {}
        for name, value in stored.items():
            if name not in BOUNDS:
                continue
            fixed = _clamp(name, value)
            if fixed is not None:
                good[name] = fixed
        return cls(**good)


@record
class Caps:
    """A space's derived caps, as ``Limits``' methods of the same names give them."""

    log_bytes: float
    sender_log_bytes: float
    join_key_log_bytes: float
    sender_inbox: int
    join_key_inbox: int
    # Below both, no cap and no share can refuse a send: its sender's and its
    # share group's holdings need no read (``broker.mail.sending.send_one``).
    quiet_log_bytes: float  # the smallest of the three log caps
    quiet_inbox: int  # the smallest of inbox_cap and the two inbox shares


def decimal_product(a: float, b: float) -> float:
    """``a × b`` as decimal arithmetic gives it, for settings written as
    decimals: the binary product is rounded to 9 places, so a share that is
    a whole count is not one short through float rounding (0.29 × 100 is
    28.999999999999996 in binary floats; here 29.0). Counts are the floor
    of this (spec S30)."""
    return round(a * b, 9)


def _clamp(name: str, value: Any) -> float | None:
    """``value`` moved inside ``BOUNDS[name]``; None: use the default."""
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    low, high = BOUNDS[name]
    if math.isnan(number) or number < low:
        return None
    number = min(number, high)
    return int(number) if name in INT_SETTINGS else number


@dataclass(frozen=True)
class StoreSettings:
    """Connection-level settings, from the environment unless given.

    A dataclass, not a pydantic model: it is read on every CLI call, and the
    environment is checked by hand below."""

    url: str
    synchronous: Literal["NORMAL", "FULL"] = "NORMAL"
    busy_timeout_ms: int = 10_000
    # Writers queue on the kernel's writer lock (broker.store.writelock): fair, with a
    # short tail. Off, SQLite's busy handler alone orders them: more throughput
    # under many writers (one process runs many commits while the others
    # sleep), a tail many times longer (BROKER_WRITER_LOCK=off; spec §Storage).
    writer_lock: bool = True
    # BROKER_WRITER_LOCK=flock: the writer lock is the lock file's flock even where
    # its robust mutex is to be had (broker.store.writelock); every process of a
    # store must take the same one.
    writer_flock: bool = False

    @classmethod
    def from_env(cls, url: str | None = None) -> StoreSettings:
        # One rule for every BROKER_* variable (broker.envvars): empty is
        # unset, anything else not taken is invalid_input naming it.
        from broker import envvars

        lock = envvars.writer_lock("BROKER_WRITER_LOCK")
        return cls(
            url=url or envvars.get("BROKER_URL") or default_url(),
            synchronous=envvars.choice(  # type: ignore[arg-type]
                "BROKER_SYNCHRONOUS", ("NORMAL", "FULL"), "NORMAL"
            ),
            busy_timeout_ms=envvars.whole("BROKER_BUSY_TIMEOUT_MS", 10_000, envvars.BUSY_MAX_MS),
            writer_lock=lock != "off",
            writer_flock=lock == "flock",
        )


def broker_home() -> Path:
    from broker import envvars

    home = envvars.get("BROKER_HOME")
    if home:
        return envvars.expand(home, "BROKER_HOME")
    data = envvars.get("XDG_DATA_HOME") or str(envvars.expand("~", "HOME")) + "/.local/share"
    return Path(data) / "broker"


def default_url() -> str:
    return f"sqlite:///{broker_home() / DB_FILENAME}"
