"""Starting broker processes (S39): the command that runs this broker, and the
environment a process the broker starts is given.

The command is this interpreter, by its absolute path, in isolated mode
(``-I``): ``python -m broker`` run from a folder puts that folder first on
``sys.path``, so a ``broker/__main__.py`` planted in a shared working tree
(where git runs its hooks, where an MCP client starts its servers) would run
instead of the broker, with the caller's secrets in its environment.
Isolated mode also skips the user's site folder and ``PYTHON*`` variables;
when this broker was installed there (``pip install --user``) or is found
through ``PYTHONPATH``, ``-P`` (no folder put first) is used instead, which
keeps them. Which one works is asked of the interpreter once per process.

A child's environment is built from an allow-list, never by deleting known
names from the parent's (a secret under a name nobody listed would pass):
its identity (``BROKER_SPACE``, ``BROKER_AS``, ``BROKER_TOKEN``), where to
reach the broker (``BROKER_URL``: the server's URL in served mode, the store's
in embedded mode), the store settings every process of a store shares, the
basics any program needs (``PATH``, ``HOME``, the locale, ...), and the
variables its starter names explicitly (never a ``BROKER_*`` one). Never the
operator key, a join key, ``BROKER_HOME`` or ``PG*`` passwords.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Iterable, Mapping

from broker import errors

# How every process of one store must open it (the same durability, timeout
# and lock discipline): no secret in them.
STORE_SETTINGS = ("BROKER_SYNCHRONOUS", "BROKER_BUSY_TIMEOUT_MS", "BROKER_WRITER_LOCK")
BASICS = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "TERM",
    "NO_COLOR",
    "BROKER_DEBUG",
)
LOCALE_PREFIX = "LC_"


@functools.cache
def _flags() -> tuple[str, ...]:
    """``-I`` when this interpreter finds this very broker in isolated mode, else ``-P``."""
    import subprocess  # only here: every agent CLI call imports this module

    import broker

    here = os.path.realpath(broker.__file__)
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-c", "import broker; print(broker.__file__)"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            cwd="/",
        )
    except (OSError, subprocess.SubprocessError):
        return ("-P",)
    found = done.stdout.strip()
    same = done.returncode == 0 and found and os.path.realpath(found) == here
    return ("-I",) if same else ("-P",)


def broker_command() -> list[str]:
    """The argv that runs this broker's CLI (``broker ...``) from any folder safely."""
    return [os.path.abspath(sys.executable), *_flags(), "-m", "broker"]


def check_env_names(passed: Iterable[str], extra: Mapping[str, str] | None) -> None:
    """What a starter hands on by name (``passed``) or by value (``extra``) is
    plain variables: a name without ``=`` or NUL, text values without NUL,
    never a ``BROKER_*`` name (S39)."""
    named = [*passed, *(extra or {})]
    for name in named:
        if not isinstance(name, str) or not name or "=" in name or "\0" in name:
            raise errors.InvalidInput(f"bad variable name {name!r}", field="env")
    for name, value in (extra or {}).items():
        if not isinstance(value, str) or "\0" in value:
            raise errors.InvalidInput(
                f"{name}: a variable's value is text without NUL", field="env"
            )
    refused = sorted({n for n in named if n.upper().startswith("BROKER_")})
    if refused:
        raise errors.InvalidInput(
            f"{', '.join(refused)}: a process the broker starts gets its identity and "
            "where to reach the broker from the broker, never a BROKER_* variable "
            "from its starter (S39)",
            field="env",
        )


def child_env(
    *,
    space: str,
    address: str,
    token: str,
    reach: str,
    passed: Iterable[str] = (),
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The whole environment of a process the broker starts for one participant.

    ``reach`` is where it reaches the broker: a served URL, or in embedded
    mode the store's URL. ``passed`` names variables of this environment to
    hand on as they are, ``extra`` gives variables by value: the caller's
    own choice (an API key its command needs), never a ``BROKER_*`` name."""
    passed = list(passed)
    check_env_names(passed, extra)
    env = {
        name: value
        for name, value in os.environ.items()
        if name in BASICS or name in STORE_SETTINGS or name.startswith(LOCALE_PREFIX)
    }
    for name in passed:
        if name in os.environ:
            env[name] = os.environ[name]
    env.update(extra or {})
    env.update(
        BROKER_SPACE=space,
        BROKER_AS=address,
        BROKER_TOKEN=token,
        BROKER_URL=str(reach),
    )
    return env
