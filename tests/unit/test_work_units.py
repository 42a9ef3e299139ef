"""`make test`'s split of the tests between its workers (tests/harness/work_units.py)."""

from __future__ import annotations

import pytest

from tests.harness import work_units
from tests.harness.work_units import (DEFAULT_PER_TEST_SECONDS, PER_TEST_SECONDS, REAL_TIER, UNIT_TIER, estimate, next_unit,
                                      unit_of)

pytestmark = pytest.mark.unit

FULLSTACK = "tests/e2e/test_fullstack.py"
CONTROLPLANE = "tests/e2e/test_controlplane.py"
SMOKE = "tests/bench/test_smoke.py"
PLANE_START_S = 25  # a worker's own control plane, before its first e2e file
WORKERS = 3


def test_the_unit_tier_is_one_unit_and_every_other_file_its_own() -> None:
    assert unit_of("tests/unit/test_planner.py::test_x[a-b]") == unit_of("tests/unit/test_views.py::t") == UNIT_TIER
    assert unit_of("tests/etcd/test_repair.py::test_y") == "tests/etcd/test_repair.py"
    assert unit_of("tests/k8s/test_validation.py::test_z") == "tests/k8s/test_validation.py"
    assert unit_of("tests/bench/test_smoke.py::test_s[etcd-3.7.3]") == SMOKE
    assert unit_of("tests/e2e/test_fullstack.py::test_u[etcd-3.7.3-StatefulSet]") == FULLSTACK


def test_the_real_tier_is_one_unit_so_its_labs_never_run_side_by_side() -> None:
    assert unit_of("tests/real/test_nodes.py::test_a") == unit_of("tests/real/test_operator_tls.py::t[etcd]") == REAL_TIER
    assert next_unit({REAL_TIER: 20, FULLSTACK: 20, UNIT_TIER: 2800}) == REAL_TIER  # the longest: it starts first


def test_a_free_worker_takes_the_longest_queued_unit() -> None:
    assert next_unit({CONTROLPLANE: 1, FULLSTACK: 20, UNIT_TIER: 2800}) == FULLSTACK
    assert next_unit({CONTROLPLANE: 1, UNIT_TIER: 2800}) == UNIT_TIER


def test_a_file_missing_from_the_table_is_estimated_by_its_number_of_tests_and_still_run() -> None:
    new = "tests/etcd/test_something_new.py"
    assert estimate(new, 10) == 10 * PER_TEST_SECONDS["tests/etcd/"]
    assert estimate("tests/other/test_x.py", 3) == 3 * DEFAULT_PER_TEST_SECONDS
    assert next_unit({new: 1}) == new
    assert next_unit({new: 1000, FULLSTACK: 1}) == new


def finish_times(units: dict[str, float], workers: int) -> dict[str, float]:
    """When each worker ends, each taking `next_unit` whenever it is free and taking `units[u]`
    seconds for it (plus a control plane's start before its first e2e file)."""
    queued = {unit: 1 for unit in units}
    free_at = {f"gw{i}": 0.0 for i in range(workers)}
    planes: set[str] = set()
    while queued:
        worker = min(free_at, key=lambda w: (free_at[w], w))
        unit = next_unit(queued)
        del queued[unit]
        if unit.startswith("tests/e2e/") and worker not in planes:
            planes.add(worker)
            free_at[worker] += PLANE_START_S
        free_at[worker] += units[unit]
    return free_at


def test_with_ci_s_durations_the_workers_end_close_together() -> None:
    ends = finish_times(work_units.SECONDS, WORKERS)
    total = sum(work_units.SECONDS.values()) + WORKERS * PLANE_START_S
    assert max(ends.values()) - min(ends.values()) <= 200, ends
    assert max(ends.values()) <= total / WORKERS + 200, ends


def test_one_unit_longer_than_all_others_together_sets_the_run_s_length() -> None:
    units = {FULLSTACK: 5000.0, CONTROLPLANE: 30.0, UNIT_TIER: 90.0}
    assert max(finish_times(units, WORKERS).values()) == 5000 + PLANE_START_S


def test_the_timeline_groups_each_workers_tests_into_units_in_the_order_they_ran() -> None:
    finished = [
        ("gw1", "tests/e2e/test_operator.py::a", 40.0),
        ("gw0", "tests/unit/test_x.py::a", 1.0),
        ("gw0", "tests/etcd/test_y.py::b", 300.0),
        ("gw1", "tests/e2e/test_operator.py::b", 90.0),
        ("gw1", "tests/e2e/test_backups.py::a", 150.0),
        ("gw0", "tests/e2e/test_membership.py::a", 400.0),
    ]
    assert work_units.spans(finished) == {
        "gw0": [(UNIT_TIER, 0.0, 1.0), ("tests/etcd/test_y.py", 1.0, 300.0), ("tests/e2e/test_membership.py", 300.0, 400.0)],
        "gw1": [("tests/e2e/test_operator.py", 0.0, 90.0), ("tests/e2e/test_backups.py", 90.0, 150.0)],
    }
    assert work_units.timeline(finished) == [
        "gw0: done at 400 s",
        "       0-     1 s  tests/unit/",
        "       1-   300 s  tests/etcd/test_y.py",
        "     300-   400 s  tests/e2e/test_membership.py",
        "gw1: done at 150 s",
        "       0-    90 s  tests/e2e/test_operator.py",
        "      90-   150 s  tests/e2e/test_backups.py",
    ]


def test_the_timeline_ends_with_the_real_tiers_own_time() -> None:
    finished = [
        ("gw0", "tests/real/test_nodes.py::a", 200.0),
        ("gw0", "tests/real/test_operator_tls.py::b[etcd]", 900.0),
        ("gw0", "tests/etcd/test_y.py::b", 950.0),
        ("gw1", "tests/unit/test_x.py::a", 30.0),
    ]
    assert work_units.timeline(finished)[-1] == f"real tier: 900 s ({REAL_TIER}, one worker)"
    assert not any(line.startswith("real tier") for line in work_units.timeline(finished[2:]))
