"""`make test`'s split of the tests between its two workers (tests/harness/work_units.py)."""

from __future__ import annotations

import pytest

from tests.harness import work_units
from tests.harness.work_units import E2E, TIERS, next_unit, role_of, unit_of

pytestmark = pytest.mark.unit

FULLSTACK = "tests/e2e/test_fullstack.py"
CONTROLPLANE = "tests/e2e/test_controlplane.py"
SMOKE = "tests/bench/test_smoke.py"
MAKE_RUN = "tests/e2e/test_make_run.py"


def test_the_tiers_are_one_unit_each_e2e_file_and_each_standalone_test_its_own() -> None:
    assert unit_of("tests/unit/test_planner.py::test_x[a-b]") == TIERS
    assert unit_of("tests/etcd/test_repair.py::test_y") == TIERS
    assert unit_of("tests/k8s/test_validation.py::test_z") == TIERS
    assert unit_of("tests/bench/test_report.py::test_r") == TIERS
    assert unit_of("tests/e2e/test_fullstack.py::test_u[etcd-3.7.3-StatefulSet]") == FULLSTACK
    assert unit_of("tests/bench/test_smoke.py::test_s[etcd-3.7.3]") == SMOKE
    assert unit_of("tests/e2e/test_make_run.py::test_m[a-b]") == MAKE_RUN


def test_the_first_worker_takes_the_tiers_and_the_second_the_longest_e2e_file() -> None:
    queued = [TIERS, CONTROLPLANE, FULLSTACK, SMOKE, MAKE_RUN]
    assert (role_of(queued), next_unit(queued, role_of(queued))) == (TIERS, TIERS)
    queued.remove(TIERS)
    assert (role_of(queued), next_unit(queued, role_of(queued))) == (E2E, FULLSTACK)


def test_the_e2e_worker_takes_a_standalone_unit_only_when_no_e2e_file_is_left() -> None:
    assert next_unit([CONTROLPLANE, SMOKE, MAKE_RUN], E2E) == CONTROLPLANE
    assert next_unit([SMOKE, MAKE_RUN], E2E) == SMOKE


def test_the_tiers_worker_takes_the_standalone_units_then_e2e_files_shortest_first() -> None:
    assert next_unit([FULLSTACK, CONTROLPLANE, MAKE_RUN, SMOKE], TIERS) == SMOKE
    assert next_unit([FULLSTACK, CONTROLPLANE, MAKE_RUN], TIERS) == MAKE_RUN
    assert next_unit([FULLSTACK, CONTROLPLANE], TIERS) == CONTROLPLANE


def test_a_file_missing_from_the_table_is_still_run() -> None:
    new = "tests/e2e/test_something_new.py"
    assert next_unit([new], E2E) == next_unit([new], TIERS) == new


def finish_times(tiers_s: float, seconds: dict[str, int]) -> dict[str, float]:
    """When each of two workers ends, each taking `next_unit` whenever it is free."""
    queued = [TIERS, *seconds]
    free_at = {"gw0": 0.0, "gw1": 0.0}
    roles: dict[str, str] = {}
    while queued:
        worker = min(free_at, key=lambda w: (free_at[w], w))
        role = roles.setdefault(worker, role_of(queued))
        unit = next_unit(queued, role)
        queued.remove(unit)
        free_at[worker] += tiers_s if unit == TIERS else seconds[unit]
    return free_at


def test_with_ci_s_durations_the_two_workers_end_within_one_short_e2e_file() -> None:
    ends = finish_times(1450, work_units.SECONDS)
    e2e_files = {u: s for u, s in work_units.SECONDS.items() if u.startswith(E2E) and u not in work_units.STANDALONE}
    assert abs(ends["gw0"] - ends["gw1"]) <= max(s for s in e2e_files.values() if s < 100)
    assert max(ends.values()) < sum(e2e_files.values()) + work_units.SECONDS[MAKE_RUN]
