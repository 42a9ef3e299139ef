"""Results files, plots and docs/benchmarks.md from what the benchmarks measured."""

from __future__ import annotations

import csv
import json
import math
import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - the backend must be chosen first
import psutil  # noqa: E402

from tools.devcluster import versions  # noqa: E402
from tests.bench import (  # noqa: E402
    backup, builds, footprint, load, operator_cost, recovery, rolls, scalein, scalein_real, scaleout, upgrade)
from tests.bench.scalein import REPORTED as STRATEGIES, Run  # noqa: E402
from tests.bench.stats import Sample, percentile  # noqa: E402
from raftset.sidecar.pure import promotion
from raftset.operator.pure.settings import OperatorSettings  # noqa: E402

TABLES: dict[str, tuple[str, ...]] = {
    "scale_in": scalein.COLUMNS,
    "scale_out": scaleout.COLUMNS,
    "operator": operator_cost.COLUMNS,
    "operator_failover": operator_cost.FAILOVER_COLUMNS,
    "footprint": footprint.COLUMNS,
    "recovery": recovery.COLUMNS,
    "backup": backup.COLUMNS,
    "engines": builds.COLUMNS,
    "upgrade": upgrade.COLUMNS,
    "rolls": rolls.COLUMNS,
    "replace": rolls.REPLACE_COLUMNS,
}
SUMMARY_COLUMNS = ("one_way_ms", "strategy", "from_members", "to_members", "repetitions", "steady_writes_per_s",
                   "steady_write_p99_ms", "steady_write_p999_ms", "failed_writes_total", "failed_writes_max",
                   "failed_write_requests_total", "failed_write_requests_max", "longest_stall_median_s",
                   "longest_stall_max_s", "write_p50_ms", "write_p99_ms", "write_p999_ms", "failed_reads_total",
                   "leader_changes_total", "leader_changes_max", "scale_in_median_s", "load_1m_median")
# Measured only by `make bench --only real` (root, the real-node lab): every other run keeps the last rows.
REAL = {"scale_in_real": scalein.COLUMNS}
SUMMARIES = {"scale_in_summary": SUMMARY_COLUMNS, "footprint_summary": footprint.SUMMARY_COLUMNS,
             "engines_summary": ("engine", *SUMMARY_COLUMNS)}
LABELS = {
    "a-builtin-no-handoff": "(a) builtin, no hand-off",
    "b-builtin-sidecar-handoff": "(b) builtin + sidecar",
    "c-advanced-planner": "(c) Advanced + planner",
    "c-operator-advanced": "(c) through the operator",
    "r-builtin-sigkill": "(r) builtin, SIGKILL",
}
COLORS = {"a-builtin-no-handoff": "#8c8c8c", "b-builtin-sidecar-handoff": "#1f77b4",
          "c-advanced-planner": "#2ca02c", "c-operator-advanced": "#17becf", "r-builtin-sigkill": "#d62728"}


def _run(cmd: Sequence[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    root = Path(__file__).resolve().parents[2]
    etcd = _run(["etcd", "--version"]).splitlines()
    return {
        "cpu_model": model or platform.processor(),
        "logical_cpus": psutil.cpu_count(),
        "physical_cpus": psutil.cpu_count(logical=False),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "os": f"{platform.system()} {platform.release()}",
        "python": sys.version.split()[0],
        "etcd": etcd[0].split(":")[-1].strip() if etcd else "",
        "kubernetes": versions.KUBERNETES,
        "openkruise": versions.KRUISE,
        "kwok": versions.KWOK,
        "raftset_commit": _run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"]),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def _median(rs: Sequence[Mapping[str, Any]], column: str) -> float:
    return round(statistics.median(r[column] for r in rs), 2)


def summarise(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One line per latency, size and strategy over the repetitions (latencies are medians)."""
    out = []
    keys = sorted({(r["one_way_ms"], r["from_members"], r["to_members"]) for r in rows})
    for one_way_ms, start, target in keys:
        for strategy in STRATEGIES:
            rs = [r for r in rows if r["strategy"] == strategy and r["from_members"] == start
                  and r["one_way_ms"] == one_way_ms]
            if not rs:
                continue
            stalls = [r["longest_stall_s"] for r in rs]
            out.append({
                "one_way_ms": one_way_ms, "strategy": strategy, "from_members": start, "to_members": target,
                "repetitions": len(rs), "steady_writes_per_s": _median(rs, "steady_writes_per_s"),
                "steady_write_p99_ms": _median(rs, "steady_write_p99_ms"),
                "steady_write_p999_ms": _median(rs, "steady_write_p999_ms"),
                "failed_writes_total": sum(r["failed_writes"] for r in rs),
                "failed_writes_max": max(r["failed_writes"] for r in rs),
                # Rows of runs before writes were retried lack the column: each request was a write then.
                "failed_write_requests_total": sum(r.get("failed_write_requests", r["failed_writes"]) for r in rs),
                "failed_write_requests_max": max(r.get("failed_write_requests", r["failed_writes"]) for r in rs),
                "longest_stall_median_s": round(statistics.median(stalls), 3),
                "longest_stall_max_s": round(max(stalls), 3),
                "write_p50_ms": round(statistics.median(r["write_p50_ms"] for r in rs), 2),
                "write_p99_ms": round(statistics.median(r["write_p99_ms"] for r in rs), 2),
                "write_p999_ms": _median(rs, "write_p999_ms"),
                "failed_reads_total": sum(r["failed_reads"] for r in rs),
                "leader_changes_total": sum(r["leader_changes"] for r in rs),
                "leader_changes_max": max(r["leader_changes"] for r in rs),
                "scale_in_median_s": round(statistics.median(r["scale_in_s"] for r in rs), 3),
                "load_1m_median": _median(rs, "load_1m"),
            })
    return out


def summarise_builds(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """`summarise` for each engine build, in the order the builds ran."""
    return [{"engine": label, **line} for label in dict.fromkeys(r["engine"] for r in rows)
            for line in summarise([r for r in rows if r["engine"] == label])]


# The parameters (tests/bench/__main__.py Params) each section was measured with: a kept section
# keeps its own, so the page describes what was measured (baseline_s: the scale-in's, shared).
PARAMS_OF = {
    "scale_in": ("scale_in_sizes", "latencies_ms", "strategies", "repetitions", "baseline_s"),
    "scale_out": ("data_mib", "join_settle_s"),
    "operator": ("cluster_counts", "spec_changes", "rest_s", "quiet_s", "churn_per_s", "churn_s", "operator_baseline"),
    "operator_failover": ("operator_failover",),
    "footprint": ("footprint_settle_s", "idle_s"),
    "recovery": ("recovery_repetitions", "recovery_sizes"),
    "backup": ("backup_mib", "backup_steady_s"),
    "engines": ("engine_builds", "engine_strategies", "engine_repetitions"),
    "upgrade": ("upgrade_path",),
    "rolls": ("roll_repetitions",),
    "replace": ("replace_targets",),
}


def keep_earlier(results: Mapping[str, Any], earlier: Mapping[str, Any], kept: Sequence[str]) -> dict[str, Any]:
    """`results` with the `kept` sections taken from an earlier run, each stamped with when it was
    measured and with the parameters it was measured with."""
    merged = dict(results)
    measured = dict(results["measured"])
    params = dict(results.get("params") or {})
    for section in kept:
        merged[section] = earlier.get(section, [])  # a section newer than the earlier run: no rows
        measured[section] = _earlier_stamp(earlier, section)
        params.update({k: v for k, v in (earlier.get("params") or {}).items() if k in PARAMS_OF.get(section, ())})
    merged["measured"] = measured
    if params:
        merged["params"] = params
    return merged


def _earlier_stamp(earlier: Mapping[str, Any], section: str) -> dict[str, Any]:
    stamp = {"finished": earlier["finished"], "raftset_commit": earlier["machine"]["raftset_commit"],
             "etcd": earlier["machine"].get("etcd", ""),
             "smoke": earlier["smoke"], "load_average_at_start": earlier["machine"]["load_average_at_start"]}
    return dict(earlier.get("measured", {}).get(section, stamp))


def keep_other_strategies(results: Mapping[str, Any], earlier: Mapping[str, Any],
                          strategies: Sequence[str]) -> dict[str, Any]:
    """`--only scale-in --strategies ...`: the scale-in rows of the strategies not measured now
    are the earlier run's, and the section's stamp says which rows are from when."""
    merged = dict(results)
    old = [r for r in earlier.get("scale_in", []) if r["strategy"] not in strategies]
    if not old:
        return merged
    merged["scale_in"] = old + list(results["scale_in"])
    stamp = {**results["measured"]["scale_in"], "strategies": [s for s in STRATEGIES if s in strategies],
             "others": {k: v for k, v in _earlier_stamp(earlier, "scale_in").items() if k not in ("others", "strategies")}}
    merged["measured"] = {**results["measured"], "scale_in": stamp}
    if "params" in results:
        merged["params"] = {**results["params"], "strategies": [
            s for s in STRATEGIES if s in {r["strategy"] for r in merged["scale_in"]}]}
    return merged


def write_results(out: Path, results: Mapping[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    for name, columns in {**TABLES, **SUMMARIES, **REAL}.items():
        with open(out / f"{name}.csv", "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=columns)
            writer.writeheader()
            for row in results.get(name) or []:  # a section newer than the results: no rows
                writer.writerow({c: row.get(c, "") for c in columns})  # rows of older runs lack new columns


# --- plots ---

def _save(fig: Any, path: Path, title: str | None = None, dpi: int = 110) -> None:
    """Title, lay out, write and free a figure: every plot ends so."""
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


def _present(strategies: Sequence[str]) -> list[str]:
    return [s for s in STRATEGIES if s in set(strategies)]


def plot_stalls(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    """Per latency (one row of panels each): the worst stall and the failed writes per strategy and size."""
    latencies = sorted({r["one_way_ms"] for r in rows})
    fig, grid = plt.subplots(len(latencies), 2, figsize=(11, 3.8 * len(latencies)), squeeze=False)
    for latency, axes in zip(latencies, grid):
        _plot_stalls_at([r for r in rows if r["one_way_ms"] == latency], axes, latency)
    _save(fig, path, "Scale-in with the leader on the highest ordinal, under load")


def _plot_stalls_at(rows: Sequence[Mapping[str, Any]], axes: Any, latency: int) -> None:
    sizes = sorted({(r["from_members"], r["to_members"]) for r in rows})
    strategies = _present([r["strategy"] for r in rows])
    width = 0.8 / len(strategies)
    for axis, metric, title in ((axes[0], "longest_stall_s", "Longest write stall (s, log scale)"),
                                (axes[1], "failed_writes", "Failed writes")):
        for i, strategy in enumerate(strategies):
            for j, (start, _target) in enumerate(sizes):
                values = [r[metric] for r in rows if r["strategy"] == strategy and r["from_members"] == start]
                if not values:
                    continue
                x = j + (i - (len(strategies) - 1) / 2) * width
                worst = max(values)
                axis.bar(x, worst, width * 0.9, color=COLORS[strategy], label=LABELS[strategy] if j == 0 else None)
                axis.scatter([x] * len(values), values, s=12, color="black", zorder=3)
                axis.annotate(f"{worst:.2f}" if metric == "longest_stall_s" else str(worst), (x, worst),
                              ha="center", va="bottom", fontsize=8, xytext=(0, 2), textcoords="offset points")
        axis.set_xticks(range(len(sizes)), [f"{a}\u2192{b} members" for a, b in sizes])
        axis.set_title(f"{latency} ms one-way: {title}\nbar = worst repetition, dots = each", fontsize=10)
        axis.grid(axis="y", alpha=0.3)
    axes[0].set_yscale("log")
    axes[0].set_ylim(0.005, 10)
    top = max([r["failed_writes"] for r in rows] + [1])
    axes[1].set_ylim(0, top * 1.25 + 0.5)
    axes[1].yaxis.get_major_locator().set_params(integer=True)
    axes[0].legend(fontsize=8, loc="upper left")


BIN_S = 0.25


def p999_over_time(samples: Sequence[Sample], bin_s: float = BIN_S) -> tuple[list[float], list[float]]:
    """The p99.9 latency (ms) of the puts started in each `bin_s` bin that acknowledged any."""
    bins: dict[int, list[float]] = {}
    for s in samples:
        if s.ok:
            bins.setdefault(math.floor(s.start / bin_s), []).append((s.end - s.start) * 1000)
    keys = sorted(bins)
    return [k * bin_s for k in keys], [percentile(bins[k], 99.9) for k in keys]


def plot_timelines(runs: Sequence[Run], path: Path) -> None:
    """One row of panels per latency and size: every put of the first repetition around the scale-in."""
    firsts = [r for r in runs if r.row["repetition"] == 0]
    sizes = sorted({(r.row["one_way_ms"], r.row["from_members"], r.row["to_members"]) for r in firsts})
    strategies = _present([r.row["strategy"] for r in firsts])
    fig, axes = plt.subplots(len(sizes), len(strategies), figsize=(4 * len(strategies), 2.9 * len(sizes)),
                             sharey=True, squeeze=False)
    for i, (latency, start, _target) in enumerate(sizes):
        for j, strategy in enumerate(strategies):
            axis = axes[i][j]
            run = next((r for r in firsts if r.row["strategy"] == strategy and r.row["from_members"] == start
                        and r.row["one_way_ms"] == latency), None)
            if run is None:
                axis.set_visible(False)
                continue
            samples = scalein.timeline(run)
            ok = [s for s in samples if s.ok]
            bad = [s for s in samples if not s.ok]
            refused = scalein.timeline(run, samples=run.observed.failed_write_requests)
            axis.axvspan(0, run.row["scale_in_s"], color="#ffe9a8", label="scale-in in progress")
            axis.scatter([s.start for s in ok], [max(0.1, (s.end - s.start) * 1000) for s in ok],
                         s=3, color=COLORS[strategy], label="write ok")
            axis.scatter([s.start for s in refused], [max(0.1, (s.end - s.start) * 1000) for s in refused],
                         s=18, marker="+", color="orange", label="request failed (write retried)")
            axis.scatter([s.start for s in bad], [max(0.1, (s.end - s.start) * 1000) for s in bad],
                         s=30, marker="x", color="red", label="write failed")
            xs, tail = p999_over_time(samples)
            axis.step(xs, tail, where="post", color="black", linewidth=1, label=f"p99.9 per {BIN_S * 1000:.0f} ms")
            axis.set_yscale("log")
            axis.set_ylim(0.3, 3000)
            axis.set_title(f"{LABELS[strategy]}, {start}\u2192{run.row['to_members']}, {latency} ms\n"
                           f"stall {run.row['longest_stall_s']:.2f}s, failed {run.row['failed_writes']} "
                           f"({run.row.get('failed_write_requests', '?')} req), "
                           f"p99.9 {run.row['write_p999_ms']:.0f} ms", fontsize=9)
            axis.grid(alpha=0.3)
            if i == len(sizes) - 1:
                axis.set_xlabel("seconds since the scale-in began")
            if j == 0:
                axis.set_ylabel("put latency (ms)")
    axes[0][0].legend(fontsize=7, loc="upper left")
    _save(fig, path, "Every put around the scale-in (first repetition)", dpi=100)


def plot_scale_out(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    """One panel per one-way latency: both joins at each data size."""
    latencies = sorted({_one_way(r) for r in rows})
    fig, axes = plt.subplots(1, len(latencies), figsize=(6 * len(latencies), 4), sharey=True, squeeze=False)
    top = max([r["sidecar_join_s"] for r in rows] + [r["baseline_join_s"] for r in rows] + [0.1])
    for axis, latency in zip(axes[0], latencies):
        _plot_scale_out_at(sorted((r for r in rows if _one_way(r) == latency), key=lambda r: r["data_mib"]), axis)
        axis.set_ylim(0, top * 1.45)
        axis.set_title(f"{latency} ms one-way", fontsize=10)
    axes[0][0].set_ylabel("seconds")
    axes[0][0].legend(fontsize=8, loc="upper left")
    _save(fig, path, "Scale-out: a fourth member joins, from an empty volume")


def _plot_scale_out_at(rows: Sequence[Mapping[str, Any]], axis: Any) -> None:
    xs = list(range(len(rows)))
    bars = (
        (-0.2, "sidecar_join_s", "sidecar: to voting and caught up", COLORS["b-builtin-sidecar-handoff"]),
        (-0.2, "sidecar_store_started_s", "sidecar: until etcd starts (learner added)", "#9ecae1"),
        (0.2, "baseline_join_s", "etcdctl member add + etcd by hand", "#8c8c8c"),
    )
    for offset, key, label, color in bars:
        values = [r[key] for r in rows]
        axis.bar([x + offset for x in xs], values, 0.38, label=label, color=color)
        if key != "sidecar_store_started_s":
            for x, v in zip(xs, values):
                axis.annotate(f"{v:.2f}s", (x + offset, v), ha="center", va="bottom", fontsize=8,
                              xytext=(0, 2), textcoords="offset points")
    axis.set_xticks(xs, [f"{r['data_mib']} MiB\n(db {r['db_size_mib']} MiB)" for r in rows])
    axis.grid(axis="y", alpha=0.3)


def _one_way(row: Mapping[str, Any]) -> int:
    """The row's one-way peer latency; rows of runs from before these sections had one were at 0 ms."""
    return int(row.get("one_way_ms") or 0)


def _operator_versions(rows: Sequence[Mapping[str, Any]]) -> str:
    """One line per size measured on both versions: the baseline's figure, then this checkout's."""
    by = {(r.get("version", operator_cost.VERSION), r["clusters"]): r for r in rows}
    lines = []
    for (version, count), mine in sorted(by.items(), key=lambda item: item[0][1]):
        base = by.get((operator_cost.BASELINE, count))
        if version != operator_cost.VERSION or base is None:
            continue
        pairs = [(f"{k}", base.get(k), mine.get(k)) for k in
                 ("cpu_rest_pct", "rss_mib", "spec_to_patch_p95_ms", "lease_to_status_p95_ms", "cpu_churn_pct",
                  "churn_p95_ms")]
        lines.append(f"- {count} clusters, baseline \u2192 this: "
                     + ", ".join(f"`{k}` {a} \u2192 {b}" for k, a, b in pairs if a is not None or b is not None))
    return "\n".join(lines)


def _failover_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The failover rows, or that there are none yet (results from before the failover was measured)."""
    if not rows:
        return "*Not measured yet: the next `make bench` (or `--only operator`) writes these rows.*"
    return _table(rows, operator_cost.FAILOVER_COLUMNS)


def plot_operator(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    """CPU and RSS at rest and the spec-change latency against the number of clusters, a line per version."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
    twin = left.twinx()
    for version, style in zip(dict.fromkeys(r.get("version", operator_cost.VERSION) for r in rows), ("-", ":")):
        mine = [r for r in rows if r.get("version", operator_cost.VERSION) == version]
        clusters = [r["clusters"] for r in mine]
        left.plot(clusters, [r["rss_mib"] for r in mine], "o" + style, color="#1f77b4", label=f"RSS, {version}")
        twin.plot(clusters, [r["cpu_rest_pct"] for r in mine], "s" + style, color="#d62728",
                  label=f"CPU at rest, {version}")
        right.plot(clusters, [r["spec_to_patch_p50_ms"] for r in mine], "o" + style, label=f"p50, {version}")
        right.plot(clusters, [r["spec_to_patch_p95_ms"] for r in mine], "s" + style, label=f"p95, {version}")
    left.set_xlabel("clusters")
    left.set_ylabel("RSS (MiB)", color="#1f77b4")
    twin.set_ylabel("CPU at rest (% of one core)", color="#d62728")
    left.set_ylim(bottom=0)
    twin.set_ylim(bottom=0)
    left.set_title("Operator process at rest")
    left.grid(alpha=0.3)
    handles = left.get_legend_handles_labels()[0] + twin.get_legend_handles_labels()[0]
    left.legend(handles=handles, fontsize=7, loc="upper left")
    right.set_xlabel("clusters")
    right.set_ylabel("ms")
    right.set_ylim(bottom=0)
    right.set_title("Spec change \u2192 StatefulSet patched")
    right.legend(fontsize=8)
    right.grid(alpha=0.3)
    _save(fig, path)


PLOTS = ("scale-in-stalls.png", "scale-in-timeline.png", "scale-out.png", "operator.png")


def plots(out: Path, results: Mapping[str, Any], runs: Sequence[Run]) -> None:
    """Each plot whose benchmark produced rows (a failed one leaves its plot out)."""
    if results["scale_in"]:
        plot_stalls(results["scale_in"], out / PLOTS[0])
    if runs:  # the timelines need this run's samples: a run that kept the scale-in keeps its plot
        plot_timelines(runs, out / PLOTS[1])
    if results["scale_out"]:
        plot_scale_out(results["scale_out"], out / PLOTS[2])
    if results["operator"]:
        plot_operator(results["operator"], out / PLOTS[3])


# --- the page ---

def _table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], labels: Mapping[str, str] | None = None) -> str:
    def cell(column: str, value: Any) -> str:
        text = (labels or {}).get(value, str(value)) if column == "strategy" else str(value)
        return text.replace("|", "\\|").replace("\n", " ")  # error messages stay in their cell
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(c, r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def markdown(results: Mapping[str, Any], doc: Path, out: Path) -> str:
    m = results["machine"]
    rel = os.path.relpath(out, doc.parent)
    img = {name: f"{rel}/{name}" for name in PLOTS}
    summary = results["scale_in_summary"]
    p = results["params"]
    # A section kept from an earlier run (`--only`) was measured with that run's parameters: read them from its rows.
    reps = max((r["repetitions"] for r in summary), default=p["repetitions"])
    latencies = sorted({r["one_way_ms"] for r in summary}) or p.get("latencies_ms", [0])
    recovery_reps = max((r["repetition"] + 1 for r in results.get("recovery") or []), default=0)
    return f"""# Benchmarks

Generated by `make bench` (`python -m tests.bench{' --smoke' if results['smoke'] else ''}`); the last
run finished {results['finished']} ({results['duration_s']:.0f} s). Raw results:
[`results.json`]({rel}/results.json) and one CSV per table in [`{rel}/`]({rel}/).
These are single-machine numbers from a shared 2-core box: compare the strategies with
each other (they ran in one run: (a), (b), (c) and (r) interleaved, (c) through the operator
after them on the full control plane), not with other machines.
Each section says when it was measured: a run with `--only scale-in` re-measures that
section and keeps the others from the run before.
{_problems(results['errors'])}
## Headline

Scale-in with the leader on the ordinal the builtin StatefulSet deletes first, under
{load.WRITERS} concurrent writers (1 KiB values) and {load.READERS} linearizable readers, with every
Raft message between two members delayed by the one-way latency in the column head
(Toxiproxy). Per cell: failed writes (failed requests) / worst stall / write p99 during the
scale-in (steady p99 just before it) / write p99.9 during the scale-in / leader changes per
run. Failed writes are writes no endpoint took; failed requests count every request that
failed, also those of a write that then succeeded on the next endpoint (see
[why (a) and (b) fail requests](#why-a-and-b-fail-requests-between-zones)). Both are totals
over {reps} repetition(s); the stall is the worst repetition's, the latencies are
medians, the leader changes the most in any one repetition.
{_stamp(results, "scale_in")}
{_headline(summary) if summary else "(the scale-in benchmark produced no rows)"}

The same scale-in of (b) and (c) on real nodes beside the loopback rows at 0 ms (see
[On real nodes](#scale-in-on-real-nodes)):
{_stamp(results, "scale_in_real")}
{_real_headline(results)}

The same scale-in on every engine build, 3\u21922 at 0 ms (see [Every engine build](#scale-in-on-every-engine-build)):
{_stamp(results, "engines")}
{_builds_headline(results.get("engines_summary") or [])}

Recovery time of the bad days, a writer running, every Raft message delayed by the one-way latency
in the column head (see [Recovery time](#recovery-time-rto)). Per cell: seconds to writable / to
full size (the median, the worst in brackets when repeated):
{_stamp(results, "recovery")}
{_recovery_headline(results.get("recovery") or [])}

Scale-out, a fourth member joining from an empty volume at each data size (see [Scale-out](#scale-out)).
Per cell: the sidecar's join / `etcdctl member add` and etcd by hand, and the sidecar's time as a
multiple of the by-hand one; † where that join's new member waited out etcd's 7 s publish timeout
(etcd's, at random in either join: see [Scale-out](#scale-out)):
{_stamp(results, "scale_out")}
{_scale_out_headline(results.get("scale_out") or [])}

## Machine

| | |
|---|---|
| CPU | {m['cpu_model']} ({m['logical_cpus']} logical, {m['physical_cpus']} physical) |
| Memory | {m['memory_gib']} GiB |
| OS / Python | {m['os']} / {m['python']} |
| etcd (last run) | {m['etcd']} |
| Control plane | Kubernetes {m['kubernetes']}, OpenKruise {m['openkruise']}, kwok {m['kwok']} |
| raftset commit | {m['raftset_commit']} |
| Load average (1/5/15 min) when the last run began | {' / '.join(map(str, m['load_average_at_start']))} |

The box is shared with other work: `load_1m` in every scale-in row is the 1-minute load
average when that scale-in began.

## Scale-in availability
{_stamp(results, "scale_in")}
Real etcd {m['etcd']} members and the real sidecars on loopback, a real kube-apiserver for
the workload, pod and Lease objects; (a), (b), (c) and (r) drive each step themselves, while
(c) through the operator runs the whole product on the full local control plane (below). Every
member's peer port sits behind a real
[Toxiproxy](https://github.com/Shopify/toxiproxy) proxy (`tests/harness/toxiproxy.py`), in
every run: the member listens for peers on :2382 and advertises the proxy on :2380. A
latency toxic on both directions of every proxy delays each Raft message by `one_way_ms`
(jitter {scalein.JITTER:.0%} of it): 0 ms is the proxy alone, 2 ms neighbouring zones, 20 ms far
zones. Latencies {', '.join(str(x) for x in latencies)} ms run in one invocation.

Before each scale-in the leader is moved (MoveLeader) to the highest ordinal, the one the
builtin StatefulSet deletes first. The load: {load.WRITERS} writers put 1 KiB values, each one put
at a time as fast as the members answer (1 s timeout per request), and {load.READERS} readers do
linearizable gets; all start on ordinal 0, which every strategy keeps. A request that fails
is asked again at once of the next endpoint, each endpoint at most once: a write fails only
when no endpoint took it (`failed_writes`), and every failed request is counted too
(`failed_write_requests`); a retried write's latency runs from its first request to its
answer. All run on one Python event loop, so the rate is what this
machine sustains for them, recorded as `steady_writes_per_s`. **Steady** is the
{p['baseline_s']:.0f} s just before the scale-in of the same run (`steady_*` columns); the
scale-in window runs from its first step until {scalein.TAIL_S:.0f} s after the last member is
gone. The longest stall is the longest time in the window in which no writer got a put
acknowledged. Leaders are polled from a surviving member every 50 ms. etcd runs with its
default raft timings (heartbeat 100 ms, election 1000 ms). {reps} repetition(s) per
latency, strategy and size, strategies interleaved ((c) through the operator runs after the
others, on its own plane).

- **(a) builtin, no hand-off**: a plain etcd StatefulSet (the sidecars are killed before
  the window). Each victim gets SIGTERM, SIGKILL after {scalein.KUBELET_GRACE_S:.0f} s; then the
  bench itself removes its member with MemberRemove through a survivor as soon as the
  pod is gone (an administrator's best case). Note that etcd hands leadership to a
  peer by itself when it stops on SIGTERM, so (a) is not a leader crash.
- **(b) builtin + sidecar**: replicas lowered on the StatefulSet, then each victim is
  terminated the kubelet way: preStop `/leave` (the sidecar moves leadership to a kept
  member, then removes its own member), SIGTERM to etcd, then to the sidecar.
- **(c) Advanced + planner**: the bench itself calls the operator's `planner.plan()`, which
  reads the heartbeat Leases the sidecars wrote and picks a follower; the bench writes
  `replicas`/`reserveOrdinals` to a Kruise StatefulSet object (no Kruise controller runs on
  this bare kube-apiserver) as the operator would, and terminates that pod the same way.
  The leader stays where it is. This isolates the planner's choice from the operator's and
  Kruise's reaction times.
- **(c) through the operator** (`tests/bench/scalein_operator.py`): the product end to end.
  The full local control plane (kube-apiserver, kube-controller-manager, kwok, the real
  OpenKruise controller), the real operator process with its default intervals, and the pod
  runner playing kubelet (real etcd members, real sidecars, preStop `/leave` on deletion,
  each member's peer port behind its Toxiproxy proxy as above). An `EtcdCluster` with
  `workloadKind: AdvancedStatefulSet` and the product's defaults (etcd's raft timings, the
  sidecar's and the operator's intervals); once it is healthy the leader is moved to the
  highest ordinal, and the bench then only patches the cluster's `spec.replicas`. The
  operator plans from the heartbeats and writes `replicas`/`reserveOrdinals`, Kruise deletes
  the chosen follower's pod, the runner terminates it the kubelet way. The window ends once
  the operator's status shows the target size (no step in progress) and Raft has exactly
  those voters, so `scale_in_s` includes the operator's and Kruise's reaction times (the
  operator reconciles every {OperatorSettings().reconcile_interval:.0f} s) and the status's catch-up, and
  the window's percentiles are over that longer window.
- **(r) builtin, SIGKILL** (reference): as (a), but the store is SIGKILLed: an expired grace
  period, an OOM kill or a lost node, where nobody hands leadership off. Its stall is
  counted in the writer's 1 s timeouts: puts hang until the survivors notice the lost
  leader and elect another (etcd's election timeout is 1 s); a write whose requests timed
  out on both survivors and was refused by the killed member is a failed write.

### Why (a) and (b) fail requests between zones

The etcd tier's scale-in of the leader across 20 ms zones
(`tests/etcd/test_zone_latency.py`) sees 0 failed writes and one election, while earlier
runs of this page showed (a) and (b) with up to 8 failed writes per run at 2 and 20 ms
(10 to 14 over two repetitions) and "2" leader changes.
Diagnostic runs (2026-11-23, one repetition each, the puts that failed with their start
and end relative to the scale-in's start) show what they are:

| run | failed puts | started at | answered | leader seen changing at |
|---|---|---|---|---|
| (b) 3→2, 20 ms | 7, all "timed out" | 0.071–0.127 s | 1.073–1.129 s | 0.191 s |
| (a) 3→2, 20 ms | 7, all "timed out" | 0.108–0.126 s | 1.110–1.127 s | 0.184–0.235 s |
| (b) 5→3, 20 ms | 6, all "timed out" | 0.131–0.145 s | 1.139–1.147 s | 0.183–0.236 s |
| (b) 3→2, 2 ms | 4, all "timed out" | 0.067–0.072 s | 1.068–1.073 s | 0.123 s |

- **One leadership transfer, not two.** Every run of (b) saw exactly one leader change;
  the headline used to add the repetitions up (2 = 1 + 1), and now gives the most in one
  run. (a) 5→3 sometimes sees two: etcd's own transfer on SIGTERM may hand leadership to
  ordinal 3, the next to go, which hands it on again; the sidecar picks a kept member
  (`raftset.sidecar.pure.leave.transfer_target`). The bench compares the leader ID
  that `Status` reports, not the term, so the lag of `Status`'s `raftTerm` (the term of
  the last applied entry; the etcd tier waits for a settled term,
  `tests/harness/scenarios.py settled_term`) cannot count a change twice here.
- **The puts in flight during the transfer are dropped.** All writers talk to ordinal 0,
  a follower, which forwards each proposal to the leader. While a transfer is under way
  the leader drops proposals (Raft's leader transfer stops accepting them), and nobody tells
  the follower that a forwarded proposal was dropped: the put waits until the client's
  deadline, 1 s here (a client without a deadline waits for etcd's request timeout,
  7 s with the default timings). The window is about one round trip plus the time the
  target needs to catch up: tens of ms at 2 and 20 ms, shorter at 0 ms, where some runs
  catch no put in it and others catch all 8 (this loaded box). (a) pays
  the same as (b) because etcd transfers leadership itself when a leader stops on SIGTERM;
  only (c), which keeps the leader, pays nothing.
- **The etcd tier counts a write, this page counted requests.** Its writer asks the other
  endpoint again after a failed put and counts only a write no endpoint took. The bench
  now does the same (`failed_writes`) and still reports `failed_write_requests`: what an
  application sees that has no retry of its own, since etcd's clientv3 retries a Put only
  when no connection was up, never after a member got it. The retried write's latency
  includes the 1 s wait, which is what the p99 / p99.9 of (a) and (b) during the scale-in
  show at 2 and 20 ms.
- **The sidecar's leave does nothing wrong.** It moved leadership to a kept voter that was
  caught up (the transfer ended within 0.2 s), then removed its member. At 2 ms etcd
  refused that MemberRemove twice ("etcdserver: unhealthy cluster") and the leave took
  2.1 s instead of 0.7 s: etcd refuses to remove a voter while some voter has been
  connected to the member asked for less than 5 s, and the victim had been promoted 2.6 s
  before the scale-in (the bench's clusters are seconds old). A refusal changes nothing,
  so the sidecar asks again after a backoff; no request failed meanwhile (every failed one
  started in the first 0.15 s).

![longest stall and failed writes per strategy]({img[PLOTS[0]]})

{_table(summary, SUMMARY_COLUMNS, LABELS)}

![every put around the scale-in]({img[PLOTS[1]]})

Every repetition:

{_table(results['scale_in'], scalein.COLUMNS, LABELS)}

## Scale-in on every engine build
{_stamp(results, "engines")}
The headline's 3\u21922 scale-in of the leader, (b) and (c) only, at 0 ms one-way (the
Toxiproxy proxy alone), under the same load, on every build the tiers run
(`tests/harness/engines.py MATRIX`), each with its engine's own raft timings. Cells as in
the headline. Xline has no safe leader hand-off (`Capabilities.hand_off` is False: consecutive
MoveLeaders broke its clusters, docs/engines.md): under (b) its leaving leader removes its own
member without moving leadership, so the two that stay elect a leader while the writes wait;
under (c) the planner scales a follower in and the leader stays.

{_table(results.get('engines_summary') or [], SUMMARIES['engines_summary'], LABELS)}

## Upgrade under load
{_stamp(results, "upgrade")}
A 3-member etcd cluster of real members and their sidecars, started on the oldest build and
rolled one minor at a time to the newest ({_upgrade_path(results.get('upgrade') or [])}): one member at a time
on the next build with its data, the way the operator's roll goes (the preStop keeps the member; the pod comes back ready and
all three vote before the next goes), followers first, highest ordinal first, the leader last; its
preStop hands leadership off first (`handed_off_to`). The scale-in's load runs throughout, with the
checker's writer beside it; each roll's window runs from its first restart until {scalein.TAIL_S:.0f} s
after the last, against the {p['baseline_s']:.0f} s just before it (`steady_*`). Before the next roll every
member serves the new build and the cluster version has moved (etcd's `/version`). etcd's default raft
timings and `snapshot-count` {upgrade.SNAPSHOT_COUNT}: etcd 3.7 cannot apply the v2 entries 3.5 left in
the WAL, so a raft snapshot on 3.6 must be past them (docs/engines.md). After the last roll every write
the checker's writer got acknowledged reads back and HashKV agrees on all three (`acked_read_back`).

{_table(results.get('upgrade') or [], upgrade.COLUMNS)}
{_real_nodes(results)}
{_rolls(results)}
## Scale-out
{_stamp(results, "scale_out")}
A three-member cluster (sidecar settings as the operator renders them by default) is filled with incompressible 1 MiB values to each
size; a fourth member then joins twice from an empty volume, at each one-way latency in turn
({', '.join(f"{ms} ms" for ms in sorted({_one_way(r) for r in results['scale_out']})) or 'none measured'}).
Every peer port, the joining members' too, sits behind its Toxiproxy proxy as in the scale-in,
made before that member first starts; between latencies only the latency toxic changes on the
live proxies (the fill itself runs at 0 ms), so every join starts from the same three members
at rest holding the same data. **sidecar**: timed from the
sidecar process starting (kubelet order: sidecar, startupProbe, store) until the member is
promoted from learner, started, and has applied every entry the cluster had when the join
began. **by hand**: `etcdctl member add` (a voting member at once, no learner step) and
`etcd --initial-cluster-state existing`, timed from the member add to the same condition.
The by-hand member counts towards quorum before it has any data; the learner does not.
The pod object exists before the sidecar's clock starts (the API's part, not the sidecar's).
`sidecar_store_started_s` is the part until etcd could start (the sidecar process starting,
its learner added, the startupProbe passing; the stand-in kubelet probes every 0.2 s). After
that the sidecar polls its member every {promotion.POLL_S} s until it answers, asks for the
promotion, and asks again ({promotion.POLL_S} s doubling to {promotion.REFUSED_CAP_S} s) while etcd
still calls the learner not in sync. `sidecar_vs_baseline`: `sidecar_join_s` over
`baseline_join_s`, the two joins at the same latency and size.
`sidecar_publish_timeouts` / `baseline_publish_timeouts` (marked † in the table below): how
often that join's new member logged that its first publish timed out. That is etcd's, not the
join's: the member's proposal of its name and client URLs was committed inside the snapshot
the leader then sent it, so etcd waits its request timeout (7 s at the default election
timeout) before it publishes again and serves clients (etcd-io/etcd#8608, #16436). It hits
either join at random (measured at 64 and 256 MiB in three runs: 13 of 18 sidecar joins, 11 of 18
by-hand ones; none at 0 MiB), so a cell
with a † on one side only compares a 7 s wait with none. The pause before each join is
{p.get("join_settle_s", scaleout.SETTLE_S):g} s, {scaleout.ETCD_REST_S:g} s before the first (after the grow: etcd refuses a MemberAdd until every
voter has been connected for 5 s); the bench logs how often etcd refused a by-hand `member add`.

{_scale_out_headline(results['scale_out'])}

![scale-out times]({img[PLOTS[2]]})

{_table(results['scale_out'], scaleout.COLUMNS)}

## Operator cost
{_stamp(results, "operator")}
The real operator as a subprocess, default intervals (reconciles on the watch events each cluster reads
and at the times its decisions turn on, a look every 5 s at a cluster in motion only, a full re-apply every
600 s: docs/architecture.md, "When a round runs"), on the full local control plane (kube-apiserver,
controller-manager, scheduler, OpenKruise, kwok). Each cluster is a one-member EtcdCluster
on the builtin StatefulSet (kwok pods), with a heartbeat Lease and a membership Lease renewed every 10 s by a
stand-in thread (the sidecar's default interval, at which its leader also refreshes the membership
record; applied server-side as the sidecar does), so
that every cluster is Available and at rest. `create_s`: from applying the new
clusters until every one has its StatefulSet and an observed status (or, when some never
get there, until the last one that did). At rest: {p.get('quiet_s', 10):.0f} s after the last cluster settled, CPU
(user+system) of the operator process over {p['rest_s']:.0f} s and its RSS. Latency: one
cluster at a time, a label added to `spec.podTemplate.labels`, until the StatefulSet's
`metadata.generation` moved (polled every 20 ms); {p['spec_changes']} changes per size,
on settled clusters only; a change not in the workload after {operator_cost.SPEC_CHANGE_TIMEOUT_S:.0f} s counts
as {operator_cost.SPEC_CHANGE_TIMEOUT_S:.0f} s (a lower bound, `spec_changes_timed_out`), and after
{operator_cost.MAX_TIMEOUTS} of those the size's other changes are not tried. `settled` is how many clusters got their StatefulSet and an
observed status (`apply_s`: how long the bench took to create the size's new clusters, four
threads at a time, inside `create_s`; the bench looks at every cluster once a second, every
clusters/1000 seconds above 1000 clusters, so `create_s` is that coarse). `size_s`: the whole size,
from its first step to its row. The local control plane takes a loopback block with room for a
ClusterIP Service and a kwok pod IP per cluster and 256 more (`tools/devcluster/net.py`: the default
/20 holds 2046 Service IPs and 1024 pod IPs; a /19 at 1000 clusters, a /17 at 5000) and fake nodes
that hold every pod. The stand-in heartbeats are started each at its due time by one event loop, up to
{operator_cost.IN_FLIGHT} awaiting their answer at once, as independent sidecars would;
`heartbeat_late_p50_s`/`_p99_s`/`_max_s` say how late each
renewal of the size was answered against its due time: a Lease lasts {3 * operator_cost.HEARTBEAT_S:.0f} s, so
a stand-in more than {2 * operator_cost.HEARTBEAT_S:.0f} s late would show the operator expired heartbeats and
the row would measure something else; `heartbeats_failed` counts the renewals refused or not answered
within {operator_cost.HEARTBEAT_S:.0f} s (the next round renews them). `version`: `this` is the
checkout measured; `baseline` the operator of git ref `{p.get('operator_baseline') or '-'}` (`--operator-baseline`),
measured after it on the same clusters, each operator alone: the one that did not create a size's
clusters starts on them (`resume_s`: until it ran a reconcile of each cluster) and is then measured the
same way. Churn (at the largest size): {p.get('churn_per_s', 0):g} spec changes a second for
{p.get('churn_s', 0):.0f} s, each on another idle cluster; `cpu_churn_pct` is the operator's CPU over
that time, `churn_p50_ms`/`churn_p95_ms` each change's time until its StatefulSet's generation moved
(one watch of the StatefulSets), a change not there {operator_cost.SPEC_CHANGE_TIMEOUT_S:.0f} s after
the last counted at {operator_cost.SPEC_CHANGE_TIMEOUT_S:.0f} s (`churn_timed_out`).
The reaction to the sidecars' word: on {operator_cost.LEASE_CHANGES} settled clusters, one at a time, the
stand-in's renewals of the cluster wait and its heartbeat Lease is written leaderless and unhealthy (its
member lost Raft's leader); `lease_to_status_p50_ms`/`_p95_ms` is the time until the operator's status
no longer names a leader (GET every {operator_cost.POLL_S * 1000:.0f} ms): the Lease watch, the round, the
planner and the status patch, the path every decision made on a Lease change takes. Then the renewals
resume and the leader is shown again before the next cluster.
`python -m tests.bench --only operator --clusters 10,100,1000,5000` picks the sizes.

{_operator_versions(results['operator'])}

![operator cost]({img[PLOTS[3]]})

{_table(results['operator'], operator_cost.COLUMNS)}

### Operator failover
{_stamp(results, "operator_failover")}
At the largest size, after the rows above, on the same clusters at rest (heartbeats still
renewed): two replicas of the operator with `--leader-elect` and the shipped Lease timings
(raftset.operator.election.Timing: `lease_duration_s`, renewals every 2 s), as the Deployment runs
them. The first takes the operator Lease and runs kopf; once it has reconciled every cluster
(`resume_s`, counted from its metrics) the second is started and waits (its log says it stands by);
then the first is SIGKILLed and a label is added to one cluster's `spec.podTemplate.labels`. From the
kill: `takeover_s` until the standby's write of the Lease (its own `acquireTime`, the same machine's
clock); `first_reconcile_s` until its first reconcile ran to its end (its
`raftset_operator_reconciles_total` above 0; it serves metrics only once it acts, polled every
{operator_cost.FAILOVER_POLL_S:g} s); `spec_change_s` until that cluster's StatefulSet's generation moved: the change
a user made while no replica acted; `all_reconciled_s` until every cluster had a reconcile of its own
run to its end in the new replica (`raftset_cluster_reconciles_total`, read every second, every
clusters/1000 seconds above 1000). `reconciled` is how many had when the bench stopped looking
({operator_cost.FAILOVER_TIMEOUT_S:.0f} s after the kill, or {operator_cost.PATIENCE_PER_CLUSTER_S:g} s a cluster if that is longer); a
time left blank was not reached by then.

{_failover_table(results.get('operator_failover') or [])}

## Recovery time (RTO)
{_stamp(results, "recovery")}
Real etcd {m['etcd']} members and their real sidecars with the operator's default sidecar settings
and etcd's default raft timings, a writer putting keys throughout (`tests/harness/checker.py`),
and every run ends with the checker: every acknowledged write reads back and HashKV agrees
(`acked_read_back`). The steps are those of the etcd tier's tests
(`tests/etcd/test_lights_out.py`, `tests/etcd/test_quorum_loss.py`), {recovery_reps} repetition(s)
of each scenario and size at each one-way latency
({', '.join(f"{ms} ms" for ms in sorted({_one_way(r) for r in results.get('recovery') or []})) or 'none measured'}).
Every member's peer port sits behind its Toxiproxy proxy as in the scale-in (a pod that comes
back keeps its address, so its proxy). One cluster per size and repetition runs every
scenario at every latency, lights-out first: each run leaves it whole again (every member
voting, the recovery record cleared), and between runs only the latency toxic changes on the
live proxies; each run has its own writer and checker.

- **lights-out**: every store and sidecar of a 3- or 5-member cluster SIGKILLed at once,
  data kept; then every pod starts at once (Parallel pod management). Timed from the power
  coming back: `rto_writable_s` until the writer's first acknowledged put, `rto_full_s`
  until all vote. `same_member_ids`: the members came back as themselves.
- **quorum-loss**: 2 of 3 (3 of 5) members lost with their volumes; the bench plays the
  operator's part (reads the survivors' heartbeat Leases, chooses the most up-to-date one
  with the operator's `choose`, records the recovery on the workload, restarts the
  survivors' pods, the chosen one first, the other moving its data aside and joining as a
  learner; then the lost pods join on empty volumes, one learner at a time). Timed from the recovery's start (the operator recording it, by policy or on
  a user's request; docs/operations.md has the end-to-end times through the operator).
  `acked_lost`: acknowledged writes above the survivor's committed index, which a forced
  one-member restart cannot keep.

{_table(results.get('recovery') or [], recovery.COLUMNS)}

## Backup and restore
{_stamp(results, "backup")}
A 3-member cluster of real etcd {m['etcd']} members with their real sidecars, filled to
`data_mib` with {backup.VALUE_BYTES // 1024} KiB values, under the same load as the scale-in
({load.WRITERS} writers, {load.READERS} readers) plus the checker's writer. One backup goes to a real
S3 server (versitygw, on the same machine and disk) through the product's code,
`raftset.sidecar.io.snapshots.take` (snapshot stream from one member, sha256, multipart upload, the
stored object read back and compared, then the manifest and "latest"), called directly so
`backup_s` is the backup alone (the leader's sidecar, asked by backup-now, starts the same call
within its check interval, 10 s by default).
`backup_mib_per_s` is the snapshot's size over that time, read back included.
`backup_write_p99_ms` is the writers' p99 while it ran; `steady_write_p99_ms` the p99 of the
{p.get('backup_steady_s', 5):.0f} s just before it, in the same run. The snapshot is then restored the product's
way into a new 3-member cluster (`spec.bootstrap.fromBackup`: the first pod's sidecar
fetches it, checks its sha256 and restores it with etcdutl; the others join as learners):
`restore_writable_s` until the first put is acknowledged, `restore_full_s` until all three
vote, both from the first pod's start. `acked_read_back` is the checker reading back every
acknowledged write the snapshot holds (`acked_in_snapshot`), `hash_kv_equal` every restored
member's HashKV at the snapshot's revision equal to the source's. `load_1m` is the load
average when the backup ended.

{_table(results.get('backup') or [], backup.COLUMNS)}

## Sidecar footprint
{_stamp(results, "footprint")}
A three-member cluster with the operator's default sidecar settings (Lease refresh every
10 s, membership-clean every 30 s, member poll every 2 s), left idle for
{p.get('footprint_settle_s', 5):.0f} s before measuring; CPU over {p['idle_s']:.0f} s. RSS is VmRSS of
/proc/<pid>/status; USS is the memory unique to the process (RSS minus shared pages). The
sidecars run as processes with a kubeconfig, as in every test: in a pod they read the
service-account files instead, the same code otherwise.

{_table(results.get('footprint_summary') or footprint.summarise(results['footprint']), footprint.SUMMARY_COLUMNS)}

{_table(results['footprint'], footprint.COLUMNS)}
"""


def _headline(summary: Sequence[Mapping[str, Any]]) -> str:
    """One table per size: strategies down, latencies across."""
    return "\n\n".join(_headline_size(summary, size)
                        for size in sorted({(r["from_members"], r["to_members"]) for r in summary}))


def _headline_size(summary: Sequence[Mapping[str, Any]], size: tuple[int, int]) -> str:
    rows = [r for r in summary if (r["from_members"], r["to_members"]) == size]
    latencies = sorted({r["one_way_ms"] for r in rows})
    head = [f"{size[0]}\u2192{size[1]} members"] + [f"{ms} ms one-way" for ms in latencies]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for strategy in _present([r["strategy"] for r in rows]):
        cells = [LABELS[strategy]]
        for ms in latencies:
            r = next((x for x in rows if x["strategy"] == strategy and x["one_way_ms"] == ms), None)
            cells.append(_cell(r) if r else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _real_headline(results: Mapping[str, Any]) -> str:
    """(b) and (c) down; the loopback row at 0 ms and the real nodes' across, in the headline's cells."""
    real = summarise(results.get("scale_in_real") or [])
    if not real:
        return "(not measured yet: `make bench --only real`, as root, where the real-node lab runs)"
    size = (real[0]["from_members"], real[0]["to_members"])
    loopback = {r["strategy"]: r for r in results.get("scale_in_summary") or []
                if r["one_way_ms"] == 0 and (r["from_members"], r["to_members"]) == size}
    lines = [f"| {size[0]}\u2192{size[1]} members | loopback, 0 ms one-way | real nodes |", "|---|---|---|"]
    for r in sorted(real, key=lambda r: STRATEGIES.index(r["strategy"])):
        same = loopback.get(r["strategy"])
        lines.append(f"| {LABELS[r['strategy']]} | {_cell(same) if same else '-'} | {_cell(r)} |")
    return "\n".join(lines)


def _cell(r: Mapping[str, Any]) -> str:
    """A summary line the headline's way: failed writes (requests) / stall / p99 (steady) / p99.9 / leader changes."""
    return (f"{r['failed_writes_total']} ({r['failed_write_requests_total']}) / {r['longest_stall_max_s']:.3f} s / "
            f"{r['write_p99_ms']:.0f} ms ({r['steady_write_p99_ms']:.0f}) / {r['write_p999_ms']:.0f} ms / "
            f"{r['leader_changes_max']}")


def _builds_headline(summary: Sequence[Mapping[str, Any]]) -> str:
    """One table: engine builds down, the strategies across."""
    if not summary:
        return "(the per-engine scale-in produced no rows)"
    strategies = _present([r["strategy"] for r in summary])
    head = ["3\u21922 members, 0 ms", *(LABELS[s] for s in strategies)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for engine in dict.fromkeys(r["engine"] for r in summary):
        cells = [engine]
        for strategy in strategies:
            r = next((x for x in summary if x["engine"] == engine and x["strategy"] == strategy), None)
            cells.append(_cell(r) if r else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _upgrade_path(rows: Sequence[Mapping[str, Any]]) -> str:
    return " \u2192 ".join(dict.fromkeys(v for r in rows for v in (r["from_version"], r["to_version"]))) or "no rolls"


def _recovery_headline(rows: Sequence[Mapping[str, Any]]) -> str:
    """Scenarios and sizes down, latencies across: the times to writable and to full size, the writes lost."""
    if not rows:
        return "(the recovery benchmark produced no rows)"
    latencies = sorted({_one_way(r) for r in rows})
    head = ["scenario", "members", *(f"{ms} ms one-way" for ms in latencies), "acknowledged writes lost"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for size in sorted({int(r.get("members") or 3) for r in rows}):
        for scenario in recovery.SCENARIOS:
            rs = [r for r in rows if r["scenario"] == scenario and int(r.get("members") or 3) == size]
            if not rs:
                continue
            cells = [scenario, str(size)]
            for ms in latencies:
                at = [r for r in rs if _one_way(r) == ms]
                cells.append(_rto_cell(at) if at else "-")
            cells.append(f"{sum(r['acked_lost'] for r in rs)} of {sum(r['acked_before'] for r in rs)}")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _rto_cell(rows: Sequence[Mapping[str, Any]]) -> str:
    """To writable / to full size: the median over the repetitions, the worst in brackets when repeated."""
    def figure(column: str) -> str:
        values = [r[column] for r in rows]
        median = f"{statistics.median(values):.1f}"
        return f"{median} s" if len(values) == 1 else f"{median} ({max(values):.1f}) s"
    return f"{figure('rto_writable_s')} / {figure('rto_full_s')}"


def _scale_out_headline(rows: Sequence[Mapping[str, Any]]) -> str:
    """Data sizes down, latencies across: the sidecar's join against the by-hand one, and their ratio."""
    if not rows:
        return "(the scale-out benchmark produced no rows)"
    latencies = sorted({_one_way(r) for r in rows})
    head = ["data", *(f"{ms} ms one-way" for ms in latencies)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for size in sorted({r["data_mib"] for r in rows}):
        cells = [f"{size} MiB"]
        for ms in latencies:
            r = next((x for x in rows if x["data_mib"] == size and _one_way(x) == ms), None)
            if r is None:
                cells.append("-")
                continue
            times = r.get("sidecar_vs_baseline") or scaleout.ratio(r["sidecar_join_s"], r["baseline_join_s"])
            cells.append(f"{r['sidecar_join_s']:.2f} s{_published_late(r, 'sidecar')} / "
                         f"{r['baseline_join_s']:.2f} s{_published_late(r, 'baseline')}"
                         + (f" (\u00d7{times:.2f})" if times is not None else ""))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _published_late(row: Mapping[str, Any], join: str) -> str:
    """A dagger where that join waited out etcd's publish timeout (rows measured before it was counted: none)."""
    return "\u2020" if row.get(f"{join}_publish_timeouts") else ""


def _stamp(results: Mapping[str, Any], section: str) -> str:
    """When, on which commit and at which load this section was measured."""
    m = (results.get("measured") or {}).get(section)
    if not m:
        return ""
    load_avg = " / ".join(map(str, m.get("load_average_at_start") or []))
    text = (f"\n*Measured {m['finished']}{' (smoke)' if m.get('smoke') else ''} on commit "
            f"`{m['raftset_commit']}` with etcd {m.get('etcd') or '?'}, load average {load_avg} "
            "at the start of that run.*\n")
    others = m.get("others")
    if not others:
        return text
    return text[:-2] + (f" That run measured {', '.join(LABELS[s] for s in m['strategies'])} only; the other "
                        f"strategies' rows are from {others['finished']}, commit `{others['raftset_commit']}`.*\n")


def _problems(errors: Sequence[str]) -> str:
    if not errors:
        return ""
    return "\n**Benchmarks that failed in this run** (their tables are empty):\n\n" + "\n".join(
        f"- `{e}`" for e in errors) + "\n"


def write_doc(doc: Path, out: Path, results: Mapping[str, Any]) -> None:
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(markdown(results, doc, out))


def _real_nodes(results: Mapping[str, Any]) -> str:
    """The scale-in on real nodes (tests/bench/scalein_real.py)."""
    start, target = scalein_real.SIZES
    return f"""
## Scale-in on real nodes
{_stamp(results, "scale_in_real")}
`make bench --only real`: strategies (b) and (c) of the headline as a user runs them, on three real nodes
(kubelet, containerd and runc in network namespaces, one per zone, CoreDNS, local volumes; the real-node
lab of docs/devcluster.md), with OpenKruise's manager and the operator's Deployment from the `kruise`
overlay and every pod from the images built from the project's Dockerfile. A fresh EtcdCluster of
{start} members per strategy (the default etcd build, its default raft timings, without TLS as the
loopback rows), the leader moved to demo-{start - 1}, then only `spec.replicas` patched to {target}: (b) on
`workloadKind: StatefulSet`, whose controller deletes demo-{start - 1} first and whose sidecar hands
leadership off in its preStop; (c) on `workloadKind: AdvancedStatefulSet`, where the operator reserves
lower ordinals and keeps the leader's pod. The same load as every other row, run in the first node's
namespace on the members' DNS names; no latency is added: the pods talk over the nodes' veth pairs and
bridges. The window ends once the operator's status shows {target} healthy members with a leader, no
step in progress, and exactly those pods Ready, plus {scalein.TAIL_S:.0f} s.

{_table(results.get('scale_in_real') or [], scalein.COLUMNS, LABELS)}
"""


def _rolls(results: Mapping[str, Any]) -> str:
    """The rolling-restart and member-replacement sections (tests/bench/rolls.py)."""
    p = results["params"]
    return f"""
## Rolling restart: a StatefulSet's order against leader last
{_stamp(results, "rolls")}
A 3-member cluster of real etcd members (the default build, etcd's default raft timings) and their real
sidecars, every peer port behind Toxiproxy as in the scale-in, under the scale-in's load, each member
restarted once on its data, one at a time: each pod comes back ready with all three voting before the
next goes. **default**: what a plain StatefulSet RollingUpdate does, highest ordinal first down to 0
wherever the leader is; each pod stops without a preStop and without our sidecar (it is gone first, so
its SIGTERM fallback hands nothing off), the store gets kubelet's SIGTERM. **leader-last**: raftset's
roll, followers first (highest ordinal first), the leader last, its preStop keeping the member and
handing leadership off. Both start with the leader on demo-{rolls.ROLL_LEADER}, the ordinal the default order
restarts first (with the leader on demo-0 the two orders would be the same). etcd transfers leadership
itself when it stops on SIGTERM as the leader, so the default order costs no election timeout, but
a leader change for every leader it restarts, and its successor may be next. Both rolls run on the same
cluster, default first, each with the leader placed again; the window runs from the first restart
until {scalein.TAIL_S:.0f} s after the last, against the {p['baseline_s']:.0f} s just before it (`steady_*`).
Each roll has the checker's writer beside the load and ends with the checker on all three: every
acknowledged write reads back and HashKV agrees (`acked_read_back`). `write_errors`: what the load's
failed put requests were told in the window, by reason (each request times out after
{load.REQUEST_TIMEOUT_S:.0f} s, then the writer asks the next endpoint).

{_table(results.get('rolls') or [], rolls.COLUMNS)}

## Member replacement under load
{_stamp(results, "replace")}
On the same cluster after the rolls, `raftset.dev/replace=true` on a pod, as a user asks for a repair
(the store's container restarting as kubelet restarts it): the follower demo-{rolls.replace_target("follower")} with the
leader on demo-{rolls.REPLACE_LEADER}, then{"" if any(r["target"] == "leader" for r in results.get("replace") or []) else " (not in this run)"} the leader
demo-{rolls.replace_target("leader")} itself, whose sidecar hands leadership off first. The sidecar moves the data aside,
the old member is removed and the pod joins as a new learner and is promoted. `replace_s`: from the
annotation until the pod's new member votes beside the other two. Window columns as in the roll; the
checker on all three ends each replacement.

{_table(results.get('replace') or [], rolls.REPLACE_COLUMNS)}
"""
