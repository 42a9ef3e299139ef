"""Rolling a changed pod template: followers first, the leader last, one member at a time."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from raftset import contract
from raftset.operator.pure import rolls
from raftset.operator.pure.objects import Incarnation
from raftset.operator.pure.planner import STEP_REASONS, Plan
from tests.unit.builders import NOW, member, members, raft, raft_member, raft_of

pytestmark = pytest.mark.unit

NEW, OLD = "rev-new", "rev-old"
STEADY = Plan(replicas=3, reserved=(), action="steady", message="3 members as desired")


def pod(ordinal: int, revision: str = OLD, *, terminating: bool = False, running: bool = True,
        ready: bool = True) -> rolls.PodRevision:
    return rolls.PodRevision(name=f"demo-{ordinal}", ordinal=ordinal, revision=revision,
                             uid=f"uid-{ordinal}-{revision}", running=running, terminating=terminating, ready=ready)


def judged(ordinal: int, revision: str = OLD) -> Incarnation:
    """The incarnation of `pod(ordinal, revision)`, as a roll's restart names it."""
    return Incarnation(f"demo-{ordinal}", f"uid-{ordinal}-{revision}")


def step_of(plan: Plan, pods: list[rolls.PodRevision], records: list[Any], *,
            listed: dict[int, float] | None = None, **kwargs: Any) -> Plan:
    """next_restart with each pod first listed by the operator `listed[ordinal]` seconds ago (default 600)."""
    seen = {p.name: rolls.PodSighting(p.uid, NOW - timedelta(seconds=(listed or {}).get(p.ordinal, 600)))
            for p in pods}
    return rolls.next_restart(plan, NEW, pods, records, NOW, seen=seen, **kwargs)


def test_nothing_to_roll_keeps_the_plan() -> None:
    pods = [pod(o, NEW) for o in range(3)]
    assert step_of(STEADY, pods, members(range(3), leader=0)) is STEADY


@pytest.mark.parametrize(("leader", "order"), [(0, [2, 1, 0]), (2, [1, 0, 2]), (1, [2, 0, 1])])
def test_followers_go_first_highest_ordinal_first_and_the_leader_last(leader: int, order: list[int]) -> None:
    revisions = {o: OLD for o in range(3)}
    seen = []
    for _ in range(3):
        pods = [pod(o, revisions[o]) for o in range(3)]
        step = step_of(STEADY, pods, members(range(3), leader=leader))
        assert step.action == "roll" and len(step.restart) == 1, step
        victim = contract.ordinal_of(step.restart[0].name)
        assert (step.hand_off_from is not None) == (victim == leader)
        seen.append(victim)
        revisions[victim] = NEW
    assert seen == order
    assert step_of(STEADY, [pod(o, NEW) for o in range(3)], members(range(3), leader=leader)) \
        is STEADY


def test_a_roll_step_is_a_step_with_its_own_reason() -> None:
    step = step_of(STEADY, [pod(o) for o in range(3)], members(range(3), leader=0))
    assert STEP_REASONS[step.action] == "RollingMember"
    assert (step.replicas, step.reserved) == (STEADY.replicas, STEADY.reserved), "a roll never scales"
    assert "demo-2" in step.message and "3 of 3" in step.message


def test_the_leader_is_told_to_hand_off() -> None:
    pods = [pod(0), pod(1, NEW), pod(2, NEW)]
    step = step_of(STEADY, pods, members(range(3), leader=0))
    assert step.restart == (judged(0),) and step.hand_off_from == "demo-0"
    assert "leadership" in step.message


def test_waits_for_a_restarted_pod_to_be_ready_even_once_its_member_reported_healthy() -> None:
    """e2e, before: kv-0 deleted while {'kv-1': False, 'kv-2': True}: the restarted kv-1 had reported
    a healthy voter (its sidecar's heartbeat) before the kubelet's probe made it Ready, and the next
    deletion took a second member out of the client Service."""
    pods = [pod(0), pod(1, NEW, ready=False), pod(2)]
    step = step_of(STEADY, pods, members(range(3), leader=2))
    assert step.action == "wait" and not step.restart, step
    assert "demo-1 to be Ready" in step.message
    pods[1] = dataclasses.replace(pods[1], ready=True)
    assert step_of(STEADY, pods, members(range(3), leader=2)).restart == (judged(0),)


def test_waits_while_a_pod_restarts() -> None:
    pods = [pod(0), pod(1), pod(2, NEW, terminating=True)]
    step = step_of(STEADY, pods, members(range(3), leader=0))
    assert step.action == "wait" and not step.restart and "demo-2" in step.message


@pytest.mark.parametrize("overrides", [
    {2: {"healthy": False}},
    {2: {"role": contract.ROLE_LEARNER}},
    {2: {"age": 60}},  # stale heartbeat
])
def test_waits_until_every_member_is_a_fresh_healthy_voter(overrides: dict[int, dict[str, Any]]) -> None:
    pods = [pod(0), pod(1), pod(2, NEW)]
    step = step_of(STEADY, pods, members(range(3), leader=0, overrides=overrides))
    assert step.action == "wait" and not step.restart, step


def test_raft_holds_the_roll_where_a_lease_still_says_voter() -> None:
    """demo-1's Lease is fresh and says "voter", but the published membership lists only demo-0
    and demo-2 (demo-1 was removed behind its back): restarting another member would leave one
    voter of two reachable. A learner in Raft holds it the same way."""
    records = members(range(3), leader=0)
    pods = [pod(0), pod(1, NEW), pod(2)]
    assert step_of(STEADY, pods, records, raft=raft_of(records)).restart == (judged(2),)
    for published, why in ((raft([raft_member(0), raft_member(2)]), "demo-1 (member"),
                           (raft([raft_member(0), raft_member(1, learner=True), raft_member(2)]), "ordinal 1 to join")):
        step = step_of(STEADY, pods, records, raft=published)
        assert step.action == "wait" and not step.restart and why in step.message, step


def test_waits_for_the_restarted_pod_to_report_from_its_new_pod() -> None:
    """Its old Lease may still be fresh: only a renewal the operator saw after it listed the new pod counts."""
    pods = [pod(0), pod(1), pod(2, NEW)]
    records = members(range(3), leader=0, overrides={2: {"age": 10}})
    step = step_of(STEADY, pods, records, listed={2: 5})
    assert step.action == "wait" and "demo-2" in step.message
    records = members(range(3), leader=0, overrides={2: {"age": 1}})
    assert step_of(STEADY, pods, records, listed={2: 5}).restart == (judged(1),)


def test_the_sidecars_clock_proves_nothing() -> None:
    """A renewTime from a sidecar whose clock runs an hour ahead says nothing about when the operator
    saw the renewal: what counts is the operator's own observation (raftset.operator.pure.freshness)."""
    records = members(range(3), leader=0, overrides={2: {"age": 10}})
    records[2] = dataclasses.replace(records[2], renewed=NOW + timedelta(hours=1))
    step = step_of(STEADY, [pod(0), pod(1), pod(2, NEW)], records, listed={2: 5})
    assert step.action == "wait" and "demo-2" in step.message, step


def test_a_pod_that_does_not_run_holds_the_roll() -> None:
    records = members(range(3), leader=0)
    step = step_of(STEADY, [pod(0), pod(1), pod(2, NEW, running=False)], records, raft=raft_of(records))
    assert step.action == "wait" and not step.restart and "ordinal 2" in step.message, step


def test_a_sighting_of_another_incarnation_proves_nothing() -> None:
    pods = [pod(0), pod(1), pod(2, NEW)]
    seen = {p.name: rolls.PodSighting(p.uid, NOW - timedelta(seconds=600)) for p in pods}
    seen["demo-2"] = rolls.PodSighting("uid-of-the-pod-it-replaced", NOW - timedelta(seconds=600))
    step = rolls.next_restart(STEADY, NEW, pods, members(range(3), leader=0), NOW, seen=seen)
    assert step.action == "wait" and "demo-2" in step.message, step


def test_sight_keeps_a_pods_first_sighting_until_it_is_re_created() -> None:
    first = rolls.sight({}, [pod(0), pod(1)], NOW)
    later = NOW + timedelta(seconds=30)
    again = rolls.sight(first, [pod(0), pod(1, NEW)], later)
    assert again == {"demo-0": rolls.PodSighting("uid-0-rev-old", NOW),
                     "demo-1": rolls.PodSighting("uid-1-rev-new", later)}
    assert rolls.sight(again, [pod(0)], later) == {"demo-0": rolls.PodSighting("uid-0-rev-old", NOW)}


def test_waits_for_a_leader() -> None:
    step = step_of(STEADY, [pod(o) for o in range(3)], members(range(3), leader=None))
    assert step.action == "wait" and "leader" in step.message


def test_a_deposed_leaders_record_holds_the_roll_until_the_new_leader_reports() -> None:
    """Restarting the member a stale record calls a follower could be the new leader: a restart too many."""
    records = [dataclasses.replace(r, raft_term=7 if r.ordinal == 0 else 8) for r in members(range(3), leader=0)]
    step = step_of(STEADY, [pod(o) for o in range(3)], records)
    assert step.action == "wait" and "deposed" in step.message and not step.restart
    records = [dataclasses.replace(r, raft_term=8) for r in members(range(3), leader=2)]
    step = step_of(STEADY, [pod(o) for o in range(3)], records)
    assert step.restart == (judged(1),)  # followers first, the new leader last


def test_only_kept_ordinals_roll() -> None:
    plan = Plan(replicas=2, reserved=(1,), action="steady", message="")
    pods = [pod(0, NEW), pod(2)]
    step = step_of(plan, pods, [member(0, contract.ROLE_LEADER), member(2)])
    assert step.restart == (judged(2),)


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
    def raw(name: str, phase: str = "Running", **meta: Any) -> dict[str, Any]:
        return {"metadata": {"name": name, "uid": f"uid-{name}", "labels": {rolls.REVISION_LABEL: OLD}, **meta},
                "status": {"phase": phase}}
    found = rolls.pod_revisions([raw("demo-1"), raw("demo-0", deletionTimestamp="x"), raw("demo-2", "Pending"),
                                 raw("demo-3", uid=None), raw("other-0"), raw("demo-x"), raw("demo-extra-1")], "demo")
    assert [(p.name, p.uid, p.running, p.terminating, p.revision) for p in found] == [
        ("demo-0", "uid-demo-0", True, True, OLD), ("demo-1", "uid-demo-1", True, False, OLD),
        ("demo-2", "uid-demo-2", False, False, OLD)]


def test_a_restarted_member_reports_for_one_refresh_before_the_next_goes() -> None:
    pods = [pod(0), pod(1), pod(2, NEW)]
    settle = timedelta(seconds=10)
    just_back = members(range(3), leader=0, overrides={2: {"age": 5}})  # renewed 7 s after its pod was listed
    step = step_of(STEADY, pods, just_back, settle=settle, listed={2: 12})
    assert step.action == "wait" and "demo-2" in step.message
    settled = members(range(3), leader=0, overrides={2: {"age": 1}})  # 11 s after
    assert step_of(STEADY, pods, settled, settle=settle, listed={2: 12}).restart == (judged(1),)


def test_a_leader_rolled_without_hand_off_is_told_an_election_follows() -> None:
    pods = [pod(0), pod(1, NEW), pod(2, NEW)]
    step = step_of(STEADY, pods, members(range(3), leader=0), hand_off=False)
    assert step.restart == (judged(0),) and step.hand_off_from == "demo-0" and step.hand_off is False
    assert "without a hand-off: an election follows" in step.message
    assert [e[:2] for e in step.step_events()] == [("Normal", "RollingMember"), ("Warning", "LeaderLeavesWithoutHandOff")]


def test_a_deleted_pod_not_yet_re_created_holds_the_roll() -> None:
    """Issue 30, bug 2: demo-2 was deleted for the roll and its pod is not re-created yet. Its Lease
    is still fresh (it lasts 30 s) and the leader has not yet published a membership that marks it
    down: only the missing pod says it is gone, and no second member may go meanwhile."""
    records = members(range(3), leader=0)
    step = step_of(STEADY, [pod(0), pod(1)], records, raft=raft_of(records))
    assert step.action == "wait" and not step.restart and "ordinal 2" in step.message, step


@pytest.mark.parametrize(("conditions", "ready"), [
    ([{"type": "Ready", "status": "True"}], True),
    ([{"type": "Ready", "status": "False"}], False),
    ([{"type": "ContainersReady", "status": "True"}], False),
    ([], False),
    (None, False),
])
def test_pod_revisions_read_the_ready_condition(conditions: Any, ready: bool) -> None:
    raw = {"metadata": {"name": "demo-0", "uid": "u"}, "status": {"phase": "Running", "conditions": conditions}}
    assert rolls.pod_revisions([raw], "demo")[0].ready is ready


@pytest.mark.parametrize("down", [{"ready": False}, {"running": False, "ready": False}])
def test_an_outdated_member_that_serves_nothing_restarts_first_while_the_others_serve(down: dict[str, bool]) -> None:
    """A bad template rolled back: demo-1 crash-loops on it (its pod runs but is not Ready, its
    heartbeat unhealthy or gone) and is now the outdated one. Waiting for it to be Ready would wait
    forever; restarting it takes no one out of the Service. demo-0, the leader, stays."""
    pods = [pod(0, NEW), pod(1, **down), pod(2, NEW)]
    for records in (members(range(3), leader=0, overrides={1: {"healthy": False}}),
                    [m for m in members(range(3), leader=0) if m.ordinal != 1]):
        step = step_of(STEADY, pods, records, raft=raft_of(members(range(3), leader=0)))
        assert step.action == "roll" and step.restart == (judged(1),), step
        assert step.hand_off_from is None and "serves nothing on the old one" in step.message


def test_a_member_that_serves_nothing_on_the_new_template_is_waited_for() -> None:
    """Restarting it again would only restart it on the same template."""
    pods = [pod(0), pod(1, NEW, ready=False), pod(2)]
    step = step_of(STEADY, pods, members(range(3), leader=0, overrides={1: {"healthy": False}}))
    assert step.action == "wait" and not step.restart and "demo-1 to be Ready" in step.message, step


@pytest.mark.parametrize("also", [
    {0: {"ready": False}},  # a second member out of the Service
    {2: {"terminating": True}},
])
def test_an_outdated_member_that_serves_nothing_waits_while_another_does_not_serve(also: dict[int, dict[str, bool]]) -> None:
    pods = [pod(0, NEW), pod(1, ready=False), pod(2, NEW)]
    pods = [dataclasses.replace(p, **also.get(p.ordinal, {})) for p in pods]
    step = step_of(STEADY, pods, members(range(3), leader=2, overrides={1: {"healthy": False}}))
    assert step.action == "wait" and not step.restart, step


def test_an_outdated_member_that_serves_nothing_waits_for_the_others_to_be_healthy_voters() -> None:
    pods = [pod(0, NEW), pod(1, ready=False), pod(2, NEW)]
    records = members(range(3), leader=0, overrides={1: {"healthy": False}, 2: {"healthy": False}})
    step = step_of(STEADY, pods, records)
    assert step.action == "wait" and not step.restart and "ordinal 2" in step.message, step


def test_a_roll_that_restarted_nothing_for_the_stuck_period_is_stuck_in_the_same_words() -> None:
    pods = [pod(0), pod(1, NEW, ready=False), pod(2)]
    records = members(range(3), leader=0)
    seen = {p.name: rolls.PodSighting(p.uid, NOW - timedelta(seconds=age)) for p, age in zip(pods, (900, 119, 900))}
    move = rolls.next_restart(STEADY, NEW, pods, records, NOW, seen=seen)
    assert rolls.overdue(move, seen, NOW, 120.0) == move, "not yet"
    later = [rolls.overdue(move, seen, NOW + timedelta(seconds=s), 120.0) for s in (1, 30)]
    assert all(m.stuck == rolls.STUCK_REASON and m.action == "wait" for m in later), later
    assert later[0].message == later[1].message and later[0].message.startswith(move.message)
    assert "no pod restarted for 120 s" in later[0].message
    step = step_of(STEADY, [pod(0), pod(1, NEW), pod(2)], records)
    assert rolls.overdue(step, seen, NOW + timedelta(seconds=30), 120.0) == step, "a restart is never stuck"
    assert rolls.overdue(move, {}, NOW, 120.0) == move
