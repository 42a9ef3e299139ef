"""Unit tests for the statistics the benchmarks added to stats.py."""

from __future__ import annotations

import pytest

from tests.bench.stats import Sample, leader_changes, leaders_in_window, started_in, window_stats

pytestmark = pytest.mark.unit


def test_a_change_right_at_the_window_start_is_counted() -> None:
    observed = [(0.0, "a"), (0.9, "a"), (1.1, "b"), (1.5, "b")]
    assert leaders_in_window(observed, (1.0, 2.0)) == ["a", "b", "b"]
    assert leader_changes(leaders_in_window(observed, (1.0, 2.0))) == 1


def test_unknown_leaders_before_the_window_do_not_hide_the_last_known_one() -> None:
    observed = [(0.0, "a"), (0.5, ""), (1.2, "a"), (3.0, "c")]
    assert leaders_in_window(observed, (1.0, 2.0)) == ["a", "a"]
    assert leaders_in_window(observed, (0.0, 0.6)) == ["a", ""]
    assert leaders_in_window([], (0.0, 1.0)) == []


def test_window_stats_give_the_tail_and_the_sustained_rate() -> None:
    # 1000 puts of 1 ms in a 2 s window, one of them 500 ms and one failed: p99.9 is the slow one.
    samples = [Sample(i * 0.002, i * 0.002 + 0.001, True) for i in range(998)]
    samples += [Sample(1.0, 1.5, True), Sample(1.2, 1.3, False)]
    stats = window_stats(samples, (0.0, 2.0))
    assert stats.writes == 1000 and stats.failed_writes == 1
    assert stats.p50_ms == pytest.approx(1.0) and stats.p99_ms == pytest.approx(1.0)
    assert stats.p999_ms == pytest.approx(500.0)
    assert stats.per_s == pytest.approx(999 / 2.0)


def test_failed_requests_are_counted_by_when_they_started() -> None:
    # A request that started in the window and timed out after it still counts; one before it does not.
    failed = [Sample(0.9, 1.9, False), Sample(1.1, 2.1, False), Sample(2.5, 2.6, False)]
    assert started_in(failed, (1.0, 2.0)) == 1
    assert started_in(failed, (0.0, 3.0)) == 3
