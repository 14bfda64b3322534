"""The ``broker`` command: one click group, thin front ends over the library.

Each submodule registers its commands on ``main`` and is imported only when
one of its commands runs (see ``COMMANDS`` in ``_common``); commands only
parse, call the library and format. Errors are ``BrokerError``s mapped to one
line on stderr and a stable exit code (see ``broker.errors``); no traceback for
user mistakes.
"""

from __future__ import annotations

import importlib

from broker.frontends.cli._common import COMMANDS, main


def load_all() -> None:
    """Import every command module (for tools that walk the whole tree)."""
    for module in sorted(set(COMMANDS.values())):
        importlib.import_module(f"broker.frontends.cli.{module}")


__all__ = ["load_all", "main"]
