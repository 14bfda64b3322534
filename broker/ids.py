"""Time-ordered ids, sortable UTC timestamps and secret tokens.

Ids are ULIDs (48-bit millisecond time + 80 random bits, Crockford base32, 26
chars), monotonic inside a process, so ``(created_at_utc, id)`` is a total order
that agrees with time. Timestamps are ISO-8601 UTC with microseconds and a
fixed width, so string comparison in SQL is time comparison.
"""

from __future__ import annotations

import binascii
import hashlib
import os
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_lock = threading.Lock()
_last_ms = -1
_last_rand = 0

Clock = Callable[[], datetime]


def system_clock() -> datetime:
    return datetime.now(UTC)


def _system() -> datetime:
    return system_clock()  # looked up at each reading: the process's clock, as it is now


class SteadyClock:
    """The store's clock (S44): the process's clock (``wall``), except that it
    never goes back. A reading earlier than the last one (the wall clock
    stepped back) is taken as the last one plus the time ``ticks`` (a
    monotonic clock) says has passed since: after a step back of an hour,
    time goes on from where it was, at its own pace, so a lease expires when
    it should, neither an hour late nor early; FIFO keeps its order. A
    reading that did not go back is the wall clock's, exactly (a clock a test
    froze stays frozen). ``floor`` moves it up to a time read from the store
    (the space's last message), so a process that started after a step back
    does not run behind what the store already holds. ``offset`` is added to
    every reading: the PostgreSQL store sets it to the database's clock minus
    this one, so every host reads the database's time."""

    def __init__(self, wall: Callable[[], datetime] | None = None) -> None:
        self.wall: Callable[[], datetime] = wall or _system
        self.given = wall is not None  # a clock a test moves: the store keeps it as it is
        self.ticks: Callable[[], float] = time.monotonic
        self._offset_us = 0
        self._lock = threading.Lock()
        # The last reading, in µs since the epoch: a reading is kept as a
        # number and made a datetime or a stamp only as asked (a datetime
        # reading, added to and formatted, was ~7 µs of every write).
        self._last: int | None = None
        self._tick = 0.0

    @property
    def offset(self) -> timedelta:
        return timedelta(microseconds=self._offset_us)

    @offset.setter
    def offset(self, value: timedelta) -> None:
        self._offset_us = value // _US

    def micros(self) -> int:
        """A reading: µs since the epoch."""
        if self.wall is _system and system_clock is _SYSTEM_CLOCK:
            at = time.time_ns() // 1000 + self._offset_us  # datetime.now's µs, with no datetime
        else:
            at = _micros(self.wall()) + self._offset_us
        tick = self.ticks()
        with self._lock:
            last = self._last
            if last is not None and at < last:
                # round, as a timedelta of float seconds does
                at = last + round(max(0.0, tick - self._tick) * 1_000_000)
            self._last, self._tick = at, tick
        return at

    def __call__(self) -> datetime:
        return _EPOCH + timedelta(microseconds=self.micros())

    def stamp(self) -> str:
        """A reading as the store writes times (``fmt_ts``)."""
        return fmt_micros(self.micros())

    def floor(self, at: datetime) -> None:
        """From now on, no reading earlier than ``at``."""
        us = _micros(at)
        with self._lock:
            if self._last is None or us > self._last:
                self._last, self._tick = us, self.ticks()


_SYSTEM_CLOCK = system_clock  # the process's clock, until a test replaces it
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)
# A stamp's head (date and time of day) by its second. More than one: a claim
# writes now and its lease's end, seconds apart, and one remembered head was
# worked out again at each of them (~3 µs a claim).
_heads: dict[int, str] = {}
_HEADS_MAX = 64


def _micros(dt: datetime) -> int:
    if dt.tzinfo is None:
        dt = dt.astimezone(UTC)  # a naive time is local, as fmt_ts reads it
    return (dt - _EPOCH) // _US


def fmt_micros(us: int) -> str:
    """``fmt_ts`` of the time ``us`` µs after the epoch; the date and time of
    day are worked out once a second."""
    seconds, fraction = divmod(us, 1_000_000)
    head = _heads.get(seconds)
    if head is None:
        if len(_heads) >= _HEADS_MAX:
            _heads.clear()
        head = _heads[seconds] = f"{(_EPOCH + timedelta(seconds=seconds)).isoformat()[:19]}."
    return f"{head}{fraction:06d}Z"


def fmt_ts(dt: datetime) -> str:
    """Fixed-width ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` (sortable as text): one
    formatter of the store's times, ``fmt_micros``."""
    return fmt_micros(_micros(dt))


def parse_ts(text: str) -> datetime:
    if (
        len(text) == 27
        and text.isascii()
        and text[10] == "T"
        and text[19] == "."
        and text[20:26].isdigit()
        and text[26] == "Z"
    ):
        # What fmt_ts writes (every stored time): fromisoformat reads it ~10x
        # faster than strptime, which also costs ~5 ms of imports (_strptime,
        # calendar, locale) and regex compiles in every CLI process.
        return datetime.fromisoformat(text[:-1]).replace(tzinfo=UTC)
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def ts_after(dt: datetime, seconds: float) -> str:
    return fmt_ts(dt + timedelta(seconds=seconds))


def stamp_after(us: int, seconds: float) -> str:
    """``ts_after`` of a reading in µs (``SteadyClock.micros``), with no datetime;
    the seconds rounded to the µs as a timedelta rounds them."""
    return fmt_micros(us + round(seconds * 1_000_000))


_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]  # 10 bits -> 2 digits
_time_cache: tuple[int, str] = (-1, "")


def _encode(value: int, length: int) -> str:
    out = []
    for _ in range(length):
        out.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(out))


def new_id(at: datetime | None = None) -> str:
    """A ULID; strictly increasing within this process even inside one ms."""
    global _last_ms, _last_rand
    ms = int((at.timestamp() if at else time.time()) * 1000)
    with _lock:
        if ms <= _last_ms:
            ms = _last_ms
            _last_rand += 1
        else:
            _last_ms = ms
            _last_rand = int.from_bytes(os.urandom(10), "big") >> 1  # room to increment
        if _last_rand >= 1 << 80:  # pragma: no cover - 2^79 ids in one ms
            raise OverflowError("ULID counter overflow")
        rand = _last_rand
    global _time_cache
    if _time_cache[0] != ms:  # the time part changes once a millisecond
        _time_cache = (ms, _encode(ms, 10))
    p = _PAIRS
    return (
        _time_cache[1]
        + p[(rand >> 70) & 1023]
        + p[(rand >> 60) & 1023]
        + p[(rand >> 50) & 1023]
        + p[(rand >> 40) & 1023]
        + p[(rand >> 30) & 1023]
        + p[(rand >> 20) & 1023]
        + p[(rand >> 10) & 1023]
        + p[rand & 1023]
    )


# A message's id locates its row (revision 0018): its 80 bits past the time
# are the message's seq (the top 40) and 40 random bits, so the log needs no
# index of ids: a lookup reads the space's (space_id, seq) key the id names,
# and checks the id. Within a space, ids of one millisecond are in seq order.
SEQ_BITS = 40
_DIGIT = {c: i for i, c in enumerate(_ALPHABET)}


def message_id(seq: int, at: datetime | None = None) -> str:
    """The id of the message at ``seq`` of its space: a ULID whose random part
    starts with ``seq`` (``seq_in_id`` reads it back)."""
    if not 0 < seq < 1 << SEQ_BITS:
        raise OverflowError(f"seq {seq} does not fit a message id")
    ms = int((at.timestamp() if at else time.time()) * 1000)
    global _time_cache
    if _time_cache[0] != ms:
        _time_cache = (ms, _encode(ms, 10))
    rand = int.from_bytes(os.urandom(5), "big")
    p = _PAIRS
    return (
        _time_cache[1]
        + p[seq >> 30]
        + p[(seq >> 20) & 1023]
        + p[(seq >> 10) & 1023]
        + p[seq & 1023]
        + p[rand >> 30]
        + p[(rand >> 20) & 1023]
        + p[(rand >> 10) & 1023]
        + p[rand & 1023]
    )


def seq_in_id(mid: str) -> int:
    """The seq a message id names (``message_id``); -1 for a string that is no
    ULID. An id the broker did not make names some seq or none: a lookup
    checks the id it finds there (and an imported id that names another seq
    has an alias, ``message_aliases``)."""
    if len(mid) != 26:
        return -1
    value = 0
    digit = _DIGIT
    try:
        for c in mid[10:18]:
            value = (value << 5) | digit[c]
    except KeyError:
        return -1
    return value


def by_id(mid: str) -> dict[str, object]:
    """A lookup's parameters for the message ``mid``: its id and the seq it
    names (the catalogue's ``{id_seq}``, with the space's ``space_id``)."""
    return {"id": mid, "id_seq": seq_in_id(mid)}


_URLSAFE = bytes.maketrans(b"+/", b"-_")


def new_token() -> str:
    """192 random bits, URL-safe base64 (32 characters): ``secrets.token_urlsafe(24)``
    spelled out, without importing ``secrets`` (which loads ``random``, ``hmac``
    and ``base64``) on every CLI call."""
    raw = binascii.b2a_base64(os.urandom(24), newline=False)
    return raw.translate(_URLSAFE).decode("ascii")


def hash_token(token: str) -> str:
    # Tokens are 192 random bits, so a fast hash is enough: nothing to brute-force.
    return hashlib.sha256(token.encode()).hexdigest()


def _reset_after_fork() -> None:
    global _last_ms, _last_rand, _lock
    _lock = threading.Lock()
    _last_ms = -1
    _last_rand = 0


os.register_at_fork(after_in_child=_reset_after_fork)
