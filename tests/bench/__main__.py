"""`make bench`: every benchmark, its results files, plots and docs/benchmarks.md.

    python -m tests.bench [--smoke] [--out DIR] [--doc FILE] [--page-only]
                          [--only scale-in|recovery|backup|footprint|scale-out|operator|engines|rolls|real]
                          [--repetitions N]
                          [--backup-mib N] [--latencies MS,MS,...] [--strategies S,S,...]
                          [--sizes FROM-TO,...]
                          [--clusters N,N,...] [--operator-baseline REF] [--no-operator-failover]

The etcd benchmarks run against a bare kube-apiserver of their own (with OpenKruise's
StatefulSet CRD, so the sidecars can read an Advanced StatefulSet); the operator's cost
is measured on a full local control plane of its own, where scale-in strategy (c)
also runs through the product (`scalein_operator`: the operator process, the real Advanced
StatefulSet controller, the pod runner's real members). The smoke runs the two planes side by
side (it asserts what is written, never how fast); `make bench` one after the other, so that
neither plane's load is in the other's figures. Both planes, and every process the benchmarks
start, are gone when this exits.

`--only scale-in` (or `recovery`, `backup`, `footprint`, `scale-out`, `operator`, `engines`: the scale-in
on every engine build and the upgrade; `rolls`: the rolling restarts and the member replacements; `real`:
(b) and (c) on real nodes, which only this measures, as root) measures
that benchmark alone and keeps the other sections of OUT/results.json as they were, each with the date,
commit and load it was measured at.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from tools.devcluster import build, start
from tools.devcluster.plane import kruise_source
from tools.devcluster.podrunner import RUN_NAMESPACE_PREFIX
from tests.bench import (
    backup, builds, footprint, operator_cost, recovery, report, rolls, scalein, scalein_operator, scalein_real, scaleout,
    upgrade)
from tests.bench.labs import grow
from tests.harness import engines

T = TypeVar("T")
PLANE_ADDRESSES = 256  # Service and pod IPs the full plane needs besides the operator cost's clusters
UPGRADE_PATH = sorted(engines.ETCDS, key=lambda e: tuple(map(int, e.version.split("."))))
BUILDS = {e.label: e for e in engines.MATRIX}
ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "docs" / "benchmarks"


@dataclass(frozen=True)
class Params:
    """What one `make bench` measures, within the issue's 45 minutes on a 2-core box: 2106 s with
    `make`'s venv (2061 s in `tests.bench`) on a quiet machine, every section at every latency. One
    repetition of each scale-in cell (each run holds thousands of writes; `--repetitions` adds
    more), and (c) through the operator rather than the bench's own planner loop, which the
    per-engine section still drives. The longest sections in that run: the scale-in 417 s,
    (c) through the operator 330 s, the operator cost 400 s (1000 clusters settle in about 140 s
    since `apiorder.Turns`; about 550 s before it, under load), the rolls 216 s, recovery 227 s.
    The scale-out's pause before each join is 2 s, 6 s once after the grow."""

    scale_in_sizes: tuple[tuple[int, int], ...] = ((3, 2), (5, 3))
    latencies_ms: tuple[int, ...] = (0, 2, 20)  # one-way, between every two members (Toxiproxy)
    strategies: tuple[str, ...] = tuple(s for s in scalein.REPORTED if s != scalein.STRATEGIES[2])
    repetitions: int = 1
    recovery_repetitions: int = 1  # every scenario and size at each of latencies_ms, on one cluster per size
    recovery_sizes: tuple[int, ...] = (3, 5)
    baseline_s: float = 2.0  # load before the scale-in starts
    data_mib: tuple[int, ...] = (0, 64, 256)
    join_settle_s: float = scaleout.SETTLE_S
    cluster_counts: tuple[int, ...] = (10, 100, 300, 1000)
    spec_changes: int = 20
    rest_s: float = 30.0
    quiet_s: float = 10.0  # after the clusters settled, before the rest window: the creation's tail
    churn_per_s: float = 10.0  # at the largest size: idle clusters, this many spec changes a second
    churn_s: float = 30.0
    operator_baseline: str = ""  # a git ref whose operator is measured beside this checkout's
    operator_failover: bool = True  # at the largest size: two replicas, the acting one killed
    footprint_settle_s: float = 60.0  # idle first: the steady state, not the joins' tail
    idle_s: float = 30.0
    backup_mib: int = 256
    backup_steady_s: float = 5.0
    engine_builds: tuple[str, ...] = tuple(e.label for e in engines.MATRIX)  # the per-engine scale-in
    engine_strategies: tuple[str, ...] = builds.STRATEGIES
    engine_repetitions: int = 1
    upgrade_path: tuple[str, ...] = tuple(e.label for e in UPGRADE_PATH)
    roll_repetitions: int = 1  # both rolls and the replacements on one cluster per latency and repetition
    replace_targets: tuple[str, ...] = rolls.TARGETS


FULL = Params()
# The smoke leaves out the SIGKILL reference: its driver differs from (a) by the signal only.
# One latency, the far zone, so the Toxiproxy path is exercised; (c) through the operator too (about
# 45 s on the full plane the operator cost starts anyway). Per engine: Xline alone (the engine
# that differs) with the planner, and the upgrade's first roll.
SMOKE = Params(scale_in_sizes=((3, 2),), latencies_ms=(20,), strategies=scalein.REPORTED[:4], repetitions=1,
               recovery_repetitions=1, recovery_sizes=(3,), baseline_s=0.5, data_mib=(0, 2), join_settle_s=0.0, cluster_counts=(2,),
               spec_changes=2, rest_s=2.0, quiet_s=2.0, churn_per_s=1.0, churn_s=2.0, footprint_settle_s=1.0, idle_s=2.0, backup_mib=2, backup_steady_s=1.0,
               engine_builds=(engines.XLINE.label,), engine_strategies=builds.STRATEGIES[1:], engine_repetitions=1,
               upgrade_path=FULL.upgrade_path[:2], replace_targets=rolls.TARGETS[:1])
SECTIONS = ("scale_in", "scale_out", "operator", "operator_failover", "footprint", "recovery", "backup", "engines", "upgrade", "rolls",
            "replace")
# --only: the sections it measures
ONLY = {"scale-in": ("scale_in",), "recovery": ("recovery",), "backup": ("backup",), "footprint": ("footprint",),
        "scale-out": ("scale_out",), "operator": ("operator", "operator_failover"), "engines": ("engines", "upgrade"),
        "rolls": ("rolls", "replace"), "real": tuple(report.REAL)}


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


class Sections:
    """Runs each benchmark on its own: one that fails is reported, the others still count."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    async def run(self, name: str, step: Callable[[], Awaitable[T]], default: T) -> T:
        try:
            return await step()
        except Exception as exc:  # noqa: BLE001 - recorded in the results and the exit status
            log(f"{name} FAILED:\n{traceback.format_exc()}")
            self.errors.append(f"{name}: {type(exc).__name__}: {exc}")
            return default


async def _etcd_benchmarks(kubeconfig: str, work: Path, p: Params, sections: Sections,
                           only: str | None = None) -> dict[str, Any]:
    runs: list[scalein.Run] = []
    bare = bare_strategies(p)
    if only in (None, "scale-in") and bare:
        log("scale-in availability")
        runs = await sections.run("scale-in", lambda: scalein.bench(
            kubeconfig, work / "scale-in", p.scale_in_sizes, p.repetitions, p.baseline_s, bare, log,
            p.latencies_ms), [])
    rto: list[dict[str, Any]] = []
    if only in (None, "recovery"):
        log("recovery time (lights-out, quorum loss)")
        rto = await sections.run("recovery", lambda: recovery.bench(
            kubeconfig, work / "recovery", p.recovery_repetitions, sizes=p.recovery_sizes,
            latencies_ms=p.latencies_ms, log=log), [])
    backed: list[dict[str, Any]] = []
    if only in (None, "backup"):
        log(f"backup and restore ({p.backup_mib} MiB, versitygw)")
        backed = await sections.run("backup", lambda: _one(backup.measure(
            kubeconfig, work / "backup", p.backup_mib, p.backup_steady_s, log)), [])
    built: list[scalein.Run] = []
    upgraded: list[dict[str, Any]] = []
    if only in (None, "engines"):
        for label in p.engine_builds:  # one build that fails keeps the others' rows
            log(f"scale-in on {label} (0 ms)")
            built += await sections.run(f"engines {label}", lambda b=BUILDS[label]: builds.bench(
                kubeconfig, work / "engines", b, p.engine_repetitions, p.baseline_s, p.engine_strategies, log), [])
        log(f"upgrade under load ({' -> '.join(p.upgrade_path)})")
        upgraded = await sections.run("upgrade", lambda: upgrade.measure(
            kubeconfig, work / "upgrade", [BUILDS[b] for b in p.upgrade_path], p.baseline_s, log), [])
    rolled: tuple[list[dict[str, Any]], list[dict[str, Any]]] = ([], [])
    if only in (None, "rolls"):
        log("rolling restarts (default order, leader last) and member replacement under load")
        rolled = await sections.run("rolls", lambda: rolls.bench(
            kubeconfig, work / "rolls", p.latencies_ms, p.roll_repetitions, p.baseline_s, p.replace_targets, log),
            rolled)
    idle: list[dict[str, Any]] = []
    joins: list[dict[str, Any]] = []
    if only in (None, "footprint", "scale-out"):
        log({None: "sidecar footprint and scale-out", "footprint": "sidecar footprint"}.get(only, "scale-out"))
        try:
            with scaleout.routed_lab(kubeconfig, work / "scale-out") as (lab, toxiproxy):
                await sections.run("grow", lambda: grow(lab, 3), None)
                if only != "scale-out":
                    idle = await sections.run("footprint", lambda: footprint.measure(
                        lab, p.footprint_settle_s, p.idle_s, log), [])
                if only != "footprint":
                    joins = await sections.run("scale-out", lambda: scaleout.measure(
                        lab, toxiproxy, p.data_mib, p.latencies_ms, p.join_settle_s, log), [])
        finally:
            shutil.rmtree(work / "scale-out", ignore_errors=True)
    return {"runs": runs, "recovery": rto, "backup": backed, "engines": built, "upgrade": upgraded,
            "footprint": idle, "scale_out": joins, "rolls": rolled[0], "replace": rolled[1]}


def _on_bare_plane(work: Path, p: Params, sections: Sections, only: str | None) -> dict[str, Any]:
    """The etcd benchmarks on a bare kube-apiserver of their own (none asked for: every section empty)."""
    etcd: dict[str, Any] = {"runs": [], "footprint": [], "scale_out": [], "recovery": [], "backup": [],
                            "engines": [], "upgrade": [], "rolls": [], "replace": []}
    if only != "operator" and (only != "scale-in" or bare_strategies(p)):
        with start(workdir=work / "apiserver", full=False) as plane:
            scalein.install_kruise_crd(
                plane.kubeconfig, kruise_source() / "config" / "crd" / "bases" / "apps.kruise.io_statefulsets.yaml")
            etcd = asyncio.run(_etcd_benchmarks(plane.kubeconfig, work, p, sections, only))
    return etcd


def _on_full_plane(work: Path, logs: Path, p: Params, sections: Sections,
                   only: str | None) -> tuple[list[scalein.Run], dict[str, list[dict[str, Any]]]]:
    """On a full local control plane: (scale-in runs of (c) through the operator, operator cost rows
    by section: "operator", "operator_failover")."""
    runs: list[scalein.Run] = []
    operator: dict[str, list[dict[str, Any]]] = {"operator": [], "operator_failover": []}
    through_operator = only in (None, "scale-in") and scalein.OPERATOR_STRATEGY in p.strategies
    if only in (None, "operator") or through_operator:
        # Room for the operator cost's clusters (a Service and a kwok pod each) and the plane's own.
        room = max(p.cluster_counts) + PLANE_ADDRESSES if only in (None, "operator") else 0
        with start(workdir=work / "control-plane", full=True, nodes=4,
                   run_namespace_prefix=RUN_NAMESPACE_PREFIX, room=room) as plane:
            if through_operator:  # first: it removes its namespaces, the operator cost starts clean
                log("scale-in availability, (c) through the operator (full control plane)")
                runs = asyncio.run(sections.run("scale-in (c) through the operator", lambda: (
                    asyncio.to_thread(scalein_operator.bench, plane.kubeconfig, logs / "scale-in-operator",
                                      p.scale_in_sizes, p.repetitions, p.baseline_s, log, p.latencies_ms)), []))
            if only in (None, "operator"):
                log("operator cost (full control plane)")
                baseline = _checkout(p.operator_baseline, work / "baseline") if p.operator_baseline else None
                measured = asyncio.run(sections.run("operator", lambda: asyncio.to_thread(
                    operator_cost.bench, plane.kubeconfig, logs / "operator", p.cluster_counts,
                    p.spec_changes, p.rest_s, log, baseline=baseline, quiet_s=p.quiet_s, churn_per_s=p.churn_per_s,
                    churn_s=p.churn_s, failover=p.operator_failover), {}))
                operator.update({k: v for k, v in measured.items() if k in operator})
                sections.errors += measured.get("errors", [])
    return runs, operator


def _checkout(ref: str, into: Path) -> Path:
    """The tree of `ref` (this repository's git ref), read only: its operator is the bench's baseline."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def _both_planes(work: Path, logs: Path, p: Params, sections: Sections, only: str | None,
                 side_by_side: bool) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """Every benchmark asked for: (the etcd sections with (c) through the operator in `runs`, operator cost
    rows), the full plane beside the bare one when `side_by_side` (the smoke), else after it."""
    if side_by_side:
        with ThreadPoolExecutor(max_workers=1) as pool:
            full = pool.submit(_on_full_plane, work, logs, p, sections, only)
            etcd = _on_bare_plane(work, p, sections, only)
            operated, operator = full.result()
    else:
        etcd = _on_bare_plane(work, p, sections, only)
        operated, operator = _on_full_plane(work, logs, p, sections, only)
    etcd["runs"] += operated
    return etcd, operator


def bare_strategies(p: Params) -> tuple[str, ...]:
    """The scale-in strategies the bare kube-apiserver runs (every one but (c) through the operator)."""
    return tuple(s for s in p.strategies if s in scalein.DRIVERS)


async def _one(row: Awaitable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [await row]


def _on_real_nodes(out: Path, doc: Path, p: Params, machine: dict[str, Any], earlier: dict[str, Any]) -> None:
    """`--only real`: (b) and (c) on the real-node lab; every other section as the last run left it."""
    began = time.monotonic()
    log("scale-in on real nodes (tests/bench/scalein_real.py)")
    rows = [run.row for run in scalein_real.bench(p.baseline_s, log)]
    finished = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    stamp = {"finished": finished, "raftset_commit": machine["raftset_commit"], "smoke": False,
             "etcd": machine["etcd"], "load_average_at_start": machine["load_average_at_start"],
             "load_average_at_end": [round(x, 2) for x in os.getloadavg()]}
    results = {**earlier, "scale_in_real": rows, "measured": {**earlier.get("measured", {}), "scale_in_real": stamp}}
    report.write_results(out, results)
    report.write_doc(doc, out, results)
    log(f"results in {out}, page {doc} ({time.monotonic() - began:.0f}s)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one repetition (for `make test`)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results files and plots")
    parser.add_argument("--doc", type=Path, help="the page (default docs/benchmarks.md, or OUT/benchmarks.md "
                                                 "when --out is given)")
    parser.add_argument("--page-only", action="store_true",
                        help="measure nothing: write the page again from OUT/results.json")
    parser.add_argument("--only", choices=tuple(ONLY), help="measure this benchmark alone; the other "
                        "sections of OUT/results.json are kept, labelled with when they were measured")
    parser.add_argument("--repetitions", type=int, help="scale-in repetitions (default and smoke: 1)")
    parser.add_argument("--backup-mib", type=int, help="data size of the backup benchmark (default 256, smoke 2)")
    parser.add_argument("--latencies", help="one-way peer latencies in ms, comma-separated (default 0,2,20)")
    parser.add_argument("--strategies", help="scale-in strategies, comma-separated (default: "
                        f"{','.join(scalein.REPORTED)}; the smoke leaves out {scalein.STRATEGIES[3]})")
    parser.add_argument("--sizes", help="scale-in sizes FROM-TO, comma-separated (default 3-2,5-3)")
    parser.add_argument("--clusters", "--operator-clusters", dest="clusters",
                        help="operator cost: cluster counts, comma-separated (default 10,100,300,1000; "
                             "e.g. 10,100,1000,5000)")
    parser.add_argument("--operator-quiet", type=float, metavar="S",
                        help="seconds between the last cluster settling and the operator's rest window (default 10)")
    parser.add_argument("--no-operator-failover", action="store_true",
                        help="operator cost: leave out the failover of two replicas at the largest size")
    parser.add_argument("--operator-baseline", metavar="REF",
                        help="operator cost: also measure the operator of this git ref (e.g. main) on the same clusters")
    args = parser.parse_args(argv)
    # The members and `etcdctl member add` are the default etcd's build, not whatever is on PATH.
    os.environ["PATH"] = f"{build.ETCD.out_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    params = SMOKE if args.smoke else FULL
    if args.repetitions:
        params = replace(params, repetitions=args.repetitions)
    if args.backup_mib:
        params = replace(params, backup_mib=args.backup_mib)
    if args.latencies:
        params = replace(params, latencies_ms=tuple(int(x) for x in args.latencies.split(",")))
    if args.strategies:
        unknown = set(args.strategies.split(",")) - set(scalein.REPORTED)
        if unknown:
            parser.error(f"unknown strategies {sorted(unknown)}: choose from {','.join(scalein.REPORTED)}")
        params = replace(params, strategies=tuple(s for s in scalein.REPORTED if s in args.strategies.split(",")))
    if args.sizes:
        params = replace(params, scale_in_sizes=tuple(
            (int(a), int(b)) for a, b in (size.split("-") for size in args.sizes.split(","))))
    if args.clusters:
        params = replace(params, cluster_counts=tuple(int(x) for x in args.clusters.split(",")))
    if args.operator_baseline:
        params = replace(params, operator_baseline=args.operator_baseline)
    if args.no_operator_failover:
        params = replace(params, operator_failover=False)
    if args.operator_quiet is not None:
        params = replace(params, quiet_s=args.operator_quiet)
    out: Path = args.out.resolve()
    doc: Path = (args.doc or (ROOT / "docs" / "benchmarks.md" if out == DEFAULT_OUT else out / "benchmarks.md"))
    if args.page_only:
        report.write_doc(doc, out, json.loads((out / "results.json").read_text()))
        return
    previous = out / "results.json"
    if args.only and not previous.is_file():
        raise SystemExit(f"--only {args.only} keeps every other section of {previous}, and there is none: "
                         f"run the whole bench into {out} first, or give --out a directory that has one")
    earlier = json.loads(previous.read_text()) if args.only else None
    machine = report.machine()
    began = time.monotonic()
    if args.only == "real":
        _on_real_nodes(out, doc, params, machine, earlier or {})
        return
    work = Path(tempfile.mkdtemp(prefix="raftset-bench-"))
    logs = Path(tempfile.mkdtemp(prefix="raftset-bench-logs-"))  # the operator's log, kept for a look
    sections = Sections()
    try:
        log(f"benchmarks ({'smoke' if args.smoke else 'full'}) in {work}")
        etcd, operator = _both_planes(work, logs, params, sections, args.only, side_by_side=args.smoke)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = [run.row for run in etcd["runs"]]
    build_rows = [run.row for run in etcd["engines"]]
    finished = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    stamp = {"finished": finished, "raftset_commit": machine["raftset_commit"], "smoke": args.smoke,
             "etcd": machine["etcd"], "load_average_at_start": machine["load_average_at_start"],
             "load_average_at_end": [round(x, 2) for x in os.getloadavg()]}
    results = {
        "smoke": args.smoke,
        "finished": finished,
        "duration_s": round(time.monotonic() - began, 1),
        "machine": machine,
        "params": asdict(params),
        "scale_in": rows,
        "scale_in_summary": report.summarise(rows),
        "scale_out": etcd["scale_out"],
        "operator": operator["operator"],
        "operator_failover": operator["operator_failover"],
        "footprint": etcd["footprint"],
        "footprint_summary": footprint.summarise(etcd["footprint"]),
        "recovery": etcd["recovery"],
        "backup": etcd["backup"],
        "engines": build_rows,
        "engines_summary": report.summarise_builds(build_rows),
        "upgrade": etcd["upgrade"],
        "rolls": etcd["rolls"],
        "replace": etcd["replace"],
        "errors": sections.errors,
        "measured": {section: stamp for section in SECTIONS},
    }
    if not args.smoke and earlier is None and previous.exists():  # the real rows stay until measured again
        results = report.keep_earlier(results, json.loads(previous.read_text()), kept=list(report.REAL))
    partial = False  # some strategies' scale-in rows are an earlier run's
    if earlier is not None:
        # The real-node rows too: an `--only` of another section dropped them (2026-11-30, `--only operator`).
        results = report.keep_earlier(results, earlier, kept=[s for s in (*SECTIONS, *report.REAL)
                                                              if s not in ONLY[args.only]])
        if args.only == "scale-in" and args.strategies:
            results = report.keep_other_strategies(results, earlier, params.strategies)
            partial = len(results["scale_in"]) > len(rows)
        results["scale_in_summary"] = report.summarise(results["scale_in"])
        results["footprint_summary"] = footprint.summarise(results["footprint"])
        results["engines_summary"] = report.summarise_builds(results["engines"])
    report.write_results(out, results)
    # The timelines need every strategy's samples: a run that measured some strategies keeps the plot.
    report.plots(out, results, [] if partial else etcd["runs"])
    report.write_doc(doc, out, results)
    log(f"results in {out}, page {doc} ({results['duration_s']:.0f}s)")
    log(f"the operators' logs: {logs / 'operator' / 'operator.log'}, {logs / 'scale-in-operator' / 'operator.log'}")
    for r in results["scale_in_summary"] + results["engines_summary"]:
        log(f"  {r.get('engine', '')} {r['one_way_ms']:>3} ms {r['strategy']:<26} "
            f"{r['from_members']}->{r['to_members']}: failed writes "
            f"{r['failed_writes_total']} (max {r['failed_writes_max']}/run), longest stall median "
            f"{r['longest_stall_median_s']}s max {r['longest_stall_max_s']}s, write p99 {r['write_p99_ms']} ms "
            f"(steady {r['steady_write_p99_ms']} ms, {r['steady_writes_per_s']}/s), "
            f"leader changes {r['leader_changes_total']}")
    if sections.errors:
        raise SystemExit("failed: " + "; ".join(sections.errors))


if __name__ == "__main__":
    main()
