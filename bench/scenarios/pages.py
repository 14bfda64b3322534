"""What one message costs on disk: WAL frames per send and bytes per message.

Two figures per system, the broker against ``raw_floor`` (one INSERT per
transaction into a one-table queue with its ready index, the broker's pragmas):

- **frames per send**: after a warm-up, the WAL is checkpointed and cut to
  nothing, a reader then holds a snapshot so that no checkpoint (SQLite's or the
  broker's own) can fold or restart the WAL, and ``frames`` one-recipient sends
  run; frames per send = (WAL bytes - 32-byte header) / (page size + 24-byte frame
  header) / sends. Each frame's page number is mapped to the table or index that
  owns it (``dbstat``), so the frames are also counted per object.
- **bytes per message**: the growth of the checkpointed database file over
  ``messages`` sends (2,000 by default), every index and the search index
  included (the search index's waiting batch is indexed first), per object from
  ``dbstat`` (the file's growth beside the sum: free pages and page 1 differ).

The body is 100 bytes for both systems.
"""

from __future__ import annotations

import sqlite3
import struct
from collections import Counter
from pathlib import Path
from typing import Any

from bench.core import BROKER, RAW_FLOOR, Ctx, Row, Scenario
from bench.peers.broker_queue import BrokerQueue
from bench.peers.raw_sqlite import RawFloor

BODY = 100
WARM = 200  # sends before anything is measured (first pages of every table and index)
FRAMES_SENDS = 64  # sends of the frame count: two search-index batches (FTS_BATCH = 32)
WAL_HEADER = 32
FRAME_HEADER = 24


def body100(i: int) -> str:
    head = f"msg {i:08d} word{i % 97} "
    return head + "x" * (BODY - len(head))


def _side(db: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(db, isolation_level=None, timeout=30)
    conn.execute("PRAGMA journal_mode = WAL")
    return conn


def _truncate(db: Path) -> None:
    conn = _side(db)
    try:
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if busy:
            raise RuntimeError(f"{db.name}: the WAL could not be checkpointed (a reader held it)")
    finally:
        conn.close()


def _objects(db: Path) -> dict[str, int]:
    """Bytes per table / index (``dbstat``)."""
    conn = _side(db)
    try:
        return {
            str(n): int(b)
            for n, b in conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name")
        }
    finally:
        conn.close()


def _page_owners(db: Path) -> dict[int, str]:
    conn = _side(db)
    try:
        return {int(p): str(n) for n, p in conn.execute("SELECT name, pageno FROM dbstat")}
    finally:
        conn.close()


def _wal_frames(wal: Path) -> tuple[int, list[int]]:
    """The WAL's page size and the page number of every frame in it."""
    data = wal.read_bytes()
    if len(data) < WAL_HEADER:
        return 0, []
    page_size = struct.unpack(">I", data[8:12])[0]
    step = page_size + FRAME_HEADER
    pages = [
        struct.unpack(">I", data[off : off + 4])[0]
        for off in range(WAL_HEADER, len(data) - step + 1, step)
    ]
    return page_size, pages


def _fold_search(q: Any) -> None:
    """Index the log rows waiting for the search index's next batch (broker only)."""
    if isinstance(q, BrokerQueue):
        from broker.mail.search import index_pending

        index_pending(q.store)


def measure(q: Any, db: Path, *, frames_sends: int, messages: int) -> dict[str, Any]:
    i = 0

    def send(n: int) -> None:
        nonlocal i
        for _ in range(n):
            q.put(body100(i))
            i += 1

    send(WARM)
    _fold_search(q)
    # Frames per send: the WAL from nothing, held so that no checkpoint folds it.
    _truncate(db)
    holder = _side(db)
    holder.execute("BEGIN")
    holder.execute("SELECT count(*) FROM sqlite_schema").fetchone()  # a snapshot: WAL pinned
    try:
        send(frames_sends)
        page_size, pages = _wal_frames(db.with_name(db.name + "-wal"))
    finally:
        holder.execute("COMMIT")
        holder.close()
    _fold_search(q)
    _truncate(db)
    owners = _page_owners(db)
    per_object_frames = Counter(owners.get(p, "page 1" if p == 1 else "free/other") for p in pages)
    # Bytes per message: the checkpointed file's growth over `messages` sends.
    before_file = db.stat().st_size
    before = _objects(db)
    send(messages)
    _fold_search(q)
    _truncate(db)
    after_file = db.stat().st_size
    after = _objects(db)
    names = sorted(set(before) | set(after) | set(per_object_frames))
    objects = {
        name: {
            "frames_per_send": round(per_object_frames.get(name, 0) / frames_sends, 3),
            "bytes_per_msg": round((after.get(name, 0) - before.get(name, 0)) / messages, 1),
        }
        for name in names
    }
    objects = {
        k: v for k, v in objects.items() if v["frames_per_send"] or v["bytes_per_msg"]
    }  # untouched tables are noise
    return {
        "frames_per_send": len(pages) / frames_sends,
        "bytes_per_msg": (after_file - before_file) / messages,
        "page_size": page_size,
        "objects": objects,
    }


def pages(ctx: Ctx) -> Scenario:
    messages = 400 if ctx.quick else 2000
    sc = Scenario(
        "pages",
        "WAL frames per one-recipient send and bytes on disk per 100-byte message",
        unit="frames/send",
        higher_is_better=False,
        params={"frames_sends": FRAMES_SENDS, "messages": messages, "body_bytes": BODY},
    )
    systems = [
        (BROKER, BrokerQueue, "broker.db"),
        (RAW_FLOOR, RawFloor, "floor.db"),
    ]
    objects: dict[str, Any] = {}
    for name, cls, file in systems:
        folder = ctx.scratch(f"pages-{name}")
        q = cls(folder)
        try:
            m = measure(q, folder / file, frames_sends=FRAMES_SENDS, messages=messages)
        finally:
            q.close()
        objects[name] = m["objects"]
        sc.add(
            Row(
                name,
                round(m["frames_per_send"], 2),
                "frames/send",
                how=q.how,
                stats={"bytes_per_msg": round(m["bytes_per_msg"], 1), "page_size": m["page_size"]},
            )
        )
        ctx.log(
            f"  pages {name}: {m['frames_per_send']:.2f} frames/send, "
            f"{m['bytes_per_msg']:.0f} bytes/msg"
        )
    sc.counts["objects"] = objects
    frames = sc.value(BROKER)
    sc.target("WAL frames per single send ≤ 4", frames, "<=", 4)
    b = sc.get(BROKER)
    f = sc.get(RAW_FLOOR)
    if b is not None and f is not None and f.stats["bytes_per_msg"]:
        ratio = b.stats["bytes_per_msg"] / f.stats["bytes_per_msg"]
        sc.ratios.append(
            {
                "label": "bytes per message, broker / raw_floor",
                "num": BROKER,
                "den": RAW_FLOOR,
                "num_point": None,
                "den_point": None,
                "value": ratio,
            }
        )
        sc.target("bytes per message ≤ 2.5× the minimal queue's", ratio, "<=", 2.5)
    sc.ratio(BROKER, RAW_FLOOR, label="frames per send, broker / raw_floor")
    return sc


def object_table(objects: dict[str, dict[str, dict[str, float]]]) -> list[str]:
    """Markdown: frames per send and bytes per message per table and index, per system."""
    out = ["| system | table or index | frames / send | bytes / message |", "|---|---|---|---|"]
    for system, per in objects.items():
        ranked = sorted(per.items(), key=lambda kv: (-kv[1]["bytes_per_msg"], kv[0]))
        for name, v in ranked:
            out.append(
                f"| {system} | {name} | {v['frames_per_send']:.2f} | {v['bytes_per_msg']:.1f} |"
            )
    return out
