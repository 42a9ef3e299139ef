"""The planner with Raft as the truth: steps wait for the published membership, record
themselves, and are done only when Raft confirms them; an unconfirmed step blocks and is
reported once overdue."""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import timedelta

import pytest

from raftset import contract
from raftset.operator.pure.scale_step import SCALE_IN, SCALE_OUT, ScaleStep
from raftset.operator.pure.planner import STUCK_AFTER_SECONDS, confirmed, plan, serving_ordinals
from raftset.times import rfc3339
from raftset.workloads import ADVANCED_STATEFULSET, STATEFULSET, Backend
from tests.unit.builders import CLUSTER, NOW, RAFT_INDEX, members, raft, raft_member, raft_of

pytestmark = pytest.mark.unit

BACKENDS = [pytest.param(STATEFULSET, id="builtin"), pytest.param(ADVANCED_STATEFULSET, id="advanced")]
STARTED = rfc3339(NOW)


def pod(ordinal: int) -> str:
    return contract.pod_name(CLUSTER, ordinal)


def leave(ordinal: int, member_id: str | None = None, *, after: int = RAFT_INDEX, age: float = 0) -> ScaleStep:
    return ScaleStep(SCALE_IN, pod(ordinal), f"{ordinal + 1:016x}" if member_id is None else member_id, after,
                     rfc3339(NOW - timedelta(seconds=age)))


def join(ordinal: int, *, after: int = RAFT_INDEX, age: float = 0) -> ScaleStep:
    return ScaleStep(SCALE_OUT, pod(ordinal), "", after, rfc3339(NOW - timedelta(seconds=age)))


# --- no membership published yet ------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("desired", "size"), [(d, s) for s in range(1, 6) for d in range(1, 7) if d != s])
def test_no_scale_step_without_a_published_membership(backend: Backend, desired: int, size: int) -> None:
    result = plan(CLUSTER, backend, desired, (size, []), members(range(size), 0), None, NOW)
    assert (result.action, result.replicas, result.record) == ("wait", size, None)
    assert "publish the Raft membership" in result.message and not result.stuck


@pytest.mark.parametrize("backend", BACKENDS)
def test_create_and_steady_need_no_membership(backend: Backend) -> None:
    assert plan(CLUSTER, backend, 3, None, [], None, NOW).action == "create"
    assert plan(CLUSTER, backend, 3, (3, []), [], None, NOW).action == "steady"


# --- every step records itself ---------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("size", "leader_at"), [(n, lead) for n in range(3, 8) for lead in range(n)])
def test_a_scale_in_step_records_its_victim_and_the_membership_it_was_planned_on(
        backend: Backend, size: int, leader_at: int) -> None:
    records = members(range(size), leader_at)
    result = plan(CLUSTER, backend, size - 1, (size, []), records, raft_of(records, index=777), NOW)
    assert result.action == SCALE_IN
    (victim,) = result.scale_away
    assert result.record == ScaleStep(SCALE_IN, victim, f"{contract.ordinal_of(victim) + 1:016x}", 777, STARTED)


def test_a_victim_that_is_no_raft_member_is_recorded_without_an_id() -> None:
    records = members(range(3), 0)
    membership = raft([raft_member(0), raft_member(1)], 0)  # ordinal 2 never became a member
    result = plan(CLUSTER, STATEFULSET, 2, (3, []), records[:2], membership, NOW)
    assert result.action == SCALE_IN and result.record == ScaleStep(SCALE_IN, pod(2), "", RAFT_INDEX, STARTED)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("size", range(1, 7))
def test_a_scale_out_step_records_the_pod_it_adds(backend: Backend, size: int) -> None:
    records = members(range(size), 0)
    result = plan(CLUSTER, backend, size + 1, (size, []), records, raft_of(records, index=55), NOW)
    assert result.action == SCALE_OUT and result.record == ScaleStep(SCALE_OUT, pod(size), "", 55, STARTED)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_steady_plan_records_nothing(backend: Backend) -> None:
    records = members(range(3), 0)
    assert plan(CLUSTER, backend, 3, (3, []), records, raft_of(records), NOW).record is None


# --- when Raft confirms a step -----------------------------------------------------------------

THREE = [raft_member(o) for o in range(3)]


@pytest.mark.parametrize(("step", "entries", "index", "done"), [
    # scale-in of ordinal 2 (member ...3)
    (leave(2), THREE, RAFT_INDEX, False),  # still listed
    (leave(2), THREE[:2], RAFT_INDEX - 1, False),  # absent, but from a membership older than the step
    (leave(2), THREE[:2], RAFT_INDEX, True),
    (leave(2), THREE[:2], RAFT_INDEX + 50, True),
    # the ordinal came back as a new member: the recorded id is what counts
    (leave(2), [*THREE[:2], raft_member(2, member_id="fresh")], RAFT_INDEX + 5, True),
    # a victim recorded without an id: by ordinal
    (leave(2, ""), THREE, RAFT_INDEX + 5, False),
    (leave(2, ""), [*THREE[:2], raft_member(2, learner=True, started=False)], RAFT_INDEX + 5, False),
    (leave(2, ""), THREE[:2], RAFT_INDEX, True),
    # scale-out of ordinal 3
    (join(3), THREE, RAFT_INDEX + 5, False),  # not added yet
    (join(3), [*THREE, raft_member(3, learner=True, started=False)], RAFT_INDEX + 5, False),
    (join(3), [*THREE, raft_member(3, learner=True)], RAFT_INDEX + 5, False),  # started, still a learner
    (join(3), [*THREE, raft_member(3, started=False)], RAFT_INDEX + 5, False),  # a voter that never started
    (join(3), [*THREE, raft_member(3)], RAFT_INDEX - 1, False),
    (join(3), [*THREE, raft_member(3)], RAFT_INDEX, True),
])
def test_a_step_is_confirmed_only_by_raft(step: ScaleStep, entries: list, index: int, done: bool) -> None:
    waiting = confirmed(step, raft(entries, 0, index=index))
    assert (waiting is None) is done, waiting
    assert confirmed(step, None) is not None


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("desired", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("step", [leave(3), join(2)], ids=["leave", "join"])
def test_an_unconfirmed_step_blocks_every_next_step_whatever_is_desired(
        backend: Backend, desired: int, step: ScaleStep) -> None:
    # Raft still lists ordinal 3 (leave) / has no member on ordinal 2 (join): neither step is confirmed.
    entries = [raft_member(0), raft_member(1), raft_member(3)]
    records = members([0, 1], 0)
    result = plan(CLUSTER, backend, desired, (3, []), records, raft(entries, 0, index=RAFT_INDEX + 9), NOW,
                  pending=step)
    assert (result.action, result.replicas, result.record, result.scale_away) == ("wait", 3, step, ())
    assert step.pod in result.message and not result.stuck


@pytest.mark.parametrize(("step", "reason"), [(leave(3), "LeaveStuck"), (join(2), "JoinStuck")])
@pytest.mark.parametrize(("age", "stuck"), [(0, False), (STUCK_AFTER_SECONDS - 1, False),
                                            (STUCK_AFTER_SECONDS, True), (3600, True)])
def test_an_unconfirmed_step_is_stuck_after_the_stuck_period(step: ScaleStep, reason: str, age: float,
                                                             stuck: bool) -> None:
    entries = [raft_member(0), raft_member(1), raft_member(3)]
    overdue = replace(step, started=rfc3339(NOW - timedelta(seconds=age)))
    result = plan(CLUSTER, STATEFULSET, 2, (3, []), members([0, 1], 0), raft(entries, 0), NOW, pending=overdue)
    assert result.action == "wait" and result.record == overdue
    assert result.stuck == (reason if stuck else None)
    if stuck:
        assert "refused or never ran" in result.message and step.pod in result.message


def test_the_stuck_period_is_the_callers() -> None:
    entries = [raft_member(0), raft_member(1), raft_member(3)]
    result = plan(CLUSTER, STATEFULSET, 2, (3, []), members([0, 1], 0), raft(entries, 0), NOW,
                  pending=leave(3, age=10), stuck_after=5)
    assert result.stuck == "LeaveStuck"


def test_an_unreadable_start_is_never_stuck() -> None:
    entries = [raft_member(0), raft_member(1), raft_member(3)]
    result = plan(CLUSTER, STATEFULSET, 2, (3, []), members([0, 1], 0), raft(entries, 0), NOW,
                  pending=replace(leave(3), started="yesterday"))
    assert result.action == "wait" and result.stuck is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_confirmed_step_lets_the_next_one_go_and_records_it(backend: Backend) -> None:
    records = members(range(4), 0)
    membership = raft_of(records, index=RAFT_INDEX + 3)  # ordinal 4 has left Raft
    result = plan(CLUSTER, backend, 3, (4, []), records, membership, NOW, pending=leave(4))
    assert result.action == SCALE_IN and result.record is not None and result.record.after_index == RAFT_INDEX + 3
    steady = plan(CLUSTER, backend, 4, (4, []), records, membership, NOW, pending=leave(4))
    assert (steady.action, steady.record) == ("steady", None)  # the confirmed record is dropped


def test_a_restarted_operator_plans_the_same_wait_from_the_recorded_step() -> None:
    entries = [raft_member(o) for o in range(5)]
    records = members(range(4), 0)
    first = plan(CLUSTER, STATEFULSET, 3, (4, []), records, raft(entries, 0), NOW, pending=leave(4, age=30))
    again = plan(CLUSTER, STATEFULSET, 3, (4, []), records, raft(entries, 0), NOW, pending=leave(4, age=30))
    assert first == again and first.action == "wait" and first.record == leave(4, age=30)


# --- Raft disagrees with the heartbeats ------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("entries", "why"), [
    ([raft_member(0), raft_member(1)], "ordinal 2 to become a voter in Raft"),
    ([raft_member(0), raft_member(1), raft_member(2, learner=True)], "to be promoted in Raft"),
    ([raft_member(0), raft_member(1), raft_member(2, started=False)], "ordinal 2 to become a voter in Raft"),
    ([*THREE, raft_member(5)], "(ordinal 5) to leave Raft"),
])
def test_scale_out_waits_until_raft_matches_even_when_every_heartbeat_looks_healthy(
        backend: Backend, entries: list, why: str) -> None:
    result = plan(CLUSTER, backend, 5, (3, []), members(range(3), 0), raft(entries, 0), NOW)
    assert (result.action, result.replicas) == ("wait", 3) and why in result.message, result.message


@pytest.mark.parametrize("backend", BACKENDS)
def test_scale_in_waits_for_a_member_raft_still_lists_on_an_ordinal_no_longer_run(backend: Backend) -> None:
    # The victim's pod and heartbeat are gone, but Raft still lists its member.
    result = plan(CLUSTER, backend, 2, (3, []), members(range(3), 0), raft([*THREE, raft_member(3)], 0), NOW)
    assert result.action == "wait" and "(ordinal 3) to leave Raft" in result.message


@pytest.mark.parametrize("backend", BACKENDS)
def test_scale_in_waits_for_a_raft_learner_other_than_the_victim(backend: Backend) -> None:
    entries = [raft_member(0), raft_member(1, learner=True), raft_member(2), raft_member(3)]
    result = plan(CLUSTER, backend, 3, (4, []), members(range(4), 0), raft(entries, 0), NOW)
    assert result.action == "wait" and "member 0000000000000002 (ordinal 1) to be promoted in Raft" in result.message


def test_members_raft_names_under_no_ordinal_are_neither_extra_nor_missing() -> None:
    stranger = replace(raft_member(9), ordinal=None, name="added-by-hand", id="abc")
    result = plan(CLUSTER, STATEFULSET, 4, (3, []), members(range(3), 0), raft([*THREE, stranger], 0), NOW)
    assert result.action == SCALE_OUT, result.message
    # It is still one of the 4 voters a quorum is counted of, healthy or not (no heartbeat says).
    result = plan(CLUSTER, STATEFULSET, 2, (3, []), members(range(3), 0), raft([*THREE, stranger], 0), NOW)
    assert result.refused and "2 healthy of 4 voters" in result.message, result.message


def test_every_combination_of_pending_step_and_membership_is_one_step_at_most() -> None:
    """Over every recorded step and membership, the plan never moves while a step is unconfirmed."""
    memberships = [raft(list(c), 0, index=i) for n in range(1, 5) for c in itertools.combinations(
        [raft_member(o) for o in range(5)], n) for i in (RAFT_INDEX - 1, RAFT_INDEX + 1)]
    for pending, membership in itertools.product([leave(3), leave(4), join(3), join(4), None], memberships):
        result = plan(CLUSTER, STATEFULSET, 2, (4, []), members(range(4), 0), membership, NOW, pending=pending)
        if pending is not None and confirmed(pending, membership) is not None:
            assert (result.action, result.replicas, result.record) == ("wait", 4, pending)
        else:
            assert result.record is None or result.record.after_index == membership.index


# --- the quorum guard believes the pods the API lists at the step, over a heartbeat still fresh ------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("gone", [0, 1])  # neither backend's victim (builtin: 3, advanced: 2)
def test_a_kept_voter_whose_pod_is_not_serving_counts_as_down_for_the_quorum_guard(
        backend: Backend, gone: int) -> None:
    """A node drain evicts a kept member's pod in the second the planner removes another: the evicted
    pod's heartbeat is still fresh, but the pod list read for the step shows it terminating (or its
    replacement Pending). 4 voters, leader 3 kept: removing one more would leave 2 serving of 4."""
    heartbeats = members(range(4), 3)
    serving = frozenset(range(4)) - {gone}
    result = plan(CLUSTER, backend, 3, (4, []), heartbeats, raft_of(heartbeats), NOW, serving=serving)
    assert (result.action, result.replicas, result.refused) == ("wait", 4, True), result.message
    assert f"{pod(gone)} not serving" in result.message


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_kept_pod_serving_lets_the_scale_in_step_go(backend: Backend) -> None:
    heartbeats = members(range(4), 3)
    result = plan(CLUSTER, backend, 3, (4, []), heartbeats, raft_of(heartbeats), NOW, serving=frozenset(range(4)))
    assert result.action == SCALE_IN and result.replicas == 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_victims_own_pod_not_serving_does_not_hold_its_removal(backend: Backend) -> None:
    """5 voters, the victim's pod already terminating: the other four are a quorum of five."""
    heartbeats = members(range(5), 0)
    result = plan(CLUSTER, backend, 4, (5, []), heartbeats, raft_of(heartbeats), NOW, serving=frozenset(range(4)))
    assert result.action == SCALE_IN and result.scale_away == (pod(4),)


def test_serving_reads_running_pods_that_are_not_terminating_and_ignores_strays() -> None:
    def listed(name: str, phase: str = "Running", deleting: bool = False) -> dict[str, object]:
        meta: dict[str, object] = {"name": name, "uid": f"uid-{name}"}
        if deleting:
            meta["deletionTimestamp"] = STARTED
        return {"metadata": meta, "status": {"phase": phase}}
    pods = [listed(pod(0)), listed(pod(1), deleting=True), listed(pod(2), "Pending"), listed(f"{CLUSTER}-canary"),
            listed(pod(4))]
    assert serving_ordinals(pods, CLUSTER) == frozenset({0, 4})


@pytest.mark.parametrize("step", [leave(3), join(2)])
def test_a_stuck_steps_message_stays_the_same_from_round_to_round(step: ScaleStep) -> None:
    """The Degraded message is what its one Warning Event says: a count of seconds in it made a new
    Warning every round (every 5 s) for as long as the step stayed stuck (seen on real nodes)."""
    entries = [raft_member(0), raft_member(1), raft_member(3)]
    started = replace(step, started=rfc3339(NOW - timedelta(seconds=STUCK_AFTER_SECONDS)))
    messages = {plan(CLUSTER, STATEFULSET, 2, (3, []), members([0, 1], 0), raft(entries, 0),
                     NOW + timedelta(seconds=later), pending=started).message for later in (0, 5, 300)}
    assert len(messages) == 1, messages
    [message] = messages
    assert started.started in message and f"{STUCK_AFTER_SECONDS:.0f} s" in message


def test_a_pod_the_budget_lists_disrupted_is_not_serving_until_a_new_one_of_its_name_is_created() -> None:
    """An eviction let the pod go (the budget's `disruptedPods`) but its deletion may not be written yet."""
    evicted_at = rfc3339(NOW)

    def listed(name: str, created: timedelta) -> dict[str, object]:
        return {"metadata": {"name": name, "creationTimestamp": rfc3339(NOW + created)}, "status": {"phase": "Running"}}
    pods = [listed(pod(0), timedelta(hours=-1)), listed(pod(1), timedelta(seconds=1)),
            listed(pod(2), timedelta(0)), listed(pod(3), timedelta(hours=-1))]
    disrupted = {pod(0): evicted_at, pod(1): evicted_at, pod(2): evicted_at}
    # 0: the evicted pod itself; 1: created after the eviction, a new pod; 2: the same second, counted evicted.
    assert serving_ordinals(pods, CLUSTER, disrupted) == frozenset({1, 3})
    assert serving_ordinals(pods, CLUSTER, {pod(3): "garbled"}) == frozenset({0, 1, 2})
    unstamped = [{"metadata": {"name": pod(0)}, "status": {"phase": "Running"}}]
    assert serving_ordinals(unstamped, CLUSTER, {pod(0): evicted_at}) == frozenset()
