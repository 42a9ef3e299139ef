"""Rolling a changed pod template: followers first, the leader last, one member at a time."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from raftset import contract
from raftset.operator import rolls
from raftset.operator.planner import STEP_REASONS, Plan
from tests.unit.builders import NOW, member, members, raft, raft_member, raft_of

pytestmark = pytest.mark.unit

NEW, OLD = "rev-new", "rev-old"
STEADY = Plan(replicas=3, reserved=(), action="steady", message="3 members as desired")


def pod(ordinal: int, revision: str = OLD, *, age: float = 600, terminating: bool = False) -> rolls.PodRevision:
    return rolls.PodRevision(name=f"demo-{ordinal}", ordinal=ordinal, revision=revision,
                             created=NOW - timedelta(seconds=age), terminating=terminating)


def test_nothing_to_roll_keeps_the_plan() -> None:
    pods = [pod(o, NEW) for o in range(3)]
    assert rolls.next_step(STEADY, NEW, pods, members(range(3), leader=0), NOW) is STEADY


@pytest.mark.parametrize(("leader", "order"), [(0, [2, 1, 0]), (2, [1, 0, 2]), (1, [2, 0, 1])])
def test_followers_go_first_highest_ordinal_first_and_the_leader_last(leader: int, order: list[int]) -> None:
    revisions = {o: OLD for o in range(3)}
    seen = []
    for _ in range(3):
        pods = [pod(o, revisions[o]) for o in range(3)]
        step = rolls.next_step(STEADY, NEW, pods, members(range(3), leader=leader), NOW)
        assert step.action == "roll" and len(step.restart) == 1, step
        victim = contract.ordinal_of(step.restart[0])
        assert (step.hand_off_from is not None) == (victim == leader)
        seen.append(victim)
        revisions[victim] = NEW
    assert seen == order
    assert rolls.next_step(STEADY, NEW, [pod(o, NEW) for o in range(3)], members(range(3), leader=leader), NOW) \
        is STEADY


def test_a_roll_step_is_a_step_with_its_own_reason() -> None:
    step = rolls.next_step(STEADY, NEW, [pod(o) for o in range(3)], members(range(3), leader=0), NOW)
    assert STEP_REASONS[step.action] == "RollingMember"
    assert (step.replicas, step.reserved) == (STEADY.replicas, STEADY.reserved), "a roll never scales"
    assert "demo-2" in step.message and "3 of 3" in step.message


def test_the_leader_is_told_to_hand_off() -> None:
    pods = [pod(0), pod(1, NEW), pod(2, NEW)]
    step = rolls.next_step(STEADY, NEW, pods, members(range(3), leader=0), NOW)
    assert step.restart == ("demo-0",) and step.hand_off_from == "demo-0"
    assert "leadership" in step.message


def test_waits_while_a_pod_restarts() -> None:
    pods = [pod(0), pod(1), pod(2, NEW, terminating=True)]
    step = rolls.next_step(STEADY, NEW, pods, members(range(3), leader=0), NOW)
    assert step.action == "wait" and not step.restart and "demo-2" in step.message


@pytest.mark.parametrize("overrides", [
    {2: {"healthy": False}},
    {2: {"role": contract.ROLE_LEARNER}},
    {2: {"age": 60}},  # stale heartbeat
])
def test_waits_until_every_member_is_a_fresh_healthy_voter(overrides: dict[int, dict[str, Any]]) -> None:
    pods = [pod(0), pod(1), pod(2, NEW)]
    step = rolls.next_step(STEADY, NEW, pods, members(range(3), leader=0, overrides=overrides), NOW)
    assert step.action == "wait" and not step.restart, step


def test_raft_holds_the_roll_where_a_lease_still_says_voter() -> None:
    """demo-1's Lease is fresh and says "voter", but the published membership lists only demo-0
    and demo-2 (demo-1 was removed behind its back): restarting another member would leave one
    voter of two reachable. A learner in Raft holds it the same way."""
    records = members(range(3), leader=0)
    pods = [pod(0), pod(1, NEW), pod(2)]
    assert rolls.next_step(STEADY, NEW, pods, records, NOW, raft=raft_of(records)).restart == ("demo-2",)
    for published, why in ((raft([raft_member(0), raft_member(2)]), "demo-1 (member"),
                           (raft([raft_member(0), raft_member(1, learner=True), raft_member(2)]), "ordinal 1 to join")):
        step = rolls.next_step(STEADY, NEW, pods, records, NOW, raft=published)
        assert step.action == "wait" and not step.restart and why in step.message, step


def test_waits_for_the_restarted_pod_to_report_from_its_new_pod() -> None:
    """Its old Lease may still be fresh: only a renewal after the new pod was created counts."""
    pods = [pod(0), pod(1), pod(2, NEW, age=5)]
    records = members(range(3), leader=0, overrides={2: {"age": 10}})
    step = rolls.next_step(STEADY, NEW, pods, records, NOW)
    assert step.action == "wait" and "demo-2" in step.message
    records = members(range(3), leader=0, overrides={2: {"age": 1}})
    assert rolls.next_step(STEADY, NEW, pods, records, NOW).restart == ("demo-1",)


def test_waits_for_a_leader() -> None:
    step = rolls.next_step(STEADY, NEW, [pod(o) for o in range(3)], members(range(3), leader=None), NOW)
    assert step.action == "wait" and "leader" in step.message


def test_only_kept_ordinals_roll() -> None:
    plan = Plan(replicas=2, reserved=(1,), action="steady", message="")
    pods = [pod(0, NEW), pod(2)]
    step = rolls.next_step(plan, NEW, pods, [member(0, contract.ROLE_LEADER), member(2)], NOW)
    assert step.restart == ("demo-2",)


def workload(generation: int = 2, observed: int = 2, updated: int = 1, replicas: int = 3,
             revision: str | None = NEW) -> dict[str, Any]:
    status: dict[str, Any] = {"observedGeneration": observed, "updatedReplicas": updated, "replicas": replicas}
    if revision:
        status["updateRevision"] = revision
    return {"metadata": {"generation": generation}, "status": status}


@pytest.mark.parametrize(("obj", "is_pending", "revision"), [
    (workload(), True, NEW),
    (workload(updated=3), False, NEW),
    (workload(observed=1), False, None),  # the controller has not seen our last write
    (workload(revision=None), False, None),
    ({}, False, None),
])
def test_pending_reads_only_the_workload_status(obj: dict[str, Any], is_pending: bool, revision: str | None) -> None:
    assert rolls.pending(obj) is is_pending
    assert rolls.update_revision(obj) == revision


def test_pod_revisions_ignore_strays() -> None:
    def raw(name: str, **meta: Any) -> dict[str, Any]:
        return {"metadata": {"name": name, "creationTimestamp": "2026-01-01T11:50:00Z",
                             "labels": {rolls.REVISION_LABEL: OLD}, **meta}}
    found = rolls.pod_revisions([raw("demo-1"), raw("demo-0", deletionTimestamp="x"), raw("other-0"),
                                 raw("demo-x"), raw("demo-extra-1")], "demo")
    assert [(p.name, p.terminating, p.revision) for p in found] == [("demo-0", True, OLD), ("demo-1", False, OLD)]


def test_a_restarted_member_reports_for_one_refresh_before_the_next_goes() -> None:
    pods = [pod(0), pod(1), pod(2, NEW, age=12)]
    settle = timedelta(seconds=10)
    just_back = members(range(3), leader=0, overrides={2: {"age": 5}})  # renewed 7 s after its pod came
    step = rolls.next_step(STEADY, NEW, pods, just_back, NOW, settle=settle)
    assert step.action == "wait" and "demo-2" in step.message
    settled = members(range(3), leader=0, overrides={2: {"age": 1}})  # 11 s after
    assert rolls.next_step(STEADY, NEW, pods, settled, NOW, settle=settle).restart == ("demo-1",)


def test_a_leader_rolled_without_hand_off_is_told_an_election_follows() -> None:
    pods = [pod(0), pod(1, NEW), pod(2, NEW)]
    step = rolls.next_step(STEADY, NEW, pods, members(range(3), leader=0), NOW, hand_off=False)
    assert step.restart == ("demo-0",) and step.hand_off_from == "demo-0" and step.hand_off is False
    assert "without a hand-off: an election follows" in step.message
    assert [e[:2] for e in step.step_events()] == [("Normal", "RollingMember"), ("Warning", "LeaderLeavesWithoutHandOff")]
