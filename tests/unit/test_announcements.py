"""Which Events a status change deserves, and which scale-away marks are stale: pure decisions."""

from __future__ import annotations

import pytest

from raftset.operator.pure.planner import Plan, stale_marks
from raftset.operator.pure.status import announcements

pytestmark = pytest.mark.unit


def degraded(status: str, message: str = "m", reason: str = "QuorumLost") -> dict:
    return {"conditions": [{"type": "Degraded", "status": status, "reason": reason, "message": message}]}


def test_leader_change_is_announced_once_both_are_known() -> None:
    assert announcements({"leader": "kv-0"}, {"leader": "kv-1"}) == [
        ("Normal", "LeaderChanged", "leader moved from kv-0 to kv-1")]
    assert announcements({"leader": ""}, {"leader": "kv-1"}) == []
    assert announcements({"leader": "kv-1"}, {"leader": "kv-1"}) == []


def test_degraded_is_warned_on_entry_and_on_a_new_message_only() -> None:
    assert announcements({}, degraded("True")) == [("Warning", "QuorumLost", "m")]
    assert announcements(degraded("True"), degraded("True")) == []
    assert announcements(degraded("True", "a"), degraded("True", "b")) == [("Warning", "QuorumLost", "b")]


def test_recovery_is_announced() -> None:
    assert announcements(degraded("True"), degraded("False")) == [
        ("Normal", "Recovered", "the cluster is no longer degraded")]
    assert announcements(degraded("False"), degraded("False")) == []


def test_stale_marks_are_kept_pods_that_are_not_this_steps_victims() -> None:
    plan = Plan(replicas=3, reserved=(2,), action="scale-in", message="", scale_away=("kv-3",))
    assert plan.kept == [0, 1, 3]
    assert stale_marks("kv", plan, ["kv-3", "kv-1", "kv-2", "kv-0"]) == ["kv-0", "kv-1"]
    assert stale_marks("kv", plan, []) == []


@pytest.mark.parametrize("stray", ["kv-canary", "kv-", "kv", "other-1", "kv-1-debug", "kv-\u0661", "kv-0x1"])
def test_a_marked_stray_pod_is_left_alone_and_stops_nothing(stray: str) -> None:
    """Issue 11 i: before the fix `kv-canary` raised ValueError on every reconcile (wedged), and
    `other-1` (another name, the cluster's labels) lost its mark as if it were ordinal 1."""
    plan = Plan(replicas=3, reserved=(), action="steady", message="")
    assert stale_marks("kv", plan, [stray, "kv-1"]) == ["kv-1"]
