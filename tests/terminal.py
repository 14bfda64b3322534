"""A child process's terminal, read by the test that gave it one (``pty``)."""

from __future__ import annotations

import os
import select
import subprocess


def read_to_end(leader: int, proc: subprocess.Popen[bytes]) -> bytes:
    """What the child writes to its terminal (``leader``: the pty's other end)
    until it closes it or exits."""
    out = b""
    while True:
        ready, _, _ = select.select([leader], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    return out
