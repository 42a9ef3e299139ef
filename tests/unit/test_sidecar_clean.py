"""Membership-clean: one actor, only undesired members absent past the grace, never below quorum."""

from __future__ import annotations

import pytest

from raftset.contract import quorum
from raftset.sidecar.pure.clean import CONFIRM_S, absences, decide
from raftset.sidecar.pure.removal_guard import has_quorum, may_remove, safe_to_remove
from tests.unit.sidecar_data import member, mid, status

pytestmark = pytest.mark.unit

GRACE = 60.0


def run(members, kept, answering, absent_since, now=1000.0, leading=True, lost=frozenset(), gone=frozenset(), grace=GRACE):
    ords = {m.id: int(m.name.rsplit("-", 1)[1]) if m.name else m.id - 0x1000 for m in members}
    return decide(leading=leading, members=members, ordinal_of=ords, kept=kept, absent_since=absent_since,
                  answering=frozenset(answering), now=now, grace=grace, lost=frozenset(lost), gone=frozenset(gone))


def test_quorum_arithmetic() -> None:
    assert [quorum(n) for n in range(1, 8)] == [1, 2, 2, 3, 3, 4, 4]
    assert has_quorum({1, 2, 3}, {1, 2}) and not has_quorum({1, 2, 3}, {1})
    assert not has_quorum(set(), set())
    assert safe_to_remove({1, 2, 3}, {1, 2}, 3)
    assert not safe_to_remove({1, 2, 3}, {1, 3}, 1)  # 2 voters left, one of them down
    assert not safe_to_remove({1}, {1}, 1)  # never remove the last voter


def test_only_the_leader_cleans() -> None:
    members = [member(0), member(1), member(2)]
    got = run(members, [0, 1], {mid(0), mid(1)}, {mid(2): 0.0}, leading=False)
    assert got.remove is None and "not the leader" in got.reason


def test_absent_undesired_member_is_removed_after_the_grace() -> None:
    members = [member(0), member(1), member(2)]
    assert run(members, [0, 1], {mid(0), mid(1)}, {mid(2): 1000.0 - GRACE}).remove == mid(2)


def test_not_before_the_grace() -> None:
    members = [member(0), member(1), member(2)]
    got = run(members, [0, 1], {mid(0), mid(1)}, {mid(2): 1000.0 - GRACE + 1})
    assert got.remove is None and "absent" in got.reason


def test_desired_members_are_never_removed_however_long_absent() -> None:
    members = [member(0), member(1), member(2)]
    assert run(members, [0, 1, 2], {mid(0), mid(1)}, {mid(2): 0.0}).remove is None


def test_present_undesired_member_is_left_to_its_own_leave() -> None:
    members = [member(0), member(1), member(2)]
    assert run(members, [0, 1], {mid(0), mid(1), mid(2)}, {}).remove is None


def test_nothing_when_two_of_three_are_down() -> None:
    members = [member(0), member(1), member(2)]
    got = run(members, [0], {mid(0)}, {mid(1): 0.0, mid(2): 0.0})
    assert got.remove is None and "quorum" in got.reason


def test_never_below_quorum_in_five() -> None:
    members = [member(i) for i in range(5)]
    # 3 of 5 answer: quorum holds; removing absent 4 leaves 4 voters with 3 healthy: fine.
    assert run(members, [0, 1, 2], {mid(0), mid(1), mid(2)}, {mid(3): 0.0, mid(4): 0.0}).remove == mid(4)


def test_a_joining_learner_gets_the_grace_period() -> None:
    members = [member(0), member(1), member(2), member(3, learner=True, started=False)]
    absent = absences({}, members, {mid(0), mid(1), mid(2)}, now=1000.0)
    assert absent == {mid(3): 1000.0}
    assert run(members, [0, 1, 2], {mid(0), mid(1), mid(2)}, absent).remove is None


def test_an_unstarted_leftover_of_an_undesired_ordinal_goes_after_the_grace() -> None:
    members = [member(0), member(1), member(2), member(3, learner=True, started=False)]
    assert run(members, [0, 1, 2], {mid(0), mid(1), mid(2)}, {mid(3): 0.0}).remove == mid(3)


def test_a_never_started_learner_of_a_kept_ordinal_goes_after_the_grace() -> None:
    """Fault h: it would block every later join (one learner at a time); its pod re-adds itself."""
    members = [member(0), member(1), member(2), member(3, learner=True, started=False)]
    answering = {mid(0), mid(1), mid(2)}
    assert run(members, [0, 1, 2, 3], answering, {mid(3): 1000.0 - GRACE}).remove == mid(3)
    assert run(members, [0, 1, 2, 3], answering, {mid(3): 1000.0 - GRACE + 1}).remove is None


@pytest.mark.parametrize(("learner", "started"), [(False, False), (False, True), (True, True)])
def test_any_other_member_of_a_kept_ordinal_is_never_cleaned(learner: bool, started: bool) -> None:
    """A started member of a kept ordinal is restarting, and a never-started voter is a
    member whose quorum share the cluster was built with: neither is clean's to remove."""
    members = [member(0), member(1), member(2), member(3), member(4, learner=learner, started=started)]
    answering = {mid(0), mid(1), mid(2), mid(3)}
    assert run(members, [0, 1, 2, 3, 4], answering, {mid(4): 0.0}).remove is None


def test_learners_first_then_highest_ordinal_one_per_round() -> None:
    members = [member(i) for i in range(5)] + [member(6, learner=True, started=False)]
    answering = {mid(0), mid(1), mid(2)}
    absent = {mid(3): 0.0, mid(4): 0.0, mid(6): 0.0}
    assert run(members, [0, 1, 2], answering, absent).remove == mid(6)
    assert run(members[:5], [0, 1, 2], answering, absent).remove == mid(4)


def test_members_of_unknown_ordinal_are_never_touched() -> None:
    members = [member(0), member(1), member(2)]
    got = decide(leading=True, members=members, ordinal_of={mid(0): 0, mid(1): 1, mid(2): None}, kept=[0, 1],
               absent_since={mid(2): 0.0}, answering=frozenset({mid(0), mid(1)}), now=1000.0, grace=GRACE)
    assert got.remove is None


def test_absence_clock_keeps_the_first_sighting_and_forgets_returners() -> None:
    members = [member(0), member(1), member(2)]
    first = absences({}, members, {mid(0)}, now=10.0)
    assert first == {mid(1): 10.0, mid(2): 10.0}
    later = absences(first, members, {mid(0), mid(1)}, now=20.0)
    assert later == {mid(2): 10.0}


@pytest.mark.parametrize(("answering", "target", "allowed"), [
    ((0, 1, 2), 2, True),
    ((0, 1), 2, True),  # 2 voters of the remaining 2 answer
    ((0, 2), 1, True),
    ((0,), 2, False),  # 1 of the remaining 2 answers: no quorum after
    ((0, 1, 2), 3, True),  # a learner: the voters keep their quorum
])
def test_may_remove_reads_a_member_list_and_the_answers(answering: tuple[int, ...], target: int,
                                                        allowed: bool) -> None:
    members = [member(0), member(1), member(2), member(3, learner=True)]
    statuses = {mid(o): (status(o) if o in answering else None) for o in range(4)}
    assert may_remove(members, statuses, mid(target)) is allowed


def test_a_member_that_answers_again_counts_as_one_that_may_stop() -> None:
    """Issue 30, bug 5: 4 voters, ordinal 1 down; ordinal 3 (not kept) was absent past the grace but
    answers again when the leader decides under the lock. It may stop before its removal commits:
    2 of the 4 voters would then answer, no quorum. Nothing is removed until 1 is back."""
    members = [member(i) for i in range(4)]
    got = run(members, [0, 1, 2], {mid(0), mid(2), mid(3)}, {mid(3): 0.0, mid(1): 0.0})
    assert got.remove is None and "quorum" in got.reason, got
    assert run(members, [0, 1, 2], {mid(0), mid(1), mid(2), mid(3)}, {mid(3): 0.0}).remove == mid(3)


def test_the_guard_counts_the_voters_of_now() -> None:
    """Healthy voters other than the target must be a quorum of the voters there are *now*: the target
    may stop before its removal commits. One short for an even size under the old count."""
    assert not safe_to_remove({1, 2, 3, 4}, {1, 2, 4}, 4)  # 2 of 4 while 4 is not yet removed
    assert safe_to_remove({1, 2, 3, 4}, {1, 2, 4}, 3)  # the one down goes: 3 of 4 answer throughout
    assert safe_to_remove({1, 2, 3, 4, 5}, {1, 2, 3, 5}, 5)  # 3 of 5
    assert not safe_to_remove({1, 2}, {1, 2}, 2)  # 1 of 2


def test_a_kept_member_marked_lost_with_its_node_goes_once_it_has_not_answered_for_the_confirmation() -> None:
    members = [member(0), member(1), member(2)]
    got = run(members, [0, 1, 2], {mid(0), mid(1)}, {mid(2): 1000.0 - CONFIRM_S}, lost={mid(2)}, grace=300.0)
    assert got.remove == mid(2) and "lost" in got.reason


def test_a_member_marked_lost_is_not_removed_before_this_sidecar_saw_it_silent_long_enough() -> None:
    members = [member(0), member(1), member(2)]
    got = run(members, [0, 1, 2], {mid(0), mid(1)}, {mid(2): 1000.0 - CONFIRM_S + 1}, lost={mid(2)}, grace=300.0)
    assert got.remove is None and "absent" in got.reason


def test_a_member_marked_lost_that_answers_is_never_removed() -> None:
    """The node's record says lost, Raft says it serves (a node cut off from the apiserver only)."""
    members = [member(0), member(1), member(2)]
    assert run(members, [0, 1, 2], {mid(0), mid(1), mid(2)}, {}, lost={mid(2)}).remove is None


def test_a_member_marked_lost_is_never_removed_below_quorum() -> None:
    members = [member(0), member(1), member(2)]
    got = run(members, [0, 1, 2], {mid(0)}, {mid(1): 0.0, mid(2): 0.0}, lost={mid(1), mid(2)})
    assert got.remove is None and "quorum" in got.reason
    five = [member(i) for i in range(5)]
    # 3 of 5 answer: one lost member may go (4 voters left, 3 of them answering).
    assert run(five, range(5), {mid(0), mid(1), mid(2)}, {mid(3): 0.0, mid(4): 0.0}, lost={mid(3), mid(4)}).remove == mid(4)


def test_a_longer_mark_wait_never_exceeds_the_clean_grace() -> None:
    members = [member(0), member(1), member(2)]
    assert run(members, [0, 1, 2], {mid(0), mid(1)}, {mid(2): 995.0}, lost={mid(2)}, grace=5.0).remove == mid(2)


# A pod the operator marked scale-away, deleted (an eviction) before the workload let its ordinal go:
# its leave rightly kept the member (the ordinal was still kept), and no pod is left to leave once it
# is not. Found on real nodes with a drain during a scale-in (docs/operations.md, "Scale-in and drains").
def test_a_member_not_kept_whose_pod_is_gone_goes_once_silent_for_the_confirmation_not_the_grace() -> None:
    members = [member(0), member(1), member(2)]
    got = run(members, [0, 1], {mid(0), mid(1)}, {mid(2): 1000.0 - CONFIRM_S}, gone={mid(2)}, grace=300.0)
    assert got.remove == mid(2) and "no pod" in got.reason and "not kept" in got.reason


def test_a_member_whose_pod_is_gone_is_not_removed_before_the_confirmation() -> None:
    members = [member(0), member(1), member(2)]
    got = run(members, [0, 1], {mid(0), mid(1)}, {mid(2): 1000.0 - CONFIRM_S + 1}, gone={mid(2)}, grace=300.0)
    assert got.remove is None and "absent" in got.reason


def test_a_kept_member_whose_pod_is_gone_is_only_restarting_and_stays() -> None:
    """The workload re-creates a kept ordinal's pod (a restart, a roll): its member is kept, its data too."""
    members = [member(0), member(1), member(2)]
    assert run(members, [0, 1, 2], {mid(0), mid(1)}, {mid(2): 0.0}, gone={mid(2)}, grace=300.0).remove is None


def test_a_member_whose_pod_is_gone_that_answers_or_would_lose_quorum_stays() -> None:
    members = [member(0), member(1), member(2)]
    assert run(members, [0, 1], {mid(0), mid(1), mid(2)}, {}, gone={mid(2)}).remove is None
    got = run(members, [0], {mid(0)}, {mid(1): 0.0, mid(2): 0.0}, gone={mid(1), mid(2)})
    assert got.remove is None and "quorum" in got.reason
