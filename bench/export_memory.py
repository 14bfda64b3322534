"""Export (and import) memory at scale: is it flat in the number of messages?

    python bench/export_memory.py --messages 1000000 --out bench/results/export_memory.json

Builds a space quickly with bulk SQL inserts into a temp database (50
participants; direct messages each with one delivery, broadcasts, posts,
receipts; a claim journal and transcript rows), then runs ``broker export`` in
a subprocess and reads its peak RSS from ``resource.getrusage(RUSAGE_CHILDREN)``.
A baseline export of a space 100 times smaller runs first, in its own
subprocess: ``RUSAGE_CHILDREN`` keeps the largest child so far, so the two
readings show whether memory grows with the space. Then ``broker import`` of
the big export into a fresh database runs in a subprocess that reports its own
peak RSS (``--no-import`` skips it). Writes JSON; never gates anything on time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

# A standalone script (``python bench/NAME.py``): the project's root on the path
# for the bench's own helpers.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.core import count

PARTICIPANTS = 50


def build(db: Path, messages: int, seed: int = 7) -> tuple[str, dict[str, int]]:
    """A space with ``messages`` log rows, written with bulk SQL in one transaction."""
    from broker.ids import fmt_ts, hash_token, message_id, new_id, new_token
    from broker.store.sqlite import Store

    rnd = random.Random(seed)
    store = Store(f"sqlite:///{db}")
    store.close()
    conn = store.connect()
    conn.execute("PRAGMA synchronous = OFF")
    space = "run_" + new_id().lower()
    start = datetime(2026, 1, 1, tzinfo=UTC)
    now = fmt_ts(start)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute(
        "INSERT INTO spaces (id, kind, state, settings, created_at_utc, updated_at_utc) "
        "VALUES (?, 'workflow', 'running', '{}', ?, ?)",
        (space, now, now),
    )
    people = [(new_id(), f"agent-{i:02d}") for i in range(PARTICIPANTS)]
    conn.executemany(
        "INSERT INTO participants (id, space_id, address, codename, agent, run_id, token_hash, "
        "status, joined_at_utc, last_seen_utc) VALUES (?,?,?,?,'worker',?,?,'running',?,?)",
        [(pid, space, a, f"flow/{a}", a, hash_token(new_token()), now, now) for pid, a in people],
    )
    conn.executemany(
        "INSERT INTO participant_events (id, space_id, participant_id, event, address, codename, "
        "agent, run_id, at_utc) VALUES (?,?,?,'joined',?,?,'worker',?,?)",
        [(new_id(), space, pid, a, f"flow/{a}", a, now) for pid, a in people],
    )
    everyone = json.dumps([a for _, a in people[1:]])
    counts = {"deliveries": 0, "broadcasts": 0, "journal": 0, "transcript": 0}
    bcast = 0
    log_bytes = 0

    def rows() -> Any:
        nonlocal bcast, log_bytes
        for seq in range(1, messages + 1):
            at = fmt_ts(start + timedelta(microseconds=seq * 1000))
            r = rnd.random()
            sender = people[seq % PARTICIPANTS][1]
            body = f"message {seq} from {sender}: " + "x" * rnd.randint(10, 200)
            bno = None
            deliver: str | None = None
            if r < 0.80:
                kind, pid_to = "direct", people[rnd.randrange(PARTICIPANTS)]
                to, reached, deliver = json.dumps([pid_to[1]]), json.dumps([pid_to[1]]), pid_to[0]
            elif r < 0.85:
                bcast += 1
                kind, to, reached, bno = "broadcast", '["broadcast"]', everyone, bcast
            elif r < 0.92:
                kind, to, reached = "post", "[]", "[]"
            else:
                kind, to, reached, body = "seen", "[]", "[]", json.dumps([new_id()])
            size = len(body) + len(to) + len(reached) + 2
            log_bytes += size
            mid = message_id(seq)
            yield (mid, space, seq, kind, sender, to, body, reached, bno, size, at, deliver)

    msg_sql = (
        "INSERT INTO messages (id, space_no, seq, kind, sender, recipients, body, reached, "
        "reached_n, bcast_no, size_bytes, created_at_utc) "
        "VALUES (?,(SELECT rowid FROM spaces WHERE id = ?),?,?,?,?,?,?,?,?,?,?)"
    )
    # A delivery's rowid is its message's times 2^20 (revision 0017; one each here),
    # which names its message, space and time (revision 0021); its recipient is
    # the participant's number (revision 0022).
    del_sql = (
        "INSERT INTO deliveries (rowid, id, recipient_no, state, attempts, acked_at_utc) "
        "SELECT m.rowid * 1048576, ?, (SELECT p.rowid FROM participants p WHERE p.id = ?), "
        "?, ?, ? FROM messages m WHERE m.space_no = (SELECT sp.rowid FROM spaces sp WHERE sp.id = ?) AND m.seq = ?"
    )
    batch_m: list[tuple[Any, ...]] = []
    batch_d: list[tuple[Any, ...]] = []
    for mid, sp, seq, kind, sender, to, body, reached, bno, size, at, deliver in rows():
        reached_n = len(json.loads(reached)) if reached != "[]" else 0
        batch_m.append((mid, sp, seq, kind, sender, to, body, reached, reached_n, bno, size, at))
        if deliver is not None:
            done = rnd.random() < 0.9
            batch_d.append(
                (
                    new_id(),
                    deliver,
                    "done" if done else "ready",
                    int(done),
                    at if done else None,
                    sp,
                    seq,
                )
            )
        if len(batch_m) >= 20000:
            conn.executemany(msg_sql, batch_m)
            conn.executemany(del_sql, batch_d)
            counts["deliveries"] += len(batch_d)
            batch_m, batch_d = [], []
    conn.executemany(msg_sql, batch_m)
    conn.executemany(del_sql, batch_d)
    counts["deliveries"] += len(batch_d)
    counts["broadcasts"] = bcast
    journal = []
    for i in range(messages // 100):
        at = fmt_ts(start + timedelta(seconds=i))
        owner = people[i % PARTICIPANTS][1]
        journal.append((new_id(), space, f"key-{i % 500}", "claimed", owner, i + 1, at, at))
    conn.executemany(
        "INSERT INTO claim_journal (id, space_id, key, event, owner, token, lease_expires_at, "
        "at_utc) VALUES (?,?,?,?,?,?,?,?)",
        journal,
    )
    counts["journal"] = len(journal)
    transcript = [
        (new_id(), space, people[i % PARTICIPANTS][0], i % 7, "notice", "notice", f"note {i}", now)
        for i in range(messages // 20)
    ]
    conn.executemany(
        "INSERT INTO transcript (id, space_id, participant_id, position, direction, kind, "
        "content, at_utc) VALUES (?,?,?,?,?,?,?,?)",
        transcript,
    )
    counts["transcript"] = len(transcript)
    conn.execute(
        "UPDATE spaces SET last_seq = ?, last_bcast = ?, log_bytes = ? WHERE id = ?",
        (messages, bcast, log_bytes, space),
    )
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return space, counts


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}


def export_child(db: Path, space: str, root: Path) -> tuple[float, dict[str, Any], list[str]]:
    cmd = [
        sys.executable,
        "-m",
        "broker",
        "--url",
        f"sqlite:///{db}",
        "export",
        space,
        "--root",
        str(root),
        "--json",
        "--quiet",
    ]
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env())
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"export failed: {proc.stderr}")
    return seconds, json.loads(proc.stdout), cmd


_IMPORT_CHILD = """
import json, resource, sys
from broker.store.sqlite import Store
from broker.interchange.importer import import_dir
store = Store(sys.argv[1])
summary = import_dir(store, sys.argv[2])
print(json.dumps({"messages": summary.messages,
                  "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def import_child(db: Path, root: Path) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORT_CHILD, f"sqlite:///{db}", str(root)],
        capture_output=True,
        text=True,
        env=_env(),
    )
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"import failed: {proc.stderr}")
    return seconds, json.loads(proc.stdout)


def peak_children_mb() -> float:
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB on Linux


def count_lines(path: Path) -> int:
    n = 0
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            n += block.count(b"\n")
    return n


def du(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


_BUILDER = """
import json, os, sys, traceback
sys.path.insert(0, sys.argv[1])
out = sys.argv[4]
try:
    from bench.export_memory import build
    from pathlib import Path
    space, counts = build(Path(sys.argv[2]), int(sys.argv[3]))
    with open(out + ".tmp", "w") as fh:
        json.dump({"space": space, "counts": counts}, fh)
    os.replace(out + ".tmp", out)
except BaseException:
    with open(out + ".err", "w") as fh:
        fh.write(traceback.format_exc())
"""
_LAUNCHER = "import subprocess, sys; subprocess.Popen(sys.argv[1:], start_new_session=True)"


def build_detached(db: Path, messages: int) -> tuple[str, dict[str, int]]:
    """Run ``build`` in an orphaned grandchild. A process we wait for adds its
    peak RSS to ``RUSAGE_CHILDREN``, and the builder (migrations, bulk inserts)
    is bigger than an export: so the launcher starts it and exits at once, the
    builder is reaped by init, and this process polls for its result file."""
    out = db.with_suffix(".built.json")
    root = str(Path(__file__).resolve().parent.parent)
    subprocess.run(
        [
            sys.executable,
            "-c",
            _LAUNCHER,
            sys.executable,
            "-c",
            _BUILDER,
            root,
            str(db),
            str(messages),
            str(out),
        ],
        check=True,
        env=_env(),
    )
    err = Path(str(out) + ".err")
    while not out.exists():
        if err.exists():
            raise SystemExit(f"build failed:\n{err.read_text()}")
        time.sleep(0.2)
    data = json.loads(out.read_text())
    return data["space"], data["counts"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=count, default=1_000_000)
    p.add_argument("--out", type=Path, default=None, help="write the JSON result here")
    p.add_argument("--no-import", action="store_true", help="skip the import measurement")
    p.add_argument("--keep", action="store_true", help="keep the temp folder")
    args = p.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="broker-export-memory-"))
    result: dict[str, Any] = {
        "bench": "export_memory",
        "command": shlex.join([sys.executable, *sys.argv]),
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "own_rss_mb_at_start": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    # 1. baseline: a space 100 times smaller, exported in its own child
    base_n = max(1000, args.messages // 100)
    base_space, _ = build_detached(tmp / "base.db", base_n)
    base_s, _, _ = export_child(tmp / "base.db", base_space, tmp / "base-export")
    result["baseline_messages"] = base_n
    result["baseline_export_seconds"] = round(base_s, 2)
    result["baseline_peak_rss_mb"] = round(peak_children_mb(), 1)
    # 2. the big space
    t0 = time.perf_counter()
    space, counts = build_detached(tmp / "big.db", args.messages)
    result["build_seconds"] = round(time.perf_counter() - t0, 2)
    result["messages"] = args.messages
    result["participants"] = PARTICIPANTS
    result.update(counts)
    result["db_mb"] = round((tmp / "big.db").stat().st_size / 2**20, 1)
    seconds, summary, cmd = export_child(tmp / "big.db", space, tmp / "export")
    result["export_command"] = shlex.join(cmd)
    result["export_seconds"] = round(seconds, 2)
    result["peak_rss_mb"] = round(peak_children_mb(), 1)  # the largest child so far
    folder = tmp / "export" / "runs" / space / "messages"
    result["exported_messages"] = count_lines(folder / "log.jsonl")
    result["export_mb"] = round(du(tmp / "export") / 2**20, 1)
    result["export_summary"] = summary
    result["rss_growth_vs_baseline"] = round(
        result["peak_rss_mb"] / max(result["baseline_peak_rss_mb"], 1e-9), 2
    )
    # 3. import it back into a fresh store (its own peak, reported by the child)
    if not args.no_import:
        seconds, imported = import_child(tmp / "imported.db", tmp / "export")
        result["import_seconds"] = round(seconds, 2)
        result["import_peak_rss_mb"] = round(imported["peak_rss_kb"] / 1024, 1)
        result["imported_messages"] = imported["messages"]
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    if not args.keep:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
