"""The broker benchmark harness: ``python -m bench [SCENARIO ...] [--quick] --out DIR``.

Every figure is a ratio measured side by side in one run on one machine: the
broker against raw sqlite3 doing the same statements (the physical limit) and
against what users would pick instead (a file mailbox as in spec §Mailbox
layout, persist-queue, litequeue, Redis Streams). See ``bench/README.md``.
"""

from __future__ import annotations

__all__: list[str] = []
