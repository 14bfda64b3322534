"""The ``broker`` command: one click group, thin front ends over the library.

Each submodule registers its commands on ``main``; they only parse, call the
library and format. Errors are ``BrokerError``s mapped to one line on stderr
and a stable exit code (see ``broker.errors``); no traceback for user mistakes.
"""

from __future__ import annotations

import importlib

from broker.cli._common import main

for _module in ("space", "participant", "message", "board", "store", "demo", "directory"):
    importlib.import_module(f"broker.cli.{_module}")

__all__ = ["main"]
