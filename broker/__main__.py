"""``python -m broker`` and the ``broker`` command: the command line.

Ctrl-C exits 130 without a word at any moment of a call, the first tenth of a
second included, while the command line is still being imported: a
KeyboardInterrupt that escapes prints a traceback and kills the process by
SIGINT."""

from __future__ import annotations

import sys
from typing import NoReturn


def run() -> NoReturn:
    try:
        from broker.frontends.cli import main
    except KeyboardInterrupt:
        sys.exit(130)  # cli._common.EXIT_INTERRUPTED, which is what is being imported
    main.main(prog_name="broker")


if __name__ == "__main__":
    run()
