"""Turn a run's results into a markdown report and PNG plots (matplotlib, Agg)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from bench.core import SYSTEM_TITLES

EXTRA_TITLES = {
    "broker_single": "broker, one at a time",
    "raw_same_single": "raw sqlite3 same statements, claim then ack",
    "sqlite_poll": "sqlite3, PRAGMA data_version polling (1 ms)",
    "file_lock": "files: O_EXCL claim files (claim-file layout)",
    "redis_lock": "Redis lock (SET NX PX + Lua release)",
    "broker_msg_send": "broker msg send",
    "broker_inbox_claim": "broker inbox claim",
    "python_floor": "python -c pass (interpreter start)",
    "python_sqlite": "python + sqlite3: one INSERT",
    "sqlite3_cli": "sqlite3 CLI: one INSERT",
    "redis_cli": "redis-cli XADD",
    "file_mailbox_mv": "file mailbox send as a process: mv into inbox/",
    "raw_busy": "raw sqlite3, minimal queue, SQLite busy handler",
    "raw_flock": "raw sqlite3, minimal queue, flock writer lock",
    "raw_flock_nockpt": "raw sqlite3 + flock, no checkpoint in commits",
    "raw_same_flock": "raw sqlite3, the broker's statements, flock writer lock",
}
# Stats shown as columns when a scenario's rows have them: key -> header.
STAT_COLUMNS = [
    ("p50_us", "p50 µs"),
    ("p99_us", "p99 µs"),
    ("p999_us", "p99.9 µs"),
    ("e2e_p50_ms", "e2e p50 ms"),
    ("e2e_p99_ms", "e2e p99 ms"),
    ("e2e_p999_ms", "e2e p99.9 ms"),
    ("e2e_max_ms", "e2e max ms"),
    ("send_p99_ms", "send p99 ms"),
    ("writer_max_wait_ms", "slowest send ms"),
    ("batch_p50_us", "p50 µs / batch"),
    ("batch_p99_us", "p99 µs / batch"),
    ("send_ms", "send ms"),
    ("read_us_per_participant", "read µs / participant"),
    ("cpu_pct_one_core", "% of one core"),
    ("wall_p50_ms", "wall p50 ms"),
    ("wall_p99_ms", "wall p99 ms"),
    ("peak_rss_mb", "peak RSS MB"),
    ("bytes_per_msg", "bytes / message"),
    ("conflicts", "conflicts"),
    ("errors", "errors"),
    ("locked_errors", "locked"),
    ("lost", "lost"),
    ("duplicates", "dup"),
    ("overlaps", "overlaps"),
]


def title_of(system: str) -> str:
    return SYSTEM_TITLES.get(system) or EXTRA_TITLES.get(system) or system


def fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if math.isnan(v):
            return "–"
        a = abs(v)
        if a >= 100:
            return f"{v:,.0f}"
        if a >= 10:
            return f"{v:.1f}"
        if a >= 1:
            return f"{v:.2f}"
        return f"{v:.3g}"
    return str(v)


def fmt_point(p: float | None) -> str:
    if p is None:
        return ""
    return f"{int(p):,}" if float(p).is_integer() else f"{p:g}"


def _ratio_to_broker(sc: dict[str, Any], row: dict[str, Any]) -> str:
    if row["status"] != "ok" or row["system"] == "broker":
        return "1" if row["system"] == "broker" and row["status"] == "ok" else ""
    for b in sc["rows"]:
        if (
            b["system"] == "broker"
            and b["point"] == row["point"]
            and b["status"] == "ok"
            and b["value"] is not None
            and row["value"]
        ):
            return f"{b['value'] / row['value']:.2f}×"
    return ""


def markdown(results: dict[str, Any]) -> str:
    m = results["machine"]
    lines = [
        f"# broker bench{' (quick)' if results.get('quick') else ''}",
        "",
        f"- command: `{results['command']}`",
        f"- when: {results['started_utc']} — {results.get('duration_s', '?')} s",
        f"- machine: {m['host']}, {m['cpus']} CPUs ({m['cpu_model']}), {m['mem_gb']} GB, "
        f"{m['platform']}, scratch on {m.get('work_fs', '?')}; load average at start "
        f"{', '.join(f'{x:.2f}' for x in m['load_avg'])}",
        f"- Python {m['python']}, SQLite {m['sqlite']}, broker synchronous="
        f"{results['settings']['synchronous']}, WAL",
        "- versions: " + ", ".join(f"{k} {v}" for k, v in results["versions"].items() if v),
        "- redis: "
        + (
            f"{results['redis'].get('version')} (appendonly={results['redis'].get('appendonly')}, "
            f"save={results['redis'].get('save')!r})"
            if results["redis"].get("reachable")
            else f"not reachable ({results['redis'].get('reason')}): Redis rows skipped"
        ),
        "",
        "Every figure is measured in this one run on this machine; ratios are broker / system "
        "(for throughput > 1 means the broker is faster; for latencies and costs < 1 means it "
        "is lower).",
    ]
    if results.get("quick"):
        lines += [
            "",
            "**Quick run**: sizes are reduced to seconds of work; figures are noisy and the "
            "targets are indicative only. Run without `--quick` on an idle machine to judge.",
        ]
    lines += [
        "",
        "## Targets (spec §Targets)",
        "",
        "The last column takes the same measure of the broker's own statements run raw, "
        "with no library (`raw_same`; in the swarm under the same writer lock), in this "
        "run, where the target has one: a target "
        'they miss too is out of reach of the library (bench/README.md, "Where the '
        'broker stands").',
        "",
        "| scenario | target | measured | holds | the statements alone |",
        "|---|---|---|---|---|",
    ]
    verdict = {True: "**yes**", False: "**no**", None: "not measured"}
    for name, sc in results["scenarios"].items():
        for t in sc.get("targets", []):
            alone = t.get("statements")
            beside = "" if alone is None else f"{fmt(alone)}: {verdict[t['statements_met']]}"
            lines.append(
                f"| {name} | {t['text']} | {fmt(t['value'])} | {verdict[t['met']]} | {beside} |"
            )
    for name, sc in results["scenarios"].items():
        lines += ["", f"## {name}: {sc['title']}", ""]
        if sc["status"] == "error" and not sc["rows"]:
            lines.append(f"**error**: {sc['error']}")
            continue
        params = {k: v for k, v in sc["params"].items() if k != "statements"}
        if params:
            lines.append("params: " + ", ".join(f"{k}={fmt(v)}" for k, v in params.items()))
            lines.append("")
        lines += _table(sc)
        ratios = [r for r in sc.get("ratios", []) if r["value"] is not None]
        if ratios:
            lines.append("")
            lines.append(
                "ratios: " + "; ".join(f"{r['label']}{_at(r)} = {r['value']:.2f}" for r in ratios)
            )
        st = sc["params"].get("statements")
        if st:
            if "error" in st:
                lines += ["", f"statement check: {st['error']}"]
            else:
                lines += [
                    "",
                    f"statement check ({st.get('traced', 'one operation traced')}): "
                    f"broker and raw_same "
                    f"{'run the same statements' if st['match'] else '**differ**'}: "
                    f"broker `{' ; '.join(st['broker'])}`"
                    + ("" if st["match"] else f" vs raw `{' ; '.join(st['raw_same'])}`"),
                ]
        if sc["status"] == "error":
            lines += ["", f"**error**: {sc['error']}"]
        objects = (sc.get("counts") or {}).get("objects")
        if objects:
            from bench.scenarios.pages import object_table

            lines += ["", "per table and index:", "", *object_table(objects)]
        for note in sc.get("notes", []):
            lines += ["", f"note: {note}"]
    lines += ["", "## How each system is run", ""]
    seen: set[tuple[str, str]] = set()
    for sc in results["scenarios"].values():
        for r in sc["rows"]:
            if r.get("how") and (r["system"], r["how"]) not in seen:
                seen.add((r["system"], r["how"]))
                lines.append(f"- **{title_of(r['system'])}** ({sc['name']}): {r['how']}")
    return "\n".join(lines) + "\n"


def _at(r: dict[str, Any]) -> str:
    if r.get("num_point") is None and r.get("den_point") is None:
        return ""
    if r["num_point"] == r["den_point"]:
        return f" @{fmt_point(r['num_point'])}"
    return f" ({fmt_point(r['num_point'])} vs {fmt_point(r['den_point'])})"


def _table(sc: dict[str, Any]) -> list[str]:
    rows = sc["rows"]
    has_point = any(r["point"] is not None for r in rows)
    stats = [
        (k, h)
        for k, h in STAT_COLUMNS
        if h != sc["unit"] and any(k in (r.get("stats") or {}) for r in rows)
    ]
    head = ["system"]
    if has_point:
        head.append(sc.get("x_label") or "point")
    head += [sc["unit"] or "value", "broker / system"] + [h for _, h in stats] + ["status"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [title_of(r["system"])]
        if has_point:
            cells.append(fmt_point(r["point"]))
        cells += [fmt(r["value"]), _ratio_to_broker(sc, r)]
        cells += [fmt((r.get("stats") or {}).get(k)) for k, _ in stats]
        cells.append(r["status"] if r["status"] == "ok" else f"{r['status']}: {r['reason']}")
        out.append("| " + " | ".join(cells) + " |")
    return out


# --- plots ------------------------------------------------------------------------------
def plots(results: dict[str, Any], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written: list[Path] = []
    for name, sc in results["scenarios"].items():
        ok = [r for r in sc["rows"] if r["status"] == "ok" and r["value"]]
        if not ok:
            continue
        fig, ax = plt.subplots(figsize=(7, 3.6), dpi=100)
        if any(r["point"] is not None for r in ok):
            for system in dict.fromkeys(r["system"] for r in ok):
                pts = sorted((r["point"], r["value"]) for r in ok if r["system"] == system)
                ax.plot(
                    [p for p, _ in pts],
                    [v for _, v in pts],
                    marker="o",
                    label=title_of(system),
                    linewidth=2.5 if system == "broker" else 1.2,
                )
            xs = sorted({r["point"] for r in ok})
            if min(xs) > 0 and max(xs) / min(xs) >= 8:
                ax.set_xscale("log", base=2 if max(xs) <= 64 else 10)
                ax.set_xticks(xs)
                ax.set_xticklabels([fmt_point(x) for x in xs], fontsize=7)
            ax.set_xlabel(sc.get("x_label") or "point")
            ax.legend(fontsize=7)
        else:
            labels = [title_of(r["system"]) for r in ok]
            values = [r["value"] for r in ok]
            colors = ["#c0392b" if r["system"] == "broker" else "#7f8c8d" for r in ok]
            ax.barh(labels[::-1], values[::-1], color=colors[::-1])
            if max(values) / max(min(values), 1e-12) >= 30:
                ax.set_xscale("log")
            ax.tick_params(axis="y", labelsize=7)
        ax.set_title(f"{name}: {sc['title']}", fontsize=9)
        if any(r["point"] is not None for r in ok):
            ax.set_ylabel(sc["unit"])
        else:
            ax.set_xlabel(sc["unit"])
        ax.grid(True, alpha=0.3)
        fig.tight_layout()
        path = out / f"{name}.png"
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    swarm = results["scenarios"].get("swarm")
    if swarm is not None:
        lat = _swarm_latency_plot(swarm, out, plt)
        if lat is not None:
            written.append(lat)
    summary = _targets_plot(results, out, plt)
    if summary is not None:
        written.append(summary)
    return written


def _swarm_latency_plot(sc: dict[str, Any], out: Path, plt: Any) -> Path | None:
    """End-to-end latency percentiles by P, one panel per percentile, a line per system."""
    ok = [r for r in sc["rows"] if r["status"] == "ok" and r["stats"].get("e2e_p50_ms")]
    if not ok:
        return None
    keys = [("e2e_p50_ms", "p50"), ("e2e_p99_ms", "p99"), ("e2e_p999_ms", "p99.9")]
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.6), dpi=100, sharey=True)
    xs = sorted({r["point"] for r in ok})
    for ax, (key, label) in zip(axes, keys, strict=True):
        for system in dict.fromkeys(r["system"] for r in ok):
            pts = sorted((r["point"], r["stats"][key]) for r in ok if r["system"] == system)
            ax.plot(
                [p for p, _ in pts],
                [v for _, v in pts],
                marker="o",
                label=title_of(system),
                linewidth=2.5 if system == "broker" else 1.2,
            )
        ax.set_yscale("log")
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs)
        ax.set_xticklabels([fmt_point(x) for x in xs], fontsize=7)
        ax.set_xlabel("agent processes")
        ax.set_title(f"end-to-end {label}", fontsize=9)
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("ms (log)")
    axes[0].legend(fontsize=6)
    fig.suptitle("swarm: commit -> receiver's claim, by P", fontsize=9)
    fig.tight_layout()
    path = out / "swarm_latency.png"
    fig.savefig(path)
    plt.close(fig)
    return path


def _targets_plot(results: dict[str, Any], out: Path, plt: Any) -> Path | None:
    """Every ratio/bound target as 'how far from holding': >= 1 means it holds."""
    items: list[tuple[str, float, bool]] = []
    for name, sc in results["scenarios"].items():
        for t in sc.get("targets", []):
            v, thr = t["value"], t["threshold"]
            if v is None or t["op"] == "==" or not thr:
                continue
            score = v / thr if t["op"] == ">=" else (thr / v if v else float("inf"))
            items.append((f"{name}: {t['text']}", min(score, 100.0), bool(t["met"])))
    if not items:
        return None
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(items) + 1.2), dpi=100)
    labels = [i[0] for i in items][::-1]
    scores = [i[1] for i in items][::-1]
    colors = ["#27ae60" if i[2] else "#c0392b" for i in items][::-1]
    ax.barh(labels, scores, color=colors)
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_xscale("log")
    ax.set_xlabel("measured / target (>= 1: holds)")
    ax.tick_params(axis="y", labelsize=6)
    ax.set_title("spec §Targets in this run", fontsize=9)
    fig.tight_layout()
    path = out / "targets.png"
    fig.savefig(path)
    plt.close(fig)
    return path
