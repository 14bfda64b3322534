"""Board key claims under contention (S22-S23).

P processes, each its own participant, hammer K keys for a fixed time: pick a
key at random, claim it (a refusal is a conflict), release it at once. Every
grant is checked afterwards: for each key, grants must not overlap in time
(each measured interval lies inside the real holding, so an overlap is a real
violation) and fencing tokens must grow in grant order.

Baselines: files (``board/claims/<key>``, created with O_CREAT | O_EXCL,
removed on release, each event appended to ``claims.jsonl``: a file-based board's layout;
no fencing token) and Redis (the documented lock: ``SET key holder NX PX`` and
a compare-and-delete release, each a Lua script that also INCRs a fencing
counter and XADDs to a journal stream).
"""

from __future__ import annotations

import json
import os
import random
import time
import uuid
from pathlib import Path
from typing import Any

from bench.core import BROKER, Ctx, Row, Scenario, pct, run_workers
from bench.peers import Unavailable

FILE_LOCK = "file_lock"
REDIS_LOCK = "redis_lock"
TTL = 30.0

CLAIM_LUA = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local t = redis.call('INCR', KEYS[2])
  redis.call('XADD', KEYS[3], '*', 'event', 'claimed', 'key', KEYS[1], 'token', t)
  return t
end
return false
"""
RELEASE_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('XADD', KEYS[3], '*', 'event', 'released', 'key', KEYS[1], 'token', ARGV[2])
  return 1
end
return 0
"""


class _Broker:
    how = "Agent.claim_key(key, ttl=30) (ClaimHeld = conflict), then Agent.release_key(key, token)"

    def __init__(self, folder: Path, procs: int) -> None:
        from bench.peers.broker_queue import open_space
        from broker import Operator

        self.store, self.space = open_space(folder)
        self.agents = [Operator(self.store).join(self.space, f"b{i}")[0] for i in range(procs)]

    def worker(self, i: int) -> tuple[Any, Any]:
        from bench.peers.broker_queue import api
        from broker import errors

        agent = self.agents[i]
        claim, release = api(agent, "claim_key"), api(agent, "release_key")

        def try_claim(key: str) -> int | None:
            try:
                return int(claim(key, TTL).fence)
            except errors.ClaimHeld:
                return None

        return try_claim, lambda key, token: release(key, token)

    def close(self) -> None:
        self.store.close()


class _Files:
    how = (
        "board/claims/<key> created with O_CREAT|O_EXCL (exists = conflict), removed on "
        "release; claimed/released appended to claims.jsonl (O_APPEND); no fencing token"
    )

    def __init__(self, folder: Path, procs: int) -> None:
        self.claims = folder / "board" / "claims"
        self.claims.mkdir(parents=True)
        self.journal = folder / "board" / "claims.jsonl"

    def worker(self, i: int) -> tuple[Any, Any]:
        counter = [0]
        jfd = os.open(self.journal, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

        def try_claim(key: str) -> int | None:
            try:
                fd = os.open(self.claims / key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                return None
            counter[0] += 1
            token = i * 1_000_000_000 + counter[0]  # unique, but not a fence across holders
            os.write(fd, json.dumps({"holder": f"b{i}", "token": token}).encode())
            os.close(fd)
            os.write(
                jfd, (json.dumps({"event": "claimed", "key": key, "token": token}) + "\n").encode()
            )
            return token

        def release(key: str, token: int) -> None:
            os.unlink(self.claims / key)
            os.write(
                jfd, (json.dumps({"event": "released", "key": key, "token": token}) + "\n").encode()
            )

        return try_claim, release

    def close(self) -> None:
        pass


class _Redis:
    how = (
        "EVAL: SET key holder NX PX 30000 + INCR fence + XADD journal; release: compare-and-DEL "
        "+ XADD journal (one round trip each)"
    )

    def __init__(self, folder: Path, procs: int) -> None:
        from bench.peers.redis_streams import connect

        self.r = connect()
        self.prefix = f"bench:board:{uuid.uuid4().hex}"

    def worker(self, i: int) -> tuple[Any, Any]:
        from bench.peers.redis_streams import connect

        r = connect()
        claim_s, release_s = r.register_script(CLAIM_LUA), r.register_script(RELEASE_LUA)
        holder = f"b{i}:{uuid.uuid4().hex[:6]}"
        journal = f"{self.prefix}:journal"

        def try_claim(key: str) -> int | None:
            k = f"{self.prefix}:{key}"
            t = claim_s(keys=[k, f"{k}:fence", journal], args=[holder, int(TTL * 1000)])
            return int(t) if t else None

        def release(key: str, token: int) -> None:
            k = f"{self.prefix}:{key}"
            release_s(keys=[k, f"{k}:fence", journal], args=[holder, token])

        return try_claim, release

    def close(self) -> None:
        keys = list(self.r.scan_iter(f"{self.prefix}*"))
        if keys:
            self.r.delete(*keys)
        self.r.close()


def _worker(barrier: Any, system: Any, i: int, keys: int, seconds: float) -> dict[str, Any]:
    try_claim, release = system.worker(i)
    rng = random.Random(i)
    grants: list[tuple[str, int, int, int]] = []
    lat: list[int] = []
    conflicts = errors = locked = 0
    first_error = None
    barrier.wait()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        key = f"k{rng.randrange(keys)}"
        s = time.perf_counter_ns()
        try:
            token = try_claim(key)
            lat.append(time.perf_counter_ns() - s)
            if token is None:
                conflicts += 1
                continue
            got = time.monotonic_ns()
            rel = time.monotonic_ns()
            release(key, token)
            grants.append((key, token, got, rel))
        except Exception as exc:  # noqa: BLE001 - every error reaching a caller counts
            errors += 1
            if "locked" in str(exc).lower() or "busy" in str(exc).lower():
                locked += 1
            first_error = first_error or f"{type(exc).__name__}: {exc}"
    return {
        "grants": grants,
        "lat": lat,
        "conflicts": conflicts,
        "errors": errors,
        "locked": locked,
        "first_error": first_error,
    }


def _check(grants: list[tuple[str, int, int, int]], fenced: bool) -> tuple[int, int]:
    """(overlapping holds, fencing tokens out of order) over all keys."""
    by_key: dict[str, list[tuple[int, int, int]]] = {}
    for key, token, got, rel in grants:
        by_key.setdefault(key, []).append((got, rel, token))
    overlaps = fence = 0
    for items in by_key.values():
        items.sort()
        for (_, rel_a, tok_a), (got_b, _, tok_b) in zip(items, items[1:], strict=False):
            if got_b < rel_a:
                overlaps += 1
            if fenced and tok_b <= tok_a:
                fence += 1
    return overlaps, fence


def board(ctx: Ctx) -> Scenario:
    procs, keys, secs = ctx.sizes.board_procs, ctx.sizes.board_keys, ctx.sizes.board_seconds
    sc = Scenario(
        "board",
        f"board key claim + release, {procs} processes on {keys} keys",
        unit="grants/s",
    )
    sc.params = {"processes": procs, "keys": keys, "seconds": secs, "ttl_s": TTL}
    for name, make in ((BROKER, _Broker), (FILE_LOCK, _Files), (REDIS_LOCK, _Redis)):
        try:
            system = make(ctx.scratch(f"board-{name}"), procs)
        except Unavailable as exc:
            sc.add(Row(name, status="skipped", reason=str(exc)))
            continue
        except Exception as exc:  # noqa: BLE001
            sc.add(Row(name, status="error", reason=f"{type(exc).__name__}: {exc}"))
            if name == BROKER:
                sc.status, sc.error = "error", f"broker: {type(exc).__name__}: {exc}"
            continue
        try:
            res = run_workers(_worker, [(system, i, keys, secs) for i in range(procs)])
            failed = [r["error"] for r in res if "error" in r]
            if failed:
                raise RuntimeError(failed[0])
            grants = [g for r in res for g in r["grants"]]
            lat = [v / 1000 for r in res for v in r["lat"]]
            overlaps, fence = _check(grants, fenced=name != FILE_LOCK)
            stats: dict[str, Any] = {
                "p50_us": round(pct(lat, 50), 1),
                "p99_us": round(pct(lat, 99), 1),
                "grants": len(grants),
                "conflicts": sum(r["conflicts"] for r in res),
                "errors": sum(r["errors"] for r in res),
                "locked_errors": sum(r["locked"] for r in res),
                "overlaps": overlaps,
                "fence_out_of_order": fence,
                "first_error": next((r["first_error"] for r in res if r["first_error"]), None),
            }
            sc.add(Row(name, len(grants) / secs, "grants/s", how=system.how, stats=stats))
            sc.counts[name] = {k: stats[k] for k in ("grants", "conflicts", "errors", "overlaps")}
            ctx.log(
                f"  board {name}: {len(grants) / secs:,.0f} grants/s, conflicts "
                f"{stats['conflicts']}, errors {stats['errors']}, overlaps {overlaps}"
            )
        except Exception as exc:  # noqa: BLE001
            sc.add(Row(name, status="error", reason=f"{type(exc).__name__}: {exc}"))
            if name == BROKER:
                sc.status, sc.error = "error", f"broker: {type(exc).__name__}: {exc}"
        finally:
            system.close()
    sc.ratio(BROKER, FILE_LOCK)
    sc.ratio(BROKER, REDIS_LOCK)
    b = sc.get(BROKER)
    if b is not None:
        sc.target("board: 0 overlapping holds", float(b.stats["overlaps"]), "==", 0.0)
        sc.target("board: fencing tokens grow", float(b.stats["fence_out_of_order"]), "==", 0.0)
    return sc
