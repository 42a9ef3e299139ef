"""Unit tests for the statistics the benchmarks added to stats.py."""

from __future__ import annotations

import pytest

from tests.bench.stats import leader_changes, leaders_in_window

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
