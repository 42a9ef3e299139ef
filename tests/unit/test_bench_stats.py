from __future__ import annotations

import pytest

from tests.bench.stats import Sample, leader_changes, longest_stall, percentile, window_stats

pytestmark = pytest.mark.unit


def test_percentile_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0
    assert percentile([], 50) == 0.0
    assert percentile([7.0], 99) == 7.0


def test_longest_stall_counts_gaps_between_successes_and_the_window_edges() -> None:
    samples = [Sample(0.0, 1.0, True), Sample(1.0, 1.5, True), Sample(1.5, 3.0, False), Sample(3.0, 4.5, True)]
    assert longest_stall(samples, (0.0, 5.0)) == pytest.approx(3.0)  # 1.5 -> 4.5
    assert longest_stall(samples, (0.5, 1.6)) == pytest.approx(0.5)
    assert longest_stall([], (2.0, 3.5)) == pytest.approx(1.5)


def test_leader_changes_ignores_unknown_observations() -> None:
    assert leader_changes(["a", "a", "", "a", "b", "b", "c"]) == 2
    assert leader_changes([]) == 0


def test_window_stats() -> None:
    samples = [Sample(0.0, 0.01, True), Sample(0.1, 0.12, True), Sample(0.2, 0.9, False), Sample(3.0, 3.01, True)]
    stats = window_stats(samples, (0.0, 1.0))
    assert stats.writes == 3 and stats.failed_writes == 1
    assert stats.p50_ms == pytest.approx(10.0) and stats.p99_ms == pytest.approx(20.0)
    assert stats.longest_stall_s == pytest.approx(0.88)
