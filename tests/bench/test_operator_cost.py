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
