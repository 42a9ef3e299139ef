"""The leader-aware scale planner: every size 1-7, every leader ordinal, both backends."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import replace

import pytest

from raftset import contract
from raftset.operator.pure import planner
from raftset.operator.pure.heartbeats import HeartbeatRecord
from raftset.contract import quorum
from raftset.operator.pure.planner import Plan, plan
from raftset.workloads import ADVANCED_STATEFULSET, STATEFULSET, Backend, kept_ordinals
from tests.unit.builders import CLUSTER, NOW, member, members, raft_of

pytestmark = pytest.mark.unit

BACKENDS = [pytest.param(STATEFULSET, id="builtin"), pytest.param(ADVANCED_STATEFULSET, id="advanced")]
SIZES = range(1, 8)
LEADER, FOLLOWER, LEARNER = contract.ROLE_LEADER, contract.ROLE_FOLLOWER, contract.ROLE_LEARNER


def pod(ordinal: int) -> str:
    return contract.pod_name(CLUSTER, ordinal)


def step(backend: Backend, desired: int, replicas: int, reserved: Sequence[int],
         records: Sequence[HeartbeatRecord]) -> Plan:
    """The plan when Raft agrees with the heartbeat records (every record's member is in Raft)."""
    return plan(CLUSTER, backend, desired, (replicas, list(reserved)), records, raft_of(records), NOW)


def size_leader_grid(sizes: range) -> list[tuple[int, int]]:
    return [(n, leader) for n in sizes for leader in range(n)]


# --- quorum -------------------------------------------------------------------------

@pytest.mark.parametrize(("voters", "expected"), [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (6, 4), (7, 4)])
def test_quorum_is_the_smallest_majority(voters: int, expected: int) -> None:
    assert quorum(voters) == expected
    assert 2 * quorum(voters) > voters >= 2 * (quorum(voters) - 1)


# --- create and steady ----------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("desired", SIZES)
def test_a_new_cluster_is_created_at_full_size(backend: Backend, desired: int) -> None:
    result = plan(CLUSTER, backend, desired, None, [], None, NOW)
    assert (result.action, result.replicas, result.reserved) == ("create", desired, ())
    assert result.kept == list(range(desired))
    assert result.scale_away == () and result.hand_off_from is None and not result.refused


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("size", SIZES)
def test_desired_equal_to_replicas_is_steady_even_without_records(backend: Backend, size: int) -> None:
    result = step(backend, size, size, [], [])
    assert (result.action, result.replicas, result.reserved, result.scale_away) == ("steady", size, (), ())


# --- normalisation of reserveOrdinals -------------------------------------------------

@pytest.mark.parametrize(("replicas", "raw", "expected"), [
    (3, [], ()),
    (3, [5, 9], ()),            # above the top kept ordinal: no effect, dropped
    (3, [1, 7], (1,)),          # kept [0, 2, 3]; 7 is beyond 3
    (3, [3], ()),               # kept [0, 1, 2]: 3 is just above the top
    (3, [1, 1, 2], (1, 2)),     # duplicates collapse; kept [0, 3, 4]
    (2, [0, 1], (0, 1)),        # kept [2, 3]
    (1, [0, 2, 4], (0,)),       # kept [1]
    (4, ["1-2"], (1, 2)),       # not ints: the normaliser only sees what the Backend parsed
])
def test_normalisation_drops_reservations_above_the_top_kept_ordinal(
        replicas: int, raw: list, expected: tuple[int, ...]) -> None:
    reserved = ADVANCED_STATEFULSET.reserved({"spec": {"reserveOrdinals": raw}})
    result = step(ADVANCED_STATEFULSET, replicas, replicas, reserved, [])
    assert result.reserved == expected
    # Dropping them never changes which ordinals run.
    assert result.kept == kept_ordinals(replicas, reserved)


def test_builtin_statefulset_ignores_reserved_ordinals() -> None:
    result = step(STATEFULSET, 3, 3, [0, 1], [])
    assert result.reserved == () and result.kept == [0, 1, 2]


# --- scale-in: builtin StatefulSet ------------------------------------------------------

@pytest.mark.parametrize(("size", "leader_at"), size_leader_grid(range(3, 8)))
def test_builtin_scale_in_always_removes_the_highest_ordinal(size: int, leader_at: int) -> None:
    for desired in range(1, size):
        result = step(STATEFULSET, desired, size, [], members(range(size), leader_at))
        assert result.action == "scale-in"
        assert (result.replicas, result.reserved) == (size - 1, ())
        assert result.kept == list(range(size - 1))
        assert result.scale_away == (pod(size - 1),)
        # Only the leader on the doomed ordinal must hand off first.
        assert result.hand_off_from == (pod(size - 1) if leader_at == size - 1 else None)
        assert not result.refused


# --- scale-in: Advanced StatefulSet ---------------------------------------------------------

@pytest.mark.parametrize(("size", "leader_at"), size_leader_grid(range(3, 8)))
def test_advanced_scale_in_removes_the_highest_follower_and_keeps_the_leader(size: int, leader_at: int) -> None:
    victim = size - 1 if leader_at != size - 1 else size - 2
    for desired in range(1, size):
        result = step(ADVANCED_STATEFULSET, desired, size, [], members(range(size), leader_at))
        assert result.action == "scale-in"
        assert result.replicas == size - 1
        assert result.scale_away == (pod(victim),)
        assert result.hand_off_from is None
        assert leader_at in result.kept
        assert result.kept == [o for o in range(size) if o != victim]
        # Only a reserved ordinal below the top needs to stay reserved.
        assert result.reserved == ((victim,) if victim < size - 1 else ())
        assert pod(leader_at) in result.message


def test_advanced_scale_in_around_an_existing_hole() -> None:
    # kept [0, 2, 3], leader on 3: the highest follower is 2, ordinal 1 stays reserved.
    result = step(ADVANCED_STATEFULSET, 2, 3, [1], members([0, 2, 3], 3))
    assert (result.replicas, result.reserved, result.kept) == (2, (1, 2), [0, 3])
    assert result.scale_away == (pod(2),)


def test_advanced_scale_in_of_the_top_ordinal_drops_reservations_that_became_useless() -> None:
    # kept [0, 2, 3], leader on 0: 3 goes; the reserved 1 is still below the new top (2).
    result = step(ADVANCED_STATEFULSET, 2, 3, [1], members([0, 2, 3], 0))
    assert (result.replicas, result.reserved, result.kept) == (2, (1,), [0, 2])
    # kept [0, 1, 4] (2, 3 reserved), leader on 0: 4 goes, and with it every reservation above 1.
    result = step(ADVANCED_STATEFULSET, 2, 3, [2, 3], members([0, 1, 4], 0))
    assert (result.replicas, result.reserved, result.kept) == (2, (), [0, 1])


CONDITIONS = {
    "stale": {"age": 45},
    "no-record": None,
    "unhealthy": {"healthy": False},
    "learner": {"role": LEARNER},
}


@pytest.mark.parametrize("condition", CONDITIONS)
@pytest.mark.parametrize("size", range(3, 8))
def test_advanced_scale_in_removes_a_single_troubled_member_first(size: int, condition: str) -> None:
    for leader_at, troubled in itertools.permutations(range(size), 2):
        records = members(range(size), leader_at, {troubled: CONDITIONS[condition] or {}})
        if CONDITIONS[condition] is None:
            records = [m for m in records if m.ordinal != troubled]
        result = step(ADVANCED_STATEFULSET, size - 1, size, [], records)
        assert result.action == "scale-in", (leader_at, troubled, result.message)
        assert result.scale_away == (pod(troubled),), (leader_at, troubled)
        assert leader_at in result.kept


@pytest.mark.parametrize(("overrides", "missing", "expected"), [
    # tier 0 (stale or no record) before tier 1 (unhealthy) before tier 2 (learner)
    ({1: {"age": 31}, 3: {"healthy": False}}, (), 1),
    ({3: {"healthy": False}}, (2,), 2),
    ({1: {"healthy": False}, 2: {"healthy": False}}, (), 2),   # the highest within a tier
    ({1: {"age": 60}, 2: {"age": 60}}, (), 2),
    ({5: {"healthy": False}}, (), 5),
    ({0: {"role": LEARNER}}, (), 0),
])
def test_advanced_victim_order(overrides: dict, missing: tuple[int, ...], expected: int) -> None:
    records = [m for m in members(range(7), 6, overrides) if m.ordinal not in missing]
    result = step(ADVANCED_STATEFULSET, 6, 7, [], records)
    assert result.action == "scale-in", result.message
    assert result.scale_away == (pod(expected),)


@pytest.mark.parametrize("size", range(2, 8))
def test_advanced_never_picks_the_leader_even_when_it_is_unhealthy(size: int) -> None:
    for leader_at in range(size):
        records = members(range(size), leader_at, {leader_at: {"healthy": False}})
        result = step(ADVANCED_STATEFULSET, size - 1, size, [], records)
        assert pod(leader_at) not in result.scale_away
        assert leader_at in result.kept


def test_the_newest_of_two_leader_records_is_protected() -> None:
    # After an election the old leader's record may still say leader for a moment.
    records = members(range(3), 2, {1: {"role": LEADER, "age": 5}})
    result = step(ADVANCED_STATEFULSET, 2, 3, [], records)
    assert 2 in result.kept and result.scale_away == (pod(1),)
    records = members(range(3), 1, {2: {"role": LEADER, "age": 5}})
    result = step(ADVANCED_STATEFULSET, 2, 3, [], records)
    assert 1 in result.kept and result.scale_away == (pod(2),)


def _termed(records: Sequence[HeartbeatRecord], terms: dict[int, int], default: int = 7) -> list[HeartbeatRecord]:
    return [replace(r, raft_term=terms.get(r.ordinal, default)) for r in records]


def test_a_leader_record_of_an_older_term_than_another_members_is_deposed_and_the_scale_in_waits() -> None:
    """The real tier's Advanced StatefulSet scale-in: the leader moved from 0 to 4 a second before
    `replicas` went down; 0's heartbeat still said leader, and the operator removed 4, the new
    leader ("keeping leader asts-0"). A higher term in any fresh heartbeat says 0 was deposed."""
    records = _termed(members(range(5), 0), {0: 7}, default=8)  # 4 leads in term 8, not reported yet
    result = step(ADVANCED_STATEFULSET, 3, 5, [], records)
    assert (result.action, result.replicas, result.scale_away) == ("wait", 5, ())
    assert "deposed" in result.message and not result.refused
    assert planner.undisputed_leader(records, raft_of(records), NOW) is None
    assert planner.leader(records, NOW).ordinal == 0  # what status still shows meanwhile
    # Once the new leader reports, it is the one kept.
    records = _termed(members(range(5), 4), {}, default=8)
    result = step(ADVANCED_STATEFULSET, 3, 5, [], records)
    assert result.action == "scale-in" and 4 in result.kept and result.scale_away == (pod(3),)


def test_a_membership_published_in_a_later_term_or_naming_another_leader_in_the_same_term_disputes_the_leader() -> None:
    records = _termed(members(range(3), 0), {})
    published = raft_of(records)
    assert planner.undisputed_leader(records, replace(published, term=7, leader=pod(0)), NOW).ordinal == 0
    assert planner.undisputed_leader(records, replace(published, term=8, leader=pod(2)), NOW) is None
    assert planner.undisputed_leader(records, replace(published, term=7, leader=pod(2)), NOW) is None
    # A membership from an older term is older news, whoever it names.
    assert planner.undisputed_leader(records, replace(published, term=6, leader=pod(2)), NOW).ordinal == 0
    assert planner.undisputed_leader(records, None, NOW).ordinal == 0
    # A stale heartbeat of a later term is no evidence: it expired.
    stale = [*records[:2], replace(records[2], raft_term=9, expires=NOW)]
    assert planner.undisputed_leader(stale, None, NOW).ordinal == 0


def test_a_leader_record_without_a_term_is_taken_as_it_is() -> None:
    records = _termed(members(range(3), 1), {1: 0})
    assert planner.undisputed_leader(records, None, NOW).ordinal == 1


# --- scale-in: waits and refusals -------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("size", range(3, 8))
def test_scale_in_waits_while_the_previous_victim_is_in_raft_even_with_a_stale_record(backend: Backend, size: int) -> None:
    # The workload already runs size-1 pods; the removed ordinal's sidecar has not left yet.
    gone = size - 1
    records = members(range(size), 0)
    result = step(backend, 1, size - 1, [], records)
    assert (result.action, result.replicas, result.scale_away) == ("wait", size - 1, ())
    assert str(gone) in result.message and "leave" in result.message
    # A stale record is not a leave: while Raft still lists the member, the next step waits.
    records[gone] = replace(records[gone], expires=NOW)
    result = step(backend, 1, size - 1, [], records)
    assert result.action == "wait" and f"ordinal {gone}) to leave Raft" in result.message
    # Once Raft no longer lists it, the next step goes ahead.
    after = plan(CLUSTER, backend, 1, (size - 1, []), records, raft_of(records[:gone]), NOW)
    assert after.action == "scale-in" if gone > 2 else after.refused, after  # 2 -> 1 never goes


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("leader_record", ["none", "stale"])
def test_scale_in_waits_without_a_leader(backend: Backend, leader_record: str) -> None:
    records = members(range(3), 0, {0: {"age": 30}})
    if leader_record == "none":
        records = members(range(3), None)
    result = step(backend, 2, 3, [], records)
    assert (result.action, result.replicas, result.scale_away) == ("wait", 3, ())
    assert "leader" in result.message and not result.refused


@pytest.mark.parametrize("backend", BACKENDS)
def test_scale_in_waits_while_another_member_is_joining(backend: Backend) -> None:
    # A learner on 0 is catching up; removing 3 meanwhile would be a second membership change.
    records = members(range(4), 3 if backend is STATEFULSET else 1, {0: {"role": LEARNER}})
    records += [member(4, healthy=False)]  # Advanced would otherwise take this one first
    result = step(backend, 3, 5, [], records)
    assert (result.action, result.replicas, result.scale_away) == ("wait", 5, ())
    assert pod(0) in result.message and "learner" in result.message


def test_advanced_takes_an_unhealthy_member_before_a_learner_after_the_learner_joined() -> None:
    records = members(range(7), 6, {1: {"healthy": False}, 3: {"role": LEARNER}})
    result = step(ADVANCED_STATEFULSET, 6, 7, [], records)
    assert (result.action, result.scale_away) == ("wait", ())
    assert "learner demo-3" in result.message
    records[3] = member(3)  # promoted
    assert step(ADVANCED_STATEFULSET, 6, 7, [], records).scale_away == (pod(1),)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_joining_learner_may_itself_be_scaled_away(backend: Backend) -> None:
    records = members(range(4), 0, {3: {"role": LEARNER}})
    result = step(backend, 3, 4, [], records)
    assert (result.action, result.scale_away) == ("scale-in", (pod(3),))


@pytest.mark.parametrize("size", range(2, 8))
def test_builtin_quorum_guard_for_every_number_of_unhealthy_members(size: int) -> None:
    """The highest ordinal goes even if healthy; refused when that leaves too few healthy voters."""
    for unhealthy in range(size):
        for bad in itertools.combinations(range(size - 1), unhealthy):  # the leader stays healthy
            records = members(range(size), size - 1, {o: {"healthy": False} for o in bad})
            result = step(STATEFULSET, size - 1, size, [], records)
            # The victim (healthy) may stop while still one of the `size` voters.
            remaining_healthy = size - 1 - len(bad)
            if remaining_healthy < quorum(size):
                assert result.refused and result.action == "wait", (bad, result)
                assert (result.replicas, result.scale_away) == (size, ())
                assert f"removing ordinal {size - 1}" in result.message
            else:
                assert not result.refused and result.action == "scale-in", (bad, result)
                assert result.hand_off_from == pod(size - 1)


@pytest.mark.parametrize("size", range(2, 8))
def test_advanced_quorum_guard_counts_only_healthy_voters_left(size: int) -> None:
    """Advanced removes an unhealthy member first, so the guard bites only when none is left to take."""
    leader_at = 0
    for unhealthy in range(size):
        for bad in itertools.combinations(range(1, size), unhealthy):
            records = members(range(size), leader_at, {o: {"healthy": False} for o in bad})
            result = step(ADVANCED_STATEFULSET, size - 1, size, [], records)
            healthy = size - len(bad)
            victim_votes = not bad
            if healthy - int(victim_votes) < quorum(size):
                assert result.refused and result.replicas == size, (bad, result)
            else:
                assert result.action == "scale-in", (bad, result)
                assert result.scale_away == (pod(max(bad) if bad else size - 1),)


def test_refused_scale_in_of_two_members_with_one_unhealthy() -> None:
    # builtin 2 -> 1 with the survivor unhealthy: no healthy voter would remain.
    records = members(range(2), 1, {0: {"healthy": False}})
    result = step(STATEFULSET, 1, 2, [], records)
    assert result.refused and "could leave 0 healthy of 2 voters" in result.message


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_member_that_left_raft_but_kept_its_lease_is_no_voter_for_the_quorum_guard(backend: Backend) -> None:
    """3 -> 2 with ordinal 1's member removed behind its back while its Lease says healthy follower:
    only 0 and 2 vote, so removing 2 (the victim on both backends: every record looks alike) would
    leave 1 of the 2 a quorum of 2 needs. Counted by its Lease, 3 - 1 = 2 let it go."""
    records = members(range(3), 0)
    raft = raft_of([records[0], records[2]])
    result = plan(CLUSTER, backend, 2, (3, []), records, raft, NOW)
    assert result.refused and result.action == "wait", result
    assert "removing ordinal 2 now could leave 1 healthy of 2 voters" in result.message
    assert planner.membership([0, 1, 2], records, NOW, raft).voters == (0, 2)
    assert planner.membership([0, 1, 2], records, NOW).voters == (0, 1, 2)


# --- scale-out ---------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("size", "leader_at"), size_leader_grid(range(1, 7)))
def test_scale_out_adds_the_next_ordinal_one_at_a_time(backend: Backend, size: int, leader_at: int) -> None:
    for desired in range(size + 1, 8):
        result = step(backend, desired, size, [], members(range(size), leader_at))
        assert (result.action, result.replicas, result.reserved) == ("scale-out", size + 1, ())
        assert result.kept == list(range(size + 1))
        assert result.scale_away == () and result.hand_off_from is None
        assert f"adding ordinal {size}" in result.message


@pytest.mark.parametrize(("replicas", "holes", "refilled"), [
    (3, [1], 1),
    (3, [0, 2], 0),
    (2, [0, 1], 0),
    (1, [0, 1, 2, 3], 0),
    (4, [3, 4], 3),
    (2, [1, 3], 1),
])
def test_scale_out_refills_the_lowest_hole_first(replicas: int, holes: list[int], refilled: int) -> None:
    kept = kept_ordinals(replicas, holes)
    result = step(ADVANCED_STATEFULSET, replicas + 2, replicas, holes, members(kept, kept[-1]))
    assert result.action == "scale-out"
    assert sorted(result.kept) == sorted([*kept, refilled])
    assert refilled not in result.reserved
    assert set(result.reserved) == {h for h in holes if h != refilled and h < max(result.kept)}
    assert f"adding ordinal {refilled}" in result.message


def test_refilling_every_hole_then_growing_past_the_top() -> None:
    replicas, reserved, kept = 2, (0, 1), [2, 3]
    added = []
    for _ in range(3):
        result = step(ADVANCED_STATEFULSET, 5, replicas, reserved, members(kept, 2))
        added += sorted(set(result.kept) - set(kept))
        replicas, reserved, kept = result.replicas, result.reserved, result.kept
    assert added == [0, 1, 4] and kept == [0, 1, 2, 3, 4] and reserved == ()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("overrides", "missing", "why"), [
    ({2: {"role": LEARNER}}, (), "learner demo-2"),
    ({1: {"healthy": False}}, (), "ordinal 1 to join"),
    ({}, (2,), "ordinal 2 to join"),
    ({2: {"age": 31}}, (), "ordinal 2 to join"),
])
def test_scale_out_waits_until_membership_matches(
        backend: Backend, overrides: dict, missing: tuple[int, ...], why: str) -> None:
    records = [m for m in members(range(3), 0, overrides) if m.ordinal not in missing]
    result = step(backend, 5, 3, [], records)
    assert (result.action, result.replicas, result.reserved) == ("wait", 3, ())
    assert why in result.message


@pytest.mark.parametrize("backend", BACKENDS)
def test_scale_out_waits_for_a_removed_member_to_leave(backend: Backend) -> None:
    records = members(range(4), 0)
    result = step(backend, 5, 3, [], records)
    assert result.action == "wait" and "ordinal 3 to leave" in result.message


# --- one step at a time, determinism, resume ------------------------------------------------

def _scenarios() -> list[tuple[Backend, int, int, tuple[int, ...], list[HeartbeatRecord]]]:
    out = []
    for backend in (STATEFULSET, ADVANCED_STATEFULSET):
        for replicas in range(1, 8):
            for holes in ((), (0,), (1, 2)) if backend.supports_reserved_ordinals else ((),):
                kept = kept_ordinals(replicas, holes)
                for leader_at in kept:
                    for desired in range(1, 8):
                        out.append((backend, desired, replicas, holes, members(kept, leader_at)))
    return out


SCENARIOS = _scenarios()


def test_every_plan_changes_at_most_one_ordinal() -> None:
    assert len(SCENARIOS) > 500
    for backend, desired, replicas, holes, records in SCENARIOS:
        before = set(kept_ordinals(replicas, holes))
        result = step(backend, desired, replicas, holes, records)
        changed = before ^ set(result.kept)
        if result.action in ("scale-in", "scale-out"):
            assert len(changed) == 1, (backend.name, desired, replicas, holes, result)
            assert abs(result.replicas - replicas) == 1
            assert (result.replicas < replicas) == (result.action == "scale-in")
            assert (result.replicas - desired) * (replicas - desired) >= 0  # never overshoots
        else:
            assert not changed and result.replicas == replicas


def test_the_same_inputs_always_give_the_same_plan_whatever_the_record_order() -> None:
    for backend, desired, replicas, holes, records in SCENARIOS:
        first = step(backend, desired, replicas, holes, records)
        assert step(backend, desired, replicas, holes, list(records)) == first
        assert step(backend, desired, replicas, holes, records[::-1]) == first
        assert step(backend, desired, replicas, holes, records[1:] + records[:1]) == first


def test_two_equally_fresh_leader_records_do_not_make_the_plan_order_dependent() -> None:
    records = members(range(5), 1, {3: {"role": LEADER}})
    plans = {step(ADVANCED_STATEFULSET, 4, 5, [], list(p)) for p in itertools.permutations(records)}
    assert len(plans) == 1
    assert planner.leader(records, NOW).ordinal == 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_restarted_operator_resumes_without_removing_twice(backend: Backend) -> None:
    records = members(range(5), 4 if backend is ADVANCED_STATEFULSET else 0)
    first = step(backend, 3, 5, [], records)
    # The operator wrote the step and crashed; it reads back the workload it wrote,
    # while the victim's sidecar is still leaving.
    again = step(backend, 3, first.replicas, first.reserved, records)
    assert again.action == "wait" and again.scale_away == ()
    assert (again.replicas, again.reserved) == (first.replicas, first.reserved)
    # The victim has left: the next victim is a different ordinal.
    left = [m for m in records if m.pod not in first.scale_away]
    second = step(backend, 3, first.replicas, first.reserved, left)
    assert second.action == "scale-in" and second.scale_away != first.scale_away
    assert set(second.kept) < set(first.kept)


# --- simulation: iterate plan() to convergence -----------------------------------------------

def _simulate(backend: Backend, start: int, target: int, leader_at: int) -> tuple[list[int], int, int]:
    """Run the planner against simulated sidecars until steady; return (kept, leader, steps)."""
    replicas, reserved = start, ()
    records = {m.ordinal: m for m in members(range(start), leader_at)}
    current_leader = leader_at
    steps = 0
    for _ in range(200):
        before = kept_ordinals(replicas, reserved)
        result = plan(CLUSTER, backend, target, (replicas, reserved), list(records.values()),
                      raft_of(records.values()), NOW)
        assert not result.refused, result
        if result.action == "steady":
            return before, current_leader, steps
        assert result.action in ("scale-in", "scale-out"), result
        steps += 1
        replicas, reserved = result.replicas, result.reserved
        after = kept_ordinals(replicas, reserved)
        if result.action == "scale-in":
            (victim,) = set(before) - set(after)
            assert result.scale_away == (pod(victim),)
            if victim == current_leader:
                assert backend is STATEFULSET and result.hand_off_from == pod(victim)
                current_leader = after[0]  # the sidecar's MoveLeader on the preStop path
                records[current_leader] = member(current_leader, LEADER)
            else:
                assert result.hand_off_from is None
            del records[victim]  # the sidecar removed its member and its Lease
        else:
            (added,) = set(after) - set(before)
            records[added] = member(added, LEARNER)
            waiting = plan(CLUSTER, backend, target, (replicas, reserved), list(records.values()),
                           raft_of(records.values()), NOW)
            # Further growth waits for the promotion; at the target the plan is simply steady.
            assert waiting.action == ("steady" if replicas == target else "wait"), waiting
            assert waiting.replicas == replicas
            records[added] = member(added, FOLLOWER)  # promoted
    raise AssertionError("the planner did not converge")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("start", SIZES)
def test_simulated_scaling_converges_to_exactly_the_target(backend: Backend, start: int) -> None:
    for target in (t for t in SIZES if t > 1 or start == 1):  # 2 -> 1 is refused (below)
        for leader_at in range(start):
            kept, final_leader, steps = _simulate(backend, start, target, leader_at)
            case = (start, target, leader_at)
            assert len(kept) == target, case
            assert steps == abs(start - target), case
            assert final_leader in kept, case
            if backend is STATEFULSET:
                assert kept == list(range(target)), case
            elif target < start:
                # The leader is kept; the other survivors are the lowest ordinals.
                assert final_leader == leader_at, case
                expected = list(range(target)) if leader_at < target else [*range(target - 1), leader_at]
                assert kept == expected, case
            else:
                assert final_leader == leader_at and kept == list(range(target)), case


@pytest.mark.parametrize("start", range(2, 8))
def test_advanced_round_trip_in_and_out_is_compact_again(start: int) -> None:
    for target in range(1, start):
        for leader_at in range(start):
            replicas, reserved = start, ()
            records = {m.ordinal: m for m in members(range(start), leader_at)}
            for goal in (target, start):
                for _ in range(50):
                    result = plan(CLUSTER, ADVANCED_STATEFULSET, goal, (replicas, reserved),
                                  list(records.values()), raft_of(records.values()), NOW)
                    if result.action == "steady":
                        break
                    before = set(kept_ordinals(replicas, reserved))
                    replicas, reserved = result.replicas, result.reserved
                    for gone in before - set(result.kept):
                        del records[gone]
                    for new in set(result.kept) - before:
                        records[new] = member(new)
                assert leader_at in kept_ordinals(replicas, reserved)
            assert kept_ordinals(replicas, reserved) == list(range(start)) and reserved == ()


# --- the Events a taken step announces ---------------------------------------------


@pytest.mark.parametrize("action", ["steady", "wait"])
def test_no_step_no_events(action: str) -> None:
    assert Plan(3, (), action, "nothing to do", hand_off_from="demo-0").step_events() == []


@pytest.mark.parametrize("action", sorted(planner.STEP_REASONS))
def test_a_step_is_announced_with_its_reason(action: str) -> None:
    assert Plan(3, (), action, "why").step_events() == [("Normal", planner.STEP_REASONS[action], "why")]


@pytest.mark.parametrize(("restart", "going"), [((), "scaled away"), (("demo-2",), "restarted on the new template")])
def test_a_leader_that_goes_hands_off_first(restart: tuple[str, ...], going: str) -> None:
    events = Plan(2, (), "scale-in", "why", restart=restart, hand_off_from="demo-2").step_events()
    assert events[1][:2] == ("Normal", "LeaderHandOff")
    assert events[1][2].startswith(f"demo-2 is the leader and is being {going}:")


@pytest.mark.parametrize(("restart", "going"), [((), "scaled away"), (("demo-2",), "restarted on the new template")])
def test_a_leader_that_goes_without_hand_off_is_a_warning(restart: tuple[str, ...], going: str) -> None:
    """Xline (Capabilities.hand_off False): no LeaderHandOff promise, a Warning that an election follows."""
    events = Plan(2, (), "scale-in", "why", restart=restart, hand_off_from="demo-2", hand_off=False).step_events()
    assert [e[:2] for e in events[1:]] == [("Warning", planner.NO_HAND_OFF_REASON)]
    assert events[1][2].startswith(f"demo-2 is the leader and is being {going} without a leadership hand-off:")
    assert "elect" in events[1][2] and "Advanced StatefulSet" in events[1][2]


@pytest.mark.parametrize("leader_at", [2, 0])
def test_builtin_scale_in_of_a_leader_without_hand_off_says_an_election_follows(leader_at: int) -> None:
    records = members(range(3), leader_at)
    result = plan(CLUSTER, STATEFULSET, 2, (3, []), records, raft_of(records), NOW, hand_off=False)
    assert result.scale_away == (pod(2),) and result.hand_off is False
    if leader_at == 2:
        assert result.hand_off_from == pod(2)
        assert "leaves without a hand-off: an election follows" in result.message
        assert [e[1] for e in result.step_events()] == ["ScalingIn", planner.NO_HAND_OFF_REASON]
    else:  # a follower goes: nothing to warn about
        assert result.hand_off_from is None and "keeping leader" in result.message
        assert [e[1] for e in result.step_events()] == ["ScalingIn"]


def test_advanced_scale_in_never_warns_of_a_missing_hand_off() -> None:
    """The planner keeps the leader, so an engine without hand-off loses nothing there."""
    records = members(range(3), 2)
    result = plan(CLUSTER, ADVANCED_STATEFULSET, 2, (3, []), records, raft_of(records), NOW, hand_off=False)
    assert result.hand_off_from is None
    assert [e[1] for e in result.step_events()] == ["ScalingIn"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_voters_never_shrink_to_one(backend: Backend) -> None:
    """Whichever goes may stop before its MemberRemove commits, leaving 1 of 2 voters: no quorum
    until it comes back, and a scaled-away pod does not. Healthy or not, 2 -> 1 is refused."""
    for leader_at, troubled in ((0, None), (1, None), (0, 1), (1, 0)):
        records = members(range(2), leader_at, {troubled: {"healthy": False}} if troubled is not None else {})
        result = step(backend, 1, 2, [], records)
        assert result.refused and result.action == "wait" and result.replicas == 2, result
        assert "no member can leave a cluster of 2 voters" in result.message, result.message


@pytest.mark.parametrize("backend", BACKENDS)
def test_four_voters_with_one_down_never_lose_a_healthy_one(backend: Backend) -> None:
    """Issue 30, bug 5: 4 voters, ordinal 1 down, a step to 3. The victim's store may stop before its
    MemberRemove commits (a leave that times out in preStop), so while it goes the cluster still has
    4 voters: taking a healthy one would leave 2 of 4 answering, no quorum. The builtin StatefulSet
    can only take ordinal 3 (healthy): it waits. Advanced takes the member that is down: 3 of 4 stay."""
    records = members(range(4), 0, {1: {"healthy": False}})
    result = step(backend, 3, 4, [], records)
    if backend is STATEFULSET:
        assert result.refused and result.action == "wait" and result.replicas == 4, result
        assert "2 healthy of 4 voters" in result.message, result
    else:
        assert (result.action, result.scale_away) == ("scale-in", (pod(1),)), result
