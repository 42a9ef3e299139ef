"""`make test`'s split of the tests between its two workers (tests/harness/work_units.py)."""

from __future__ import annotations

import pytest

from tests.harness import work_units
from tests.harness.work_units import E2E, TIERS, next_unit, role_of, unit_of

pytestmark = pytest.mark.unit

FULLSTACK = "tests/e2e/test_fullstack.py"
CONTROLPLANE = "tests/e2e/test_controlplane.py"
OPERATOR_HA = "tests/e2e/test_operator_ha.py"
PLANE_START_S = 25  # the tiers' worker's own control plane, before its first e2e file


def test_the_tiers_and_the_bench_are_one_unit_and_each_e2e_file_its_own() -> None:
    assert unit_of("tests/unit/test_planner.py::test_x[a-b]") == TIERS
    assert unit_of("tests/etcd/test_repair.py::test_y") == TIERS
    assert unit_of("tests/k8s/test_validation.py::test_z") == TIERS
    assert unit_of("tests/bench/test_smoke.py::test_s[etcd-3.7.3]") == TIERS
    assert unit_of("tests/e2e/test_fullstack.py::test_u[etcd-3.7.3-StatefulSet]") == FULLSTACK


def test_the_first_worker_takes_the_tiers_and_the_second_the_longest_e2e_file() -> None:
    queued = [FULLSTACK, CONTROLPLANE, TIERS]
    assert (role_of(queued), next_unit(queued, role_of(queued))) == (TIERS, TIERS)
    queued.remove(TIERS)
    assert (role_of(queued), next_unit(queued, role_of(queued))) == (E2E, FULLSTACK)


def test_after_the_tiers_their_worker_takes_e2e_files_shortest_first() -> None:
    assert next_unit([FULLSTACK, OPERATOR_HA, CONTROLPLANE], TIERS) == CONTROLPLANE
    assert next_unit([FULLSTACK, OPERATOR_HA, CONTROLPLANE], E2E) == FULLSTACK


def test_a_file_missing_from_the_table_is_still_run() -> None:
    new = "tests/e2e/test_something_new.py"
    assert next_unit([new], E2E) == next_unit([new], TIERS) == new


def finish_times(tiers_s: float) -> dict[str, float]:
    """When each of two workers ends, each taking `next_unit` whenever it is free."""
    queued = [TIERS, *work_units.SECONDS]
    free_at = {"gw0": 0.0, "gw1": 0.0}
    roles: dict[str, str] = {}
    planes: set[str] = set()
    while queued:
        worker = min(free_at, key=lambda w: (free_at[w], w))
        role = roles.setdefault(worker, role_of(queued))
        unit = next_unit(queued, role)
        queued.remove(unit)
        if unit == TIERS:
            free_at[worker] += tiers_s
            continue
        if worker not in planes:
            planes.add(worker)
            free_at[worker] += PLANE_START_S
        free_at[worker] += work_units.SECONDS[unit]
    return free_at


@pytest.mark.parametrize("tiers_s", [900, 1500, 2000])
def test_with_ci_s_durations_the_two_workers_end_close_together_and_sooner(tiers_s: int) -> None:
    ends = finish_times(tiers_s)
    e2e_alone = PLANE_START_S + sum(work_units.SECONDS.values())  # the plain split's e2e worker
    assert abs(ends["gw0"] - ends["gw1"]) <= 200 + PLANE_START_S, ends
    assert max(ends.values()) <= (tiers_s + e2e_alone + PLANE_START_S) / 2 + 200, ends
    assert max(ends.values()) < e2e_alone


def test_tiers_longer_than_every_e2e_file_together_are_the_run_as_before() -> None:
    assert finish_times(4000) == {"gw0": 4000, "gw1": PLANE_START_S + sum(work_units.SECONDS.values())}


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
        "gw0": [(TIERS, 0.0, 300.0), ("tests/e2e/test_membership.py", 300.0, 400.0)],
        "gw1": [("tests/e2e/test_operator.py", 0.0, 90.0), ("tests/e2e/test_backups.py", 90.0, 150.0)],
    }
    assert work_units.timeline(finished) == [
        "gw0: done at 400 s",
        "       0-   300 s  tiers",
        "     300-   400 s  tests/e2e/test_membership.py",
        "gw1: done at 150 s",
        "       0-    90 s  tests/e2e/test_operator.py",
        "      90-   150 s  tests/e2e/test_backups.py",
    ]
