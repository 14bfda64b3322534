"""Numbers at the edge (S33): finite, of the right type, inside documented bounds
(and the text that goes with them).

Every duration and count an agent or the operator passes to the queue, the
turns, the board or the directory goes through one of these before anything is
read or written. A violation is ``InvalidInput`` naming the field; ``nan``,
``inf``, ``1e300``, a negative number, a bool or a string never reach a
comparison or a ``timedelta`` (where they would spin, overflow or raise a
``TypeError`` traceback).

Text that names or labels something (a reason, a lease owner, a
participant's agent/role/step/task; path patterns have the same rule in
``broker.board.globs``) goes through ``label``: one line
of printable text, so no C0 control, DEL or C1 control (U+0080-U+009F: 0x9b
is a one-byte CSI to a terminal, 0x85 a line break) is ever stored in it.
Bodies and evidence keep theirs (they are escaped on display, S31).
"""

from __future__ import annotations

import math

from broker import errors, vocab

DAY_S = 86400.0
WEEK_S = 7 * DAY_S
MIN_SECONDS = vocab.MIN_SECONDS


def _number(value: object, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise errors.InvalidInput(
            f"bad {field} {value!r}: a number of seconds is needed", field=field
        )
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float
        number = math.inf
    if not math.isfinite(number):
        raise errors.InvalidInput(f"bad {field} {value!r}: not a finite number", field=field)
    return number


def seconds(value: object, field: str, *, top: float, zero: bool = False) -> float:
    """A duration in seconds: at least ``MIN_SECONDS`` (or at least 0 with
    ``zero``: a wait), at most ``top``."""
    number = _number(value, field)
    low = 0.0 if zero else MIN_SECONDS
    if not low <= number <= top:
        raise errors.InvalidInput(
            f"bad {field} {value!r}: at least {low:g} and at most {top:g} seconds", field=field
        )
    return number


def count(value: object, field: str, *, low: int = 1, top: int) -> int:
    """A whole number from ``low`` to ``top``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise errors.InvalidInput(f"bad {field} {value!r}: a whole number is needed", field=field)
    if not low <= value <= top:
        raise errors.InvalidInput(f"bad {field} {value}: {low} to {top}", field=field)
    return value


def text_flaw(value: str) -> str | None:
    """What makes ``value`` text that cannot be stored on both backends (S33),
    or None: a lone surrogate is not UTF-8, and PostgreSQL's text holds no NUL
    (SQLite's does: refusing it on both gives one answer everywhere)."""
    if "\x00" in value:
        return "a NUL (U+0000) character"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "a lone surrogate"
    return None


def text_problem(value: str) -> str | None:
    """What text ``value`` should be, when it is not text that can be stored."""
    flaw = text_flaw(value)
    return None if flaw is None else f"text without {flaw}"


def text(value: object, field: str, top: int) -> str:
    """Text of at most ``top`` characters that can be stored (``text_problem``)."""
    if not isinstance(value, str):
        raise errors.InvalidInput(f"bad {field} {value!r}: text is needed", field=field)
    if len(value) > top:
        raise errors.InvalidInput(
            f"bad {field}: at most {top} characters, not {len(value)}", field=field
        )
    flaw = text_flaw(value)
    if flaw is not None:
        raise errors.InvalidInput(f"{field} is not valid text ({flaw})", field=field)
    return value


def control_char(value: str) -> str | None:
    """The first C0 control, DEL, C1 control or lone surrogate in ``value``, if any."""
    for c in value:
        o = ord(c)
        if o < 0x20 or 0x7F <= o <= 0x9F or 0xD800 <= o <= 0xDFFF:
            return c
    return None


def label(value: object, field: str, top: int) -> str:
    """``text`` that is also one printable line: no C0, DEL or C1 control (S31, S33)."""
    value = text(value, field, top)
    bad = control_char(value)
    if bad is not None:
        raise errors.InvalidInput(
            f"bad {field} {value[:80]!r}: it holds the control character {bad!r}", field=field
        )
    return value
