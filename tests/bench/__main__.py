"""`make bench`: every benchmark, its results files, plots and docs/benchmarks.md.

    python -m tests.bench [--smoke] [--out DIR] [--doc FILE]

The etcd benchmarks run against a bare kube-apiserver of their own (with OpenKruise's
StatefulSet CRD, so the sidecars can read an Advanced StatefulSet); the operator's cost
is measured on a full local control plane started afterwards. Both planes, and every
process the benchmarks start, are gone when this exits.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from raftset.devcluster import start
from raftset.devcluster.plane import kruise_source
from tests.bench import footprint, operator_cost, report, scalein, scaleout
from tests.bench.labs import PRODUCT_DEFAULTS, grow
from tests.etcd.harness import Lab

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "docs" / "benchmarks"


@dataclass(frozen=True)
class Params:
    scale_in_sizes: tuple[tuple[int, int], ...] = ((3, 2), (5, 3))
    strategies: tuple[str, ...] = scalein.STRATEGIES
    repetitions: int = 3
    baseline_s: float = 2.0  # load before the scale-in starts
    data_mib: tuple[int, ...] = (0, 64, 256)
    join_settle_s: float = scaleout.SETTLE_S
    cluster_counts: tuple[int, ...] = (10, 100, 300)
    spec_changes: int = 20
    rest_s: float = 30.0
    idle_s: float = 20.0


FULL = Params()
# The smoke leaves out the SIGKILL reference: its driver differs from (a) by the signal only.
SMOKE = Params(scale_in_sizes=((3, 2),), strategies=scalein.STRATEGIES[:3], repetitions=1, baseline_s=0.3, data_mib=(0, 2), join_settle_s=0.0,
               cluster_counts=(2,), spec_changes=2, rest_s=2.0, idle_s=2.0)


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


async def _etcd_benchmarks(kubeconfig: str, work: Path, p: Params) -> dict[str, Any]:
    log("scale-in availability")
    runs = await scalein.bench(kubeconfig, work / "scale-in", p.scale_in_sizes, p.repetitions, p.baseline_s,
                               p.strategies, log)
    log("sidecar footprint and scale-out")
    lab = Lab(kubeconfig, work / "scale-out", replicas=3, env_extra=PRODUCT_DEFAULTS)
    try:
        await grow(lab, 3)
        idle = await footprint.measure(lab, p.idle_s, log)
        joins = await scaleout.measure(lab, p.data_mib, p.join_settle_s, log)
    finally:
        lab.close()
        shutil.rmtree(work / "scale-out", ignore_errors=True)
    return {"runs": runs, "footprint": idle, "scale_out": joins}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one repetition (for `make test`)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results files and plots")
    parser.add_argument("--doc", type=Path, help="the page (default docs/benchmarks.md, or OUT/benchmarks.md "
                                                 "when --out is given)")
    args = parser.parse_args(argv)
    params = SMOKE if args.smoke else FULL
    out: Path = args.out.resolve()
    doc: Path = (args.doc or (ROOT / "docs" / "benchmarks.md" if out == DEFAULT_OUT else out / "benchmarks.md"))
    machine = report.machine()
    began = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="raftset-bench-"))
    try:
        log(f"benchmarks ({'smoke' if args.smoke else 'full'}) in {work}")
        with start(workdir=work / "apiserver", full=False) as plane:
            scalein.install_kruise_crd(plane.kubeconfig,
                                       kruise_source() / "config" / "crd" / "bases" / "apps.kruise.io_statefulsets.yaml")
            etcd = asyncio.run(_etcd_benchmarks(plane.kubeconfig, work, params))
        log("operator cost (full control plane)")
        with start(workdir=work / "control-plane", full=True, nodes=4) as plane:
            operator = operator_cost.bench(plane.kubeconfig, work / "operator", params.cluster_counts,
                                           params.spec_changes, params.rest_s, log)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = [run.row for run in etcd["runs"]]
    results = {
        "smoke": args.smoke,
        "finished": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "duration_s": round(time.monotonic() - began, 1),
        "machine": machine,
        "params": asdict(params),
        "scale_in": rows,
        "scale_in_summary": report.summarise(rows),
        "scale_out": etcd["scale_out"],
        "operator": operator,
        "footprint": etcd["footprint"],
    }
    report.write_results(out, results)
    report.plots(out, results, etcd["runs"])
    report.write_doc(doc, out, results)
    log(f"results in {out}, page {doc} ({results['duration_s']:.0f}s)")
    for r in results["scale_in_summary"]:
        log(f"  {r['strategy']:<26} {r['from_members']}->{r['to_members']}: failed writes {r['failed_writes_total']}"
            f" (max {r['failed_writes_max']}/run), longest stall median {r['longest_stall_median_s']}s"
            f" max {r['longest_stall_max_s']}s, leader changes {r['leader_changes_total']}")


if __name__ == "__main__":
    main()
