"""The operator-cost bench's bookkeeping of spec changes that never reach the workload."""

from __future__ import annotations

import pytest

from tests.bench import operator_cost
from tests.bench.operator_cost import MAX_TIMEOUTS, SPEC_CHANGE_TIMEOUT_S

pytestmark = pytest.mark.unit


def test_a_timed_out_change_counts_at_the_timeout_and_enough_of_them_end_the_size() -> None:
    answers = iter([0.1, None, 0.2] + [None] * 10)
    asked: list[str] = []

    def measure(name: str, mark: str) -> float | None:
        asked.append(mark)
        return next(answers)

    latencies, timed_out = operator_cost._spec_changes(measure, [f"c{i}" for i in range(10)], "this-1000")
    assert timed_out == MAX_TIMEOUTS
    assert latencies[:3] == [100.0, SPEC_CHANGE_TIMEOUT_S * 1000, 200.0]
    assert len(asked) == 3 + MAX_TIMEOUTS - 1, "no change is tried after the last allowed timeout"
    assert asked[0] == "this-1000-0"


def test_changes_that_all_land_are_all_measured() -> None:
    latencies, timed_out = operator_cost._spec_changes(lambda name, mark: 0.05, ["a", "b"], "this-10")
    assert (latencies, timed_out) == ([50.0, 50.0], 0)


def test_renewals_are_spread_over_the_interval_and_repeat_every_interval() -> None:
    interval = operator_cost.HEARTBEAT_S
    times = [operator_cost.due(100.0, 0, position, 4) for position in range(4)]
    assert times == [100.0, 100.0 + interval / 4, 100.0 + interval / 2, 100.0 + 3 * interval / 4]
    assert operator_cost.due(100.0, 3, 1, 4) == times[1] + 3 * interval


def test_heartbeat_lateness_is_summarised_in_seconds() -> None:
    late = [0.01] * 98 + [2.5, 31.0]
    assert operator_cost.lateness(late) == {"heartbeat_late_p50_s": 0.01, "heartbeat_late_p99_s": 2.5,
                                            "heartbeat_late_max_s": 31.0}
    assert operator_cost.lateness([]) == {"heartbeat_late_p50_s": 0.0, "heartbeat_late_p99_s": 0.0,
                                          "heartbeat_late_max_s": 0.0}


@pytest.mark.parametrize("clusters, seconds", [(10, 1.0), (1000, 1.0), (3000, 3.0), (5000, 5.0)])
def test_the_settle_poll_slows_down_above_a_thousand_clusters(clusters: int, seconds: float) -> None:
    assert operator_cost.settle_poll_s(clusters) == seconds


def test_the_bench_waits_longer_for_thousands_of_clusters() -> None:
    assert operator_cost.patience_s(50, operator_cost.RESUME_S) == operator_cost.RESUME_S
    assert operator_cost.patience_s(5000, operator_cost.RESUME_S) == 5000 * operator_cost.PATIENCE_PER_CLUSTER_S
    assert operator_cost.patience_s(5000, operator_cost.FAILOVER_TIMEOUT_S) > operator_cost.FAILOVER_TIMEOUT_S
