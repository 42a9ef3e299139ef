"""`make bench` cannot rot: its smoke run produces every results file with every column.

Runs `python -m tests.bench --smoke` as `make bench` runs it (its own bare kube-apiserver
for the real etcd members and sidecars, then a full local control plane for the
operator: scale-in (c) through it, and its cost); asserts what it wrote, never how fast
anything was.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench import report
from tests.harness import engines
from tests.harness.engines import EngineUnderTest

# The bench runs the default etcd build (tests/bench/__main__.py puts it first on PATH): the id names it.
pytestmark = [pytest.mark.etcd, pytest.mark.parametrize("etcd", [engines.DEFAULT], ids=lambda e: e.label)]

ROOT = Path(__file__).resolve().parents[2]
# Columns some rows leave blank by their meaning: only an operator that did not create a size's
# clusters resumes on them (`resume_s`, tests/bench/operator_cost.py).
BLANK_BY_DESIGN = {"operator": ("resume_s",)}


def test_smoke_run_writes_every_results_file_with_every_column(tmp_path: Path, etcd: EngineUnderTest) -> None:
    out = tmp_path / "bench"
    done = subprocess.run([sys.executable, "-m", "tests.bench", "--smoke", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"smoke run failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"

    results = json.loads((out / "results.json").read_text())
    assert results["smoke"] is True
    assert results["machine"]["logical_cpus"] >= 1 and results["machine"]["etcd"] == etcd.version
    tables = {**report.TABLES, **report.SUMMARIES}
    for name, columns in tables.items():
        rows = results[name]
        assert rows, f"{name}: no rows"
        for row in rows:
            missing = [c for c in columns if row.get(c) is None and c not in BLANK_BY_DESIGN.get(name, ())]
            assert not missing, f"{name}: {missing} missing in {row}"
        with open(out / f"{name}.csv", newline="") as fh:
            reader = csv.DictReader(fh)
            assert tuple(reader.fieldnames or ()) == columns
            assert len(list(reader)) == len(rows)
    assert {r["strategy"] for r in results["scale_in"]} >= {
        "a-builtin-no-handoff", "b-builtin-sidecar-handoff", "c-advanced-planner", "c-operator-advanced"}
    # (c) through the operator: only spec.replicas changed, the operator's plan kept the leader.
    [operated] = [r for r in results["scale_in"] if r["strategy"] == "c-operator-advanced"]
    assert operated["victims"] == "demo-1" and operated["leader_before"] == operated["leader_after"] == "demo-2"
    # The smoke's one latency went through Toxiproxy, under the concurrent load, with a steady phase.
    assert {r["one_way_ms"] for r in results["scale_in"]} == {20}
    assert all(r["steady_writes_per_s"] > 0 and r["steady_write_p50_ms"] > 0 for r in results["scale_in"])
    assert set(results["measured"]) == {"scale_in", "scale_out", "operator", "operator_failover", "footprint",
                                        "recovery", "backup", "engines", "upgrade", "rolls", "replace"}
    # Each heartbeat turned leaderless reached the operator's status (the reaction is measured, not judged).
    assert all(r["lease_changes"] >= 1 and r["lease_changes_timed_out"] == 0 for r in results["operator"])
    # The failover's standby reconciled every cluster of the largest size after the kill.
    [failed_over] = results["operator_failover"]
    assert failed_over["reconciled"] == failed_over["clusters"] == max(results["params"]["cluster_counts"])
    # The per-engine scale-in in its smallest form: Xline, the planner; the upgrade's first roll.
    assert {r["engine"] for r in results["engines"]} == {engines.XLINE.label}
    [roll] = results["upgrade"]
    assert (roll["from_version"], roll["to_version"]) == tuple(e.version for e in sorted(
        engines.ETCDS, key=lambda e: tuple(map(int, e.version.split(".")))))[:2]
    assert roll["member_ids_unchanged"] is True and roll["acked_read_back"] > 0
    assert roll["restart_order"].endswith(roll["leader_before"]) and roll["handed_off_to"] != roll["leader_before"]
    # Both rolls at the smoke's one latency, the leader restarted last only by raftset's; a follower replaced.
    default, last = results["rolls"]
    assert (default["order"], last["order"]) == ("default", "leader-last")
    assert default["restart_order"] == "demo-2 demo-1 demo-0" and default["leader_before"] == "demo-2"
    assert last["restart_order"].endswith(last["leader_before"])
    [replaced] = results["replace"]
    assert replaced["target"] == "follower" and replaced["replace_s"] > 0
    assert all(r["acked_read_back"] > 0 and r["one_way_ms"] == 20 for r in results["rolls"] + results["replace"])
    [backed] = results["backup"]
    assert backed["acked_read_back"] == backed["acked_in_snapshot"] > 0 and backed["hash_kv_equal"] is True
    assert {r["scenario"] for r in results["recovery"]} == {"lights-out", "quorum-loss"}
    # Recovery and scale-out at the smoke's one latency too, through the proxies; each recovery checked.
    assert all(r["one_way_ms"] == 20 and r["acked_read_back"] > 0 for r in results["recovery"])
    assert [(r["one_way_ms"], r["data_mib"]) for r in results["scale_out"]] == [(20, 0), (20, 2)]
    assert all(r["sidecar_vs_baseline"] > 0 for r in results["scale_out"])
    for png in report.PLOTS:
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
    page = (out / "benchmarks.md").read_text()
    for heading in ("## Machine", "## Scale-in availability", "## Scale-out", "## Operator cost",
                    "## Sidecar footprint", "| sidecar RSS (MiB, largest) |", "## Recovery time (RTO)",
                    "## Backup and restore", "| 20 ms one-way |", "*Measured ", "## Scale-in on every engine build",
                    "## Upgrade under load", "## Rolling restart", "## Member replacement under load"):
        assert heading in page
    assert all(f"]({png}" in page or f"/{png})" in page for png in report.PLOTS)
