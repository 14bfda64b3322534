"""Checkpoints after the writer lock, not inside it (spec §Storage, "Checkpoints").

SQLite runs its automatic checkpoint inside the ``COMMIT`` that pushes the WAL
past 1,000 pages: that commit then fsyncs the WAL and the database before it
returns, and with the writer lock held from ``BEGIN IMMEDIATE`` to the end of
``COMMIT`` every other writer waits for the disk too. So the store turns the
automatic checkpoint off on its connections and, right after a writer drops
the lock, runs a PASSIVE checkpoint itself when the WAL holds 1,000 frames
that are not folded back yet: the same work, while the next writer goes on
(a PASSIVE checkpoint takes no lock a writer needs).

How many frames are not folded back is read from the WAL index (the ``-shm``
file every connection maps): ``mxFrame`` (the last valid frame) and
``nBackfill`` (frames already copied into the database), at fixed offsets of
the wal-index header that every SQLite since 3.7.0 shares (connections of
different versions use one ``-shm`` at once, so it cannot change; its
``iVersion`` is checked). A read is two loads from a shared mapping, no system
call. If the index cannot be mapped or is not the expected version, SQLite's
own automatic checkpoint stays on.

The mapping is only read while a connection of this process is open on the
database: SQLite never truncates a ``-shm`` file that another connection holds
open, so the mapping stays valid.
"""

from __future__ import annotations

import mmap
import os
import struct

WALINDEX_VERSION = 3007000  # iVersion of the wal-index header since SQLite 3.7.0
_HEADER = struct.Struct("=I")  # native byte order, as SQLite writes it
_MX_FRAME = 16  # WalIndexHdr.mxFrame (first copy of the header)
_N_BACKFILL = 96  # WalCkptInfo.nBackfill, after the two 48-byte header copies
_SIZE = 136  # both header copies and the checkpoint info
CHECKPOINT_FRAMES = 1000  # SQLite's default wal_autocheckpoint


class WalIndex:
    """A read-only view of one database's WAL index header."""

    __slots__ = ("_map",)

    def __init__(self, mapping: mmap.mmap) -> None:
        self._map = mapping

    @classmethod
    def open(cls, db: str) -> WalIndex | None:
        """The index of ``db`` (its ``-shm``), or None when it cannot be read as
        expected (then SQLite's automatic checkpoint stays on)."""
        try:
            fd = os.open(f"{db}-shm", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            if os.fstat(fd).st_size < _SIZE:
                return None
            mapping = mmap.mmap(fd, _SIZE, mmap.MAP_SHARED, mmap.PROT_READ)
        except (OSError, ValueError):
            return None
        finally:
            os.close(fd)
        if _HEADER.unpack_from(mapping, 0)[0] != WALINDEX_VERSION:
            mapping.close()
            return None
        return cls(mapping)

    def pending(self) -> int:
        """Frames in the WAL not yet copied back into the database."""
        m = self._map
        return int(_HEADER.unpack_from(m, _MX_FRAME)[0] - _HEADER.unpack_from(m, _N_BACKFILL)[0])

    def due(self) -> bool:
        return self.pending() >= CHECKPOINT_FRAMES

    def close(self) -> None:
        self._map.close()
