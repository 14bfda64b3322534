"""The test command scripts/mutation.sh gives mutmut 2: ``pytest ARGS``, such that
every failure counts as a kill and a hang cannot stall the run.

- mutmut 2 reads only exit code 1 as "killed": pytest's 2 (a mutant that breaks
  the import is caught at collection) would read as a survivor, so any failure
  exits 1.
- A mutant can make a wait endless. mutmut then kills the process it started,
  but not that process's children, which keep its terminal open and stall
  mutmut. So pytest runs in its own process group, which is killed whole after
  MUTATION_TEST_TIMEOUT seconds (default 120, below mutmut's own limit of ten
  times the baseline); a hang counts as a kill.
- A mutant that passes the tests the coverage map chose for its line
  (scripts/mutmut_config.py) runs the whole selection (MUTATION_SELECTION)
  before it counts as a survivor: the map attributes a line that runs once
  per process (a cache filled on first use) to the first test that ran it,
  so the narrowed tests can miss a mutant the selection kills.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys


def _forked(path: str, args: list[str], timeout: float) -> int:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(path)
        conn.sendall(json.dumps(args).encode() + b"\n")
        replies = conn.makefile("rb")
        pid = int(replies.readline())
        conn.settimeout(timeout)
        try:
            code = int(replies.readline() or 1)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            print(f"mutation runner: the tests ran past {timeout:.0f} s: killed", flush=True)
            return 1
    return 0 if code == 0 else 1


def main(args: list[str]) -> int:
    code = _run(args)
    selection = shlex.split(os.environ.get("MUTATION_SELECTION", ""))
    if code == 0 and selection and args != selection:
        code = _run(selection)  # survived its narrowed tests: the whole selection decides
    return code


def _run(args: list[str]) -> int:
    timeout = float(os.environ.get("MUTATION_TEST_TIMEOUT", "120"))
    server = os.environ.get("MUTATION_FORKSERVER")
    if server and os.path.exists(server):
        return _forked(server, args, timeout)
    proc = subprocess.Popen([sys.executable, "-m", "pytest", *args], start_new_session=True)
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        print(f"mutation runner: the tests ran past {timeout:.0f} s: killed", flush=True)
        return 1
    return 0 if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
