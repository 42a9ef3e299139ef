"""Unit tests for the pure parts of the report: the summary keys and keeping earlier sections."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.bench import footprint, report, scalein, scaleout
from tests.bench.stats import Sample

pytestmark = pytest.mark.unit


def _row(one_way_ms: int, strategy: str, start: int, **values: Any) -> dict[str, Any]:
    row: dict[str, Any] = {c: 0 for c in scalein.COLUMNS}
    row.update(one_way_ms=one_way_ms, strategy=strategy, from_members=start, to_members=start - 1, **values)
    return row


def test_the_summary_is_keyed_by_latency_size_and_strategy() -> None:
    rows = [_row(0, "b-builtin-sidecar-handoff", 3, failed_writes=0, longest_stall_s=0.02),
            _row(20, "b-builtin-sidecar-handoff", 3, failed_writes=2, failed_write_requests=7, longest_stall_s=0.4,
                 leader_changes=1, repetition=0),
            _row(20, "b-builtin-sidecar-handoff", 3, failed_writes=1, failed_write_requests=5, longest_stall_s=0.9,
                 leader_changes=1, repetition=1),
            _row(20, "a-builtin-no-handoff", 3, failed_writes=5, longest_stall_s=1.0)]
    summary = report.summarise(rows)
    assert [(r["one_way_ms"], r["strategy"]) for r in summary] == [
        (0, "b-builtin-sidecar-handoff"), (20, "a-builtin-no-handoff"), (20, "b-builtin-sidecar-handoff")]
    far_b = summary[2]
    assert far_b["repetitions"] == 2 and far_b["failed_writes_total"] == 3 and far_b["longest_stall_max_s"] == 0.9
    assert far_b["failed_write_requests_total"] == 12 and far_b["failed_write_requests_max"] == 7
    # Leader changes per run, not summed over the repetitions: one hand-off each is 1, not 2.
    assert far_b["leader_changes_total"] == 2 and far_b["leader_changes_max"] == 1
    assert all(set(report.SUMMARY_COLUMNS) <= set(r) for r in summary)
    table = report._headline(summary)
    assert "| 3\u21922 members | 0 ms one-way | 20 ms one-way |" in table
    assert "| (b) builtin + sidecar | 0 (0) / 0.020 s" in table
    assert "| 3 (12) / 0.900 s / 0 ms (0) / 0 ms / 1 |" in table


def test_sections_not_measured_again_keep_their_rows_and_their_stamp() -> None:
    new_stamp = {"finished": "today", "raftset_commit": "new", "smoke": False, "load_average_at_start": [1, 1, 1]}
    results = {"scale_in": ["new rows"], "scale_out": [], "operator": [], "footprint": [],
               "measured": {s: new_stamp for s in ("scale_in", "scale_out", "operator", "footprint")}}
    earlier = {"scale_in": ["old"], "scale_out": ["old out"], "operator": ["old op"], "footprint": ["old fp"],
               "finished": "yesterday", "smoke": False, "machine": {"raftset_commit": "old", "etcd": "3.4.23",
                                                                   "load_average_at_start": [9, 9, 9]}}
    merged = report.keep_earlier(results, earlier, kept=("scale_out", "operator", "footprint"))
    assert merged["scale_in"] == ["new rows"] and merged["measured"]["scale_in"] == new_stamp
    assert merged["scale_out"] == ["old out"] and merged["footprint"] == ["old fp"]
    assert merged["measured"]["operator"]["finished"] == "yesterday"
    assert merged["measured"]["operator"]["raftset_commit"] == "old"
    stamp = report._stamp(merged, "operator")
    assert "*Measured yesterday on commit `old` with etcd 3.4.23, load average 9 / 9 / 9" in stamp


def test_a_kept_section_keeps_the_parameters_it_was_measured_with() -> None:
    from tests.bench.__main__ import Params
    assert sorted(k for keys in report.PARAMS_OF.values() for k in keys) == sorted(Params.__dataclass_fields__)
    stamp = {"finished": "today", "raftset_commit": "new", "smoke": False, "load_average_at_start": [1, 1, 1]}
    results = {"scale_in": [], "footprint": [], "measured": {"scale_in": stamp, "footprint": stamp},
               "params": {"repetitions": 2, "idle_s": 60.0}}
    earlier = {"footprint": ["old fp"], "finished": "yesterday", "smoke": False, "params": {"repetitions": 3, "idle_s": 20.0},
               "machine": {"raftset_commit": "old", "load_average_at_start": [9, 9, 9]}}
    merged = report.keep_earlier(results, earlier, kept=("footprint",))
    assert merged["params"] == {"repetitions": 2, "idle_s": 20.0}


def test_measuring_some_strategies_keeps_the_others_earlier_rows_and_says_so() -> None:
    new_stamp = {"finished": "today", "raftset_commit": "new", "etcd": "3.7.3", "smoke": False,
                 "load_average_at_start": [1, 1, 1]}
    results = {"scale_in": [_row(0, scalein.OPERATOR_STRATEGY, 3)], "measured": {"scale_in": new_stamp},
               "params": {"strategies": [scalein.OPERATOR_STRATEGY]}}
    earlier = {"scale_in": [_row(0, "b-builtin-sidecar-handoff", 3), _row(0, scalein.OPERATOR_STRATEGY, 3, writes=1)],
               "finished": "yesterday", "smoke": False,
               "machine": {"raftset_commit": "old", "etcd": "3.7.3", "load_average_at_start": [9, 9, 9]}}
    merged = report.keep_other_strategies(results, earlier, [scalein.OPERATOR_STRATEGY])
    assert [(r["strategy"], r["writes"]) for r in merged["scale_in"]] == [
        ("b-builtin-sidecar-handoff", 0), (scalein.OPERATOR_STRATEGY, 0)]
    assert merged["params"]["strategies"] == ["b-builtin-sidecar-handoff", scalein.OPERATOR_STRATEGY]
    stamp = report._stamp(merged, "scale_in")
    assert "*Measured today on commit `new`" in stamp
    assert "measured (c) through the operator only; the other strategies' rows are from yesterday, commit `old`.*" in stamp
    # Every strategy measured again: nothing earlier is kept, the stamp is the plain one.
    assert report.keep_other_strategies(results, {**earlier, "scale_in": earlier["scale_in"][1:]},
                                        [scalein.OPERATOR_STRATEGY]) == results


def test_p999_over_time_takes_each_bin_s_acknowledged_puts() -> None:
    samples = [Sample(0.01, 0.02, True), Sample(0.1, 0.9, True), Sample(0.3, 0.31, True),
               Sample(0.3, 1.3, False), Sample(-0.2, -0.1, True)]
    xs, tail = report.p999_over_time(samples, bin_s=0.25)
    assert xs == [-0.25, 0.0, 0.25]
    assert tail == pytest.approx([100.0, 800.0, 10.0])


def test_write_errors_are_counted_by_reason_without_the_address() -> None:
    errors = ["put: Put at http://127.0.0.1:2379: etcdserver: leader changed",
              "get: Range at http://127.0.0.1:2379: etcdserver: leader changed",
              "put: Put at http://127.0.0.2:2379: etcdserver: leader changed",
              "put: Put at http://127.0.0.2:2379: deadline exceeded"]
    assert scalein.error_kinds(errors, "put") == "2x etcdserver: leader changed; 1x deadline exceeded"
    assert scalein.error_kinds(errors, "get") == "1x etcdserver: leader changed"


def test_the_recovery_headline_gives_medians_and_the_worst_per_scenario_size_and_latency() -> None:
    def rto(ms: int, scenario: str, size: int, writable: float, full: float, lost: int, before: int) -> dict[str, Any]:
        return {"one_way_ms": ms, "scenario": scenario, "members": size, "rto_writable_s": writable,
                "rto_full_s": full, "acked_lost": lost, "acked_before": before}
    rows = [rto(0, "lights-out", 3, 4.0, 6.0, 0, 120), rto(0, "lights-out", 3, 2.0, 5.0, 0, 110),
            rto(0, "lights-out", 3, 3.0, 9.0, 0, 100), rto(20, "lights-out", 3, 3.5, 3.6, 0, 90),
            rto(0, "quorum-loss", 3, 8.5, 30.0, 1, 101), rto(20, "quorum-loss", 3, 9.0, 40.0, 0, 100),
            rto(0, "quorum-loss", 5, 9.5, 50.0, 0, 99)]
    table = report._recovery_headline(rows)
    assert "| scenario | members | 0 ms one-way | 20 ms one-way | acknowledged writes lost |" in table
    assert "| lights-out | 3 | 3.0 (4.0) s / 6.0 (9.0) s | 3.5 s / 3.6 s | 0 of 420 |" in table
    assert "| quorum-loss | 3 | 8.5 s / 30.0 s | 9.0 s / 40.0 s | 1 of 201 |" in table
    assert "| quorum-loss | 5 | 9.5 s / 50.0 s | - | 0 of 99 |" in table, "a latency without rows is a dash"
    assert "| lights-out | 5 |" not in table, "a size without rows gets none"
    assert report._recovery_headline([]) == "(the recovery benchmark produced no rows)"
    # Rows of a run from before the latency column were at 0 ms.
    old = {k: v for k, v in rows[4].items() if k != "one_way_ms"}
    assert "| quorum-loss | 3 | 8.5 s / 30.0 s | 1 of 101 |" in report._recovery_headline([old])


def test_the_scale_out_headline_puts_the_sidecar_against_the_hand_join_per_size_and_latency() -> None:
    def join(ms: int, mib: int, sidecar: float, baseline: float) -> dict[str, Any]:
        return {"one_way_ms": ms, "data_mib": mib, "db_size_mib": mib, "sidecar_join_s": sidecar,
                "sidecar_store_started_s": 0.5, "baseline_join_s": baseline,
                "sidecar_vs_baseline": scaleout.ratio(sidecar, baseline)}
    rows = [join(0, 0, 1.14, 0.32), join(20, 0, 2.0, 1.0), join(0, 64, 8.09, 7.1), join(20, 64, 9.0, 0.0)]
    assert [r["sidecar_vs_baseline"] for r in rows] == [3.56, 2.0, 1.14, None]
    table = report._scale_out_headline(rows)
    assert "| data | 0 ms one-way | 20 ms one-way |" in table
    assert "| 0 MiB | 1.14 s / 0.32 s (\u00d73.56) | 2.00 s / 1.00 s (\u00d72.00) |" in table
    assert "| 64 MiB | 8.09 s / 7.10 s (\u00d71.14) | 9.00 s / 0.00 s |" in table
    assert report._scale_out_headline([]) == "(the scale-out benchmark produced no rows)"
    # A row of a run from before the latency and ratio columns: 0 ms, the ratio worked out.
    old = {k: v for k, v in rows[2].items() if k not in ("one_way_ms", "sidecar_vs_baseline")}
    assert "| 64 MiB | 8.09 s / 7.10 s (\u00d71.14) |" in report._scale_out_headline([old])


def test_the_scale_out_headline_marks_a_join_that_waited_out_etcds_publish_timeout(tmp_path: Path) -> None:
    row = {"one_way_ms": 0, "data_mib": 64, "sidecar_join_s": 7.9, "baseline_join_s": 0.4,
           "sidecar_vs_baseline": 19.75, "sidecar_publish_timeouts": 1, "baseline_publish_timeouts": 0}
    assert "| 64 MiB | 7.90 s\u2020 / 0.40 s (\u00d719.75) |" in report._scale_out_headline([row])
    both = {**row, "baseline_join_s": 7.2, "baseline_publish_timeouts": 2, "sidecar_vs_baseline": 1.1}
    assert "| 64 MiB | 7.90 s\u2020 / 7.20 s\u2020 (\u00d71.10) |" in report._scale_out_headline([both])
    log = tmp_path / "store.log"
    assert scaleout.publish_timeouts(log) == 0  # no log: nothing counted
    log.write_text(f'{{"msg":"{scaleout.PUBLISH_TIMEOUT}"}}\n{{"msg":"published local member"}}\n')
    assert scaleout.publish_timeouts(log) == 1


def test_the_scale_out_plot_takes_rows_of_several_latencies(tmp_path: Path) -> None:
    rows = [{"one_way_ms": ms, "data_mib": mib, "db_size_mib": mib, "sidecar_join_s": 1.0,
             "sidecar_store_started_s": 0.5, "baseline_join_s": 0.5} for ms in (0, 2, 20) for mib in (0, 64)]
    report.plot_scale_out(rows, tmp_path / "scale-out.png")
    assert (tmp_path / "scale-out.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_footprint_summary_puts_the_largest_sidecar_next_to_the_target() -> None:
    rows = [{"process": "sidecar demo-0", "rss_mib": 64.7, "cpu_idle_pct": 0.37},
            {"process": "etcd demo-0", "rss_mib": 90.0, "cpu_idle_pct": 3.0},  # etcd's figures are not the sidecar's
            {"process": "sidecar demo-1", "rss_mib": 64.9, "cpu_idle_pct": 0.23}]
    assert footprint.summarise(rows) == [
        {"figure": "sidecar RSS (MiB, largest)", "measured": 64.9, "target": "\u2264 50"},
        {"figure": "sidecar idle CPU (% of one core, largest)", "measured": 0.37, "target": "none set"}]
    assert footprint.summarise([]) == []


def test_each_engine_build_gets_its_own_summary_and_headline_row_in_the_order_they_ran() -> None:
    rows = [_row(0, "b-builtin-sidecar-handoff", 3, engine="etcd-3.7.3", longest_stall_s=0.1),
            _row(0, "b-builtin-sidecar-handoff", 3, engine="xline-0.6.1", failed_writes=4, failed_write_requests=6,
                 longest_stall_s=1.2, leader_changes=1),
            _row(0, "c-advanced-planner", 3, engine="xline-0.6.1", longest_stall_s=0.2)]
    summary = report.summarise_builds(rows)
    assert [(r["engine"], r["strategy"]) for r in summary] == [
        ("etcd-3.7.3", "b-builtin-sidecar-handoff"), ("xline-0.6.1", "b-builtin-sidecar-handoff"),
        ("xline-0.6.1", "c-advanced-planner")]
    assert all(set(report.SUMMARIES["engines_summary"]) <= set(r) for r in summary)
    table = report._builds_headline(summary)
    assert "| 3\u21922 members, 0 ms | (b) builtin + sidecar | (c) Advanced + planner |" in table
    assert "| etcd-3.7.3 | 0 (0) / 0.100 s / 0 ms (0) / 0 ms / 0 | - |" in table
    assert "| xline-0.6.1 | 4 (6) / 1.200 s / 0 ms (0) / 0 ms / 1 | 0 (0) / 0.200 s" in table


def test_the_failover_table_says_when_it_was_not_measured_and_shows_its_rows_when_it_was() -> None:
    from tests.bench import operator_cost
    assert "Not measured yet" in report._failover_table([])
    row = {"version": "this", "clusters": 50, "lease_duration_s": 15.0, "resume_s": 3.1, "takeover_s": 15.2,
           "first_reconcile_s": 17.9, "spec_change_s": 18.4, "all_reconciled_s": 21.0, "reconciled": 50}
    table = report._failover_table([row])
    assert table.splitlines()[0] == "| " + " | ".join(operator_cost.FAILOVER_COLUMNS) + " |"
    assert "| this | 50 | 15.0 | 3.1 | 15.2 | 17.9 | 18.4 | 21.0 | 50 |" in table
    assert "operator_failover" in report.TABLES and report.TABLES["operator_failover"] == operator_cost.FAILOVER_COLUMNS
