"""How a broker command exits: the statuses of the exit-code table
(docs/spec.md) that are no error's own (an error's is ``BrokerError.exit_code``),
and the exit on Ctrl-C.

A leaf that imports nothing of the broker: ``broker.__main__`` loads it before
the command line, so that a Ctrl-C while the command line is still loading
exits as one does later.
"""

from __future__ import annotations

import sys
from typing import NoReturn

EXIT_USAGE = 2
EXIT_OS = 10  # the file system refused (same family as storage errors)
EXIT_INTERNAL = 70  # a bug (sysexits' EX_SOFTWARE)
EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_PIPE = 141  # 128 + SIGPIPE: the reader went away


def is_interrupt(exc: BaseException) -> bool:
    """Whether ``exc`` is a Ctrl-C that a library turned into an error of its
    own while a module loaded: Python's class creation wraps it in a
    RuntimeError (chained), pydantic-core's schema building folds it into a
    SchemaError's text (not chained)."""
    seen: set[int] = set()
    at: BaseException | None = exc
    while at is not None and id(at) not in seen:
        if isinstance(at, KeyboardInterrupt):
            return True
        if type(at).__name__ == "SchemaError" and "KeyboardInterrupt" in str(at):
            return True
        seen.add(id(at))
        at = at.__cause__ or at.__context__
    return False


def interrupted() -> NoReturn:
    """Exit 130 on Ctrl-C, saying nothing.

    CPython (3.11) remembers a KeyboardInterrupt that left code run by ``exec``
    of a string, even one caught later, and a ``python -m`` process then kills
    itself by SIGINT as it exits instead of exiting 130. Dataclasses make their
    methods that way, so a Ctrl-C while a module loads (lazily, well into a
    command) often lands there. A successful ``exec`` of a string forgets it."""
    exec("None")  # noqa: S102 - the string is constant; see above
    sys.exit(EXIT_INTERRUPTED)
