"""Unit tests for the pure parts of the real-node scale-in bench: when a cluster has settled, who led
when, the load's observations across the namespace boundary, and the page's side-by-side rows."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from tests.bench import nodeload, report, scalein, scalein_real
from tests.bench.load import Observed
from tests.bench.stats import Sample

pytestmark = pytest.mark.unit


def _cluster(members: list[str], *, leader: str = "demo-4", progressing: str = "False", observed: int = 2,
             healthy: bool = True) -> dict[str, Any]:
    return {"metadata": {"generation": 2},
            "status": {"observedGeneration": observed, "leader": leader,
                       "members": [{"name": m, "healthy": healthy} for m in members],
                       "conditions": [{"type": "Progressing", "status": progressing}]}}


KEPT = ["demo-0", "demo-1", "demo-4"]


def test_a_cluster_settles_on_its_kept_ordinals_only_once_status_and_the_ready_pods_agree() -> None:
    assert scalein_real.settled(_cluster(KEPT), set(KEPT), 3) == [0, 1, 4]
    assert scalein_real.settled(_cluster(KEPT), {*KEPT, "demo-2"}, 3) is None  # a removed member's pod still Ready
    assert scalein_real.settled(_cluster(KEPT, progressing="True"), set(KEPT), 3) is None
    assert scalein_real.settled(_cluster(KEPT, observed=1), set(KEPT), 3) is None  # the last spec not seen yet
    assert scalein_real.settled(_cluster(KEPT, healthy=False), set(KEPT), 3) is None
    assert scalein_real.settled(_cluster(KEPT, leader=""), set(KEPT), 3) is None
    assert scalein_real.settled(_cluster([*KEPT, "demo-2"]), {*KEPT, "demo-2"}, 3) is None


def test_the_leader_at_a_moment_is_the_last_one_the_load_saw_by_then() -> None:
    observed = Observed(leaders=[(1.0, "a"), (2.0, ""), (3.0, "b"), (5.0, "a")])
    ordinals = {0xa: 4, 0xb: 0}
    assert scalein_real.leader_at(observed, 2.5, ordinals) == 4  # an empty answer is no leader change
    assert scalein_real.leader_at(observed, 3.0, ordinals) == 0
    assert scalein_real.leader_at(observed, 9.0, ordinals) == 4
    assert scalein_real.leader_at(observed, 0.5, ordinals) is None


def test_what_the_load_saw_in_the_node_comes_back_whole() -> None:
    observed = Observed(writes=[Sample(1.0, 1.2, True), Sample(1.3, 2.5, False)], reads=[Sample(1.0, 1.1, True)],
                        failed_write_requests=[Sample(1.3, 2.3, False)], failed_read_requests=[],
                        leaders=[(1.0, "a")], errors=["put: timeout"])
    document = json.loads(json.dumps(dataclasses.asdict(observed)))  # as it crosses the process boundary
    assert nodeload.observed_from(document) == observed


def _row(strategy: str, failed: int, **values: Any) -> dict[str, Any]:
    row: dict[str, Any] = {c: 0 for c in scalein.COLUMNS}
    row.update(strategy=strategy, from_members=5, to_members=3, failed_writes=failed, **values)
    return row


def test_the_page_puts_each_real_row_beside_its_loopback_row_at_0_ms() -> None:
    loopback = report.summarise([_row("b-builtin-sidecar-handoff", 1), _row("c-operator-advanced", 0),
                                 _row("b-builtin-sidecar-handoff", 9, one_way_ms=20)])
    real = [_row("c-operator-advanced", 0, longest_stall_s=0.05), _row("b-builtin-sidecar-handoff", 2)]
    text = report._real_headline({"scale_in_summary": loopback, "scale_in_real": real})
    lines = text.splitlines()
    assert lines[0] == "| 5\u21923 members | loopback, 0 ms one-way | real nodes |"
    b, c = lines[2], lines[3]  # the headline's order: (b) before (c)
    assert b.startswith(f"| {report.LABELS['b-builtin-sidecar-handoff']} | 1 (0) /") and b.count(" / ") == 8
    assert "| 2 (0) / " in b  # the real row's failed writes, not the 20 ms row's
    assert c.startswith(f"| {report.LABELS['c-operator-advanced']} | 0 (0) /") and "0.050 s" in c
    assert "not measured yet" in report._real_headline({"scale_in_summary": loopback})
