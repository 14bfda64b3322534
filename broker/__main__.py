"""``python -m broker`` and the ``broker`` command: the command line.

Ctrl-C exits 130 without a word at any moment of a call, the first tenth of a
second included, while the command line is still being imported: a
KeyboardInterrupt that escapes prints a traceback and kills the process by
SIGINT."""

from __future__ import annotations

from typing import NoReturn

from broker.exits import interrupted


def run() -> NoReturn:
    try:
        from broker.frontends.cli import main
    except KeyboardInterrupt:
        interrupted()
    main.main(prog_name="broker")


if __name__ == "__main__":
    run()
