"""The order a roll restarts pods in: a StatefulSet's against raftset's."""

from __future__ import annotations

import pytest

from tests.bench.rolls import replace_target, roll_order

pytestmark = pytest.mark.unit


def test_a_statefulset_rolls_from_the_highest_ordinal_wherever_the_leader_is() -> None:
    assert roll_order("default", leader=2) == [2, 1, 0]
    assert roll_order("default", leader=0, size=5) == [4, 3, 2, 1, 0]


def test_raftset_rolls_the_followers_highest_first_and_the_leader_last() -> None:
    assert roll_order("leader-last", leader=2) == [1, 0, 2]
    assert roll_order("leader-last", leader=0) == [2, 1, 0]
    assert roll_order("leader-last", leader=1, size=5) == [4, 3, 2, 0, 1]


def test_the_follower_replaced_is_the_highest_ordinal_and_the_leader_is_the_one_it_is_placed_on() -> None:
    assert (replace_target("follower"), replace_target("leader")) == (2, 0)
