"""Scaled away or restarting, and what a leaving member does."""

from __future__ import annotations

import pytest

from raftset import contract
from raftset.sidecar.pure.leave import Fate, decide, fate, transfer_target, wants_terminating
from raftset.workloads import ADVANCED_STATEFULSET, STATEFULSET
from tests.unit.sidecar_data import member, mid, status

pytestmark = pytest.mark.unit


def sts(replicas: int, reserved=None, deleting: bool = False) -> dict:
    meta: dict = {"name": "demo", "uid": "u1"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec: dict = {"replicas": replicas}
    if reserved is not None:
        spec["reserveOrdinals"] = reserved
    return {"metadata": meta, "spec": spec}


def pod(annotation: str | None = None) -> dict:
    meta: dict = {"name": "demo-1", "deletionTimestamp": "2026-01-01T00:00:00Z"}
    if annotation is not None:
        meta["annotations"] = {contract.ANNOTATION_SCALE_AWAY: annotation}
    return {"metadata": meta}


@pytest.mark.parametrize(("ordinal", "replicas", "away"), [
    (0, 3, False), (2, 3, False), (2, 2, True), (3, 3, True), (1, 1, True), (0, 1, False),
])
def test_builtin_statefulset_scales_away_the_highest_ordinals(ordinal: int, replicas: int, away: bool) -> None:
    assert fate(ordinal, STATEFULSET, sts(replicas), pod()).scaled_away is away


def test_builtin_statefulset_ignores_reserve_ordinals() -> None:
    assert not fate(1, STATEFULSET, sts(3, reserved=[1]), pod()).scaled_away


@pytest.mark.parametrize(("ordinal", "replicas", "reserved", "away"), [
    (1, 2, [1], True),       # the reserved ordinal
    (2, 2, [1], False),      # kept because 1 is reserved
    (3, 2, [1], True),
    (0, 3, ["0-1"], True),   # 0 and 1 reserved -> kept [2, 3, 4]
    (4, 3, ["0-1"], False),
])
def test_advanced_statefulset_respects_reserved_ordinals(ordinal, replicas, reserved, away) -> None:
    assert fate(ordinal, ADVANCED_STATEFULSET, sts(replicas, reserved), pod()).scaled_away is away


@pytest.mark.parametrize("value", ["true", "True", "1", "false", ""])
def test_operator_mark_alone_never_removes_a_kept_member(value: str) -> None:
    got = fate(1, STATEFULSET, sts(3), pod(value))
    assert not got.scaled_away
    assert ("stale mark" in got.reason) is (value.lower() in ("true", "1"))


def test_marked_and_not_kept_is_scaled_away() -> None:
    assert fate(1, ADVANCED_STATEFULSET, sts(2, [1]), pod("true")).scaled_away


def test_cluster_deletion_keeps_membership() -> None:
    assert not fate(5, STATEFULSET, None, pod("true")).scaled_away
    assert not fate(5, STATEFULSET, sts(0, deleting=True), pod("true")).scaled_away


MEMBERS = [member(0), member(1), member(2)]
ORD = {mid(i): i for i in range(3)}


def statuses(leader: int = 0, down=()):
    return {mid(i): None if i in down else status(i, leader=leader, applied=100 + i) for i in range(3)}


def test_restarting_leader_hands_off_and_keeps_membership() -> None:
    got = decide(Fate(False, "restart"), mid(2), MEMBERS, statuses(leader=2), ORD, [0, 1, 2])
    assert got.move_leader_to == mid(1) and not got.remove  # most caught up among the others


def test_restarting_follower_does_nothing() -> None:
    got = decide(Fate(False, "restart"), mid(1), MEMBERS, statuses(leader=0), ORD, [0, 1, 2])
    assert got.move_leader_to is None and not got.remove


def test_scaled_away_leader_hands_off_then_removes_itself() -> None:
    got = decide(Fate(True, "away"), mid(2), MEMBERS, statuses(leader=2), ORD, [0, 1])
    assert got.move_leader_to in (mid(0), mid(1)) and got.remove


def test_scaled_away_follower_removes_itself_without_hand_off() -> None:
    got = decide(Fate(True, "away"), mid(2), MEMBERS, statuses(leader=0), ORD, [0, 1])
    assert got.move_leader_to is None and got.remove


def test_scaled_away_member_keeps_membership_when_removal_would_lose_quorum() -> None:
    got = decide(Fate(True, "away"), mid(2), MEMBERS, statuses(leader=2, down=[1]), ORD, [0, 1])
    assert not got.remove and "quorum" in got.reason
    assert got.move_leader_to == mid(0)


def test_already_removed_member_does_nothing() -> None:
    got = decide(Fate(True, "away"), mid(9), MEMBERS, statuses(), ORD, [0, 1])
    assert not got.remove and "already removed" in got.reason


def test_scaled_away_learner_is_removed_with_voters_healthy() -> None:
    members = [member(0), member(1), member(2), member(3, learner=True)]
    sts_ = {**statuses(), mid(3): status(3, learner=True)}
    got = decide(Fate(True, "away"), mid(3), members, sts_, {**ORD, mid(3): 3}, [0, 1, 2])
    assert got.remove


def test_transfer_prefers_kept_ordinals_then_most_caught_up() -> None:
    members = [member(i) for i in range(5)]
    sts_ = {mid(i): status(i, leader=4, applied=a) for i, a in enumerate([10, 50, 20, 90, 5])}
    ords = {mid(i): i for i in range(5)}
    # 3 is most caught up but scaled away too: pick 1 among the kept.
    assert transfer_target(mid(4), members, sts_, ords, [0, 1, 2]) == mid(1)


def test_transfer_skips_learners_unhealthy_and_erroring_members() -> None:
    members = [member(0), member(1, learner=True), member(2), member(3)]
    sts_ = {mid(0): status(0, leader=0), mid(1): status(1, learner=True, applied=999), mid(2): None,
            mid(3): status(3, errors=("NOSPACE",), applied=999)}
    assert transfer_target(mid(0), members, sts_, {mid(i): i for i in range(4)}, [0, 1, 2, 3]) is None


def test_transfer_ignores_the_alarms_every_member_reports() -> None:
    # etcd lists every active alarm on every member's Status: a CORRUPT replacement of the leader
    # must still find a successor.
    alarm = f"memberID:{mid(0)} alarm:CORRUPT"
    members = [member(0), member(1), member(2)]
    sts_ = {mid(i): status(i, errors=(alarm,), applied=10 + i) for i in range(3)}
    assert transfer_target(mid(0), members, sts_, {mid(i): i for i in range(3)}, [0, 1, 2]) == mid(2)


@pytest.mark.parametrize("away", [True, False])
def test_leader_of_an_engine_without_safe_hand_off_never_moves_leadership(away: bool) -> None:
    got = decide(Fate(away, "why"), mid(2), MEMBERS, statuses(leader=2), ORD, [0, 1], hand_off=False)
    assert got.move_leader_to is None and got.remove is away
    assert "no leadership hand-off" in got.reason


def test_follower_reason_is_unchanged_without_hand_off() -> None:
    got = decide(Fate(True, "away"), mid(2), MEMBERS, statuses(leader=0), ORD, [0, 1], hand_off=False)
    assert got.reason == "away" and got.remove


def test_a_scaled_away_member_removes_itself_where_only_its_removal_keeps_quorum() -> None:
    """Issue 30, bug 5, from the leaving side: 4 voters, ordinal 1 down, ordinal 3 scaled away. Its pod
    stops whatever it decides: removed, 2 of the 3 voters left answer; kept, 2 of 4 would. So it removes
    itself (the removal needs its own vote, which the preStop path gives before the store stops). The
    step itself is refused earlier, by the operator's guard and by clean's, which count the 4."""
    members = [member(i) for i in range(4)]
    sts_ = {mid(i): None if i == 1 else status(i, leader=0) for i in range(4)}
    got = decide(Fate(True, "away"), mid(3), members, sts_, {mid(i): i for i in range(4)}, [0, 1, 2])
    assert got.remove, got


def test_a_leader_hands_off_only_to_a_member_whose_pod_is_not_terminating() -> None:
    """Every pod deleted at once (a lights-out, a namespace-wide `kubectl delete pods`): a target that is
    itself terminating would try to hand leadership on again and time out, staggering the stops."""
    got = decide(Fate(False, "restart"), mid(2), MEMBERS, statuses(leader=2), ORD, [0, 1, 2], terminating={1})
    assert got.move_leader_to == mid(0)
    alone = decide(Fate(False, "restart"), mid(2), MEMBERS, statuses(leader=2), ORD, [0, 1, 2], terminating={0, 1})
    assert alone.move_leader_to is None and "terminating" in alone.reason


def test_the_terminating_pods_are_read_only_by_a_leader_that_would_hand_off() -> None:
    assert wants_terminating(statuses(leader=2), mid(2), hand_off=True)
    assert not wants_terminating(statuses(leader=0), mid(2), hand_off=True)
    assert not wants_terminating(statuses(leader=2), mid(2), hand_off=False)
