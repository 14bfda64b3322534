"""The BROKER_* environment variables, read by one rule (README "Environment").

- Empty means unset: ``BROKER_X=`` is the same as no ``BROKER_X`` at all
  (the default applies), for every variable.
- A value that is not one the variable takes is ``invalid_input`` naming
  the variable and what it takes (exit 2), for every variable: never read
  as some other value.
- A switch takes ``on`` or ``off`` (also ``1``/``0``, ``true``/``false``,
  ``yes``/``no``; any case).
- A path may start with ``~`` or ``~user``; a user that does not exist is
  ``invalid_input`` naming the variable.

``VARIABLES`` is the table the README prints; ``check()`` (the CLI, before
any command runs) checks every variable that has a fixed set of values, so
a mistyped one is refused even by a command that would not read it.
Only ``os`` at import time: this runs on every CLI call.
"""

from __future__ import annotations

import os
from pathlib import Path

# name -> what it takes (the README's table says the same, in more words).
VARIABLES = {
    "BROKER_HOME": "a folder (default ~/.local/share/broker, or $XDG_DATA_HOME/broker)",
    "BROKER_URL": "sqlite:////path/file.db, postgresql+psycopg://..., http(s)://..., unix://...",
    "BROKER_SPACE": "a run id (agent commands' --space)",
    "BROKER_AS": "an address (agent commands' --as)",
    "BROKER_TOKEN": "a participant's secret token (agent commands' --token)",
    "BROKER_JOIN_KEY": "a space's join key (join's --join-key)",
    "BROKER_OPERATOR_KEY": "the operator key (default: the key file beside the database)",
    "BROKER_SYNCHRONOUS": "NORMAL (default) or FULL",
    "BROKER_BUSY_TIMEOUT_MS": "a whole number of milliseconds, 0 to 3600000 (default 10000)",
    "BROKER_WRITER_LOCK": "on (default), off, or flock (the lock file's flock, not its mutex)",
    "BROKER_GUARD": "on (default) or off (the git guard lets the commit through, logged)",
    "BROKER_DEBUG": "on or off (default): a bug's traceback on stderr",
}
_ON = frozenset({"on", "1", "true", "yes"})
_OFF = frozenset({"off", "0", "false", "no"})
BUSY_MAX_MS = 3_600_000


def _bad(name: str, value: str, takes: str) -> Exception:
    from broker.errors import InvalidInput

    return InvalidInput(f"{name} must be {takes}, not {value!r}", field=name)


def get(name: str) -> str | None:
    """The variable's value; None when it is unset or empty."""
    return os.environ.get(name) or None


def switch(name: str, default: bool) -> bool:
    """An on/off variable."""
    value = get(name)
    if value is None:
        return default
    word = value.strip().lower()
    if word in _ON:
        return True
    if word in _OFF:
        return False
    raise _bad(name, value, "on or off")


def writer_lock(name: str) -> str:
    """The writer lock's switch: ``"on"`` (default), ``"off"``, or ``"flock"``
    (given in any case)."""
    value = get(name)
    if value is None:
        return "on"
    word = value.strip().lower()
    if word == "flock":
        return word
    if word in _ON or word in _OFF:
        return "on" if word in _ON else "off"
    raise _bad(name, value, "on, off or flock")


def choice(name: str, choices: tuple[str, ...], default: str) -> str:
    """One of ``choices`` (upper case; given in any case)."""
    value = get(name)
    if value is None:
        return default
    if value.strip().upper() not in choices:
        raise _bad(name, value, " or ".join(choices))
    return value.strip().upper()


def whole(name: str, default: int, high: int) -> int:
    """A whole number from 0 to ``high``."""
    value = get(name)
    if value is None:
        return default
    text = value.strip()
    if not (text.isascii() and text.isdigit()) or int(text) > high:
        raise _bad(name, value, f"a whole number from 0 to {high}")
    return int(text)


def expand(path: str, name: str, field: str | None = None) -> Path:
    """``path`` with a leading ``~``/``~user`` expanded; an unknown user (or
    no home to expand ``~`` to) is invalid input naming where the path came
    from (a variable, a URL, an argument)."""
    try:
        return Path(path).expanduser()
    except RuntimeError:
        user = path[1:].split("/", 1)[0]
        who = f"no user {user!r}" if user else "no home folder (HOME is unset)"
        from broker.errors import InvalidInput

        raise InvalidInput(
            f"{name} {path!r}: cannot expand {path.split('/', 1)[0]!r}: {who}",
            field=field or name,
        ) from None


def check() -> None:
    """Check every variable with a fixed set of values (see the module doc)."""
    choice("BROKER_SYNCHRONOUS", ("NORMAL", "FULL"), "NORMAL")
    whole("BROKER_BUSY_TIMEOUT_MS", 10_000, BUSY_MAX_MS)
    writer_lock("BROKER_WRITER_LOCK")
    for name in ("BROKER_GUARD", "BROKER_DEBUG"):
        switch(name, False)
